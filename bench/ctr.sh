#!/usr/bin/env bash
# CTR training speed, memory and held-out AUC, in one run: DeepFM as the TensorFlow sample
# (F=39, K=32, deep 128,64,32, keep 0.5, Adam 5e-4, batch 1024) on ROWS generated training rows
# and ROWS/5 test rows (dtrain data gen-ctr; one epoch):
#   - dtrain, 1 thread and 2 threads;
#   - dtrain, 1 and 2 threads, from the same rows as TFRecord Examples of the sample's form;
#   - PyTorch, 1 thread (bench/peers/torch_deepfm.py: sparse embeddings with SparseAdam, Adam for
#     the rest; its BLAS pool held to 1 thread too, and the cores it kept busy reported; run as
#     bench/peer_env.sh says: TCMalloc preloaded, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset,
#     its BLAS kernel printed);
#   - both on 1 thread again with the sample's L2 (1e-4 on the table rows a batch touches);
#   - LR and FM by dtrain, 1 thread, for the AUC order.
# Each runs REPEAT times, interleaved; medians are reported with the ratios the goals are stated in
# (dtrain 1 thread / PyTorch 1 thread, dtrain 2 threads / dtrain 1 thread), the AUCs, peak RSS
# beside the tables' and slots' size, the MLP's rate as dense products against the 1-thread
# sgemm peak of the kernel dtrain ran (bench/gemm_bench: dtrain's AVX-512 kernel or OpenBLAS's),
# the table traffic against this machine's memory bandwidth (bench/peers/limits.c, 1 thread),
# and each round's 1- and 2-thread runs with their ratio, beside the round trip of a cache line
# between the two cores just before the 2-thread run (a VM's vCPUs may sit on one chip or on
# two, and move), and beside the same pair with the input parsed already (the second epoch of
# two with --cache memory), which tells the training threads' own scaling from the input
# thread's share of two cores.
# usage: bench/ctr.sh BUILD_DIR    env: REPEAT (3), ROWS (1000000), PEERS_DIR, PYTHON, TCMALLOC
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: bench/ctr.sh BUILD_DIR}" && pwd)
repeat=${REPEAT:-3}
rows=${ROWS:-1000000}
peers=${PEERS_DIR:-$here/peers}
python=${PYTHON:-/usr/bin/python3}
die() { echo "bench/ctr.sh: error: $*" >&2; exit 1; }
[ -x "$build/dtrain" ] || die "$build/dtrain is missing (make)"
[ -f "$peers/torch_deepfm.py" ] || die "$peers/torch_deepfm.py is missing (set PEERS_DIR)"
"$python" -c "import torch, numpy" 2> /dev/null || die "$python cannot import torch and numpy"
PEER_PYTHON=$python
. "$here/peer_env.sh"
peer_env_check
work=$(mktemp -d /tmp/dtrain-ctr-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
json() { "$python" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }

command -v cc > /dev/null || die "no C compiler (cc) to build $peers/limits.c"
cc -O2 -o "$work/limits" "$peers/limits.c" -lopenblas 2> "$work/limits.err" ||
    die "cannot build $peers/limits.c against OpenBLAS: $(head -3 "$work/limits.err")"
[ -x "$build/bench/gemm_bench" ] || make -s -C "$here/.." BUILD="$build" "$build/bench/gemm_bench" ||
    die "cannot build $build/bench/gemm_bench (make BUILD=$1 $1/bench/gemm_bench)"
echo "measuring this machine's limits (1 thread)" >&2
OPENBLAS_NUM_THREADS=1 "$work/limits" > "$work/limits.txt"
"$build/bench/gemm_bench" > "$work/gemm.txt" || die "gemm_bench failed: $(tail -3 "$work/gemm.txt")"
peer_info 1 > "$work/peer_blas" || die "$python cannot load torch in the peers' environment"
echo "generating $rows + $((rows / 5)) rows" >&2
"$build/dtrain" data gen-ctr --rows "$rows" --seed 11 --out "$work/train.svm" > "$work/gen"
"$build/dtrain" data gen-ctr --rows $((rows / 5)) --seed 12 --out "$work/test.svm" > /dev/null
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$work/gen")
teacher=$(sed -n 's/.*teacher_auc=\([0-9.]*\).*/\1/p' "$work/gen")
gen_rate=$(sed -n 's/.*rows_per_s=\([0-9]*\).*/\1/p' "$work/gen")
hyper=(--feature-size "$fs" --optimizer adam --lr 5e-4 --batch-size 1024 --shuffle-buffer 0
       --seed 1)
train=(train --data "libsvm:$work/train.svm" "${hyper[@]}")
common=("${train[@]}" --test-data "libsvm:$work/test.svm" --progress none)
# The same rows as TFRecord Examples of the sample's form (label, ids, values).
"$build/dtrain" convert --from libsvm --field-size 39 --index-base 0 "$work/train.svm" \
    "$work/train.tfrecord" > /dev/null
tfrecord=(train --data "tfrecord:$work/train.tfrecord" --field-size 39 "${hyper[@]}"
          --test-data "libsvm:$work/test.svm" --progress none)
# Steps per epoch, and the last quarter of the second epoch, for the runs without the parse.
steps=$((rows / 1024))
quarter=$(((steps + 3) / 4))
[ "$quarter" -ge 1 ] || die "ROWS=$rows: fewer rows than one batch of 1024"

for rep in $(seq 1 "$repeat"); do
    echo "run $rep of $repeat" >&2
    for t in 1 2; do
        # Where the two cores sit (one chip or two) changes what 2 threads can gain: recorded.
        [ "$t" = 1 ] || "$work/limits" round-trip | sed 's/.*: \([0-9]*\) ns/\1/' >> "$work/rt"
        "$build/dtrain" "${common[@]}" --model deepfm --threads "$t" \
            --metrics-out "$work/d$t.json" > /dev/null
        echo "$(json "$work/d$t.json" samples_per_sec) $(json "$work/d$t.json" test_auc)" \
             "$(json "$work/d$t.json" peak_rss_mb)" >> "$work/dtrain$t"
        json "$work/d$t.json" gemm_kernel > "$work/kernel"
    done
    # The same pair reading the TFRecord file.
    for t in 1 2; do
        "$build/dtrain" "${tfrecord[@]}" --model deepfm --threads "$t" \
            --metrics-out "$work/t$t.json" > /dev/null
        echo "$(json "$work/t$t.json" samples_per_sec) $(json "$work/t$t.json" test_auc)" \
             "$(json "$work/t$t.json" peak_rss_mb)" >> "$work/tfrecord$t"
    done
    # The same pair with the input parsed already: two epochs with --cache memory, and the rate
    # of the second epoch's last quarter, whose batches come from memory. At 1 thread the input
    # thread has the other core to itself; at 2 threads it takes its parse (about 0.4 s per 1M
    # rows here) from the training threads' cores: the difference between the two ratios is its
    # share.
    for t in 1 2; do
        "$build/dtrain" "${train[@]}" --model deepfm --threads "$t" --epochs 2 --cache memory \
            --progress estimator --log-step-count-steps "$quarter" > "$work/c$t.out" 2>&1 ||
            die "the run with --cache memory failed: $(tail -3 "$work/c$t.out")"
        rate=$(grep -o 'global_step/sec: [0-9.]*' "$work/c$t.out" | tail -1 | awk '{ print $2 }')
        [ -n "$rate" ] || die "no global_step/sec line in $work/c$t.out"
        echo "$rate" | awk '{ printf "%.0f\n", $1 * 1024 }' >> "$work/cached$t"
    done
    # With the sample's L2 (1e-4 on the table rows a batch touches), both.
    "$build/dtrain" "${common[@]}" --model deepfm --threads 1 --l2-reg 1e-4 \
        --metrics-out "$work/d1l2.json" > /dev/null
    echo "$(json "$work/d1l2.json" samples_per_sec) $(json "$work/d1l2.json" test_auc)" \
         "$(json "$work/d1l2.json" peak_rss_mb)" >> "$work/dtrain1l2"
    for l2 in 0 1e-4; do
        "${PEER_ENV[@]}" "$python" "$peers/torch_deepfm.py" --train "$work/train.svm" --test "$work/test.svm" \
            --feature-size "$fs" --threads 1 --l2-reg "$l2" > "$work/torch.out" 2>&1 ||
            die "the PyTorch peer failed: $(tail -3 "$work/torch.out")"
        tail -1 "$work/torch.out" | sed 's/[a-z_]*=//g' | awk '{ print $1, $5, $7, $8 }' \
            >> "$work/torch$( [ "$l2" = 0 ] || echo l2)"
    done
done
for m in lr fm; do
    "$build/dtrain" "${common[@]}" --model "$m" --threads 1 --metrics-out "$work/$m.json" > /dev/null
done

"$python" - "$work" "$fs" "$teacher" "$gen_rate" <<'PY'
import json, re, statistics, sys
work, fs, teacher, gen_rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
limits = open(f"{work}/limits.txt").read()
memcpy = float(re.search(r"memcpy 64MiB: ([0-9.]+) GB/s", limits).group(1))
blas = max(float(g) for g in re.findall(r"sgemm M=\d+ N=\d+ K=\d+: ([0-9.]+) GFLOP/s", limits))
kernel = open(f"{work}/kernel").read().strip()
gemm = open(f"{work}/gemm.txt").read()
peaks = {k: float(v) for k, v in re.findall(r"peak (\w+): ([0-9.]+) GFLOP/s", gemm)}
sgemm = peaks[kernel]
def rows(name):
    return [[float(x) for x in l.split()] for l in open(f"{work}/{name}") if l.strip()]
def med(name, col):
    return statistics.median(r[col] for r in rows(name))
d1, d2, pt = med("dtrain1", 0), med("dtrain2", 0), med("torch", 0)
d1l2, ptl2 = med("dtrain1l2", 0), med("torchl2", 0)
# Tables and Adam's two slots: (fm_w + fm_v) x 3 floats.
tables_mb = fs * (1 + 32) * 3 * 4 / 2**20
print(f"data: {fs} feature ids, teacher AUC {teacher}, gen-ctr {gen_rate} rows/s")
print(f"{'':28} {'samples/s':>10} {'test AUC':>9} {'peak RSS MB':>12}")
for label, name in (("dtrain deepfm, 1 thread", "dtrain1"), ("dtrain deepfm, 2 threads", "dtrain2"),
                    ("  from TFRecord, 1 thread", "tfrecord1"),
                    ("  from TFRecord, 2 threads", "tfrecord2"),
                    ("PyTorch deepfm, 1 thread", "torch"),
                    ("dtrain, 1 thread, L2 1e-4", "dtrain1l2"),
                    ("PyTorch, 1 thread, L2 1e-4", "torchl2")):
    print(f"{label:28} {med(name, 0):10,.0f} {med(name, 1):9.4f} {med(name, 2):12,.0f}")
print(f"dtrain 1 thread / PyTorch 1 thread: {d1 / pt:.2f}x without L2, {d1l2 / ptl2:.2f}x with the "
      f"sample's L2 1e-4 (goal >= 3)")
# The peer's CPU time over its training time: 1.00 when its products stay on the one core asked
# for (its BLAS pool is fixed before torch loads; set_num_threads alone leaves it machine-wide).
print(f"PyTorch 1 thread kept {med('torch', 3):.2f} cores busy while training "
      f"({med('torchl2', 3):.2f} with L2); its environment (bench/peer_env.sh): "
      f"{open(f'{work}/peer_blas').read().strip()}")
print(f"dtrain 2 threads / dtrain 1 thread: {d2 / d1:.2f}x (goal >= 1.7); from TFRecord "
      f"{med('tfrecord2', 0) / med('tfrecord1', 0):.2f}x")
rt = [int(l) for l in open(f"{work}/rt") if l.strip()]
# A round's 1- and 2-thread runs are back to back, so they share the VM's state of the moment
# (its speed drifts by a fifth over minutes): each round's ratio beside the ratio of medians.
rounds = [r2[0] / r1[0] for r1, r2 in zip(rows("dtrain1"), rows("dtrain2"))]
print("rounds, 1 thread then 2 threads (samples/s; the cores' cache-line round trip before the "
      "2-thread run: about 45-120 ns on one chip, 350+ across two): " +
      "; ".join(f"{r1[0]:,.0f}, {r2[0]:,.0f} ({ns} ns): {r2[0] / r1[0]:.2f}x"
                for r1, r2, ns in zip(rows("dtrain1"), rows("dtrain2"), rt)) +
      f"; median of the rounds' ratios {statistics.median(rounds):.2f}x")
cached = [r2[0] / r1[0] for r1, r2 in zip(rows("cached1"), rows("cached2"))]
print("the same with the input parsed already (the second epoch of --epochs 2 --cache memory, "
      "which no input thread shares; samples/s): " +
      "; ".join(f"{r1[0]:,.0f}, {r2[0]:,.0f}: {r2[0] / r1[0]:.2f}x"
                for r1, r2 in zip(rows("cached1"), rows("cached2"))) +
      f"; median {statistics.median(cached):.2f}x")
print(f"AUC dtrain - PyTorch: {med('dtrain1', 1) - med('torch', 1):+.4f} without L2, "
      f"{med('dtrain1l2', 1) - med('torchl2', 1):+.4f} with it (goal >= -0.002)")
# Table pages no row touched are never allocated, so RSS may stay below the nominal size.
print(f"tables + Adam slots, nominal: {tables_mb:,.0f} MB; dtrain's peak RSS minus that: "
      f"{med('dtrain1', 2) - tables_mb:,.0f} MB (goal <= 64)")
# The MLP: (39 x 32) -> 128 -> 64 -> 32 -> 1, forward 2 x MACs, backward twice that, as dense
# products. dtrain's backward of a layer after ReLU and dropout sums over dy's non-zeros alone
# (about 29% of them in the first layer), so it does fewer: the figures are what dense products
# would have to reach for the same speed.
macs = 1248 * 128 + 128 * 64 + 64 * 32 + 32
mlp_gflops = d1 * 6 * macs / 1e9
print(f"sgemm peak on 1 thread: " + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()) +
      f" GFLOP/s (gemm_bench); OpenBLAS through limits.c {blas:.0f}; dtrain ran '{kernel}'")
print(f"MLP: {6 * macs / 1e6:.2f} MFLOP per example as dense products; at 1 thread "
      f"{mlp_gflops:.1f} GFLOP/s of them, {100 * mlp_gflops / sgemm:.0f}% of the {kernel} kernel's "
      f"1-thread peak ({sgemm:.0f} GFLOP/s), whose roofline for dense products is "
      f"{sgemm * 1e9 / (6 * macs):,.0f} samples/s")
# Each example gathers 39 rows of fm_w and fm_v (33 floats) and adds 39 gradient rows; the
# unique rows' Adam updates read and write three such arrays (counted once per example, an
# upper bound: rows repeat within a batch).
lookups = d1 * 39
traffic = lookups * 33 * 4 * (2 + 6) / 1e9
print(f"tables: {lookups / 1e6:.2f} M row lookups+updates per second on 1 core, at most "
      f"{traffic:.1f} GB/s of row traffic against {memcpy:.1f} GB/s of memcpy")
lr, fm = (json.load(open(f"{work}/{m}.json"))["test_auc"] for m in ("lr", "fm"))
print(f"held-out AUC: lr {lr:.4f} < fm {fm:.4f} <= deepfm {med('dtrain1', 1):.4f} < teacher {teacher}")
PY
