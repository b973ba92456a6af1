"""DeepFM trained asynchronously through parameter servers in PyTorch (torch.distributed.rpc over
TensorPipe), the peer of bench/ps.sh.

What a competent PyTorch user writes for a CTR parameter server: --ps processes hold the
first-order weights and the factors, row id on ps id % P (at row id // P), with their Adagrad
accumulators; ps 0 also holds the bias and the MLP. --workers processes each read every W-th
training row and loop over batches: the batch's unique ids, their rows pulled from every ps at
once (rpc_async) with the dense part from ps 0, forward and backward with autograd, then the row
gradients and the dense gradients pushed to the ps, which apply Adagrad as a push arrives; no
worker waits for another. The model is bench/peers/torch_deepfm.py's (tables start at 0 and
N(0, 0.01^2), the MLP as PyTorch's default).

`--launch` starts the ps and worker processes on this machine, takes part as the coordinator,
waits for the workers, reads the trained parameters back, evaluates them on --test and prints
`samples_per_s=X train_s=T rows=N test_auc=A test_logloss=L` (samples/s over all workers: rows
over the slowest worker's training time; reading files is not counted).
"""
import argparse
import os
import subprocess
import sys
import threading
import time

import peer_threads

peer_threads.pin(1)  # each process one thread, as torch.set_num_threads(1) below

import numpy as np  # noqa: E402 (after the pools' width is set)
import torch  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402
import torch.nn as nn  # noqa: E402

from ctr_common import auc, load_libsvm

ap = argparse.ArgumentParser()
ap.add_argument("--train", required=True)
ap.add_argument("--test")
ap.add_argument("--field-size", type=int, default=39)
ap.add_argument("--feature-size", type=int, required=True)
ap.add_argument("--embedding-size", type=int, default=32)
ap.add_argument("--deep-layers", default="128,64,32")
ap.add_argument("--dropout-keep", type=float, default=0.5)
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--batch-size", type=int, default=1024)
ap.add_argument("--epochs", type=int, default=1)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--ps", type=int, default=1)
ap.add_argument("--workers", type=int, default=2)
ap.add_argument("--port", type=int, default=29611)
ap.add_argument("--launch", action="store_true")
ap.add_argument("--rank", type=int, default=-1)
args = ap.parse_args()
torch.set_num_threads(1)
F, K, P, W = args.field_size, args.embedding_size, args.ps, args.workers
WORLD = P + W + 1
COORD = P + W


def dense_shapes():
    shapes, width = [(1,)], F * K
    for units in [int(u) for u in args.deep_layers.split(",")] + [1]:
        shapes += [(units, width), (units,)]
        width = units
    return shapes


def init_dense():
    torch.manual_seed(args.seed)
    out = [torch.zeros(1)]
    width = F * K
    for units in [int(u) for u in args.deep_layers.split(",")] + [1]:
        lin = nn.Linear(width, units)
        out += [lin.weight.detach().clone(), lin.bias.detach().clone()]
        width = units
    return out


def logits(b, w_rows, v_rows, dense, vals, training):
    """The DeepFM logit of a batch whose rows are already gathered: (B, F) and (B, F, K)."""
    z = b + (w_rows * vals).sum(1)
    e = v_rows * vals.unsqueeze(-1)
    s = e.sum(1)
    z = z + 0.5 * (s * s - (e * e).sum(1)).sum(1)
    h = e.reshape(len(vals), -1)
    layers = [(dense[i], dense[i + 1]) for i in range(1, len(dense), 2)]
    for k, (wt, bs) in enumerate(layers):
        h = h @ wt.t() + bs
        if k + 1 < len(layers):
            h = torch.relu(h)
            if training and args.dropout_keep < 1.0:
                h = nn.functional.dropout(h, 1.0 - args.dropout_keep, True)
    return z + h.squeeze(-1)


# ---- the ps side: its state and the functions workers call on it ----

class Shard:
    def __init__(self, k):
        rows = (args.feature_size - k + P - 1) // P
        g = torch.Generator().manual_seed(args.seed * 1000 + k)
        self.w = torch.zeros(rows)
        self.v = torch.randn(rows, K, generator=g) * 0.01
        self.aw = torch.full((rows,), 0.1)
        self.av = torch.full((rows, K), 0.1)
        self.dense = init_dense() if k == 0 else []
        self.adense = [torch.full_like(t, 0.1) for t in self.dense]
        self.lock = threading.Lock()


SHARD = None


def pull_rows(local):
    return SHARD.w[local], SHARD.v[local]


def push_rows(local, gw, gv):
    with SHARD.lock:
        SHARD.aw[local] += gw * gw
        SHARD.w[local] -= args.lr * gw / SHARD.aw[local].sqrt()
        SHARD.av[local] += gv * gv
        SHARD.v[local] -= args.lr * gv / SHARD.av[local].sqrt()


def pull_dense():
    return SHARD.dense


def push_dense(grads):
    with SHARD.lock:
        for t, a, g in zip(SHARD.dense, SHARD.adense, grads):
            a += g * g
            t -= args.lr * g / a.sqrt()


def whole_shard():
    return SHARD.w, SHARD.v


# ---- the worker ----

def work(me):
    """Trains on rows me, me + W, ...; returns (rows, seconds)."""
    y, ids, vals = load_libsvm(args.train, F, W, me)
    ps = [rpc.get_worker_info(f"ps{k}") for k in range(P)]
    lossf = nn.BCEWithLogitsLoss()
    B, seen = args.batch_size, 0
    t0 = time.time()
    for _ in range(args.epochs):
        for lo in range(0, len(y) - B + 1, B):
            bid, bval = torch.from_numpy(ids[lo:lo + B]), torch.from_numpy(vals[lo:lo + B])
            uniq, where = torch.unique(bid, return_inverse=True)
            owner = uniq % P
            parts = [(owner == k).nonzero().squeeze(1) for k in range(P)]
            futs = [rpc.rpc_async(ps[k], pull_rows, args=(uniq[parts[k]] // P,)) for k in range(P)]
            fd = rpc.rpc_async(ps[0], pull_dense)
            w_u, v_u = torch.empty(len(uniq)), torch.empty(len(uniq), K)
            for k in range(P):
                wk, vk = futs[k].wait()
                w_u[parts[k]], v_u[parts[k]] = wk, vk
            dense = [t.requires_grad_() for t in fd.wait()]
            w_u.requires_grad_(), v_u.requires_grad_()
            z = logits(dense[0], w_u[where], v_u[where], dense, bval, True)
            loss = lossf(z, torch.from_numpy(y[lo:lo + B]))
            loss.backward()
            pushes = [rpc.rpc_async(ps[k], push_rows,
                                    args=(uniq[parts[k]] // P, w_u.grad[parts[k]],
                                          v_u.grad[parts[k]])) for k in range(P)]
            pushes.append(rpc.rpc_async(ps[0], push_dense, args=([t.grad for t in dense],)))
            for f in pushes:
                f.wait()
            seen += B
    return seen, time.time() - t0


# ---- the coordinator ----


def coordinate():
    futs = [rpc.rpc_async(f"worker{i}", work, args=(i,)) for i in range(W)]
    results = [f.wait() for f in futs]
    rows = sum(r[0] for r in results)
    secs = max(r[1] for r in results)
    line = f"samples_per_s={rows / secs:.0f} train_s={secs:.2f} rows={rows}"
    if args.test:
        w, v = torch.zeros(args.feature_size), torch.zeros(args.feature_size, K)
        for k in range(P):
            wk, vk = rpc.rpc_sync(f"ps{k}", whole_shard)
            w[k::P], v[k::P] = wk, vk
        dense = rpc.rpc_sync("ps0", pull_dense)
        y, ids, vals = load_libsvm(args.test, F)
        with torch.no_grad():
            z = torch.cat([logits(dense[0], w[torch.from_numpy(ids[i:i + 8192])],
                                  v[torch.from_numpy(ids[i:i + 8192])], dense,
                                  torch.from_numpy(vals[i:i + 8192]), False)
                           for i in range(0, len(y), 8192)]).numpy().astype(np.float64)
        p = np.clip(1.0 / (1.0 + np.exp(-z)), 1e-7, 1 - 1e-7)
        logloss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
        line += f" test_auc={auc(z, y):.4f} test_logloss={logloss:.4f}"
    print(line, flush=True)


def main():
    global SHARD
    rank = COORD if args.launch else args.rank
    children = []
    if args.launch:
        base = [sys.executable, os.path.abspath(__file__)] + [
            a for a in sys.argv[1:] if a != "--launch"]
        children = [subprocess.Popen(base + ["--rank", str(r)]) for r in range(P + W)]
    name = f"ps{rank}" if rank < P else f"worker{rank - P}" if rank < COORD else "coordinator"
    if rank < P:
        SHARD = Shard(rank)
    opts = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{args.port}",
                                           num_worker_threads=8, rpc_timeout=600)
    rpc.init_rpc(name, rank=rank, world_size=WORLD, rpc_backend_options=opts)
    if rank == COORD:
        coordinate()
    rpc.shutdown()
    for c in children:
        if c.wait() != 0:
            sys.exit(f"torch_ps_deepfm.py: a child process failed ({c.returncode})")


main()
