#!/usr/bin/env python3
"""Writes the tf.train.Example fixture for tests/test_example.c, encoded by Google's protobuf
library, independently of dtrain's hand-written encoder and decoder.

    python3 scripts/make_example_fixture.py tests/fixtures/example_python.tfrecord

Writes that file and, beside it, example_python.expected (the values protobuf itself decodes from
each record). Needs Debian's python3-protobuf, and nothing of TensorFlow: the messages are built
at run time from a FileDescriptorProto with tf.train.Example's field numbers:

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }       map entry: key = 1, value = 2
    Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                            Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1; }
    Int64List { repeated int64 value = 1; }             (proto3: numbers packed by default)

Besides the canonical messages (package "tensorflow", a real map), three writer variants share
that wire format: "w" declares the map as a plain repeated entry message, so the script controls
the order of entries and can repeat a key; "u" is "w" with [packed = false] number lists; "x" is
"w" with extra fields at every level, which dtrain's decoder must skip as unknown fields. Some
records concatenate serialized pieces, which protobuf defines as merging them: a map entry whose
value precedes its key, a Feature whose list is split in two, a Feature whose float_list is
replaced by a later int64_list (a oneof keeps the last), an Example whose Features come in two
parts. The expected values are what protobuf's own parser reads back from each final record with
the canonical messages, so every one of those rules is checked against the library.

If the python3 that runs this script lacks google.protobuf (a pyenv shim, say), it re-runs itself
once with /usr/bin/python3.

TFRecord framing: u64 length (little endian), u32 masked crc32c of the length bytes, data, u32
masked crc32c of the data; crc32c is Castagnoli (reflected polynomial 0x82F63B78), computed
below in plain Python; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 mod 2^32.

Expected file, one line per item, values exact:
    record I N              record I (from 0) has N features in protobuf's map view
    key K KIND N V...       sorted by key; KIND float (V: the float32's bits, 8 hex digits),
                            int64 (V: decimal), bytes (V: hex, "-" for an empty value),
                            none (no list set, N = 0)
"""
import os
import struct
import sys

try:
    from google.protobuf import descriptor_pb2, message_factory
except ImportError:
    system_python = "/usr/bin/python3"
    if (os.environ.get("DT_FIXTURE_REEXEC") != "1" and os.path.exists(system_python)
            and os.path.realpath(system_python) != os.path.realpath(sys.executable)):
        os.environ["DT_FIXTURE_REEXEC"] = "1"
        os.execv(system_python, [system_python] + sys.argv)
    raise

F = descriptor_pb2.FieldDescriptorProto


def field(name, number, ftype, label=F.LABEL_OPTIONAL, type_name=None, oneof=None, packed=None):
    f = F(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name
    if oneof is not None:
        f.oneof_index = oneof
    if packed is not None:
        f.options.packed = packed
    return f


def file_proto(package, as_map=True, packed=None, extras=False):
    """The Example messages in package; as_map: Features.feature is a real map; packed: None for
    proto3's default (packed), False for unpacked; extras: extra fields at every level."""
    fp = descriptor_pb2.FileDescriptorProto(name=package + ".proto", package=package,
                                            syntax="proto3")
    p = "." + package + "."
    rep = F.LABEL_REPEATED
    lists = [("BytesList", F.TYPE_BYTES, None), ("FloatList", F.TYPE_FLOAT, packed),
             ("Int64List", F.TYPE_INT64, packed)]
    for name, t, pk in lists:
        m = fp.message_type.add(name=name)
        m.field.append(field("value", 1, t, rep, packed=pk))
    feature = fp.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    feature.field.append(field("bytes_list", 1, F.TYPE_MESSAGE, type_name=p + "BytesList", oneof=0))
    feature.field.append(field("float_list", 2, F.TYPE_MESSAGE, type_name=p + "FloatList", oneof=0))
    feature.field.append(field("int64_list", 3, F.TYPE_MESSAGE, type_name=p + "Int64List", oneof=0))
    features = fp.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.field.append(field("key", 1, F.TYPE_STRING))
    entry.field.append(field("value", 2, F.TYPE_MESSAGE, type_name=p + "Feature"))
    if as_map:
        entry.options.map_entry = True
    features.field.append(field("feature", 1, F.TYPE_MESSAGE, rep, p + "Features.FeatureEntry"))
    example = fp.message_type.add(name="Example")
    example.field.append(field("features", 1, F.TYPE_MESSAGE, type_name=p + "Features"))
    if extras:
        # Unknown to a tf.train.Example reader: one of every wire type it must skip.
        fp.message_type[0].field.append(field("crc", 4, F.TYPE_FIXED64))       # BytesList
        fp.message_type[1].field.append(field("unit", 2, F.TYPE_STRING))       # FloatList
        fp.message_type[2].field.append(field("flag", 5, F.TYPE_SINT64))       # Int64List
        feature.field.append(field("tag", 9, F.TYPE_FIXED32))
        entry.field.append(field("weight", 3, F.TYPE_DOUBLE))
        features.field.append(field("version", 2, F.TYPE_INT32))
        example.field.append(field("extra_id", 7, F.TYPE_UINT64))
        example.field.append(field("note", 12, F.TYPE_STRING))
        example.field.append(field("blob", 2000, F.TYPE_BYTES))  # a two-byte tag
    return fp


def classes(package, as_map=True, **kw):
    msgs = message_factory.GetMessages([file_proto(package, as_map=as_map, **kw)])
    out = {name.split(".")[-1]: cls for name, cls in msgs.items()}
    if not as_map:
        # The entry is a nested message: its class is the type of an added element.
        out["FeatureEntry"] = type(out["Features"]().feature.add())
    return out


TF = classes("tensorflow", as_map=True)
W = classes("w", as_map=False)
U = classes("u", as_map=False, packed=False)
X = classes("x", as_map=False, extras=True)

INT64_MAX = 2**63 - 1
INT64_MIN = -2**63


def feature(M, kind, values):
    f = M["Feature"]()
    if kind == "float":
        f.float_list.value.extend(values)
    elif kind == "int64":
        f.int64_list.value.extend(values)
    elif kind == "bytes":
        f.bytes_list.value.extend(values)
    elif kind == "empty_float":
        f.float_list.SetInParent()
    # "none": no list set
    return f


def example(M, items):
    """An Example of the variant M with map entries in the given order (keys may repeat)."""
    ex = M["Example"]()
    ex.features.SetInParent()
    for key, kind, values in items:
        e = ex.features.feature.add()
        e.key = key
        e.value.CopyFrom(feature(M, kind, values))
    return ex


def ser(msg):
    return msg.SerializeToString()


def entry_bytes(M, key=None, kind=None, values=None):
    """A serialized map entry (Features.feature field 1): key and/or value."""
    e = M["FeatureEntry"]()
    if key is not None:
        e.key = key
    if kind is not None:
        e.value.CopyFrom(feature(M, kind, values))
    return ser(e)


def wrap(field_no, payload):
    """A length-delimited field: how the pieces of a message are concatenated below."""
    return encode_varint(field_no << 3 | 2) + encode_varint(len(payload)) + payload


def encode_varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def records():
    recs = []
    # 0: as TensorFlow writes it: a real map, packed lists, keys sorted (deterministic). dtrain's
    #    encoder given the same features in this order must produce the same bytes.
    ex = TF["Example"]()
    for key, kind, values in [
            ("floats", "float", [1.5, -2.25, 3e-5]),
            ("ints", "int64", [-1, 2**53 + 1, 2**62]),
            ("img", "bytes", [b"\x00\x7f\x80\xff"]),
            ("ids", "int64", [3, 2**40, -5, 0]),
            ("w", "float", [0.5, 0.0, -1.0]),
            ("opt", "float", [4.0, 5.0]),
            ("label", "int64", [1]),
            ("other", "bytes", [b"hello"])]:
        ex.features.feature[key].CopyFrom(feature(TF, kind, values))
    recs.append(ex.SerializeToString(deterministic=True))
    # 1: unpacked number lists (fixed32 floats and varint int64s one by one), reversed order,
    #    a float label, "opt" missing, an empty int64 list.
    recs.append(ser(example(U, [
        ("w", "float", [2.5]),
        ("label", "float", [0.75]),
        ("ids", "int64", []),
        ("img", "bytes", [b"\x01\x02\x03\x04"]),
        ("ints", "int64", [INT64_MAX, INT64_MIN, 12345678901]),
        ("floats", "float", [-0.0, 1e-45, 3.4028234663852886e38])])))
    # 2: unknown fields at every level, a key given twice (the last entry wins), an entry whose
    #    value comes before its key.
    ex = X["Example"](extra_id=2**63 + 5, note="ignore me", blob=b"\xff" * 300)
    ex.features.version = -7
    for key, kind, values in [("floats", "float", [9.0, 9.0, 9.0]), ("ints", "int64", [7, 8, 9]),
                              ("img", "bytes", [b"\x10\x20\x30\x40"]), ("label", "int64", [0]),
                              ("floats", "float", [0.125, 1e10, -3.0])]:
        e = ex.features.feature.add(key=key, weight=0.5)
        e.value.CopyFrom(feature(X, kind, values))
        e.value.tag = 0xDEADBEEF
        if kind == "float":
            e.value.float_list.unit = "cm"
        elif kind == "int64":
            e.value.int64_list.flag = -3
        else:
            e.value.bytes_list.crc = 2**64 - 1
    value_first = entry_bytes(X, kind="float", values=[6.5]) + entry_bytes(X, key="w")
    recs.append(ser(ex) + wrap(1, wrap(1, value_first)))
    # 3: merges. "floats": one list split over two Feature occurrences; "ints": a float_list
    #    replaced by a later int64_list (oneof: the last wins); "w": a packed list in two
    #    segments, one unpacked; the Features in two parts of the Example.
    floats = ser(feature(W, "float", [1.0, 2.0])) + ser(feature(W, "float", [3.0]))
    ints = ser(feature(W, "float", [7.0])) + ser(feature(W, "int64", [-2**31, 2**31, 1]))
    w_list = ser(W["FloatList"](value=[0.25])) + ser(U["FloatList"](value=[-8.0, 16.0]))
    part1 = wrap(1, wrap(1, ser(W["FeatureEntry"](key="floats")) + wrap(2, floats)))
    part1 += wrap(1, wrap(1, ser(W["FeatureEntry"](key="ints")) + wrap(2, ints)))
    part2 = ser(example(W, [("img", "bytes", [b"\xff\xfe\x00\x01"]), ("label", "int64", [3]),
                            ("opt", "float", [-1.0, 2.0])]))
    part2 += wrap(1, wrap(1, ser(W["FeatureEntry"](key="w")) + wrap(2, wrap(2, w_list))))
    recs.append(part1 + part2)
    # 4: a Feature with no list set ("ids"), an empty float list ("w"), an Example with every
    #    value at a size boundary: 127 and 128 byte varints, 0x7f/0x80 lengths.
    recs.append(ser(example(W, [
        ("ids", "none", None),
        ("w", "empty_float", None),
        ("floats", "float", [float(127), float(128), float(2**24 + 1)]),
        ("ints", "int64", [127, 128, 2**63 - 2**10]),
        ("img", "bytes", [bytes(range(250, 254))]),
        ("label", "float", [-1.5]),
        ("k" * 63, "bytes", [bytes(200)]),
        ("multi", "bytes", [b"hello", b"", b"\xc3\xa9"])])))
    # 5: "ints" has two values where the spec wants three (an error for the spec's reader).
    recs.append(ser(example(W, [("floats", "float", [1.0, 2.0, 3.0]), ("ints", "int64", [1, 2]),
                                ("img", "bytes", [b"abcd"]), ("label", "int64", [1])])))
    # 6: no label.
    recs.append(ser(example(W, [("floats", "float", [1.0, 2.0, 3.0]),
                                ("ints", "int64", [1, 2, 3]), ("img", "bytes", [b"abcd"])])))
    return recs


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data))


def expected(data):
    """Protobuf's own reading of a record with the canonical messages."""
    ex = TF["Example"]()
    ex.ParseFromString(data)
    lines = [f"record {{}} {len(ex.features.feature)}"]
    for key in sorted(ex.features.feature):
        f = ex.features.feature[key]
        kind = f.WhichOneof("kind")
        if kind == "float_list":
            vals = [struct.pack(">f", v).hex() for v in f.float_list.value]
            lines.append(f"key {key} float {len(vals)} " + " ".join(vals))
        elif kind == "int64_list":
            vals = [str(v) for v in f.int64_list.value]
            lines.append(f"key {key} int64 {len(vals)} " + " ".join(vals))
        elif kind == "bytes_list":
            vals = [v.hex() or "-" for v in f.bytes_list.value]
            lines.append(f"key {key} bytes {len(vals)} " + " ".join(vals))
        else:
            lines.append(f"key {key} none 0")
    return [line.rstrip() for line in lines]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_example_fixture.py OUT.tfrecord")
    out = sys.argv[1]
    assert masked(b"123456789") == 0xC78AB0E5 and masked(b"") == 0xA282EAD8
    recs = records()
    with open(out, "wb") as f:
        for r in recs:
            f.write(frame(r))
    base = out[:-len(".tfrecord")] if out.endswith(".tfrecord") else out
    with open(base + ".expected", "w") as f:
        for i, r in enumerate(recs):
            lines = expected(r)
            lines[0] = lines[0].format(i)
            f.write("\n".join(lines) + "\n")
    print(f"{out}: {len(recs)} records, {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    main()
