"""DCN-v2 in PyTorch over raw Criteo TSV, the peer of bench/features.sh.

What a competent PyTorch user writes for the model of a TF feature spec over Criteo (label,
I1..I13, C1..C26; docs/FEATURES.md) trained as TF Recommenders' DCN-v2 (arXiv 2008.13535):

  inputs   the 13 numeric columns as log(1 + max(x, 0)), a missing value 0 (numeric_column with
           default_value 0 and a log1p normalizer); each of the 26 categorical columns hashed
           into --hash-buckets buckets (categorical_column_with_hash_bucket) and embedded by its
           own nn.Embedding(sparse=True) of --embedding-size (embedding_column, combiner sum:
           initial N(0, 1/K), and a missing value gives no id, so a zero vector: padding row);
           x0 = concat(13 numerics, 26 embeddings), 13 + 26 K wide (429 at K = 16).
  cross    --cross-layers layers of TFRS's Cross: x_{l+1} = x0 * (W x_l + b) + x_l, W full rank
           (D x D) or, with --projection-dim r, U V (D x r, r x D; the bias on the second).
  deep     --deep-layers Linear + ReLU, beside the cross network (parallel structure):
           logit = Linear(1)(concat(cross_out, deep_out)).
  training batch --batch-size in file order (the last partial batch dropped), BCE with logits,
           SparseAdam for the tables and Adam for the dense variables at --lr; kernels Glorot
           uniform and biases 0, as Keras's Dense (and dtrain) start them.

The hash is not TensorFlow's Fingerprint64 (FNV-1a 64 of the token's bytes, finalised by
MurmurHash3's fmix64, modulo the buckets): the same number of buckets, so as many collisions,
not the same ones. The files are read and parsed into tensors before the clock starts: the timed
loop is training only.

Prints this process's BLAS and kernel (`blas: ...`), then last:
samples_per_s=X train_s=T rows=N final_loss=L test_auc=A test_logloss=L peak_rss_mb=M cores=C
(C: the process's CPU time over the training's wall time, the cores it kept busy, which
--threads bounds).
"""
import argparse
import ctypes
import resource
import sys
import time

import peer_threads

peer_threads.pin(peer_threads.threads_from_argv())

import numpy as np  # noqa: E402 (after the pools' width is set)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from ctr_common import auc  # noqa: E402

NUMERIC, CATEGORICAL = 13, 26
COLUMNS = 1 + NUMERIC + CATEGORICAL


def blas_info():
    """The BLAS this process loaded (OpenBLAS's core and build, its threads) and torch's CPU
    capability, as one line."""
    libs = sorted({line.split()[-1] for line in open("/proc/self/maps")
                   if ".so" in line and ("blas" in line or "mkl" in line)})
    parts = []
    for path in [p for p in libs if "libopenblas" in p] or libs:
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            parts.append(f"openblas core={lib.openblas_get_corename().decode()} "
                         f"threads={lib.openblas_get_num_threads()} "
                         f"({lib.openblas_get_config().decode()}; {path})")
            break
        except (OSError, AttributeError):
            continue
    if not parts:
        parts.append("libraries " + (", ".join(libs) or "none found"))
    cap = [line.split(":", 1)[1].strip() for line in torch.__config__.show().splitlines()
           if "CPU capability" in line]
    return (f"blas: {'; '.join(parts)}; torch {torch.__version__} cpu_capability="
            f"{cap[0] if cap else '?'} torch_threads={torch.get_num_threads()}")


def hash_tokens(tokens, buckets):
    """Fixed-width byte strings (numpy S, NUL-padded) -> bucket ids; b'' -> -1 (missing)."""
    b = tokens.view(np.uint8).reshape(len(tokens), -1)
    h = np.full(len(tokens), 0xcbf29ce484222325, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(b.shape[1]):
            c = b[:, j].astype(np.uint64)
            h = np.where(c != 0, (h ^ c) * np.uint64(0x100000001b3), h)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xff51afd7ed558ccd)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xc4ceb9fe1a85ec53)
        h ^= h >> np.uint64(33)
    ids = (h % np.uint64(buckets)).astype(np.int64)
    ids[b[:, 0] == 0] = -1
    return ids


def load_criteo(path, buckets, chunk=100000):
    """labels (n,) float32, numerics (n, 13) float32, ids (n, 26) int64 (-1: missing)."""
    raw = open(path, "rb").read()
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    ys, xs, ids = [], [], []
    for s in range(0, len(lines), chunk):
        part = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines[s:s + chunk]]
        cells = b"\t".join(part).split(b"\t")
        if len(cells) != COLUMNS * len(part):
            for i, ln in enumerate(part):
                got = len(ln.split(b"\t"))
                if got != COLUMNS:
                    sys.exit(f"{path}: line {s + i + 1}: {got} columns, Criteo rows have {COLUMNS}")
        a = np.array(cells, dtype=np.bytes_).reshape(len(part), COLUMNS)
        ys.append(a[:, 0].astype(np.float32))
        num = a[:, 1:1 + NUMERIC].copy()
        num[num == b""] = b"0"
        xs.append(np.log1p(np.maximum(num.astype(np.float64), 0.0)).astype(np.float32))
        cat = a[:, 1 + NUMERIC:]
        ids.append(np.stack([hash_tokens(np.ascontiguousarray(cat[:, j]), buckets)
                             for j in range(CATEGORICAL)], axis=1))
    return np.concatenate(ys), np.concatenate(xs), np.concatenate(ids)


class Cross(nn.Module):
    """TFRS's Cross: x0 * (W x + b) + x, W = U V when projection_dim > 0."""

    def __init__(self, d, projection_dim):
        super().__init__()
        if projection_dim > 0:
            self.u = nn.Linear(d, projection_dim, bias=False)
            self.v = nn.Linear(projection_dim, d)
            self.kernels = [self.u, self.v]
        else:
            self.u, self.v = None, nn.Linear(d, d)
            self.kernels = [self.v]

    def forward(self, x0, x):
        z = self.v(self.u(x)) if self.u is not None else self.v(x)
        return x0 * z + x


class DCNv2(nn.Module):
    def __init__(self, args):
        super().__init__()
        K, B = args.embedding_size, args.hash_buckets
        self.one_table = args.one_table
        if self.one_table:
            # The 26 tables as one, each column's rows at its own offset (plus one padding row):
            # the same rows and updates, one gather and one sparse gradient per step.
            self.tables = nn.ModuleList([nn.Embedding(CATEGORICAL * B + 1, K, sparse=True,
                                                      padding_idx=CATEGORICAL * B)])
            self.register_buffer("offsets", torch.arange(CATEGORICAL, dtype=torch.int64) * B)
        else:
            self.tables = nn.ModuleList([nn.Embedding(B + 1, K, sparse=True, padding_idx=B)
                                         for _ in range(CATEGORICAL)])
        for t in self.tables:
            with torch.no_grad():
                nn.init.normal_(t.weight, 0.0, 1.0 / K ** 0.5)
                t.weight[t.padding_idx].zero_()
        d = NUMERIC + CATEGORICAL * K
        self.cross = nn.ModuleList([Cross(d, args.projection_dim)
                                    for _ in range(args.cross_layers)])
        layers, width = [], d
        for units in [int(u) for u in args.deep_layers.split(",") if u]:
            layers += [nn.Linear(width, units), nn.ReLU()]
            width = units
        self.deep = nn.Sequential(*layers)
        self.out = nn.Linear(d + width, 1)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        self.buckets = B

    def forward(self, num, ids):
        n = len(ids)
        if self.one_table:
            pad = self.tables[0].padding_idx
            emb = self.tables[0](torch.where(ids < 0, pad, ids + self.offsets)).reshape(n, -1)
            x0 = torch.cat([num, emb], 1)
        else:
            ids = torch.where(ids < 0, self.buckets, ids)
            x0 = torch.cat([num] + [t(ids[:, j]) for j, t in enumerate(self.tables)], 1)
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        return self.out(torch.cat([x, self.deep(x0)], 1)).squeeze(-1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", required=True, help="Criteo TSV (label, I1..I13, C1..C26)")
    ap.add_argument("--test", required=True)
    ap.add_argument("--hash-buckets", type=int, default=40000)
    ap.add_argument("--embedding-size", type=int, default=16)
    ap.add_argument("--cross-layers", type=int, default=3)
    ap.add_argument("--projection-dim", type=int, default=0, help="0: full-rank cross kernels")
    ap.add_argument("--deep-layers", default="256,128,64")
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--one-table", action="store_true",
                    help="the 26 tables as one nn.Embedding at per-column offsets")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    t_load = time.time()
    ytr, xtr, itr = load_criteo(args.train, args.hash_buckets)
    yte, xte, ite = load_criteo(args.test, args.hash_buckets)
    print(f"loaded {len(ytr)} training and {len(yte)} test rows in {time.time() - t_load:.1f} s",
          file=sys.stderr)
    model = DCNv2(args)
    tables = [p for n, p in model.named_parameters() if n.startswith("tables.")]
    dense = [p for n, p in model.named_parameters() if not n.startswith("tables.")]
    opts = [torch.optim.SparseAdam(tables, lr=args.lr), torch.optim.Adam(dense, lr=args.lr)]
    lossf = nn.BCEWithLogitsLoss()
    ytr_t, xtr_t, itr_t = torch.from_numpy(ytr), torch.from_numpy(xtr), torch.from_numpy(itr)
    print(blas_info(), flush=True)

    B = args.batch_size
    n_batches = len(ytr) // B
    if n_batches == 0:
        sys.exit(f"{args.train}: {len(ytr)} rows, fewer than one batch of {B}")
    t0 = time.time()
    clock = peer_threads.CpuClock()
    seen, last_loss = 0, float("nan")
    model.train()
    for _ in range(args.epochs):
        total = 0.0
        for b in range(n_batches):
            sl = slice(b * B, (b + 1) * B)
            loss = lossf(model(xtr_t[sl], itr_t[sl]), ytr_t[sl])
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o in opts:
                o.step()
            total += loss.item()
            seen += B
        last_loss = total / n_batches
    train_s = time.time() - t0
    cores = clock.cores()

    model.eval()
    with torch.no_grad():
        z = torch.cat([model(torch.from_numpy(xte[i:i + 8192]), torch.from_numpy(ite[i:i + 8192]))
                       for i in range(0, len(yte), 8192)]).numpy().astype(np.float64)
    p = np.clip(1.0 / (1.0 + np.exp(-z)), 1e-7, 1 - 1e-7)
    logloss = float(-np.mean(yte * np.log(p) + (1 - yte) * np.log(1 - p)))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"samples_per_s={seen / train_s:.0f} train_s={train_s:.2f} rows={seen} "
          f"final_loss={last_loss:.4f} test_auc={auc(z, yte):.4f} test_logloss={logloss:.4f} "
          f"peak_rss_mb={rss:.0f} cores={cores:.2f}")


if __name__ == "__main__":
    main()
