#!/usr/bin/env bash
# Dynamic tables against hashed fixed tables, on ROWS rows of the wide generated data (every
# categorical field's values from 10^8, a long tail, drifting: dtrain data gen-ctr --id-space
# 100000000) and a test set that continues it in time (--first-row ROWS):
#   speed    DeepFM (K 32, deep 128,64,32, Adam 0.001, batch 1024) at 1 thread, the dynamic table
#            (every key admitted) against a fixed table of 4M hashed rows, REPEAT rounds in turns;
#            the median of the per-round ratios (the goal: at least 0.8);
#   quality  at the same table memory: the dynamic table with min_count 2 against --hash-buckets
#            sized to the bytes it ended with, both test AUCs, and the hashed table's collision
#            rate (bench/hash_collisions.c); the dynamic table admitting every key for reference;
#   memory   bytes per live key against (dim + slots) x 4 + 24, and with a counting Bloom filter
#            the filter's bytes per key only counted (the goal: at most 8);
#   eviction steps_to_live 300 checked every 100 steps: live keys and AUC;
#   ps       asynchronous parameter-server training, 1 ps and 2 workers under dtrain launch,
#            the dynamic table against the fixed one, REPEAT rounds in turns; the median ratio of
#            the chief's samples/s (the goal: at least 0.8).
# usage: bench/dynamic.sh BUILD    env: ROWS (1000000), REPEAT (3), ONLY (all, or "ps")
set -euo pipefail
build=$(cd "${1:?usage: bench/dynamic.sh BUILD}" && pwd)
rows=${ROWS:-1000000}
repeat=${REPEAT:-3}
work=$(mktemp -d /tmp/dtrain-bench-dynamic-XXXXXX)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
[ -x "$py" ] || py=python3
dtrain="$build/dtrain"
make -s -C "$(dirname "$0")/.." "$build/bench/hash_collisions" BUILD="$build" > /dev/null 2>&1 ||
    cc -O2 -I"$(dirname "$0")/../include" -o "$build/bench/hash_collisions" \
        "$(dirname "$0")/hash_collisions.c"

"$dtrain" data gen-ctr --rows "$rows" --seed 1 --id-space 100000000 --out "$work/train.svm" |
    sed 's/^/train data: /'
"$dtrain" data gen-ctr --rows $((rows / 5)) --seed 2 --id-space 100000000 --first-row "$rows" \
    --out "$work/test.svm" | sed 's/^/test data: /'
common=(train --model deepfm --data "libsvm:$work/train.svm" --test-data "libsvm:$work/test.svm"
        --optimizer adam --lr 0.001 --batch-size 1024 --epochs 1 --progress none --seed 1)
field() { "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
run() { # NAME ARGS...: a run's metrics into $work/NAME.json
    local name=$1
    shift
    "$dtrain" "${common[@]}" "$@" --metrics-out "$work/$name.json" > "$work/$name.out" 2>&1 ||
        { echo "bench/dynamic.sh: $name failed: $(tail -3 "$work/$name.out")" >&2; exit 1; }
}

ps_round() { # NAME ARGS...: a ps job's metrics into $work/NAME.json
    local name=$1
    shift
    timeout 600 "$dtrain" launch -n 2 --ps 1 -- "$dtrain" "${common[@]}" --threads 1 \
        --strategy parameter_server "$@" --metrics-out "$work/$name.json" > "$work/$name.out" 2>&1 ||
        { echo "bench/dynamic.sh: $name failed: $(tail -3 "$work/$name.out")" >&2; exit 1; }
}
# rounds RUNNER LABEL EXTRA...: REPEAT rounds of RUNNER with a fixed table of 4M hashed rows and
# with the dynamic table (EXTRA flags on both), each side first in turn; the median ratio.
rounds() {
    local runner=$1 label=$2 r f d
    shift 2
    for r in $(seq 1 "$repeat"); do
        if [ $((r % 2)) -eq 1 ]; then
            "$runner" fixed "$@" --hash-buckets 4000000; "$runner" dyn "$@" --dynamic-tables
        else
            "$runner" dyn "$@" --dynamic-tables; "$runner" fixed "$@" --hash-buckets 4000000
        fi
        f=$(field "$work/fixed.json" samples_per_sec)
        d=$(field "$work/dyn.json" samples_per_sec)
        echo "$f $d" >> "$work/speed.$label"
        printf "round %d: fixed (4M hashed rows) %.0f, dynamic %.0f samples/s\n" "$r" "$f" "$d"
    done
    "$py" - "$work/speed.$label" "$label" <<'PY'
import statistics, sys
rounds = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
ratios = sorted(d / f for f, d in rounds)
print(f"{sys.argv[2]}: dynamic / fixed samples/s: median {statistics.median(ratios):.3f} "
      f"(rounds {', '.join(f'{r:.3f}' for r in ratios)}; goal >= 0.8)")
PY
}

if [ "${ONLY:-all}" = ps ]; then
    echo "== ps: asynchronous, 1 ps + 2 workers, $repeat rounds"
    rounds ps_round ps
    exit 0
fi
echo "== speed: 1 thread, $repeat rounds"
rounds run one_thread --threads 1

echo "== quality at the same memory (2 threads)"
run dyn2 --threads 2 --dynamic-tables --admit-min-count 2
bytes=$(field "$work/dyn2.json" dynamic_bytes)
# a fixed row: fm_w and fm_v (1 + 32 floats) with Adam's two slots
hashed=$("$py" -c "print(int($bytes / ((1 + 32) * 4 * 3)))")
run hashed --threads 2 --hash-buckets "$hashed"
run dynall --threads 2 --dynamic-tables
coll=$("$build/bench/hash_collisions" "$work/train.svm" "$hashed")
printf "dynamic, min_count 2: test AUC %.4f, %d live keys, %.1f MB\n" \
    "$(field "$work/dyn2.json" test_auc)" "$(field "$work/dyn2.json" dynamic_live_keys)" \
    "$("$py" -c "print($bytes / 1e6)")"
printf "hashed, %d rows (the same memory): test AUC %.4f; %s\n" "$hashed" \
    "$(field "$work/hashed.json" test_auc)" "$coll"
printf "dynamic, every key: test AUC %.4f, %d live keys, %.1f MB\n" \
    "$(field "$work/dynall.json" test_auc)" "$(field "$work/dynall.json" dynamic_live_keys)" \
    "$("$py" -c "print($(field "$work/dynall.json" dynamic_bytes) / 1e6)")"

echo "== memory"
printf "bytes per live key: %.1f (rows and slots %d, key overhead %.1f; goal <= %d)\n" \
    "$(field "$work/dynall.json" dynamic_bytes_per_key)" $(((1 + 32) * 4 * 3)) \
    "$(field "$work/dynall.json" dynamic_key_overhead_bytes)" $(((1 + 32) * 4 * 3 + 24))
distinct=$(echo "$coll" | sed -n 's/.*distinct=\([0-9]*\).*/\1/p')
live2=$(field "$work/dyn2.json" dynamic_live_keys)
counted=$((distinct - live2))
bits=$((counted * 8 * 6)) # 6 bytes a counted key
run bloom --threads 2 --dynamic-tables --admit-min-count 2 --admit-bloom-bits "$bits" \
    --admit-bloom-hashes 3
printf "Bloom filter of %d bits: %.2f bytes per key only counted (%d keys; goal <= 8); %d live " \
    "$bits" "$("$py" -c "print($(field "$work/bloom.json" dynamic_bloom_bytes) / $counted)")" \
    "$counted" "$(field "$work/bloom.json" dynamic_live_keys)"
printf "keys (exact counting: %d), test AUC %.4f\n" "$live2" "$(field "$work/bloom.json" test_auc)"

echo "== eviction"
run evict --threads 2 --dynamic-tables --evict-steps-to-live 300 --evict-every-steps 100
printf "steps_to_live 300: %d live keys, %d evicted, test AUC %.4f, %.1f MB\n" \
    "$(field "$work/evict.json" dynamic_live_keys)" "$(field "$work/evict.json" dynamic_evicted)" \
    "$(field "$work/evict.json" test_auc)" \
    "$("$py" -c "print($(field "$work/evict.json" dynamic_bytes) / 1e6)")"
