#!/usr/bin/env python3
"""The peer of `dtrain bench allreduce`: torch.distributed's all_reduce over Gloo (TCP), float32
sum, 4 KiB to 64 MiB by factors of 4, on 127.0.0.1:PORT.

usage: gloo_allreduce.py RANK WORLD PORT [ITERS]
Rank 0 prints one line per size: `bytes=B us=T algbw_GBps=A busbw_GBps=U` (T: the mean time of
one all-reduce, the slowest rank's; busbw = algbw x 2(n-1)/n, as nccl-tests count it).
"""
import sys
import time

import torch
import torch.distributed as dist


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    iters_max = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    size = 4096
    while size <= 64 << 20:
        t = torch.ones(size // 4, dtype=torch.float32)
        iters = max(1, min(1000, (256 << 20) // size, iters_max if size >= 1 << 20 else 1000))
        for _ in range(3):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        took = torch.tensor([(time.perf_counter() - t0) / iters])
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        sec = took.item()
        algbw = size / sec / 1e9
        busbw = algbw * 2 * (world - 1) / world
        if rank == 0:
            print(f"bytes={size} us={sec * 1e6:.1f} algbw_GBps={algbw:.3f} busbw_GBps={busbw:.3f}",
                  flush=True)
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
