"""A PyTorch peer's thread count, fixed before numpy and torch load.

torch.set_num_threads bounds PyTorch's own (OpenMP) pool only. Debian's torch does its matrix
products through the system BLAS, OpenBLAS, which starts a pool as wide as the machine when the
library loads and reads its width from the environment then: a peer that only calls
set_num_threads(1) runs its products on every core. So the width goes into the environment
first, for each of the pools a BLAS or OpenMP build may start.
"""
import os
import sys
import time

VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def threads_from_argv(default=1):
    """The value of --threads N or --threads=N in sys.argv, else default (argparse checks it later)."""
    argv = sys.argv[1:]
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--threads="):
            value = arg.split("=", 1)[1]
        else:
            continue
        return int(value) if value.isdigit() and int(value) > 0 else default
    return default


def pin(threads):
    """Every pool to `threads`; call before numpy or torch is imported."""
    if "numpy" in sys.modules or "torch" in sys.modules:
        raise RuntimeError("peer_threads.pin must run before numpy and torch are imported")
    for name in VARIABLES:
        os.environ[name] = str(threads)


class CpuClock:
    """The process's CPU time over a span of wall time: the cores it kept busy on average."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def cores(self):
        wall = time.perf_counter() - self.wall
        return (time.process_time() - self.cpu) / wall if wall > 0 else float("nan")
