#!/usr/bin/env python3
"""Writes the CTR golden fixture for tests/test_golden_ctr.c: dtrain's DeepFM against PyTorch.

    python3 scripts/make_golden_ctr.py tests/fixtures/golden_deepfm.bin

Needs PyTorch and NumPy (Debian: python3-torch, python3-numpy). If the python3 that runs this
script lacks torch (a pyenv shim, say), it re-runs itself once with /usr/bin/python3.

The model: DeepFM with the TensorFlow sample's semantics, written here from the formula alone:
    e_f   = fm_v[id_f] * x_f                                     (F fields, K factors each)
    logit = fm_b + sum_f fm_w[id_f] x_f + 1/2 sum_k ((sum_f e_fk)^2 - sum_f e_fk^2)
            + MLP(concat_f e_f)
    MLP   = Dense(8, relu) -> Dense(6, relu) -> Dense(1)          (no dropout)
    loss  = mean over the batch of the sigmoid cross-entropy of logit against the 0/1 label
with F = 5, K = 4, 40 table rows, a batch of 6, ids repeated within and across examples.

Parameters. Tensor t, in this order and dtrain's layout (row-major; kernels (IN, OUT)):
    t=0 fm_b (1)   t=1 dense/kernel (20, 8)   t=2 dense/bias (8)   t=3 dense_1/kernel (8, 6)
    t=4 dense_1/bias (6)   t=5 dense_2/kernel (6, 1)   t=6 dense_2/bias (1)
    t=7 fm_w (40, 1)       t=8 fm_v (40, 4)
element i of tensor t is, computed in IEEE double and rounded to float32:
    h = (i * 2654435761 + 12345 * (t + 1)) mod 2^32; h ^= h >> 16;
    h = (h * 0x45D9F3B) mod 2^32; h ^= h >> 16
    value = float32(scale_t * (h / 2^32 - 0.5))
    scale_t = 2 sqrt(6 / (fan_in + fan_out)) for kernels, 0.2 for biases and fm_w, 1.0 for fm_v.
The batch: ids[b, f] = (7 b + 3 f^2 + b f) mod 40 for field f < 4 and (b mod 3) for f = 4;
values x[b, f] = 1 for f >= 2, float32(0.25 (b + 1) (f + 1) / 3) otherwise; labels b mod 2.

Computed in float64; stored: the logits, the mean loss, and the gradient of every variable, the
tables' as dense (rows, dim) arrays (zero on rows no example touched), as float32.

Fixture format, little-endian, no padding:
    8 bytes "DTGOLDCT" | u32 version = 1 | u32 B, F, K, rows |
    B*F i64 ids | B*F f32 values | B f32 labels | B f64 logits | f64 mean loss |
    9 x (u32 name length n | n name bytes | u32 count N | N f32 gradients in dtrain's layout) |
    u32 CRC32C (Castagnoli) of every byte before it
"""
import os
import struct
import sys

# The CNN fixture's script brings the weights' formula, the CRC, and the re-run under
# /usr/bin/python3 when this python3 lacks torch.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import crc32c, formula_param  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

B, F, K, ROWS = 6, 5, 4, 40
DEEP = [8, 6]


def glorot(fan_in, fan_out):
    return 2.0 * (6.0 / (fan_in + fan_out)) ** 0.5


def main(path):
    widths = [F * K] + DEEP + [1]
    names, shapes, scales = ["fm_b"], [(1,)], [0.2]
    for li in range(len(widths) - 1):
        layer = "dense" if li == 0 else f"dense_{li}"
        names += [f"{layer}/kernel", f"{layer}/bias"]
        shapes += [(widths[li], widths[li + 1]), (widths[li + 1],)]
        scales += [glorot(widths[li], widths[li + 1]), 0.2]
    names += ["fm_w", "fm_v"]
    shapes += [(ROWS, 1), (ROWS, K)]
    scales += [0.2, 1.0]
    params = [torch.tensor(formula_param(t, s, sc).astype(np.float64), requires_grad=True)
              for t, (s, sc) in enumerate(zip(shapes, scales))]
    ids = np.array([[(7 * b + 3 * f * f + b * f) % ROWS if f < 4 else b % 3 for f in range(F)]
                    for b in range(B)], dtype=np.int64)
    vals = np.array([[1.0 if f >= 2 else np.float32(0.25 * (b + 1) * (f + 1) / 3)
                      for f in range(F)] for b in range(B)], dtype=np.float32)
    labels = np.array([b % 2 for b in range(B)], dtype=np.float32)

    fm_b, fm_w, fm_v = params[0], params[-2], params[-1]
    idt, x = torch.from_numpy(ids), torch.from_numpy(vals.astype(np.float64))
    e = fm_v[idt] * x.unsqueeze(-1)                         # (B, F, K)
    s = e.sum(1)
    logit = fm_b[0] + (fm_w[idt].squeeze(-1) * x).sum(1) + 0.5 * (s * s - (e * e).sum(1)).sum(1)
    h = e.reshape(B, F * K)
    for li in range(len(widths) - 1):
        kernel, bias = params[1 + 2 * li], params[2 + 2 * li]
        h = h @ kernel + bias
        if li < len(widths) - 2:
            h = torch.relu(h)
    logit = logit + h.squeeze(-1)
    y = torch.from_numpy(labels.astype(np.float64))
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y)
    loss.backward()

    out = bytearray(b"DTGOLDCT")
    out += struct.pack("<5I", 1, B, F, K, ROWS)
    out += ids.astype("<i8").tobytes() + vals.astype("<f4").tobytes() + labels.astype("<f4").tobytes()
    out += logit.detach().numpy().astype("<f8").tobytes()
    out += struct.pack("<d", loss.item())
    for name, p in zip(names, params):
        g = p.grad.numpy().astype("<f4").ravel()
        out += struct.pack("<I", len(name)) + name.encode() + struct.pack("<I", g.size) + g.tobytes()
    out += struct.pack("<I", crc32c(bytes(out)))
    with open(path, "wb") as f:
        f.write(out)
    print(f"{path}: loss {loss.item():.17g}, {len(out)} bytes")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: make_golden_ctr.py OUT", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
