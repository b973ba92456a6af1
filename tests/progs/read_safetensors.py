#!/usr/bin/env python3
"""An independent safetensors reader for dtrain's tests: it knows only the safetensors format
(https://github.com/huggingface/safetensors#format), none of dtrain's code.

usage: read_safetensors.py FILE [--names a,b,c]

Checks the layout (8-byte little-endian header length within the file, a JSON object that begins
with '{', only whitespace after it, known dtypes, shapes of non-negative integers whose sizes match
their data_offsets, data_offsets that tile the data section exactly, __metadata__ of strings),
loads every tensor with numpy, and prints one line per tensor in header order:
    NAME [d0,d1,...] CRC
where CRC is the CRC32C (Castagnoli) of the tensor's little-endian bytes as 8 hex digits. With
--names it then prints "combined CRC": the CRC32C of the named tensors' bytes, concatenated in
the order given. Any violation: a message on stderr and exit status 1.
"""
import json
import struct
import sys

import numpy as np

# dtype -> (numpy little-endian dtype, bytes per element). numpy has no bfloat16: its bytes are
# read as little-endian u16, which gives the same bytes.
DTYPES = {
    "F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2),
    "I64": ("<i8", 8), "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1),
    "U8": ("u1", 1), "BOOL": ("?", 1), "U64": ("<u8", 8), "U32": ("<u4", 4), "U16": ("<u2", 2),
}


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    table = CRC_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class FormatError(Exception):
    pass


def no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise FormatError(f"key {k!r} appears twice")
        d[k] = v
    return d


def is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def check_entry(name, info):
    if not isinstance(info, dict):
        raise FormatError(f"tensor {name!r}: entry is not an object")
    dtype = info.get("dtype")
    if dtype not in DTYPES:
        raise FormatError(f"tensor {name!r}: unknown dtype {dtype!r}")
    shape = info.get("shape")
    if not isinstance(shape, list) or not all(is_count(d) for d in shape):
        raise FormatError(f"tensor {name!r}: shape {shape!r} is not a list of non-negative ints")
    offs = info.get("data_offsets")
    if (not isinstance(offs, list) or len(offs) != 2 or not all(is_count(o) for o in offs)
            or offs[1] < offs[0]):
        raise FormatError(f"tensor {name!r}: data_offsets {offs!r} is not [begin, end]")
    n = 1
    for d in shape:
        n *= d
    if n * DTYPES[dtype][1] != offs[1] - offs[0]:
        raise FormatError(f"tensor {name!r}: shape {shape} of {dtype} needs "
                          f"{n * DTYPES[dtype][1]} bytes, data_offsets {offs} hold "
                          f"{offs[1] - offs[0]}")
    return dtype, shape, offs


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise FormatError(f"{len(blob)} bytes: no room for the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise FormatError(f"header length {n} exceeds the {len(blob) - 8} bytes after it")
    raw = blob[8:8 + n]
    if not raw.startswith(b"{"):
        raise FormatError("the header does not begin with '{'")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise FormatError("header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise FormatError("__metadata__ is not an object of strings")
    data = blob[8 + n:]
    entries = [(name,) + check_entry(name, info) for name, info in header.items()]
    end = 0
    for name, _, _, offs in sorted(entries, key=lambda e: tuple(e[3])):
        if offs[0] != end:
            raise FormatError(f"tensor {name!r}: data_offsets {offs} do not start where the "
                              f"previous tensor ends ({end})")
        end = offs[1]
    if end != len(data):
        raise FormatError(f"tensors cover {end} bytes of a {len(data)}-byte data section")
    tensors = {}
    for name, dtype, shape, offs in entries:
        count = (offs[1] - offs[0]) // DTYPES[dtype][1]
        arr = np.frombuffer(data, dtype=np.dtype(DTYPES[dtype][0]), count=count, offset=offs[0])
        tensors[name] = arr.reshape(shape)
    return tensors


def main(argv):
    if crc32c(b"123456789") != 0xE3069283:
        print("read_safetensors.py: the CRC32C table is wrong", file=sys.stderr)
        return 2
    names = None
    args = list(argv[1:])
    if "--names" in args:
        i = args.index("--names")
        if i + 1 >= len(args):
            print("usage: read_safetensors.py FILE [--names a,b,c]", file=sys.stderr)
            return 2
        names = args[i + 1].split(",") if args[i + 1] else []
        del args[i:i + 2]
    if len(args) != 1:
        print("usage: read_safetensors.py FILE [--names a,b,c]", file=sys.stderr)
        return 2
    path = args[0]
    try:
        tensors = read(path)
    except FormatError as e:
        print(f"read_safetensors.py: {path}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"read_safetensors.py: {e}", file=sys.stderr)
        return 1
    for name, arr in tensors.items():
        shape = "[" + ",".join(str(d) for d in arr.shape) + "]"
        print(f"{name} {shape} {crc32c(arr.tobytes()):08x}")
    if names is not None:
        crc = 0
        for name in names:
            if name not in tensors:
                print(f"read_safetensors.py: {path}: no tensor {name!r}", file=sys.stderr)
                return 1
            crc = crc32c(tensors[name].tobytes(), crc)
        print(f"combined {crc:08x}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
