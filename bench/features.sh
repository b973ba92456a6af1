#!/usr/bin/env bash
# Training from a feature spec (docs/FEATURES.md), in one run, on ROWS generated Criteo TSV rows
# and ROWS/5 test rows (dtrain data gen-ctr --format criteo), one epoch, batch 1024, 1 thread:
#   (a) DeepFM written as a spec (13 log1p numerics and 26 columns hashed into 40,000 buckets
#       each, every field K wide; deep 128,64,32, dropout 0.5, Adam 5e-4) against the built-in
#       --model deepfm on the same file (field-positional criteo: rows, --hash-buckets
#       26 x 40,000 + 13, the same number of table rows): samples/s, the ratio, held-out AUC;
#   (b) DCN-v2 (3 full-rank cross layers beside a 256,128,64 MLP, K=16, Adam 1e-3) from a spec,
#       against bench/peers/torch_dcn_v2.py, the same model in PyTorch: samples/s, the ratio,
#       the AUC difference, and the dense part's FLOP rate against the 1-thread sgemm peak
#       (build/bench/gemm_bench) of the kernel each ran;
#   (c) adapting 26 vocabularies (C1..C26, "vocabulary" columns) over the training rows
#       (dtrain data transform -n 1, whose time is the adapt pass's), against an epoch of (a)
#       and (b).
# The runs go one after the other, nothing else of ours beside them; each is wrapped to count the
# cores other processes kept busy meanwhile, which the report prints. REPEAT rounds run
# interleaved and medians are reported. The PyTorch peer runs as bench/peer_env.sh says (TCMalloc
# preloaded, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset) and its BLAS kernel is printed.
# usage: bench/features.sh BUILD_DIR
# env:   ROWS (1000000), REPEAT (1), K (32: DeepFM's field width), PEERS_DIR, PYTHON, TCMALLOC
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: bench/features.sh BUILD_DIR}" && pwd)
rows=${ROWS:-1000000}
repeat=${REPEAT:-1}
k=${K:-32}
peers=${PEERS_DIR:-$here/peers}
python=${PYTHON:-/usr/bin/python3}
die() { echo "bench/features.sh: error: $*" >&2; exit 1; }
case "$rows" in '' | *[!0-9]*) die "ROWS must be a whole number, got '$rows'" ;; esac
case "$repeat" in '' | *[!0-9]* | 0) die "REPEAT must be a whole number >= 1, got '$repeat'" ;; esac
case "$k" in '' | *[!0-9]* | 0) die "K must be a whole number >= 1, got '$k'" ;; esac
[ "$rows" -ge 1024 ] || die "ROWS=$rows: fewer rows than one batch of 1024"
[ -x "$build/dtrain" ] || die "$build/dtrain is missing (make)"
[ -f "$peers/torch_dcn_v2.py" ] || die "$peers/torch_dcn_v2.py is missing (set PEERS_DIR)"
"$python" -c "import torch, numpy" 2> /dev/null || die "$python cannot import torch and numpy"
PEER_PYTHON=$python
. "$here/peer_env.sh"
peer_env_check
[ -x "$build/bench/gemm_bench" ] || make -s -C "$here/.." BUILD="$build" "$build/bench/gemm_bench" ||
    die "cannot build $build/bench/gemm_bench (make BUILD=$1 $1/bench/gemm_bench)"
work=$(mktemp -d /tmp/dtrain-features-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT

# Runs a command (output to a log) and prints "wall_s exit_code other_cores": the wall time
# around it (a monotonic clock read just before and after, as date +%s.%N around the command)
# and how many cores other processes kept busy meanwhile (all CPU time in /proc/stat less the
# command's own, over the wall time).
cat > "$work/measure.py" << 'EOF'
import os, resource, subprocess, sys, time
def busy_s():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
log, cmd = sys.argv[1], sys.argv[2:]
b0 = busy_s()
t0 = time.monotonic()
with open(log, "w") as f:
    rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
wall = time.monotonic() - t0
b1 = busy_s()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.3f %d %.2f" % (wall, rc, max(0.0, (b1 - b0 - ru.ru_utime - ru.ru_stime) / wall)))
EOF
# measure NAME CMD...: runs it, fails with the log's end if it fails, appends
# "wall others" to $work/NAME.m.
measure() {
    local name=$1 out wall rc others
    shift
    out=$("$python" "$work/measure.py" "$work/$name.log" "$@")
    read -r wall rc others <<< "$out"
    [ "$rc" = 0 ] || die "$name failed (exit $rc): $(tail -5 "$work/$name.log")"
    echo "$wall $others" >> "$work/$name.m"
}
json() { "$python" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }

echo "measuring the 1-thread sgemm peaks (gemm_bench)" >&2
"$build/bench/gemm_bench" > "$work/gemm.txt" || die "gemm_bench failed: $(tail -3 "$work/gemm.txt")"
echo "generating $rows + $((rows / 5)) Criteo rows" >&2
"$build/dtrain" data gen-ctr --rows "$rows" --seed 11 --format criteo --out "$work/train.tsv" \
    > "$work/gen"
"$build/dtrain" data gen-ctr --rows $((rows / 5)) --seed 12 --format criteo \
    --out "$work/test.tsv" > /dev/null
teacher=$(sed -n 's/.*teacher_auc=\([0-9.]*\).*/\1/p' "$work/gen")

# The specs: Criteo's 13 numerics (default 0, log1p) and 26 categorical columns hashed into
# 40,000 buckets each; DeepFM with every field K wide, DCN-v2 as TFRS's; 26 adapted vocabularies.
"$python" - "$work" "$k" << 'PY'
import json, sys
work, k = sys.argv[1], int(sys.argv[2])
num = [f"I{i}" for i in range(1, 14)]
cat = [f"C{i}" for i in range(1, 27)]
cols = [{"name": c, "type": "numeric", "default_value": 0, "normalizer": "log1p"} for c in num]
cols += [{"name": c, "type": "hash_bucket", "hash_bucket_size": 40000} for c in cat]
def spec(model, dim):
    dnn = num + [{"embedding": c, "dimension": dim, "combiner": "sum"} for c in cat]
    return {"label": "label", "columns": cols, "model": dict(model, dnn_feature_columns=dnn)}
json.dump(spec({"type": "deepfm", "dnn_hidden_units": [128, 64, 32], "dnn_dropout": 0.5,
                "optimizer": {"type": "adam", "learning_rate": 5e-4}}, k),
          open(f"{work}/deepfm.json", "w"), indent=1)
json.dump(spec({"type": "dcn_v2", "num_cross_layers": 3, "structure": "parallel",
                "dnn_hidden_units": [256, 128, 64],
                "optimizer": {"type": "adam", "learning_rate": 0.001}}, 16),
          open(f"{work}/dcn.json", "w"), indent=1)
json.dump({"label": "label",
           "columns": [{"name": c, "type": "vocabulary", "num_oov_buckets": 1} for c in cat]},
          open(f"{work}/vocab.json", "w"), indent=1)
PY

data=(--data "criteo:$work/train.tsv" --test-data "criteo:$work/test.tsv" --epochs 1
      --batch-size 1024 --threads 1 --shuffle-buffer 0 --seed 1 --progress none)
for rep in $(seq 1 "$repeat"); do
    echo "round $rep of $repeat: (a) DeepFM, spec and built-in" >&2
    measure spec_deepfm "$build/dtrain" train --feature-spec "$work/deepfm.json" "${data[@]}" \
        --metrics-out "$work/spec_deepfm.json"
    measure builtin_deepfm "$build/dtrain" train --model deepfm "${data[@]}" \
        --hash-buckets $((26 * 40000 + 13)) --embedding-size "$k" --deep-layers 128,64,32 \
        --dropout-keep 0.5 --optimizer adam --lr 5e-4 --metrics-out "$work/builtin_deepfm.json"
    for name in spec_deepfm builtin_deepfm; do
        echo "$(json "$work/$name.json" samples_per_sec) $(json "$work/$name.json" test_auc)" \
             "$(json "$work/$name.json" train_seconds) $(json "$work/$name.json" param_count)" \
             "$(json "$work/$name.json" peak_rss_mb)" >> "$work/$name"
    done
    echo "round $rep of $repeat: (b) DCN-v2, dtrain's spec and PyTorch" >&2
    measure spec_dcn "$build/dtrain" train --feature-spec "$work/dcn.json" "${data[@]}" \
        --metrics-out "$work/spec_dcn.json"
    echo "$(json "$work/spec_dcn.json" samples_per_sec) $(json "$work/spec_dcn.json" test_auc)" \
         "$(json "$work/spec_dcn.json" train_seconds) $(json "$work/spec_dcn.json" param_count)" \
         "$(json "$work/spec_dcn.json" peak_rss_mb)" >> "$work/spec_dcn"
    json "$work/spec_dcn.json" gemm_kernel > "$work/kernel"
    measure torch_dcn "${PEER_ENV[@]}" "$python" "$peers/torch_dcn_v2.py" \
        --train "$work/train.tsv" --test "$work/test.tsv" --hash-buckets 40000 \
        --embedding-size 16 --cross-layers 3 --deep-layers 256,128,64 --lr 0.001 \
        --batch-size 1024 --threads 1
    grep '^blas: ' "$work/torch_dcn.log" | tail -1 > "$work/torch_blas"
    grep '^samples_per_s=' "$work/torch_dcn.log" | tail -1 | "$python" -c '
import sys
d = dict(kv.split("=") for kv in sys.stdin.read().split())
print(d["samples_per_s"], d["test_auc"], d["train_s"], d["cores"], d["peak_rss_mb"])' \
        >> "$work/torch_dcn" || die "no result line from torch_dcn_v2.py: $(tail -3 "$work/torch_dcn.log")"
    echo "round $rep of $repeat: (c) adapting 26 vocabularies" >&2
    measure adapt1 "$build/dtrain" data transform --feature-spec "$work/vocab.json" \
        --data "criteo:$work/train.tsv" -n 1 --threads 1
    measure adapt_all "$build/dtrain" data transform --feature-spec "$work/vocab.json" \
        --data "criteo:$work/train.tsv" -n 1 --threads 0
done
# The vocabularies' sizes (once, not timed).
"$build/dtrain" data transform --feature-spec "$work/vocab.json" --data "criteo:$work/train.tsv" \
    -n 1 --write-spec "$work/vocab_adapted.json" > /dev/null

"$python" - "$work" "$rows" "$teacher" "$k" "$(nproc)" << 'PY'
import json, re, statistics, sys
work, rows, teacher, K, ncpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
def table(name):
    return [[float(x) for x in l.split()] for l in open(f"{work}/{name}") if l.strip()]
def med(name, col):
    return statistics.median(r[col] for r in table(name))
def others(name):
    return max(r[1] for r in table(f"{name}.m"))
gemm = open(f"{work}/gemm.txt").read()
peaks = {k: float(v) for k, v in re.findall(r"peak (\w+): ([0-9.]+) GFLOP/s", gemm)}
kernel = open(f"{work}/kernel").read().strip()
warnings = []
def noise(name, what):
    o = others(name)
    if o > ncpu - 1 + 0.25:
        warnings.append(f"{what}: other processes kept {o:.2f} cores busy (more than the "
                        f"{ncpu - 1} this 1-thread run leaves free)")
    return o

print(f"data: {rows:,} training rows, {rows // 5:,} test rows (dtrain data gen-ctr --format criteo;"
      f" teacher AUC {teacher}); one epoch, batch 1024, 1 thread, file order")
print(f"'others' is how many cores other processes kept busy during the run (0 on an idle "
      f"machine; above {ncpu - 1 + 0.25:.2f} they took time on the run's own core)")

print(f"\n(a) DeepFM, K={K}, deep 128,64,32, dropout 0.5, Adam 5e-4")
print(f"{'':44} {'samples/s':>10} {'test AUC':>9} {'params':>11} {'peak RSS MB':>12} {'others':>7}")
for label, name in (("spec (26 hash_bucket columns of 40,000)", "spec_deepfm"),
                    ("--model deepfm --hash-buckets 1,040,013", "builtin_deepfm")):
    print(f"{label:44} {med(name, 0):10,.0f} {med(name, 1):9.4f} {med(name, 3):11,.0f} "
          f"{med(name, 4):12,.0f} {noise(name, label):7.2f}")
sa, ba = med("spec_deepfm", 0), med("builtin_deepfm", 0)
print(f"spec / built-in: {sa / ba:.2f}x samples/s (goal >= 0.90); AUC spec - built-in "
      f"{med('spec_deepfm', 1) - med('builtin_deepfm', 1):+.4f} (goal: the same, within 0.002)")

print("\n(b) DCN-v2: x0 = 13 numerics + 26 x 16 embeddings (D = 429), 3 full-rank cross layers "
      "beside an MLP 256,128,64, parallel; Adam 1e-3")
print(f"{'':44} {'samples/s':>10} {'test AUC':>9} {'peak RSS MB':>12} {'others':>7}")
d, t = med("spec_dcn", 0), med("torch_dcn", 0)
print(f"{'dtrain, spec':44} {d:10,.0f} {med('spec_dcn', 1):9.4f} {med('spec_dcn', 4):12,.0f} "
      f"{noise('spec_dcn', 'dtrain DCN-v2'):7.2f}")
print(f"{'PyTorch, bench/peers/torch_dcn_v2.py':44} {t:10,.0f} {med('torch_dcn', 1):9.4f} "
      f"{med('torch_dcn', 4):12,.0f} {noise('torch_dcn', 'PyTorch DCN-v2'):7.2f}")
print(f"PyTorch's BLAS, as the peer printed it: "
      f"{open(f'{work}/torch_blas').read().strip()[len('blas: '):]}")
print(f"PyTorch kept {med('torch_dcn', 3):.2f} cores busy while training (CPU time over training "
      f"time; 1.00 is the one core asked for)")
print(f"dtrain / PyTorch: {d / t:.2f}x samples/s (goal >= 2.5); AUC dtrain - PyTorch "
      f"{med('spec_dcn', 1) - med('torch_dcn', 1):+.4f} (goal >= -0.002)")
# Dense FLOPs per example, forward and backward (a multiply-add is 2; backward is dW and dX,
# twice the forward): each cross layer's D x D product, the MLP and the output layer over
# concat(cross, deep). Element-wise work, the tables and the optimizer are not counted.
D, H = 13 + 26 * 16, [256, 128, 64]
cross = 3 * 2 * 3 * D * D
widths = [D] + H
mlp = 6 * (sum(a * b for a, b in zip(widths, widths[1:])) + (D + H[-1]))
flops = cross + mlp
print(f"dense FLOPs per example: cross 3 x 2 x 3 x {D}^2 = {cross:,}, MLP and output "
      f"{mlp:,}; {flops / 1e6:.2f} MFLOP")
for who, sps, k in (("dtrain", d, kernel), ("PyTorch", t, "blas")):
    g = sps * flops / 1e9
    print(f"  {who:8} {g:6.1f} GFLOP/s = {100 * g / peaks[k]:3.0f}% of the {k} kernel's 1-thread "
          f"peak ({peaks[k]:.1f} GFLOP/s; at that peak {peaks[k] * 1e9 / flops:,.0f} samples/s)")
print("  sgemm peaks on 1 thread (gemm_bench): " +
      ", ".join(f"{k} {v:.1f}" for k, v in peaks.items()) + f" GFLOP/s; dtrain ran '{kernel}'")

print(f"\n(c) adapting 26 vocabularies (C1..C26) over the {rows:,} training rows "
      f"(dtrain data transform -n 1: the adapt pass, then one row)")
voc = json.load(open(f"{work}/vocab_adapted.json"))["columns"]
tokens = sum(len(c.get("vocabulary", [])) for c in voc)
a1, aa = med("adapt1.m", 0), med("adapt_all.m", 0)
e_fm, e_dcn = med("spec_deepfm", 2), med("spec_dcn", 2)
print(f"  {tokens:,} tokens in all; 1 thread {a1:.2f} s (others {noise('adapt1', 'adapt, 1 thread'):.2f}),"
      f" every core {aa:.2f} s (others {others('adapt_all'):.2f})")
print(f"  one epoch at 1 thread (training time): DeepFM spec {e_fm:.2f} s, DCN-v2 spec {e_dcn:.2f} s")
print(f"  adapt (1 thread) / DeepFM epoch: {a1 / e_fm:.2f} (goal < 1); / DCN-v2 epoch: "
      f"{a1 / e_dcn:.2f}")
if warnings:
    print("\nNOISE WARNINGS (the machine was not quiet; rerun, or REPEAT=3):")
    for w in warnings:
        print("  - " + w)
else:
    print("\nNo noise warning: no run shared its core with other processes.")
PY
