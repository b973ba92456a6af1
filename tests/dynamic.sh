#!/usr/bin/env bash
# Dynamic tables from the command line: a resumed run ends where the uninterrupted one does under
# every admission and eviction; numpy reads the keys, rows, counts and last-seen steps; ids up to
# 2^63 - 1 are keys as they are; max_rows holds; the memory bound stops a table with one line
# naming it; predict and evaluate read the checkpoints; wrong combinations are one-line errors.
# usage: tests/dynamic.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
tmp=$(mktemp -d /tmp/dtrain-dynamic-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
. "$(dirname "$0")/lib.sh"
# Debian's python3, which has numpy.
py=/usr/bin/python3
[ -x "$py" ] || py=python3

"$dtrain" data gen-ctr --rows 20000 --seed 1 --out "$tmp/train.svm" > /dev/null
"$dtrain" data gen-ctr --rows 4000 --seed 2 --out "$tmp/test.svm" > /dev/null
common=(train --model deepfm --dynamic-tables --batch-size 256 --seed 3 --threads 2
        --save-checkpoints-steps 78 --progress none)
base=("${common[@]}" --data "libsvm:$tmp/train.svm" --test-data none)

# --- resumed == uninterrupted, bit for bit, under each policy (the save at step 78 runs a whole
#     eviction pass in both runs) ---
resume_check() {
    local name=$1
    shift
    rm -rf "$tmp/A" "$tmp/B"
    "$dtrain" "${base[@]}" "$@" --epochs 2 --model-dir "$tmp/A" --metrics-out "$tmp/A.json" \
        > "$tmp/a.out" 2>&1
    local sa=$?
    "$dtrain" "${base[@]}" "$@" --epochs 1 --model-dir "$tmp/B" > /dev/null 2>&1
    "$dtrain" "${base[@]}" "$@" --epochs 2 --model-dir "$tmp/B" --metrics-out "$tmp/B.json" \
        > "$tmp/b.out" 2>&1
    local sb=$?
    local a b
    a=$(json_field "$tmp/A.json" param_checksum)
    b=$(json_field "$tmp/B.json" param_checksum)
    if [ "$sa" -eq 0 ] && [ "$sb" -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] &&
        grep -q "Restoring parameters" "$tmp/b.out"; then
        ok "$name" "checksum $a"
    else
        fail "$name" "exit $sa/$sb, checksums $a/$b: $(tail -2 "$tmp/a.out" "$tmp/b.out")"
    fi
}
resume_check dynamic_resume_exact_counts_and_steps_to_live --optimizer adagrad \
    --admit-min-count 2 --evict-steps-to-live 30 --evict-every-steps 10
resume_check dynamic_resume_bloom_filter_and_adam --optimizer adam --admit-min-count 3 \
    --admit-bloom-bits 65536
resume_check dynamic_resume_max_rows_and_ftrl --table-optimizer ftrl --evict-max-rows 3000 \
    --evict-every-steps 5
resume_check dynamic_resume_l2_below --optimizer adagrad --evict-l2-below 0.05 \
    --evict-every-steps 20

# --- numpy reads the tables; max_rows held (the last run's checkpoints) ---
rm -rf "$tmp/M"
run "$dtrain" "${base[@]}" --epochs 1 --model-dir "$tmp/M" --table-optimizer adagrad \
    --admit-min-count 2 --evict-max-rows 2500 --evict-every-steps 4
got=$("$py" - "$tmp/M/ckpt-78.safetensors" <<'PY' 2>&1
import json, struct, sys
import numpy as np
path = sys.argv[1]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
kinds = {"F32": "<f4", "I64": "<i8", "U32": "<u4", "U8": "u1"}
t = {}
for name, e in head.items():
    if name == "__metadata__":
        continue
    a, b = e["data_offsets"]
    t[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=kinds[e["dtype"]]).reshape(e["shape"])
keys = t["fm_v/keys"]
step = int(head["__metadata__"]["global_step"])
assert keys.dtype == np.int64 and len(np.unique(keys)) == len(keys), "keys repeat"
assert (t["fm_w/keys"] == keys).all(), "the tables' keys differ"
assert t["fm_v"].shape == (len(keys), 32) and t["fm_w"].shape == (len(keys), 1)
assert t["adagrad/accumulator/fm_v"].shape == (len(keys), 32)
assert len(keys) <= 2500, f"{len(keys)} rows past max_rows"
assert (t["fm_v/counts"] >= 2).all(), "a key admitted before its second sighting"
assert (t["fm_v/last_seen"] >= 1).all() and (t["fm_v/last_seen"] <= step).all()
ck = t["fm_w/counting_keys"]
assert len(np.intersect1d(ck, keys)) == 0 and (t["fm_w/counting_counts"] >= 1).all()
print(f"{len(keys)} keys, {len(ck)} counted, last seen {t['fm_v/last_seen'].min()}..{step}")
PY
)
if [ "$status" -eq 0 ] && echo "$got" | grep -q " keys, "; then ok numpy_reads_dynamic_tables "$got"
else fail numpy_reads_dynamic_tables "exit $status: $got $(tail -2 "$tmp/err")"; fi

run "$dtrain" inspect "$tmp/M"
if [ "$status" -eq 0 ] && grep -qE "fm_v +[0-9]+ live keys" "$tmp/out" &&
    grep -q "admission: min_count 2, counted exactly" "$tmp/out" &&
    grep -q "past 2500 rows, the least recently seen; a pass every 4 steps" "$tmp/out"; then
    ok inspect_shows_dynamic_tables "$(grep -E "fm_v +[0-9]+ live" "$tmp/out")"
else fail inspect_shows_dynamic_tables "exit $status: $(tail -6 "$tmp/out") $(cat "$tmp/err")"; fi

# --- ids anywhere in 0 .. 2^63 - 1 are keys as they are ---
"$py" - "$tmp/train.svm" "$tmp/big.svm" <<'PY'
import sys
out = open(sys.argv[2], "w")
for i, line in enumerate(open(sys.argv[1])):
    parts = line.split()
    fields = []
    for p in parts[1:]:
        k, v = p.split(":")
        # spread over the whole non-negative int64 range; one row holds the largest id
        key = (int(k) * 0x9E3779B97F4A7C15) % (1 << 63) if i else (1 << 63) - 1
        fields.append(f"{key}:{v}")
    out.write(" ".join([parts[0]] + fields) + "\n")
PY
rm -rf "$tmp/G"
run "$dtrain" "${common[@]}" --data "libsvm:$tmp/big.svm" --test-data none --epochs 1 \
    --model-dir "$tmp/G"
got=$("$py" - "$tmp/G/ckpt-78.safetensors" <<'PY' 2>&1
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
e = json.loads(raw[8:8 + n])["fm_v/keys"]
a, b = e["data_offsets"]
keys = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<i8")
print(int(keys.max()), len(keys))
PY
)
if [ "$status" -eq 0 ] && [ "${got%% *}" = 9223372036854775807 ]; then
    ok dynamic_tables_key_any_int64_id "max key, keys: $got"
else fail dynamic_tables_key_any_int64_id "exit $status: $got $(tail -2 "$tmp/err")"; fi
expect_error fixed_tables_refuse_ids_past_their_rows 1 "feature" \
    train --model deepfm --data "libsvm:$tmp/big.svm" --feature-size 1000 --epochs 1 \
    --test-data none --progress none

# --- the memory bound: one line naming the table and its rows ---
expect_error dynamic_memory_limit_names_the_table 1 "table fm_v: " \
    "${base[@]}" --epochs 1 --dynamic-memory-limit 3000000 --model-dir "$tmp/L"
if grep -q " rows take " "$tmp/err"; then ok dynamic_memory_limit_gives_the_rows "$(cat "$tmp/err")"
else fail dynamic_memory_limit_gives_the_rows "$(cat "$tmp/err")"; fi

# --- predict and evaluate read a dynamic checkpoint; evaluate agrees with training's test ---
rm -rf "$tmp/P"
run "$dtrain" "${common[@]}" --data "libsvm:$tmp/train.svm" --test-data "libsvm:$tmp/test.svm" \
    --epochs 1 --model-dir "$tmp/P" --admit-min-count 2
train_auc=$(sed -n 's/.*test AUC: \([0-9.]*\).*/\1/p' "$tmp/out")
run "$dtrain" predict --model-dir "$tmp/P" --data "libsvm:$tmp/test.svm" --out "$tmp/p.tsv"
lines=$(wc -l < "$tmp/p.tsv" 2>/dev/null)
run "$dtrain" evaluate --model-dir "$tmp/P" --test-data "libsvm:$tmp/test.svm" --field-size 39
eval_auc=$(sed -n 's/.*auc = \([0-9.]*\).*/\1/p' "$tmp/out")
same=$("$py" -c "print(abs(float('${train_auc:-0}') - float('${eval_auc:-1}')) < 1e-4)")
if [ "$status" -eq 0 ] && [ "$lines" = 4000 ] && [ "$same" = True ]; then
    ok dynamic_checkpoints_predict_and_evaluate "AUC $train_auc trained, $eval_auc evaluated"
else fail dynamic_checkpoints_predict_and_evaluate "exit $status, $lines lines, AUC $train_auc/$eval_auc: $(cat "$tmp/err")"; fi

# --- wrong combinations ---
expect_error dynamic_tables_name_what_export_lacks 1 "--format onnx" \
    export --model-dir "$tmp/P" --format dtrain --out "$tmp/p_export"
expect_error dynamic_flags_need_dynamic_tables 1 "--dynamic-tables" \
    train --model deepfm --data "libsvm:$tmp/train.svm" --feature-size 3000000 \
    --admit-min-count 2 --epochs 1 --test-data none
expect_error dynamic_tables_refuse_hash_buckets 1 "--hash-buckets" \
    "${base[@]}" --epochs 1 --hash-buckets 1000
expect_error dynamic_tables_name_the_strategies_that_train_them 1 "one_device" \
    "${base[@]}" --epochs 1 --strategy mirrored
expect_error bloom_filter_counts_to_15 1 "--admit-min-count 20" \
    "${base[@]}" --epochs 1 --admit-bloom-bits 4096 --admit-min-count 20

echo "$passed $failed" > "$counts"
