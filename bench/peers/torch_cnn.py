#!/usr/bin/env python3
"""The peer of dtrain's tutorial CNN benchmark: the same model, data and optimizer in PyTorch, as a
competent PyTorch user writes it.

TensorFlow's multi-worker tutorial CNN (Conv2D(32, 3, relu) -> MaxPool2D(2) -> Flatten ->
Dense(64, relu) -> Dense(10)), Fashion-MNIST from the Debian package (pixels / 255), batch 64
per process, shuffled each epoch, cross-entropy from logits. With --ddp-rank/--ddp-world it runs
as one process of DistributedDataParallel over Gloo on 127.0.0.1:--port, each rank taking its
own half of every epoch (DistributedSampler), as torchrun would start it.

Prints `samples_per_s=X train_s=T steps=N test_acc=A peak_rss_mb=M cores=C` last (test_acc after
the last epoch; nan when --steps cut the run short and --eval is not given; C the process's CPU
time over the training's wall time, which --threads bounds).
"""
import argparse
import gzip
import os
import resource
import struct
import sys
import time

import peer_threads

peer_threads.pin(peer_threads.threads_from_argv())

import numpy as np  # noqa: E402 (after the pools' width is set)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, = struct.unpack(">I", raw[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(split):
    images = read_idx(f"{DATA}/{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    labels = read_idx(f"{DATA}/{split}-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels)


class TutorialCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 32, 3)
        self.hidden = nn.Linear(32 * 13 * 13, 64)
        self.out = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.out(F.relu(self.hidden(torch.flatten(x, 1))))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        right = sum((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
                    for i in range(0, len(x), 1000))
    model.train()
    return right / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--opt", choices=["sgd", "adam"], default="adam")
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval", action="store_true", help="evaluate even when --steps cut it short")
    ap.add_argument("--ddp-rank", type=int, default=-1)
    ap.add_argument("--ddp-world", type=int, default=1)
    ap.add_argument("--port", type=int, default=29500)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    ddp = a.ddp_rank >= 0
    if ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                                rank=a.ddp_rank, world_size=a.ddp_world)
    x, y = load("train")
    model = TutorialCNN()
    net = nn.parallel.DistributedDataParallel(model) if ddp else model
    opt = (torch.optim.Adam(net.parameters(), lr=a.lr) if a.opt == "adam"
           else torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9))
    rank, world = (a.ddp_rank, a.ddp_world) if ddp else (0, 1)
    gen = torch.Generator().manual_seed(a.seed)
    steps = samples = 0
    train_s, cpu_s = 0.0, 0.0
    cut = False
    for _ in range(a.epochs):
        order = torch.randperm(len(x), generator=gen)[rank::world]
        n_batches = len(order) // a.batch_size
        t0, c0 = time.perf_counter(), time.process_time()
        for b in range(n_batches):
            idx = order[b * a.batch_size:(b + 1) * a.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x[idx]), y[idx])
            loss.backward()
            opt.step()
            steps += 1
            samples += len(idx)
            if a.steps and steps >= a.steps:
                cut = True
                break
        train_s += time.perf_counter() - t0
        cpu_s += time.process_time() - c0
        if cut:
            break
    acc = float("nan")
    if rank == 0 and (not cut or a.eval):
        tx, ty = load("t10k")
        acc = accuracy(model, tx, ty)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"samples_per_s={samples / train_s:.1f} train_s={train_s:.2f} steps={steps} "
          f"test_acc={acc:.4f} peak_rss_mb={rss_mb:.0f} cores={cpu_s / train_s:.2f}", flush=True)
    if ddp:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
