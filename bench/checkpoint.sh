#!/usr/bin/env bash
# Checkpoint cost: the tutorial CNN with Adam saved every SAVE_EVERY steps (STEPS steps, 1 thread).
# Reports the mean time of a save against Estimator's default interval between saves (600 s),
# and the file's size against the raw bytes of its tensors (parameters and Adam's slots).
# usage: bench/checkpoint.sh BUILD_DIR    env: STEPS (300), SAVE_EVERY (20)
set -euo pipefail
build=$(cd "${1:?usage: bench/checkpoint.sh BUILD_DIR}" && pwd)
steps=${STEPS:-300}
every=${SAVE_EVERY:-20}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
work=$(mktemp -d /tmp/dtrain-ckptbench-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$build/dtrain" train --model mnist_cnn --optimizer adam --threads 1 --max-steps "$steps" \
    --progress none --test-data none --model-dir "$work/m" --save-checkpoints-steps "$every" \
    --keep-checkpoint-max 2 --save-summary-steps 0 --metrics-out "$work/m.json" > /dev/null
read -r n secs train < <("$py" -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['checkpoints'], j['checkpoint_seconds'], j['train_seconds'])" "$work/m.json")
file="$work/m/ckpt-$steps.safetensors"
size=$(stat -c %s "$file")
raw=$("$build/dtrain" inspect "$file" | sed -n 's/.*tensors, \([0-9]*\) bytes of data$/\1/p')
echo "tutorial CNN + Adam: $n saves in $steps steps"
awk -v s="$secs" -v n="$n" 'BEGIN { m = s / n; printf "  a save takes %.2f ms: %.5f%% of the default 600 s between saves (goal < 5%%)\n", m * 1000, m / 600 * 100 }'
awk -v s="$secs" -v t="$train" -v e="$every" -v st="$steps" 'BEGIN { printf "  even every %d steps (%.0f ms of training), saves cost %.1f%% of it\n", e, t / st * e * 1000, s / t * 100 }'
awk -v f="$size" -v r="$raw" 'BEGIN { printf "  file %d bytes, tensors %d bytes: +%.3f%% (goal within 1%%)\n", f, r, (f - r) / r * 100 }'
