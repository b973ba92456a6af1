#!/usr/bin/env python3
"""The largest relative difference between the variables of two dtrain checkpoints, read with
numpy through read_safetensors.py (which knows only the safetensors format).

usage: ckpt_diff.py A B [--prefix P]
Compares every tensor of A whose name does not contain '/' after an optimizer prefix (the model's
variables, tables included: fm_w, fm_v, dense/kernel, ...) or, with --prefix, those starting
with P. Prints "max_rel=X tensors=N": per tensor, max |a - b| over max |a| (its scale, so that elements
near zero, where rounding differences are largest relative to themselves, are weighed on the
tensor's scale), the largest over the tensors. Exit 1 when a tensor is missing or shaped
differently.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import read_safetensors  # noqa: E402

OPTIMIZERS = ("adam/", "adagrad/", "momentum/", "ftrl/", "sgd/")


def main(argv):
    args = argv[1:]
    prefix = None
    if "--prefix" in args:
        i = args.index("--prefix")
        prefix = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        print("usage: ckpt_diff.py A B [--prefix P]", file=sys.stderr)
        return 2
    a, b = (read_safetensors.read(p) for p in args)
    worst, n = 0.0, 0
    for name, x in a.items():
        if prefix is not None and not name.startswith(prefix):
            continue
        if prefix is None and name.startswith(OPTIMIZERS):
            continue
        if name not in b or b[name].shape != x.shape:
            print(f"ckpt_diff.py: {name}: missing or shaped differently in {args[1]}",
                  file=sys.stderr)
            return 1
        xa, xb = x.astype(np.float64), b[name].astype(np.float64)
        if xa.size:
            scale = max(float(np.abs(xa).max()), 1e-30)
            worst = max(worst, float(np.abs(xa - xb).max()) / scale)
        n += 1
    print(f"max_rel={worst:.3g} tensors={n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
