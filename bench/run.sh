#!/usr/bin/env bash
# The speed and memory benchmark, in one run and one report (see bench/README.md):
#   - this machine's limits: memcpy bandwidth, OpenBLAS sgemm GFLOP/s (1 and 2 threads) and the
#     round trip of a cache line between two threads
#     (bench/peers/limits.c);
#   - the tutorial CNN trained for one epoch of Fashion-MNIST (batch 64, Adam 1e-3) by PyTorch
#     (bench/peers/torch_cnn.py, run as bench/peer_env.sh says: TCMalloc preloaded,
#     OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset; its BLAS kernel and the cores it kept busy
#     reported) and by dtrain, 1 and 2 threads, interleaved: samples/s, the
#     ratio dtrain/PyTorch, peak RSS, and the FLOP rate against the sgemm peak; dtrain is also run
#     once per repeat with --no-fuse (1 thread), the end-to-end effect of the fused first block;
#   - bench/conv_bench: the first block alone, generic kernels against the fused kernel.
#
# usage: bench/run.sh BUILD_DIR        (make bench runs it on the build it made)
# env:   REPEAT=N      run each training N times (default 1) and report the median
#        NOFUSE=0      skip the dtrain --no-fuse runs
#        PEERS_DIR=... where torch_cnn.py and limits.c are (default: bench/peers)
#        PYTHON=...    a python3 that can import torch (default: the first of /usr/bin/python3,
#                      python3 that can)
#        TCMALLOC=...  the TCMalloc library the peers preload (default: libtcmalloc_minimal.so.4)
# Progress goes to stderr, the report to stdout. Exits 1 with a message when something it needs is
# missing or a run fails, rather than print figures it does not have.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-}
repeat=${REPEAT:-1}
nofuse=${NOFUSE:-1}
peers=${PEERS_DIR:-$here/peers}
data_dir=/usr/share/datasets/fashion-mnist

die() {
    echo "bench/run.sh: error: $*" >&2
    exit 1
}

[ -n "$build" ] || { echo "usage: bench/run.sh BUILD_DIR   (env: REPEAT=N, NOFUSE=0)" >&2; exit 2; }
case "$repeat" in '' | *[!0-9]* | 0) die "REPEAT must be a whole number >= 1, got '$repeat'" ;; esac
build=$(cd "$build" 2>/dev/null && pwd) || die "build directory '$1' does not exist (run: make bench)"

# ---- Everything it needs, checked before anything runs ----
dtrain=$build/dtrain
conv_bench=$build/bench/conv_bench
[ -x "$dtrain" ] || die "$dtrain is missing: build it first (make bench, or make BUILD=$1 all)"
[ -x "$conv_bench" ] || die "$conv_bench is missing: build it first (make bench, or make BUILD=$1 $1/bench/conv_bench)"
[ -d "$peers" ] || die "the peer baselines are not at $peers (set PEERS_DIR to the folder with torch_cnn.py and limits.c)"
for f in torch_cnn.py limits.c; do
    [ -f "$peers/$f" ] || die "$peers/$f is missing"
done
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
    t10k-labels-idx1-ubyte.gz; do
    [ -f "$data_dir/$f" ] || die "the Fashion-MNIST dataset is missing ($data_dir/$f): install the Debian package dataset-fashion-mnist (or run make bench, whose scripts/deps.sh does)"
done
command -v cc > /dev/null || die "no C compiler (cc) to build $peers/limits.c: install gcc"

# Debian's python3-torch installs into /usr/bin/python3's path; a python3 earlier on PATH (pyenv,
# a venv) may not see it, so take the first interpreter that can import torch and numpy.
py=
tried=
for cand in ${PYTHON:-} /usr/bin/python3 python3; do
    path=$(command -v "$cand" 2> /dev/null) || continue
    tried="$tried $path"
    if "$path" -c 'import torch, numpy' > /dev/null 2>&1; then
        py=$path
        break
    fi
done
[ -n "$py" ] || die "no python3 can import torch and numpy (tried:${tried:- none}): install the Debian packages python3-torch and python3-numpy (or run make bench, whose scripts/deps.sh does)"
PEER_PYTHON=$py
. "$here/peer_env.sh"
peer_env_check

tmp=$(mktemp -d /tmp/dtrain-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
note() { echo "bench: $*" >&2; }

# Runs a command with its output to a log and prints "peak_rss_mib wall_s exit_code other_cores":
# the child's peak RSS from getrusage(RUSAGE_CHILDREN) once it has exited, the same measure for
# every program; and how many cores other processes kept busy meanwhile, on average (all CPU time
# in /proc/stat less the child's own, over the wall time): the noise indicator of the report.
cat > "$tmp/measure.py" << 'EOF'
import os, resource, subprocess, sys, time
def busy_s():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...: all but idle and iowait
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
log, cmd = sys.argv[1], sys.argv[2:]
b0, t0 = busy_s(), time.monotonic()
with open(log, "w") as f:
    rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
wall, b1 = time.monotonic() - t0, busy_s()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
others = max(0.0, (b1 - b0 - ru.ru_utime - ru.ru_stime) / wall) if wall > 0 else 0.0
print("%.1f %.2f %d %.2f" % (ru.ru_maxrss / 1024, wall, rc, others))
EOF

fail_run() { # what, log
    echo "bench/run.sh: error: $1 failed; the end of its output:" >&2
    tail -n 20 "$2" >&2
    exit 1
}

# lines: kind threads samples_per_s peak_rss_mib test_acc wall_s other_cores dtrain's_peak_rss_mb
#        peer's_cores (the CPU time over the training time it printed; nan for dtrain)
results=$tmp/results
: > "$results"

# What the PyTorch peers run on: OpenBLAS's kernel, torch's CPU capability, the allocator.
for t in 1 2; do
    peer_info "$t" > "$tmp/peer-$t.info" || die "$py cannot load torch in the peers' environment"
done

# ---- Machine limits ----
note "building and running limits.c (OpenBLAS sgemm, memcpy), 1 and 2 threads"
cc -O2 -o "$tmp/limits" "$peers/limits.c" -lopenblas > "$tmp/limits-cc.log" 2>&1 ||
    { cat "$tmp/limits-cc.log" >&2; die "cannot build $peers/limits.c against OpenBLAS: install libopenblas-dev"; }
for t in 1 2; do
    read -r _ _ rc others <<< "$(OPENBLAS_NUM_THREADS=$t "$py" "$tmp/measure.py" "$tmp/limits-$t.txt" "$tmp/limits")"
    [ "$rc" = 0 ] || fail_run "limits (OPENBLAS_NUM_THREADS=$t)" "$tmp/limits-$t.txt"
    echo "$others" > "$tmp/limits-$t.others"
done

# ---- Training: interleaved, so a burst of load from elsewhere hits both systems ----
run_torch() { # threads rep
    local t=$1 log=$tmp/torch-$1-$2.log out sps acc cores
    note "PyTorch, $t thread(s), run $2 of $repeat"
    out=$("$py" "$tmp/measure.py" "$log" "${PEER_ENV[@]}" "$py" "$peers/torch_cnn.py" \
        --threads "$t" --epochs 1 --opt adam --lr 0.001)
    read -r rss wall rc others <<< "$out"
    [ "$rc" = 0 ] || fail_run "torch_cnn.py --threads $t" "$log"
    sps=$(sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' "$log" | tail -n 1)
    acc=$(sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p' "$log" | tail -n 1)
    cores=$(sed -n 's/.*cores=\([0-9.]*\).*/\1/p' "$log" | tail -n 1)
    [ -n "$sps" ] || fail_run "torch_cnn.py --threads $t (no samples_per_s in its output)" "$log"
    echo "torch $t $sps $rss ${acc:-nan} $wall $others nan ${cores:-nan}" >> "$results"
}

run_dtrain() { # kind threads rep [extra flags]
    local kind=$1 t=$2 rep=$3 json=$tmp/$1-$2-$3.json log=$tmp/$1-$2-$3.log out fields
    shift 3
    note "dtrain${*:+ $*}, $t thread(s), run $rep of $repeat"
    out=$("$py" "$tmp/measure.py" "$log" "$dtrain" train --model mnist_cnn --data fashion-mnist \
        --epochs 1 --batch-size 64 --optimizer adam --lr 0.001 --threads "$t" --seed 1 \
        --progress none --metrics-out "$json" "$@")
    read -r rss wall rc others <<< "$out"
    [ "$rc" = 0 ] || fail_run "dtrain train --threads $t $*" "$log"
    [ -s "$json" ] || fail_run "dtrain train --threads $t $* (no --metrics-out file)" "$log"
    fields=$("$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
acc = d.get("test_accuracy")
print(d["samples_per_sec"], d["peak_rss_mb"], "nan" if acc is None else acc)' "$json") ||
        fail_run "reading $json" "$log"
    read -r sps rss_json acc <<< "$fields"
    echo "$kind $t $sps $rss $acc $wall $others $rss_json nan" >> "$results"
}

for rep in $(seq 1 "$repeat"); do
    run_torch 1 "$rep"
    run_dtrain dtrain 1 "$rep"
    run_torch 2 "$rep"
    run_dtrain dtrain 2 "$rep"
    if [ "$nofuse" != 0 ]; then
        run_dtrain nofuse 1 "$rep" --no-fuse
    fi
done

# ---- The first block alone ----
note "conv_bench (first block: generic vs fused kernels)"
read -r _ _ conv_rc conv_others <<< "$("$py" "$tmp/measure.py" "$tmp/conv_bench.txt" "$conv_bench")"

# ---- The report ----
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
"$py" - "$results" "$tmp" "$repeat" "$build" "$cpu" "$(nproc)" "$conv_rc" "$conv_others" "$py" \
    << 'EOF'
import math, re, statistics, sys

results, tmp, repeat, build, cpu, ncpu, conv_rc, conv_others, py = sys.argv[1:]
repeat = int(repeat)
# A t-thread measurement on ncpu cores is flagged when other processes used more than the
# ncpu - t cores it leaves free, plus this margin: then they took time on its cores.
BUSY = 0.25


def crowded(others, t):
    return others > max(0, int(ncpu) - t) + BUSY

# FLOPs per training example of the tutorial CNN (multiply + add = 2 FLOPs), forward + backward:
#   Conv2D 3x3, 1 -> 32 channels, 26x26 outputs:  forward 2*26*26*32*9; weight gradient the same;
#                                                 no input gradient (it is the first layer).
#   Dense 5408 -> 64:                             forward 2*5408*64; backward twice that (dW, dX).
#   Dense 64 -> 10:                               forward 2*64*10; backward twice that (dW, dX).
# Biases, ReLUs, pooling, softmax and the optimizer are not counted (a few percent at most).
conv_f = 2 * 26 * 26 * 32 * 9
d1_f = 2 * 5408 * 64
d2_f = 2 * 64 * 10
flops = 2 * conv_f + 3 * d1_f + 3 * d2_f


def limits(t):
    text = open(f"{tmp}/limits-{t}.txt").read()
    others = float(open(f"{tmp}/limits-{t}.others").read())
    gemm = {tuple(map(int, m[:3])): float(m[3])
            for m in re.findall(r"sgemm M=(\d+) N=(\d+) K=(\d+): ([0-9.]+) GFLOP/s", text)}
    mem = re.search(r"memcpy 64MiB: ([0-9.]+) GB/s", text)
    # The peak: the better of the two large square products (one burst of load from elsewhere
    # during one of them then does not halve it), else the best line.
    big = [gemm[k] for k in ((512, 512, 512), (1024, 1024, 1024)) if k in gemm]
    peak = max(big) if big else (max(gemm.values()) if gemm else None)
    return text, gemm, (float(mem.group(1)) if mem else None), peak, others


L = {1: limits(1), 2: limits(2)}
if L[1][3] is None or L[2][3] is None:
    sys.exit("bench/run.sh: error: limits printed no sgemm line:\n" + L[1][0] + L[2][0])

runs = {}  # (kind, threads) -> list of (sps, rss_mib, acc, wall[, rss_ext])
for line in open(results):
    f = line.split()
    runs.setdefault((f[0], int(f[1])), []).append([float(x) for x in f[2:]])


# fields: 0 samples/s, 1 peak RSS MiB (getrusage), 2 test accuracy, 3 wall s,
#         4 cores used by other processes meanwhile, 5 dtrain's own peak_rss_mb,
#         6 the PyTorch peer's cores (its CPU time over its training time)
def med(kind, t, i):
    v = [r[i] for r in runs.get((kind, t), []) if not math.isnan(r[i])]
    return statistics.median(v) if v else None


def spread(kind, t):
    v = [r[0] for r in runs.get((kind, t), [])]
    return "" if len(v) < 2 else f" ({min(v):,.0f}-{max(v):,.0f})"


def fmt(x, spec=",.0f"):
    return "-" if x is None else format(x, spec)


W = 78
print("=" * W)
print(f"dtrain benchmark: build {build}")
print(f"machine: {cpu}, {ncpu} CPUs online; python: {py}")
print(f"REPEAT={repeat}: each training figure is the median of {repeat} run(s)"
      + (" (min-max in brackets)" if repeat > 1 else ""))
print("The machine is shared and noisy: compare ratios taken in this one run, not absolute")
print("figures across runs.")
print("=" * W)

warnings = []
print("\n-- Machine limits (bench/peers/limits.c; OpenBLAS) --")
for t in (1, 2):
    text, gemm, mem, peak, others = L[t]
    print(f"OPENBLAS_NUM_THREADS={t}: memcpy {fmt(mem, '.2f')} GB/s, sgemm peak {peak:.1f} GFLOP/s "
          f"(best of 512^3, 1024^3); other processes used {others:.2f} cores meanwhile")
    for (m, n, k), g in gemm.items():
        print(f"    sgemm M={m} N={n} K={k}: {g:.1f} GFLOP/s")
    rt = re.search(r"cache-line round trip: ([0-9]+) ns", text)
    if rt:
        print(f"    cache-line round trip between two threads: {rt.group(1)} ns (about 45 between "
              f"cores that share a cache, 350 and more across chips)")
    if crowded(others, t):
        warnings.append(f"other processes used {others:.2f} cores during the {t}-thread limits "
                        "probe: that peak is low, and the fractions of it high")
if L[2][3] < 1.3 * L[1][3]:
    warnings.append(f"the 2-thread sgemm peak ({L[2][3]:.1f}) is not well above the 1-thread one "
                    f"({L[1][3]:.1f}): the second core was busy, so the 2-thread fractions of peak "
                    "below are overstated")

print("\n-- Training: tutorial CNN, Fashion-MNIST, 1 epoch of 937 steps x 64, Adam lr 1e-3 --")
print("samples/s is training time only (data loading and the test pass excluded, both systems);")
print("peak RSS is the whole process, from getrusage once it has exited. PyTorch runs as")
print("bench/peer_env.sh says (TCMalloc preloaded, OPENBLAS_CORETYPE/L2_SIZE unset), on:")
for t in (1, 2):
    print(f"  {t} thread{'s' if t > 1 else ''}: " + open(f"{tmp}/peer-{t}.info").read().strip())
hdr = f"{'':34}{'1 thread':>26}{'2 threads':>26}"
print(hdr)


def row(label, vals):
    print(f"{label:34}" + "".join(f"{v:>26}" for v in vals))


row("PyTorch samples/s", [fmt(med("torch", t, 0)) + spread("torch", t) for t in (1, 2)])
row("dtrain samples/s", [fmt(med("dtrain", t, 0)) + spread("dtrain", t) for t in (1, 2)])
ratios = {}
for t in (1, 2):
    a, b = med("dtrain", t, 0), med("torch", t, 0)
    ratios[t] = a / b if a and b else None
row("dtrain / PyTorch", [("x" + fmt(ratios[t], ".2f")) if ratios[t] else "-" for t in (1, 2)])
if ("nofuse", 1) in runs:
    nf = med("nofuse", 1, 0)
    row("dtrain --no-fuse samples/s", [fmt(nf) + spread("nofuse", 1), "(not run)"])
    f1 = med("dtrain", 1, 0)
    row("dtrain fused / --no-fuse", ["x" + fmt(f1 / nf, ".2f"), ""])
row("PyTorch peak RSS MiB", [fmt(med("torch", t, 1)) for t in (1, 2)])
row("dtrain peak RSS MiB", [fmt(med("dtrain", t, 1), ",.1f") for t in (1, 2)])
row("  (dtrain's own peak_rss_mb)", [fmt(med("dtrain", t, 5), ",.1f") for t in (1, 2)])
rss_ratio = [med("torch", t, 1) / med("dtrain", t, 1) for t in (1, 2)]
row("PyTorch RSS / dtrain RSS", ["x" + fmt(r, ".1f") for r in rss_ratio])
row("test accuracy PyTorch", [fmt(med("torch", t, 2), ".4f") for t in (1, 2)])
row("test accuracy dtrain", [fmt(med("dtrain", t, 2), ".4f") for t in (1, 2)])
row("PyTorch cores busy while training", [fmt(med("torch", t, 6), ".2f") for t in (1, 2)])
row("wall s per run PyTorch (all of it)", [fmt(med("torch", t, 3), ".1f") for t in (1, 2)])
row("wall s per run dtrain (all of it)", [fmt(med("dtrain", t, 3), ".1f") for t in (1, 2)])
print(f"cores used by other processes during the runs (max; 0 = quiet machine; flagged above "
      f"{max(0, int(ncpu) - 1) + BUSY:.2f} for 1 thread, {max(0, int(ncpu) - 2) + BUSY:.2f} for 2):")
for kind, name in (("torch", "PyTorch"), ("dtrain", "dtrain"), ("nofuse", "dtrain --no-fuse")):
    vals = []
    for t in (1, 2):
        v = [r[4] for r in runs.get((kind, t), [])]
        vals.append(fmt(max(v), ".2f") if v else "")
        if v and crowded(max(v), t):
            warnings.append(f"other processes used up to {max(v):.2f} cores during the {name} "
                            f"{t}-thread run(s): those figures are depressed")
    row("  " + name, vals)

print("\n-- FLOP rate --")
print("FLOPs per training example (forward + backward, multiply-add = 2):")
print(f"  conv 3x3x1->32 on 26x26: forward 2*26*26*32*9 = {conv_f:,}, weight gradient {conv_f:,},")
print("                           no input gradient (first layer)")
print(f"  dense 5408->64: forward 2*5408*64 = {d1_f:,}, backward (dW + dX) {2 * d1_f:,}")
print(f"  dense 64->10:   forward 2*64*10 = {d2_f:,}, backward (dW + dX) {2 * d2_f:,}")
print(f"  total 2*{conv_f:,} + 3*{d1_f:,} + 3*{d2_f:,} = {flops:,} FLOP/example"
      f" ({flops * 60000 / 1e9:.1f} GFLOP per 60,000 examples)")
print("  (biases, ReLUs, pooling, softmax and the optimizer are not counted)")
print("achieved GFLOP/s = samples/s * FLOP/example / 1e9, against OpenBLAS's sgemm peak of the same")
print("thread count (dtrain multiplies with its own AVX-512 kernel where the CPU has AVX-512F, which")
print("can pass that peak: build/bench/gemm_bench measures both kernels):")
for kind, name in (("dtrain", "dtrain"), ("torch", "PyTorch"), ("nofuse", "dtrain --no-fuse")):
    for t in (1, 2):
        s = med(kind, t, 0)
        if s is None:
            continue
        g = s * flops / 1e9
        print(f"  {name:17} {t} thread{'s' if t > 1 else ' '}: {g:6.2f} GFLOP/s = "
              f"{100 * g / L[t][3]:5.1f}% of {L[t][3]:.1f}")

print("\n-- bench/conv_bench: the first block alone (generic im2col+GEMM vs fused AVX2) --")
print(open(f"{tmp}/conv_bench.txt").read().rstrip())
print(f"(other processes used {float(conv_others):.2f} cores during conv_bench)")
if crowded(float(conv_others), 2):
    warnings.append(f"other processes used {float(conv_others):.2f} cores during conv_bench")
if conv_rc != "0":
    print(f"conv_bench FAILED (exit {conv_rc})")
print("=" * W)
if warnings:
    print("NOISE WARNINGS (the machine was not quiet; rerun, or REPEAT=3):")
    for w in warnings:
        print("  - " + w)
else:
    print("No noise warning: no measurement shared its cores with other processes.")
EOF
if [ "$conv_rc" != 0 ]; then
    die "conv_bench exited $conv_rc (see its output above)"
fi
