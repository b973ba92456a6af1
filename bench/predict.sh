#!/usr/bin/env bash
# Serving speed and memory, in one run, on the CTR bench's DeepFM (F=39, K=32, deep 128,64,32,
# trained one epoch on ROWS generated rows):
#   - throughput at batch 256 on one thread: dtrain's C predictor (bench/predict_bench) against
#     ONNX Runtime's CPU execution provider scoring the same model exported with dtrain export
#     (one intra-op thread, every graph optimisation; bench/peers/ort_deepfm.js through the npm
#     package onnxruntime-node), ids already hashed for both, drawn alike;
#   - latency one row at a time: p50 and p99 of both (ONNX Runtime's include its Node binding's
#     call, which a C++ server would not pay: the figure says so);
#   - dtrain predict over the ROWS LibSVM rows on 2 threads against training DeepFM on the same
#     rows with the same threads, and the scoring's own rate on parsed rows (where the time goes);
#   - two predictor processes over one checkpoint of about 2 GB (CKPT_ROWS table rows), every
#     table page read by both: each one's RSS and PSS, the tables being shared.
# Each timed pair runs REPEAT times, interleaved; medians are reported with their ratios.
# usage: bench/predict.sh BUILD_DIR    env: REPEAT (3), ROWS (1000000), CKPT_ROWS (15600000),
#        SECONDS_EACH (5), ORT_DIR (onnxruntime-node's directory; scripts/onnxruntime.sh installs
#        it when unset), PREDICT_ONLY (1: only dtrain predict against training, no ONNX Runtime,
#        no C predictor figures, no 2 GB checkpoint)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$(cd "${1:?usage: bench/predict.sh BUILD_DIR}" && pwd)
repeat=${REPEAT:-3}
rows=${ROWS:-1000000}
ckpt_rows=${CKPT_ROWS:-15600000}
secs=${SECONDS_EACH:-5}
only=${PREDICT_ONLY:-0}
die() { echo "bench/predict.sh: error: $*" >&2; exit 1; }
[ -x "$build/dtrain" ] || die "$build/dtrain is missing (make)"
make -s -C "$root" BUILD="$build" "$build/bench/predict_bench" > /dev/null
[ "$only" = 1 ] || command -v node > /dev/null || die "node is missing (apt-get install nodejs)"
if [ "$only" != 1 ] && [ -z "${ORT_DIR:-}" ]; then
    cache=$(bash "$root/scripts/onnxruntime.sh" "$build/onnxruntime") ||
        die "onnxruntime-node: not installed"
    ORT_DIR=$cache/node_modules/onnxruntime-node
fi
work=$(mktemp -d /tmp/dtrain-predict-bench-XXXXXX)
holders=()
cleanup() { for p in "${holders[@]}"; do kill "$p" 2> /dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
spread() { sort -g | awk '{a[NR]=$1} END {printf "%.0f-%.0f", a[1], a[NR]}'; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

echo "== data and model: $rows rows, DeepFM F=39 K=32 deep 128,64,32, one epoch on 2 threads"
"$build/dtrain" data gen-ctr --rows "$rows" --seed 1 --format libsvm --out "$work/train.libsvm" > "$work/gen"
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$work/gen")
train() {
    rm -rf "$work/model"
    "$build/dtrain" train --model deepfm --data "libsvm:$work/train.libsvm" --field-size 39 \
        --feature-size "$fs" --embedding-size 32 --deep-layers 128,64,32 --dropout-keep 0.5,0.5,0.5 \
        --optimizer adam --lr 0.0005 --batch-size 1024 --epochs 1 --threads 2 --test-data none \
        --progress none --shuffle-buffer 0 --model-dir "$work/model" --metrics-out "$work/train.json" \
        > /dev/null
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['samples_per_sec'])" "$work/train.json"
}
ckpt_of() { ls "$work/model"/ckpt-*.safetensors | head -1; }
train > /dev/null
ckpt=$(ckpt_of)
echo "checkpoint $(du -h "$ckpt" | cut -f1) (tables and Adam's slots)"

# The C predictor against ONNX Runtime: throughput at batch 256 and latency at batch 1.
serving_peer() {
    "$build/dtrain" export --checkpoint "$ckpt" --format onnx --out "$work/onnx/model.onnx" > /dev/null
    echo "ONNX $(du -h "$work/onnx/model.onnx" | cut -f1)"
    echo "== throughput, batch 256, 1 thread, and latency, batch 1 ($repeat rounds, interleaved)"
    for r in $(seq "$repeat"); do
        "$build/bench/predict_bench" throughput "$ckpt" 256 "$secs" | tee -a "$work/c_tp"
        PREDICT_PRIVATE_TABLES=1 "$build/bench/predict_bench" throughput "$ckpt" 256 "$secs" \
            | tee -a "$work/c_tp_private"
        "$build/bench/predict_bench" latency "$ckpt" 20000 | tee -a "$work/c_lat"
        node "$here/peers/ort_deepfm.js" "$ORT_DIR" "$work/onnx/model.onnx" "$fs" 39 256 "$secs" 20000 \
            | tee -a "$work/ort"
    done
    c_tp=$(field rows_per_s < "$work/c_tp" | median)
    o_tp=$(grep batch=256 "$work/ort" | field rows_per_s | median)
    c_tpp=$(field rows_per_s < "$work/c_tp_private" | median)
    c50=$(field p50_us < "$work/c_lat" | median); c99=$(field p99_us < "$work/c_lat" | median)
    o50=$(grep batch=1 "$work/ort" | field p50_us | median)
    o99=$(grep batch=1 "$work/ort" | field p99_us | median)
}
[ "$only" = 1 ] || serving_peer

echo "== dtrain predict over the $rows rows on 2 threads, against training on them ($repeat rounds)"
"$build/dtrain" export --checkpoint "$ckpt" --format dtrain --out "$work/serving" > /dev/null
# rate MODEL: rows/s of dtrain predict over the rows on 2 threads.
rate() {
    local t0 t1
    t0=$(date +%s%N)
    "$build/dtrain" predict "$@" --data "libsvm:$work/train.libsvm" --threads 2 --batch-size 1024 \
        --out /dev/null
    t1=$(date +%s%N)
    python3 -c "print(round($rows / (($t1 - $t0) / 1e9)))"
}
for r in $(seq "$repeat"); do
    p=$(rate --checkpoint "$ckpt")
    x=$(rate --model-dir "$work/serving")
    tr=$(train)
    echo "predict rows_per_s=$p exported=$x train samples_per_s=$tr" | tee -a "$work/pred"
done
head -n 100000 "$work/train.libsvm" > "$work/head.libsvm"
"$build/bench/predict_bench" rows "$ckpt" "$work/head.libsvm" 1024 | tee "$work/scoring"
pr=$(field rows_per_s < "$work/pred" | awk '/./' | median)
px=$(sed -n 's/.*exported=\([0-9.]*\).*/\1/p' "$work/pred" | median)
tr=$(sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' "$work/pred" | median)
pr_s=$(field rows_per_s < "$work/pred" | awk '/./' | spread)
px_s=$(sed -n 's/.*exported=\([0-9.]*\).*/\1/p' "$work/pred" | spread)
tr_s=$(sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' "$work/pred" | spread)
sc=$(field rows_per_s < "$work/scoring")

# Two predictor processes over one checkpoint of about 2 GB: RSS and PSS.
shared_tables() {
    echo "== two processes over one checkpoint of $ckpt_rows rows"
    "$build/bench/predict_bench" make-ckpt "$work/big.safetensors" "$ckpt_rows" > /dev/null
    mkfifo "$work/in1" "$work/in2"
    for i in 1 2; do
        "$build/bench/predict_bench" hold "$work/big.safetensors" < "$work/in$i" > "$work/hold$i" &
        holders+=($!)
        exec {fd}> "$work/in$i"
        eval "hold_fd$i=$fd"
    done
    for i in 1 2; do
        for _ in $(seq 600); do grep -q ready "$work/hold$i" 2> /dev/null && break; sleep 0.5; done
        grep -q ready "$work/hold$i" || die "predictor $i did not get ready"
    done
    mem() { awk -v k="$2:" '$1 == k {print int($2 / 1024)}' "/proc/$1/smaps_rollup"; }
    big=$(( $(stat -c %s "$work/big.safetensors") / 1048576 ))
    r1=$(mem "${holders[0]}" Rss); p1=$(mem "${holders[0]}" Pss)
    r2=$(mem "${holders[1]}" Rss); p2=$(mem "${holders[1]}" Pss)
    eval "exec $hold_fd1>&- $hold_fd2>&-"
    wait "${holders[@]}"
    holders=()
}
[ "$only" = 1 ] || shared_tables

echo
echo "== summary"
if [ "$only" != 1 ]; then
echo "C predictor batch 256, 1 thread:   $c_tp rows/s ($(sed -n 's/.*gemm=\([a-z0-9]*\).*/\1/p' "$work/c_tp" | head -1) kernel)"
echo "ONNX Runtime batch 256, 1 thread:  $o_tp rows/s"
python3 -c "print('ratio C predictor / ONNX Runtime: %.2fx (goal >= 2)' % ($c_tp / $o_tp))"
python3 -c "print('C predictor with private_tables (copied, huge pages): $c_tpp rows/s, %.2fx ONNX Runtime' % ($c_tpp / $o_tp))"
echo "latency batch 1: C predictor p50 $c50 us p99 $c99 us; ONNX Runtime (through Node) p50 $o50 us p99 $o99 us"
fi
echo "dtrain predict, 2 threads: $pr rows/s from the checkpoint ($pr_s), $px from its dtrain export ($px_s); training on 2 threads: $tr samples/s ($tr_s); medians (min-max) of $repeat rounds"
python3 -c "print('ratio predict / train: %.2fx from the checkpoint, %.2fx from the export (goal >= 3); scoring alone on parsed rows, 1 thread: $sc rows/s' % ($pr / $tr, $px / $tr))"
[ "$only" = 1 ] ||
    echo "two predictors over a $big MB checkpoint: RSS $r1 MB and $r2 MB, PSS $p1 MB and $p2 MB"
