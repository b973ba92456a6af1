#!/usr/bin/env python3
"""Someone on the path between a ps client and a ps task, for tests/ps.sh: listens on LISTEN
and forwards every connection to 127.0.0.1:TARGET, byte for byte, except the first PUSH_ROWS
message it sees from a client (over all connections):

  alter   a bit of the message's last row is flipped and its checksums made right again (the
          header's CRC32C, and before version 2 of the messages the payload's), so that it
          decodes as a valid message with another gradient;
  replay  the message is forwarded, then sent again a second later (by then the ps has answered
          it and the answer has reached the client, so only the copy is in question).

It follows the stream as dtrain speaks it: the client's hello (64 bytes; its version says
whether a 16-byte MAC follows every message, from version 2 on) and handshake MAC (32 bytes),
then ps messages (a 28-byte header whose bytes 16..20 give the payload's size). What it did
goes to stderr as one line, "ps_proxy: altered PUSH_ROWS ..." or "ps_proxy: replayed ...".
usage: ps_proxy.py LISTEN TARGET alter|replay"""
import socket
import struct
import sys
import threading
import time

HELLO, HS_MAC, HEADER = 64, 32, 28
PUSH_ROWS = 6


def crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def read_exact(s, n):
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


state = {"done": False}
lock = threading.Lock()


def forward(s, msg, mac, mode):
    """Sends on msg (a whole message) and its MAC (empty before version 2), as mode says."""
    with lock:
        first = not state["done"] and struct.unpack_from("<H", msg, 6)[0] == PUSH_ROWS
        state["done"] = state["done"] or first
    if not first:
        s.sendall(msg + mac)
        return
    request = struct.unpack_from("<Q", msg, 8)[0]
    if mode == "replay":
        s.sendall(msg + mac)
        time.sleep(1.0)
        s.sendall(msg + mac)
        print(f"ps_proxy: replayed PUSH_ROWS request {request}", file=sys.stderr, flush=True)
        return
    m = bytearray(msg)
    m[len(m) - 4] ^= 0x01  # the low mantissa bit of the last row's last float
    size = struct.unpack_from("<I", m, 16)[0]
    if struct.unpack_from("<H", m, 4)[0] < 2:
        struct.pack_into("<I", m, 20, crc32c(m[HEADER:HEADER + size]))
    struct.pack_into("<I", m, 24, crc32c(m[:24]))
    s.sendall(bytes(m) + mac)
    print(f"ps_proxy: altered PUSH_ROWS request {request} (checksums made right)",
          file=sys.stderr, flush=True)


def client_to_server(c, s, mode):
    try:
        hello = read_exact(c, HELLO)
        s.sendall(hello)
        tag = 16 if struct.unpack_from("<H", hello, 8)[0] >= 2 else 0
        s.sendall(read_exact(c, HS_MAC))
        while True:
            header = read_exact(c, HEADER)
            size = struct.unpack_from("<I", header, 16)[0]
            msg = header + read_exact(c, size)
            forward(s, msg, read_exact(c, tag), mode)
    except (EOFError, OSError):
        pass
    for x in (c, s):
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def server_to_client(s, c):
    try:
        while True:
            data = s.recv(1 << 16)
            if not data:
                break
            c.sendall(data)
    except OSError:
        pass
    for x in (c, s):
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main():
    listen, target, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", listen))
    ls.listen(16)
    while True:
        c, _ = ls.accept()
        try:
            s = socket.create_connection(("127.0.0.1", target))
        except OSError:
            c.close()
            continue
        threading.Thread(target=client_to_server, args=(c, s, mode), daemon=True).start()
        threading.Thread(target=server_to_client, args=(s, c), daemon=True).start()


if __name__ == "__main__":
    main()
