#!/usr/bin/env python3
"""A stranger holding idle connections open, for tests/ps.sh: N connections from SOURCE (another
loopback address, as another host would be) to every ps and worker address of the TF_CONFIG of
process PID, none of them ever sending a byte; each one the task closes is opened again at once,
so the task's handshake slots stay full of strangers until this ends (SIGTERM). On its way out it
prints "idle_flood: held N connections to each of K ports, reopened R" to stderr.

usage: idle_flood.py PID N SOURCE"""
import json
import selectors
import signal
import socket
import sys
import time


def targets(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    cluster = json.loads(env[b"TF_CONFIG"])["cluster"]
    out = []
    for job in ("ps", "worker"):
        for addr in cluster.get(job, []):
            host, port = addr.rsplit(":", 1)
            out.append((host, int(port)))
    return out


def main():
    pid, n, source = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ports = targets(pid)
    sel = selectors.DefaultSelector()
    reopened = 0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))

    def open_one(addr):
        s = socket.socket()
        s.setblocking(False)
        s.bind((source, 0))
        try:
            s.connect(addr)
        except BlockingIOError:
            pass
        except OSError:  # nothing listens there now (a task being started again)
            s.close()
            return False
        sel.register(s, selectors.EVENT_READ, addr)
        return True

    missing = [a for a in ports for _ in range(n)]
    while not stop:
        # Reopened in rounds 20 ms apart: a stranger as persistent as any, without spinning a
        # core of the machine the test shares with the job.
        missing = [a for a in missing if not open_one(a)]
        time.sleep(0.02)
        for key, _ in sel.select(timeout=0.1):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:  # closed by the task: open another in its place
                sel.unregister(s)
                s.close()
                missing.append(key.data)
                reopened += 1
    print(f"idle_flood: held {n} connections to each of {len(ports)} ports, reopened {reopened}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
