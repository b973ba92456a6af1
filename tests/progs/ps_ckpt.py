#!/usr/bin/env python3
"""Reassembles a sharded checkpoint of parameter-server training with numpy alone.

usage: ps_ckpt.py MANIFEST [--compare CHECKPOINT]

MANIFEST is a checkpoint's ckpt-<step>.safetensors written by a parameter-server job: its
metadata lists the ps tasks' shard files ("ps_shards"), each a safetensors file holding table
shards ("fm_v/part_1", their optimizer slots "adam/m/fm_v/part_1") described in its metadata
("rows_total=R dim=D shards=S shard=s strategy=div|mod ..."), and dense variables' optimizer
slots ("dense/var_3/slot_0"). Prints each table and how it was sharded; with --compare, checks
that every reassembled table, slot and dense tensor equals CHECKPOINT's (a one_device or other
checkpoint) bit for bit, and exits 1 naming the first that differs.
"""
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            continue
        lo, hi = t["data_offsets"]
        tensors[name] = np.frombuffer(data[lo:hi], dtype="<f4").reshape(t["shape"])
    return tensors, meta, list(header.keys())


def rows_of_shard(rows, shards, shard, strategy):
    """The global rows a shard holds, in its order (TF's even split for div)."""
    if strategy == "mod":
        return np.arange(shard, rows, shards)
    base, extra = divmod(rows, shards)
    lo = shard * base + min(shard, extra)
    return np.arange(lo, lo + base + (1 if shard < extra else 0))


def describe(text):
    return dict(kv.split("=", 1) for kv in text.split())


def reassemble(manifest):
    dense, meta, order = read_safetensors(manifest)
    folder = os.path.dirname(manifest) or "."
    out = dict(dense)  # the dense variables are the manifest's own
    tables = {}
    for name in meta["ps_shards"].split(","):
        tensors, fmeta, _ = read_safetensors(os.path.join(folder, name))
        for key, text in fmeta.items():
            if "/part_" in key:
                d = describe(text)
                table = key.rsplit("/part_", 1)[0]
                rows, dim = int(d["rows_total"]), int(d["dim"])
                shard, shards = int(d["shard"]), int(d["shards"])
                where = rows_of_shard(rows, shards, shard, d["strategy"])
                names = [table] + [s for s in d.get("slots", "").split(",") if s]
                info = tables.setdefault(table, {"rows": rows, "dim": dim, "shards": shards,
                                                 "strategy": d["strategy"], "covered": 0})
                info["covered"] += len(where)
                for n in names:
                    whole = out.setdefault(n, np.zeros((rows, dim), dtype=np.float32))
                    whole[where] = tensors["%s/part_%d" % (n, shard)]
            elif key.startswith("dense/var_"):
                d = describe(text)
                v = int(key[len("dense/var_"):])
                view = order[v]
                for k, slot in enumerate(s for s in d.get("names", "").split(",") if s):
                    out["%s/%s" % (slot, view)] = tensors["%s/slot_%d" % (key, k)].reshape(
                        dense[view].shape)
    for table, info in tables.items():
        if info["covered"] != info["rows"]:
            sys.exit("%s: table %s: the shards hold %d of %d rows" % (manifest, table,
                                                                     info["covered"], info["rows"]))
    return out, tables


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    out, tables = reassemble(args[0])
    for table, info in sorted(tables.items()):
        print("%s: %d x %d in %d shards (%s)" % (table, info["rows"], info["dim"], info["shards"],
                                                 info["strategy"]))
    if len(args) == 3 and args[1] == "--compare":
        other, _, _ = read_safetensors(args[2])
        for name, value in sorted(out.items()):
            if name not in other:
                sys.exit("%s: no tensor %s" % (args[2], name))
            if other[name].shape != value.shape or not np.array_equal(
                    other[name].view(np.uint32), np.ascontiguousarray(value).view(np.uint32)):
                sys.exit("tensor %s differs from %s's" % (name, args[2]))
        print("ps_ckpt: %d tensors equal, bit for bit" % len(out))


if __name__ == "__main__":
    main()
