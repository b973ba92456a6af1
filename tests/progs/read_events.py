#!/usr/bin/env python3
"""Decodes a TensorBoard event file with Google's protobuf library, independently of dtrain's
hand-written encoder (src/train/summary.c), for tests/test_summary.c:

    python3 tests/progs/read_events.py FILE

Prints one line per event:
    version brain.Event:2 WALL      the file_version event (WALL: repr of wall_time)
    scalar STEP TAG VALUE           one line per summary value (VALUE: repr of the float)

Needs Debian's python3-protobuf and nothing of TensorFlow: the messages (the fields dtrain writes,
with the numbers of TF's event.proto and summary.proto) are built at run time from a
FileDescriptorProto, no protoc:

    Event   { double wall_time = 1; int64 step = 2;
              oneof what { string file_version = 3; Summary summary = 5; } }
    Summary { repeated Value value = 1; }
    Value   { string tag = 1; float simple_value = 2; }

The TFRecord framing is read here too, checking both CRCs: u64 length (little endian), u32 masked
crc32c of the 8 length bytes, data, u32 masked crc32c of the data; crc32c is Castagnoli
(reflected polynomial 0x82F63B78), table driven; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8
mod 2^32.

On a framing, CRC or parse error it exits with status 1 and a message naming the file and the
record's byte offset. If the python3 that runs it lacks google.protobuf (a pyenv shim, say), it
re-runs itself once with /usr/bin/python3, where Debian installs the package; failing that it
exits with status 2 and says so.
"""
import os
import struct
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as e:
    system_python = "/usr/bin/python3"
    if (os.environ.get("DT_READ_EVENTS_REEXEC") != "1" and os.path.exists(system_python)
            and os.path.realpath(system_python) != os.path.realpath(sys.executable)):
        os.environ["DT_READ_EVENTS_REEXEC"] = "1"
        os.execv(system_python, [system_python] + sys.argv)
    sys.stderr.write(f"read_events.py: cannot import google.protobuf ({e}) with {sys.executable}"
                     " (Debian: apt-get install python3-protobuf)\n")
    sys.exit(2)

F = descriptor_pb2.FieldDescriptorProto


def event_classes():
    fp = descriptor_pb2.FileDescriptorProto(name="dt_read_events.proto", package="dtcheck",
                                            syntax="proto3")
    value = fp.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    summary = fp.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".dtcheck.Value")
    event = fp.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL,
                    oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".dtcheck.Summary", oneof_index=0)

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fp)
    desc = pool.FindMessageTypeByName("dtcheck.Event")
    # GetMessageClass arrived in protobuf 4.22 (Python); older versions (Debian 12's 4.21) only
    # have MessageFactory.GetPrototype, which newer ones deprecate and then drop.
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = make_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class Bad(Exception):
    pass


def records(path, blob):
    """Yields (offset, data) for each record of blob, checking the framing."""
    off = 0
    while off < len(blob):
        if len(blob) - off < 12:
            raise Bad(f"{path}: offset {off}: truncated record header "
                      f"({len(blob) - off} bytes of 12)")
        length_bytes = blob[off:off + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", blob[off + 8:off + 12])
        if length_crc != masked_crc(length_bytes):
            raise Bad(f"{path}: offset {off}: length crc mismatch (stored {length_crc:#010x}, "
                      f"computed {masked_crc(length_bytes):#010x})")
        end = off + 12 + length + 4
        if end > len(blob):
            raise Bad(f"{path}: offset {off}: truncated record: needs {12 + length + 4} bytes, "
                      f"{len(blob) - off} left")
        data = blob[off + 12:off + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[end - 4:end])
        if data_crc != masked_crc(data):
            raise Bad(f"{path}: offset {off}: data crc mismatch (stored {data_crc:#010x}, "
                      f"computed {masked_crc(data):#010x})")
        yield off, data
        off = end


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: read_events.py EVENT_FILE\n")
        return 2
    assert crc32c(b"123456789") == 0xE3069283, "crc32c self-check"
    path = sys.argv[1]
    Event = event_classes()
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        sys.stderr.write(f"{path}: {e.strerror}\n")
        return 1
    out = []
    try:
        for off, data in records(path, blob):
            ev = Event()
            try:
                ev.ParseFromString(data)
            except Exception as e:  # DecodeError, or a RuntimeError from the C++ backend
                raise Bad(f"{path}: offset {off}: not an Event message: {e}")
            what = ev.WhichOneof("what")
            if what == "file_version":
                out.append(f"version {ev.file_version} {ev.wall_time!r}")
            elif what == "summary":
                for v in ev.summary.value:
                    out.append(f"scalar {ev.step} {v.tag} {v.simple_value!r}")
            else:
                raise Bad(f"{path}: offset {off}: an Event with neither file_version nor summary")
    except Bad as e:
        sys.stdout.write("".join(line + "\n" for line in out))
        sys.stderr.write(f"read_events.py: {e}\n")
        return 1
    sys.stdout.write("".join(line + "\n" for line in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
