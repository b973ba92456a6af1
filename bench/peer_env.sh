# How the bench scripts run their PyTorch peers (sourced by bench/run.sh, ctr.sh, ps.sh and
# features.sh; bench/README.md, "How the peers run"). As PyTorch's CPU performance guide says,
# and as the peers' README in the shared folder asks:
#   - TCMalloc preloaded (Debian's libtcmalloc-minimal4): with glibc's malloc each large
#     temporary is a fresh mmap and its page faults on these VMs (DeepFM 4.0k against 17.3k
#     samples/s);
#   - the workplace's OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, so that OpenBLAS picks the
#     kernel of the CPU it runs on (a forced older core type cut sgemm from 120 to 40 GFLOP/s);
#   - the thread pools fixed before torch loads: the peers do that themselves
#     (bench/peers/peer_threads.py).
# After sourcing, with PEER_PYTHON set to the interpreter that runs the peers:
#   peer_env_check             stops the script when the preload library is missing
#   "${PEER_ENV[@]}" CMD ...   runs CMD in the peers' environment
#   peer_info THREADS          one line: the BLAS (OpenBLAS core, its threads, build) and torch's
#                              CPU capability that a peer of THREADS threads gets in it
#   peer_cores OUT ERR CMD ... runs CMD (stdout to OUT, stderr to ERR) and prints
#                              "cpu_s wall_s cores": the CPU time of CMD and of every process it
#                              waited for, over its wall time (for peers that print no cores= of
#                              their own); returns CMD's status
# Knob: TCMALLOC=path of the library to preload (default: the multiarch libtcmalloc_minimal.so.4).

peer_tcmalloc=${TCMALLOC:-}
if [ -z "$peer_tcmalloc" ]; then
    for peer_f in /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \
        /usr/lib/*-linux-gnu*/libtcmalloc_minimal.so.4 /usr/lib/libtcmalloc_minimal.so.4; do
        if [ -e "$peer_f" ]; then peer_tcmalloc=$peer_f; break; fi
    done
fi
PEER_ENV=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "LD_PRELOAD=$peer_tcmalloc")

peer_env_check() {
    if [ -z "$peer_tcmalloc" ] || [ ! -e "$peer_tcmalloc" ]; then
        echo "bench: error: TCMalloc (libtcmalloc_minimal.so.4) is missing: the PyTorch peers run" \
            "with it preloaded; install the Debian package libtcmalloc-minimal4 (make bench" \
            "installs the bench group of deps/packages.txt), or set TCMALLOC=/path/to/it" >&2
        exit 1
    fi
}

peer_info() { # THREADS
    OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1 MKL_NUM_THREADS=$1 \
        "${PEER_ENV[@]}" "${PEER_PYTHON:-/usr/bin/python3}" - "$1" << 'PY'
import ctypes, os, sys
import torch
torch.set_num_threads(int(sys.argv[1]))
libs = sorted({l.split()[-1] for l in open("/proc/self/maps")
               if ".so" in l and ("blas" in l or "mkl" in l or "tcmalloc" in l)})
blas = "no OpenBLAS found (" + ", ".join(libs) + ")"
for path in [p for p in libs if "libopenblas" in p]:
    try:
        lib = ctypes.CDLL(path)
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        blas = (f"OpenBLAS core {lib.openblas_get_corename().decode()}, "
                f"{lib.openblas_get_num_threads()} thread(s) ({lib.openblas_get_config().decode()})")
        break
    except (OSError, AttributeError):
        pass
cap = [l.split(":", 1)[1].strip() for l in torch.__config__.show().splitlines()
       if "CPU capability" in l]
malloc = "tcmalloc" if any("tcmalloc" in p for p in libs) else "glibc malloc"
unset = all(v not in os.environ for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"))
print(f"torch {torch.__version__}, cpu capability {cap[0] if cap else '?'}, {blas}, {malloc}, "
      f"OPENBLAS_CORETYPE/L2_SIZE {'unset' if unset else 'SET'}")
PY
}

peer_cores() { # OUT ERR CMD...
    local out=$1 err=$2
    shift 2
    "${PEER_PYTHON:-/usr/bin/python3}" - "$out" "$err" "$@" << 'PY'
import resource, subprocess, sys, time
t0 = time.monotonic()
with open(sys.argv[1], "w") as out, open(sys.argv[2], "w") as err:
    rc = subprocess.call(sys.argv[3:], stdout=out, stderr=err)
wall = time.monotonic() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = ru.ru_utime + ru.ru_stime
print(f"{cpu:.2f} {wall:.2f} {cpu / wall if wall > 0 else 0:.2f}")
sys.exit(rc)
PY
}
