#!/usr/bin/env python3
"""Reads a checkpoint's dynamic tables with numpy alone, key by key, and compares two.

usage: dynamic_ckpt.py CHECKPOINT [--compare OTHER] [--no-bloom]

CHECKPOINT is a ckpt-<step>.safetensors: a one_device checkpoint ("fm_v" rows in the order of
"fm_v/keys", slots "adam/m/fm_v", "fm_v/counts", "fm_v/last_seen", the admission's state under
the first table's name), or a parameter-server manifest whose "ps_shards" metadata lists the shard
files (the same tensors per part: "fm_v/part_1", "fm_v/part_1/keys", "adam/m/fm_v/part_1" ...).
Prints each table's keys; with --compare, checks that both hold the same keys with the same rows,
optimizer slots, counts and last-seen steps bit for bit, the same keys being counted, and (unless
--no-bloom: filters of several shards merge into one that counts no key lower) the same Bloom
filter; exits 1 naming the first difference. A parameter-server checkpoint compared with a
one_device one: the one_device tables hold the union of the ps tables' keys, with each key's
greatest count and step (they share one key map there).
"""
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "I64": "<i8", "U32": "<u4", "U8": "u1"}
TABLES = ("fm_w", "fm_v")


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return out, meta


def parts(path):
    """[(tensors, suffix)]: the file itself (suffix ''), or each shard file ('/part_s')."""
    tensors, meta = read(path)
    if "ps_shards" not in meta:
        return [(tensors, "")]
    out = []
    for name in meta["ps_shards"].split(","):
        t, _ = read(os.path.join(os.path.dirname(path), name))
        shards = sorted({k.split("/part_")[1].split("/")[0] for k in t if "/part_" in k})
        out.extend((t, "/part_" + s) for s in shards)
    return out


def load(path):
    """{table: {key: (row, slots tuple, count, last)}}, {key: (count, last)} counted, bloom."""
    tables, counting, bloom = {}, {}, None
    for t, sfx in parts(path):
        for table in TABLES:
            keys = t.get(table + sfx + "/keys")
            if keys is None:
                continue
            rows = t[table + sfx]
            slots = sorted(k for k in t if k.endswith("/" + table + sfx) and k != table + sfx)
            counts, last = t[table + sfx + "/counts"], t[table + sfx + "/last_seen"]
            d = tables.setdefault(table, {})
            for i, key in enumerate(keys.tolist()):
                if key in d:
                    raise SystemExit(f"{path}: {table}: key {key} given twice")
                d[key] = (rows[i].tobytes(), tuple(t[s][i].tobytes() for s in slots),
                          int(counts[i]), int(last[i]))
            ck = t.get(table + sfx + "/counting_keys")
            if ck is not None:
                cc = t[table + sfx + "/counting_counts"]
                cl = t[table + sfx + "/counting_last_seen"]
                for i, key in enumerate(ck.tolist()):
                    c, l = counting.get(key, (0, 0))
                    counting[key] = (max(c, int(cc[i])), max(l, int(cl[i])))
            b = t.get(table + sfx + "/bloom")
            if b is not None:
                bloom = b.copy() if bloom is None else np.maximum(bloom & 15, b & 15) | \
                    (np.maximum(bloom >> 4, b >> 4) << 4)
    return tables, counting, bloom


def main():
    args = sys.argv[1:]
    no_bloom = "--no-bloom" in args
    args = [a for a in args if a != "--no-bloom"]
    a, ca, ba = load(args[0])
    for table, d in sorted(a.items()):
        print(f"{table}: {len(d)} keys")
    if "--compare" not in args:
        return 0
    b, cb, bb = load(args[args.index("--compare") + 1])
    if sorted(a) != sorted(b):
        print(f"tables {sorted(a)} and {sorted(b)}")
        return 1
    # Into one process, the tables of a ps checkpoint share one key map: every table holds the
    # keys of all of them (a key a table lacked with its initial row), each key's count and step
    # the greatest any table had.
    union = "ps_shards" in read(args[0])[1] and "ps_shards" not in read(
        args[args.index("--compare") + 1])[1]
    if union:
        most = {}
        for d in a.values():
            for key, v in d.items():
                c, l = most.get(key, (0, 0))
                most[key] = (max(c, v[2]), max(l, v[3]))
        for table in sorted(a):
            if set(b[table]) != set(most):
                print(f"{table}: {len(b[table])} keys, the tables' union has {len(most)}")
                return 1
            for key, v in a[table].items():
                w = b[table][key]
                if (v[0], v[1], most[key]) != (w[0], w[1], (w[2], w[3])):
                    print(f"{table}: key {key}: its row, slots, count or step differs")
                    return 1
        a = {t: {k: v for k, v in d.items()} for t, d in a.items()}
        b = {t: {k: v for k, v in d.items() if k in a[t]} for t, d in b.items()}
        for t in a:
            a[t] = {k: (v[0], v[1], most[k][0], most[k][1]) for k, v in a[t].items()}
        ca = {k: v for k, v in ca.items() if k not in most}
    for table in sorted(a):
        ka, kb = set(a[table]), set(b[table])
        if ka != kb:
            print(f"{table}: {len(ka - kb)} keys only in the first, {len(kb - ka)} only in the "
                  f"second")
            return 1
        for key in sorted(ka):
            for what, i in (("row", 0), ("slots", 1), ("count", 2), ("last_seen", 3)):
                if a[table][key][i] != b[table][key][i]:
                    print(f"{table}: key {key}: its {what} differs")
                    return 1
    if ca != cb:
        print(f"keys being counted: {len(ca)} and {len(cb)}, or their counts, differ")
        return 1
    if not no_bloom and ((ba is None) != (bb is None) or
                         (ba is not None and not np.array_equal(ba, bb))):
        print("the Bloom filters differ")
        return 1
    n = sum(len(d) for d in a.values())
    print(f"equal bit for bit: {n} keys' rows, slots, counts and steps; {len(ca)} keys counted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
