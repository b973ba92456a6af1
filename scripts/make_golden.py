#!/usr/bin/env python3
"""Writes the golden fixture for tests/test_golden.c: dtrain's built-in mnist_cnn against PyTorch.

    python3 scripts/make_golden.py tests/fixtures/golden_cnn.bin

Needs PyTorch and NumPy (Debian: python3-torch, python3-numpy) and the Fashion-MNIST training set
in /usr/share/datasets/fashion-mnist. If the python3 that runs this script lacks torch (a pyenv
shim, say), it re-runs itself once with /usr/bin/python3.

The model (dtrain's "mnist_cnn", TensorFlow's multi-worker tutorial CNN):
    input 28x28x1 -> conv2d 32 3x3 valid stride 1 relu -> max_pooling2d 2x2 stride 2
    -> flatten (13*13*32 = 5408) -> dense 64 relu -> dense 10 (logits)
    loss: softmax cross-entropy from logits, mean over the batch (F.cross_entropy's default).

Parameters. Tensor t, in dtrain's order and layout (row-major):
    t=0 conv2d/kernel  (KH, KW, C, OC) = (3, 3, 1, 32)   Keras HWIO
    t=1 conv2d/bias    (32)
    t=2 dense/kernel   (IN, OUT) = (5408, 64), IN in (H, W, C) order of the NHWC pooled tensor
    t=3 dense/bias     (64)
    t=4 dense_1/kernel (64, 10)
    t=5 dense_1/bias   (10)
element i of tensor t (flat index in that layout) is, computed in IEEE double and then rounded
to the nearest float32:
    h     = (i * 2654435761 + 12345 * (t + 1)) mod 2^32       (exact integer arithmetic)
    h     = h xor (h >> 16);  h = (h * 0x45D9F3B) mod 2^32;  h = h xor (h >> 16)
    value = float32(scale_t * (h / 2^32 - 0.5))
    scale_t = 2 * sqrt(6 / (fan_in + fan_out)) for kernels (Keras's Glorot fans: for the conv
              kernel fan_in = KH*KW*C = 9, fan_out = KH*KW*OC = 288), 0.2 for biases.
The weights are not stored in the fixture: the C test recomputes them with the same formula.
The second line (an integer finaliser) matters: without it the weights are an affine function of
i modulo 1, so sums of conv taps obey near-exact linear relations and some 2x2 pooling windows on
nearly blank patches tie to within 1e-10 relative, closer than float32 can resolve; float32 then
routes those windows' gradients to another position than this float64 reference does (3e-6
error in conv2d/kernel, 100 times the arithmetic error).

Input: the first 16 images and labels of the Fashion-MNIST training set, as uint8; the float
input is uint8 / 255 divided in float32. The reference loss and gradients are computed in
float64 (model and input cast to double) and the gradients stored as float32.

PyTorch's layouts differ: Conv2d weight (OC, C, KH, KW) on NCHW activations; nn.Flatten of the
NCHW pooled tensor gives (C, H, W) order; Linear weight is (OUT, IN). The script maps dtrain's
tensors to torch's and the gradients back, and cross-checks the flatten permutation against a
second torch model that flattens in NHWC order with the dense kernel used as is.

Fixture format, little-endian, no padding:
    8 bytes   magic "DTGOLD01"
    u32       version = 1
    u32       batch B
    B*784     images, uint8, row-major 28x28 each
    B         labels, uint8
    f64       loss: the mean over the batch of the cross-entropy
    6 times, in dtrain's parameter order:
        u32   name length n
        n     name bytes, no terminator (e.g. "conv2d/kernel")
        u32   element count N
        N     float32: d loss / d parameter, in dtrain's layout
    u32       CRC32C (Castagnoli: reflected polynomial 0x82F63B78, init ~0, final ~) of every
              byte before it
"""
import gzip
import math
import os
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    system_python = "/usr/bin/python3"
    if (os.environ.get("DT_GOLDEN_REEXEC") != "1" and os.path.exists(system_python)
            and os.path.realpath(system_python) != os.path.realpath(sys.executable)):
        os.environ["DT_GOLDEN_REEXEC"] = "1"
        os.execv(system_python, [system_python] + sys.argv)
    raise

DATA_DIR = "/usr/share/datasets/fashion-mnist"
BATCH = 16
H, W, C, OC, K = 28, 28, 1, 32, 3
OH, OW = H - K + 1, W - K + 1            # 26, 26
PH, PW = OH // 2, OW // 2                # 13, 13
FLAT = PH * PW * OC                      # 5408
HIDDEN, CLASSES = 64, 10

# name, dtrain shape, scale
PARAMS = [
    ("conv2d/kernel", (K, K, C, OC), 2.0 * math.sqrt(6.0 / (K * K * C + K * K * OC))),
    ("conv2d/bias", (OC,), 0.2),
    ("dense/kernel", (FLAT, HIDDEN), 2.0 * math.sqrt(6.0 / (FLAT + HIDDEN))),
    ("dense/bias", (HIDDEN,), 0.2),
    ("dense_1/kernel", (HIDDEN, CLASSES), 2.0 * math.sqrt(6.0 / (HIDDEN + CLASSES))),
    ("dense_1/bias", (CLASSES,), 0.2),
]


def formula_param(t, shape, scale):
    """The float32 parameter tensor t in dtrain's layout, by the formula above."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.uint64)
    m32 = np.uint64(0xFFFFFFFF)
    h = (i * np.uint64(2654435761) + np.uint64(12345 * (t + 1))) & m32
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x45D9F3B)) & m32
    h ^= h >> np.uint64(16)
    u = h.astype(np.float64) / 4294967296.0
    v = (scale * (u - 0.5)).astype(np.float32)
    # The same in plain Python integers and floats, for a few elements.
    for j in sorted({0, min(1, n - 1), n // 2, n - 1}):
        hj = (j * 2654435761 + 12345 * (t + 1)) % (1 << 32)
        hj ^= hj >> 16
        hj = (hj * 0x45D9F3B) % (1 << 32)
        hj ^= hj >> 16
        assert v[j] == np.float32(scale * (hj / 4294967296.0 - 0.5))
    return v.reshape(shape)


def read_idx(path, magic, n):
    with gzip.open(path, "rb") as f:
        got = struct.unpack(">I", f.read(4))[0]
        if got != magic:
            sys.exit(f"{path}: magic {got:#010x}, expected {magic:#010x}")
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        per = int(np.prod(dims[1:])) if len(dims) > 1 else 1
        if dims[0] < n:
            sys.exit(f"{path}: {dims[0]} items, need {n}")
        return np.frombuffer(f.read(n * per), dtype=np.uint8).reshape((n,) + tuple(dims[1:]))


def crc32c(data):
    table = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class Net(nn.Module):
    """The mnist_cnn in torch. nhwc_flatten: flatten the pooled tensor in (H, W, C) order as dtrain
    does (then the dense kernel needs no row permutation), else nn.Flatten's (C, H, W)."""

    def __init__(self, nhwc_flatten):
        super().__init__()
        self.nhwc_flatten = nhwc_flatten
        self.conv = nn.Conv2d(C, OC, K)
        self.fc1 = nn.Linear(FLAT, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, CLASSES)
        self.pool_pre = None  # the conv output after relu, before pooling, for diagnostics
        self.fc1_pre = None

    def forward(self, x):  # x (B, 1, 28, 28)
        z = F.relu(self.conv(x))
        self.pool_pre = z.detach()
        z = F.max_pool2d(z, 2, 2)
        z = z.permute(0, 2, 3, 1).flatten(1) if self.nhwc_flatten else nn.Flatten()(z)
        z = self.fc1(z)
        self.fc1_pre = z.detach()
        return self.fc2(F.relu(z))


def load_dtrain_params(net, p):
    """Copies dtrain-layout tensors p[0..5] into net."""
    with torch.no_grad():
        # (KH, KW, C, OC) -> (OC, C, KH, KW)
        net.conv.weight.copy_(torch.from_numpy(p[0].transpose(3, 2, 0, 1).copy()))
        net.conv.bias.copy_(torch.from_numpy(p[1]))
        if net.nhwc_flatten:
            net.fc1.weight.copy_(torch.from_numpy(p[2].T.copy()))
        else:
            # rows (H, W, C) -> columns (C, H, W): (PH, PW, OC, OUT) -> (OUT, OC, PH, PW)
            w = p[2].reshape(PH, PW, OC, HIDDEN).transpose(3, 2, 0, 1).reshape(HIDDEN, FLAT)
            net.fc1.weight.copy_(torch.from_numpy(w.copy()))
        net.fc1.bias.copy_(torch.from_numpy(p[3]))
        net.fc2.weight.copy_(torch.from_numpy(p[4].T.copy()))
        net.fc2.bias.copy_(torch.from_numpy(p[5]))


def dtrain_grads(net):
    """The gradients of net in dtrain's layouts, float64."""
    g = [t.grad.detach().numpy() for t in (net.conv.weight, net.conv.bias, net.fc1.weight,
                                           net.fc1.bias, net.fc2.weight, net.fc2.bias)]
    conv = g[0].transpose(2, 3, 1, 0)  # (OC, C, KH, KW) -> (KH, KW, C, OC)
    if net.nhwc_flatten:
        dense = g[2].T
    else:
        # (OUT, OC, PH, PW) -> (PH, PW, OC, OUT) -> (FLAT, OUT)
        dense = g[2].reshape(HIDDEN, OC, PH, PW).transpose(2, 3, 1, 0).reshape(FLAT, HIDDEN)
    return [np.ascontiguousarray(a) for a in (conv, g[1], dense, g[3], g[4].T, g[5])]


def run(net, x, labels):
    net.zero_grad()
    logits = net(x)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    return logits.detach(), loss.item(), dtrain_grads(net)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_golden.py OUTPUT")
    out_path = sys.argv[1]
    assert crc32c(b"123456789") == 0xE3069283
    torch.set_num_threads(1)

    images = read_idx(os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz"), 0x803, BATCH)
    labels = read_idx(os.path.join(DATA_DIR, "train-labels-idx1-ubyte.gz"), 0x801, BATCH)
    assert images.shape == (BATCH, H, W) and labels.shape == (BATCH,)

    params = [formula_param(t, shape, scale) for t, (_, shape, scale) in enumerate(PARAMS)]
    x32 = images.astype(np.float32) / np.float32(255.0)          # float32 division, as dtrain
    x = torch.from_numpy(x32.astype(np.float64)).reshape(BATCH, 1, H, W)
    y = torch.from_numpy(labels.astype(np.int64))

    nets = []
    for nhwc in (False, True):
        net = Net(nhwc).double()
        load_dtrain_params(net, [p.astype(np.float64) for p in params])
        nets.append(net)
    logits, loss, grads = run(nets[0], x, y)
    logits_b, loss_b, grads_b = run(nets[1], x, y)

    # The (C, H, W) -> (H, W, C) permutation both ways, against the model that needs none.
    assert torch.allclose(logits, logits_b, rtol=0, atol=1e-12), "flatten permutation mismatch"
    assert abs(loss - loss_b) < 1e-12
    for (name, shape, _), g, gb in zip(PARAMS, grads, grads_b):
        assert g.shape == shape and gb.shape == shape, name
        assert np.allclose(g, gb, rtol=0, atol=1e-12), f"{name}: gradient permutation mismatch"

    # How robust the fixture is to float32 rounding: a max-pool window whose top two values (or a
    # relu whose input) are closer than float32 can resolve could route a gradient differently in
    # dtrain's float32 than here. Measure the margins, and run the same model in float32 torch:
    # its pooling choices must match and its error bounds what to expect of dtrain.
    def windows(net):
        pre = net.pool_pre.reshape(BATCH, OC, PH, 2, PW, 2).permute(0, 1, 2, 4, 3, 5)
        return pre.reshape(-1, 4)
    win = windows(nets[0]).sort(dim=1, descending=True).values
    gap, top = win[:, 0] - win[:, 1], win[:, 0]
    near = ((gap > 0) & (top > 0)).nonzero().flatten()
    min_rel_gap = (gap[near] / top[near]).min().item() if len(near) else float("inf")
    exact_ties = int(((gap == 0) & (top > 0)).sum())
    min_fc1 = nets[0].fc1_pre.abs().min().item()
    net32 = Net(False).float()
    load_dtrain_params(net32, params)
    _, loss32, grads32 = run(net32, torch.from_numpy(x32).reshape(BATCH, 1, H, W), y)
    rerouted = int((windows(net32).argmax(1) != windows(nets[0]).argmax(1)).sum())
    print(f"loss {loss:.12f}; pool windows: {exact_ties} exact positive ties, min relative gap "
          f"otherwise {min_rel_gap:.3g}; min |dense pre-activation| {min_fc1:.3g}")
    print(f"float32 torch: {rerouted} pool windows routed differently, loss error "
          f"{abs(loss32 - loss):.3g}")
    if rerouted or min_rel_gap < 1e-7 or min_fc1 < 1e-6:
        print("warning: a near tie: float32 may route a gradient differently", file=sys.stderr)

    body = bytearray()
    body += b"DTGOLD01"
    body += struct.pack("<II", 1, BATCH)
    body += images.tobytes()
    body += labels.astype(np.uint8).tobytes()
    body += struct.pack("<d", loss)
    for (name, shape, _), g, g32 in zip(PARAMS, grads, grads32):
        nb = name.encode()
        gf = np.ascontiguousarray(g, dtype=np.float64).astype("<f4").reshape(-1)
        body += struct.pack("<I", len(nb)) + nb
        body += struct.pack("<I", gf.size) + gf.tobytes()
        print(f"  {name:15s} {str(shape):16s} max |grad| {np.abs(g).max():.4g}, float32 torch "
              f"max abs error {np.abs(g32 - g).max():.3g}")
    body += struct.pack("<I", crc32c(body))
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "wb") as f:
        f.write(body)
    print(f"wrote {out_path}: {len(body)} bytes")


if __name__ == "__main__":
    main()
