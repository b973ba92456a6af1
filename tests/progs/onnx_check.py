"""Checks exported ONNX models with the onnx package, for tests/onnx.sh.

  onnx_check.py MODEL.onnx         onnx.checker.check_model(full_check=True) on the model's
                                   path (its external data read), every node of the default domain at
                                   opset 13 or of ONNX's ai.onnx.ml at 2 (a dynamic table's
                                   LabelEncoder, only when a node uses it); prints
                                   "ok nodes=N initializers=I external=E ops=..."
  onnx_check.py --same A.onnx B.onnx
                                   the same initializers in both, bit for bit (external data
                                   read); prints "same initializers=N bytes=B"
Exits 1 with the reason otherwise.
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def load(path):
    return onnx.load(path, load_external_data=True)


def external(path):
    m = onnx.load(path, load_external_data=False)
    return sum(1 for t in m.graph.initializer
               if t.data_location == onnx.TensorProto.EXTERNAL)


def check(path):
    # By path: the checker reads external data itself, and a model with more than 2 GB of it
    # cannot be checked as one protobuf in memory.
    onnx.checker.check_model(path, full_check=True)
    m = onnx.load(path, load_external_data=False)
    opsets = {o.domain: o.version for o in m.opset_import}
    ml = any(n.domain == "ai.onnx.ml" for n in m.graph.node)
    if opsets != ({"": 13, "ai.onnx.ml": 2} if ml else {"": 13}):
        sys.exit(f"{path}: opset imports {opsets}, expected the default domain at 13"
                 f"{' and ai.onnx.ml at 2' if ml else ''}")
    ops = sorted({n.op_type for n in m.graph.node})
    bad = [n.op_type for n in m.graph.node if n.domain not in ("", "ai.onnx", "ai.onnx.ml")]
    if bad:
        sys.exit(f"{path}: operators outside the standard domain: {bad}")
    print(f"ok nodes={len(m.graph.node)} initializers={len(m.graph.initializer)} "
          f"external={external(path)} ops={','.join(ops)}")


def same(a, b):
    ta = {t.name: numpy_helper.to_array(t) for t in load(a).graph.initializer}
    tb = {t.name: numpy_helper.to_array(t) for t in load(b).graph.initializer}
    if ta.keys() != tb.keys():
        sys.exit(f"initializers differ: {sorted(ta.keys() ^ tb.keys())[:5]}")
    n = 0
    for name, x in ta.items():
        y = tb[name]
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            d = np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))) \
                if x.shape == y.shape else "shape"
            sys.exit(f"initializer {name} differs (max abs {d})")
        n += x.nbytes
    print(f"same initializers={len(ta)} bytes={n}")


def main():
    try:
        if len(sys.argv) == 4 and sys.argv[1] == "--same":
            same(sys.argv[2], sys.argv[3])
        elif len(sys.argv) == 2:
            check(sys.argv[1])
        else:
            sys.exit(__doc__)
    except (onnx.checker.ValidationError, OSError, ValueError) as e:
        sys.exit(f"{sys.argv[-1]}: {e}")


main()
