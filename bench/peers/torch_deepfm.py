"""DeepFM (or FM, LR) in PyTorch over field-positional LibSVM, the peer of bench/ctr.sh.

What a competent PyTorch user writes for the TensorFlow DeepFM sample's model: the first-order
weights and the factors are nn.Embedding(sparse=True) tables updated by SparseAdam (or sparse
Adagrad), the bias and the MLP by Adam (or Adagrad); the MLP is Linear+ReLU+Dropout per deep
layer, then Linear(1); the loss is the mean sigmoid cross-entropy, plus with --l2-reg X the
sample's L2 as dtrain applies it: X/2 x the squares of each table row the batch touches, once
per row (torch.unique of the batch's ids, looked up again). Tables start as dtrain's do
(first-order weights 0, factors N(0, 0.01^2)), the MLP as PyTorch's default.

The last line: samples_per_s=X train_s=T rows=N final_loss=L test_auc=A test_logloss=L
peak_rss_mb=M cores=C (training time only: reading the files is not counted; C is the process's CPU
time over the training's wall time, the cores it kept busy, which --threads bounds).
"""
import argparse
import resource
import time

import peer_threads

peer_threads.pin(peer_threads.threads_from_argv())

import numpy as np  # noqa: E402 (after the pools' width is set)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from ctr_common import auc, load_libsvm

ap = argparse.ArgumentParser()
ap.add_argument("--train", required=True)
ap.add_argument("--test", required=True)
ap.add_argument("--model", choices=["lr", "fm", "deepfm"], default="deepfm")
ap.add_argument("--field-size", type=int, default=39)
ap.add_argument("--feature-size", type=int, required=True)
ap.add_argument("--embedding-size", type=int, default=32)
ap.add_argument("--deep-layers", default="128,64,32")
ap.add_argument("--dropout-keep", type=float, default=0.5)
ap.add_argument("--l2-reg", type=float, default=0.0)
ap.add_argument("--optimizer", choices=["adam", "adagrad"], default="adam")
ap.add_argument("--lr", type=float, default=5e-4)
ap.add_argument("--batch-size", type=int, default=1024)
ap.add_argument("--epochs", type=int, default=1)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--seed", type=int, default=1)
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)
F = args.field_size


class DeepFM(nn.Module):
    def __init__(self):
        super().__init__()
        K = args.embedding_size
        self.w = nn.Embedding(args.feature_size, 1, sparse=True)
        nn.init.zeros_(self.w.weight)
        self.bias = nn.Parameter(torch.zeros(1))
        self.v = None
        self.mlp = None
        if args.model != "lr":
            self.v = nn.Embedding(args.feature_size, K, sparse=True)
            nn.init.normal_(self.v.weight, 0.0, 0.01)
        if args.model == "deepfm":
            layers, width = [], F * K
            for units in [int(u) for u in args.deep_layers.split(",")]:
                layers += [nn.Linear(width, units), nn.ReLU()]
                if args.dropout_keep < 1.0:
                    layers.append(nn.Dropout(1.0 - args.dropout_keep))
                width = units
            layers.append(nn.Linear(width, 1))
            self.mlp = nn.Sequential(*layers)

    def forward(self, ids, vals):
        z = self.bias + (self.w(ids).squeeze(-1) * vals).sum(1)
        if self.v is not None:
            e = self.v(ids) * vals.unsqueeze(-1)           # (B, F, K)
            s = e.sum(1)
            z = z + 0.5 * (s * s - (e * e).sum(1)).sum(1)
            if self.mlp is not None:
                z = z + self.mlp(e.reshape(len(ids), -1)).squeeze(-1)
        return z


ytr, itr, vtr = load_libsvm(args.train, F)
yte, ite, vte = load_libsvm(args.test, F)
model = DeepFM()
tables = [p for n, p in model.named_parameters() if n.startswith(("w.", "v."))]
dense = [p for n, p in model.named_parameters() if not n.startswith(("w.", "v."))]
if args.optimizer == "adam":
    opts = [torch.optim.SparseAdam(tables, lr=args.lr)]
    if dense:
        opts.append(torch.optim.Adam(dense, lr=args.lr))
else:
    opts = [torch.optim.Adagrad(tables + dense, lr=args.lr, initial_accumulator_value=0.1)]
lossf = nn.BCEWithLogitsLoss()
itr_t, vtr_t, ytr_t = torch.from_numpy(itr), torch.from_numpy(vtr), torch.from_numpy(ytr)
B = args.batch_size
n_batches = len(ytr) // B
t0 = time.time()
clock = peer_threads.CpuClock()
seen, last_loss = 0, float("nan")
for epoch in range(args.epochs):
    model.train()
    total = 0.0
    for b in range(n_batches):
        sl = slice(b * B, (b + 1) * B)
        z = model(itr_t[sl], vtr_t[sl])
        loss = lossf(z, ytr_t[sl])
        if args.l2_reg > 0:
            # L2 on the rows the batch touches, each once: l2-reg x row added to its gradient,
            # as dtrain's --l2-reg does.
            uniq = torch.unique(itr_t[sl])
            reg = model.w(uniq).pow(2).sum()
            if model.v is not None:
                reg = reg + model.v(uniq).pow(2).sum()
            loss = loss + 0.5 * args.l2_reg * reg
        for o in opts:
            o.zero_grad()
        loss.backward()
        for o in opts:
            o.step()
        total += loss.item()
        seen += B
    last_loss = total / max(n_batches, 1)
train_s = time.time() - t0
cores = clock.cores()
model.eval()
with torch.no_grad():
    z = torch.cat([model(torch.from_numpy(ite[i:i + 8192]), torch.from_numpy(vte[i:i + 8192]))
                   for i in range(0, len(yte), 8192)]).numpy().astype(np.float64)
p = np.clip(1.0 / (1.0 + np.exp(-z)), 1e-7, 1 - 1e-7)
logloss = float(-np.mean(yte * np.log(p) + (1 - yte) * np.log(1 - p)))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
print(f"samples_per_s={seen / train_s:.0f} train_s={train_s:.2f} rows={seen} "
      f"final_loss={last_loss:.4f} test_auc={auc(z, yte):.4f} test_logloss={logloss:.4f} "
      f"peak_rss_mb={rss:.0f} cores={cores:.2f}")
