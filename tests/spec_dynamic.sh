#!/usr/bin/env bash
# A feature spec's dynamic columns ("dynamic": true): an identity column keyed by its ids trains
# and predicts as the fixed column does, bit for bit; a resumed run ends where the uninterrupted
# one does under admission and eviction (exact counts and a Bloom filter); keys are the values'
# Fingerprint64 less its top bit, or the ids themselves; numpy reads each table's keys; inspect
# lists the tables; the parameter server trains them as one_device does and restores their
# checkpoints anywhere; what does not train or export them yet says so in one line.
# usage: tests/spec_dynamic.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
tmp=$(mktemp -d /tmp/dtrain-spec-dynamic-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
. "$(dirname "$0")/lib.sh"
py=/usr/bin/python3
[ -x "$py" ] || py=python3

"$dtrain" data gen-ctr --format census --rows 6000 --seed 1 --out "$tmp/train.csv" > /dev/null
"$dtrain" data gen-ctr --format census --rows 2000 --seed 2 --out "$tmp/test.csv" > /dev/null
flags=(--batch-size 128 --shuffle-buffer 0 --progress none --seed 5 --threads 2)

# --- an identity column keyed by its ids = the fixed column: same test AUC, same predictions ---
# (every key admitted, nothing evicted, each key's row drawn as the fixed table's row of that id)
identity_spec() {
    cat << EOF
{"label": {"key": "income_bracket", "vocabulary": ["<=50K", ">50K"]},
 "columns": [
   {"name": "hours_per_week", "type": "numeric", "normalizer": "standardize"},
   {"name": "age_id", "type": "identity", "key": "age", $1},
   {"name": "edu_num", "type": "identity", "key": "education_num", $1},
   {"name": "occupation", "type": "hash_bucket", "hash_bucket_size": 100}],
 "model": {"type": "wide_deep",
   "linear_feature_columns": ["age_id", "occupation", "edu_num"],
   "dnn_feature_columns": ["hours_per_week", {"embedding": "age_id", "dimension": 4},
                           {"shared_embedding": ["age_id", "edu_num"], "dimension": 3},
                           {"embedding": "occupation", "dimension": 4}],
   "dnn_hidden_units": [16, 8]}}
EOF
}
identity_spec '"num_buckets": 100' > "$tmp/fixed.json"
identity_spec '"dynamic": true' > "$tmp/dynamic.json"
for m in fixed dynamic; do
    "$dtrain" train --data "csv:$tmp/train.csv" --test-data "csv:$tmp/test.csv" \
        --feature-spec "$tmp/$m.json" "${flags[@]}" --epochs 2 --model-dir "$tmp/m_$m" \
        --metrics-out "$tmp/$m.metrics" > "$tmp/$m.out" 2>&1
    "$dtrain" predict --model-dir "$tmp/m_$m" --data "csv:$tmp/test.csv" --out "$tmp/$m.tsv" \
        >> "$tmp/$m.out" 2>&1
done
fa=$(json_field "$tmp/fixed.metrics" test_auc)
da=$(json_field "$tmp/dynamic.metrics" test_auc)
if [ -n "$fa" ] && [ "$fa" = "$da" ] && [ "$(wc -l < "$tmp/dynamic.tsv")" = 2000 ] &&
    cmp -s "$tmp/fixed.tsv" "$tmp/dynamic.tsv" && grep -q "Dynamic tables: " "$tmp/dynamic.out"; then
    ok spec_dynamic_identity_equals_fixed "test AUC $fa both, 2000 predictions identical"
else
    fail spec_dynamic_identity_equals_fixed "AUC $fa/$da: $(tail -2 "$tmp/fixed.out" "$tmp/dynamic.out")"
fi

# --- resumed == uninterrupted under admission and eviction (hash, crossed and identity columns;
#     the save at step 46, an epoch, runs a whole eviction pass in both runs) ---
policy_spec() {
    cat << EOF
{"label": {"key": "income_bracket", "vocabulary": ["<=50K", ">50K"]},
 "columns": [
   {"name": "hours_per_week", "type": "numeric", "normalizer": "standardize"},
   {"name": "workclass", "type": "hash_bucket", "hash_bucket_size": 50},
   {"name": "occupation", "type": "hash_bucket", "dynamic": true, "admit": $1},
   {"name": "native_country", "type": "hash_bucket", "dynamic": true},
   {"name": "fnl", "type": "identity", "key": "fnlwgt", "dynamic": true, "admit": $1,
    "evict": {"steps_to_live": 30, "every_steps": 10}},
   {"name": "work_x_occ", "type": "crossed", "keys": ["workclass", "occupation"],
    "dynamic": true, "admit": $1, "evict": {"l2_below": 0.001}}],
 "model": {"type": "wide_deep",
   "linear_feature_columns": ["occupation", "work_x_occ", "fnl", "workclass"],
   "dnn_feature_columns": ["hours_per_week", {"embedding": "occupation", "dimension": 4},
                           {"embedding": "native_country", "dimension": 4, "combiner": "sqrtn"},
                           {"embedding": "fnl", "dimension": 4}],
   "dnn_hidden_units": [16, 8], "dnn_optimizer": {"type": "adam", "learning_rate": 0.01}}}
EOF
}
resume_check() {
    local name=$1
    policy_spec "$2" > "$tmp/$name.json"
    local base=(train --data "csv:$tmp/train.csv" --test-data none --feature-spec "$tmp/$name.json"
                "${flags[@]}" --save-checkpoints-steps 46)
    rm -rf "$tmp/A" "$tmp/B"
    "$dtrain" "${base[@]}" --epochs 2 --model-dir "$tmp/A" --metrics-out "$tmp/A.json" \
        > "$tmp/a.out" 2>&1
    local sa=$?
    "$dtrain" "${base[@]}" --epochs 1 --model-dir "$tmp/B" > /dev/null 2>&1
    "$dtrain" "${base[@]}" --epochs 2 --model-dir "$tmp/B" --metrics-out "$tmp/B.json" \
        > "$tmp/b.out" 2>&1
    local sb=$?
    local a b
    a=$(json_field "$tmp/A.json" param_checksum)
    b=$(json_field "$tmp/B.json" param_checksum)
    if [ "$sa" -eq 0 ] && [ "$sb" -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] &&
        grep -q "Restoring parameters" "$tmp/b.out" && grep -q " evicted" "$tmp/a.out"; then
        ok "$name" "checksum $a; $(grep "^Dynamic tables:" "$tmp/a.out")"
    else
        fail "$name" "exit $sa/$sb, checksums $a/$b: $(tail -2 "$tmp/a.out" "$tmp/b.out")"
    fi
}
resume_check spec_dynamic_resume_exact_counts '{"min_count": 2}'
resume_check spec_dynamic_resume_bloom_filter '{"min_count": 3, "bloom": {"bits": 65536, "hashes": 3}}'

# --- keys: an identity column's ids as they are; a hashed one's Fingerprint64 less its top bit,
#     which the fixed column reduces modulo its buckets (the same row both ways) ---
cat > "$tmp/keys.json" << 'EOF'
{"label": {"key": "income_bracket", "vocabulary": ["<=50K", ">50K"]},
 "columns": [
   {"name": "occ_dynamic", "type": "hash_bucket", "key": "occupation", "dynamic": true},
   {"name": "occ_fixed", "type": "hash_bucket", "key": "occupation", "hash_bucket_size": 997},
   {"name": "fnl", "type": "identity", "key": "fnlwgt", "dynamic": true}],
 "model": {"type": "linear", "linear_feature_columns": ["occ_dynamic", "occ_fixed", "fnl"]}}
EOF
run "$dtrain" data transform --feature-spec "$tmp/keys.json" --data "csv:$tmp/train.csv" -n 500
cp "$tmp/out" "$tmp/rows.jsonl"
check=$("$py" - "$tmp/rows.jsonl" "$tmp/train.csv" << 'EOF'
import csv, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
raw = list(csv.DictReader(open(sys.argv[2])))[:len(rows)]
bad = 0
for r, x in zip(rows, raw):
    key, = r["occ_dynamic"]["ids"]
    fixed, = r["occ_fixed"]["ids"]
    # the key is Fingerprint64 with bit 63 cleared: one of key and key + 2^63 is it
    bad += not (0 <= key < 2**63 and fixed in (key % 997, (key + 2**63) % 997))
    bad += r["fnl"]["ids"] != [int(x["fnlwgt"])]
print(len(rows), bad)
EOF
)
if [ "$status" -eq 0 ] && [ "$check" = "500 0" ]; then
    ok spec_dynamic_keys_are_fingerprints_and_ids "500 rows: every key as TF hashes it, less bit 63"
else fail spec_dynamic_keys_are_fingerprints_and_ids "exit $status, rows/bad $check: $(cat "$tmp/err")"; fi

# --- numpy reads a table's keys, rows and counts (the last resume run's checkpoint) ---
ckpt=$(ls "$tmp"/B/ckpt-92.safetensors 2> /dev/null)
check=$("$py" - "$ckpt" "$tmp/train.csv" << 'EOF'
import csv, json, struct, sys
import numpy as np
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
head = json.loads(data[8:8 + n])
def t(name):
    h = head[name]
    a, b = h["data_offsets"]
    dt = {"F32": np.float32, "I64": np.int64, "U32": np.uint32}[h["dtype"]]
    return np.frombuffer(data[8 + n + a:8 + n + b], dtype=dt).reshape(h["shape"])
keys = t("dnn/fnl_embedding/embedding_weights/keys")
rows = t("dnn/fnl_embedding/embedding_weights")
counts = t("dnn/fnl_embedding/embedding_weights/counts")
fnl = {int(r["fnlwgt"]) for r in csv.DictReader(open(sys.argv[2]))}
ok = (len(keys) > 0 and len(set(keys.tolist())) == len(keys) and set(keys.tolist()) <= fnl
      and rows.shape == (len(keys), 4) and (counts >= 2).all() and np.isfinite(rows).all())
print(len(keys), ok)
EOF
)
if [ "${check#* }" = True ]; then
    ok spec_dynamic_numpy_reads_keys "${check% *} live keys of fnl, each an fnlwgt seen twice or more"
else fail spec_dynamic_numpy_reads_keys "$check"; fi

run "$dtrain" inspect "$tmp/B"
if grep -q "^dynamic tables:" "$tmp/out" && grep -q "dnn/fnl_embedding/embedding_weights .* live keys" "$tmp/out"; then
    ok spec_dynamic_inspect_lists_tables "$(grep -c " live keys" "$tmp/out") tables"
else fail spec_dynamic_inspect_lists_tables "$(tail -5 "$tmp/out") $(cat "$tmp/err")"; fi

# --- the parameter server: one worker is one_device bit for bit (ssp:0 on 1 ps, async over 3,
#     hybrid), the ps tasks admitting and evicting; two workers on two ps checkpoint, and the
#     checkpoint evaluates as trained and goes on in one_device and on 3 ps alike ---
policy_spec '{"min_count": 2}' > "$tmp/ps.json"
pbase=(train --data "csv:$tmp/train.csv" --test-data "csv:$tmp/test.csv" --feature-spec "$tmp/ps.json"
       --batch-size 128 --shuffle-buffer 0 --progress none --seed 5 --threads 1)
"$dtrain" "${pbase[@]}" --epochs 1 --metrics-out "$tmp/one.json" > /dev/null 2>&1
one_sum=$(json_field "$tmp/one.json" param_checksum)
for spec in "ssp0|1|--ps-mode ssp:0" "3ps|3|" "hybrid|1|--ps-mode hybrid"; do
    IFS='|' read -r label nps extra <<< "$spec"
    # shellcheck disable=SC2086
    run timeout 120 "$dtrain" launch -n 1 --ps "$nps" -- "$dtrain" "${pbase[@]}" --epochs 1 \
        --strategy parameter_server $extra --metrics-out "$tmp/ps_$label.json"
    sum=$(json_field "$tmp/ps_$label.json" param_checksum)
    if [ "$status" -eq 0 ] && [ -n "$one_sum" ] && [ "$sum" = "$one_sum" ]; then
        ok "spec_dynamic_ps_one_worker_${label}_equals_one_device" "checksum $sum"
    else
        fail "spec_dynamic_ps_one_worker_${label}_equals_one_device" "exit $status, checksum $sum vs $one_sum: $(tail -3 "$tmp/err")"
    fi
done
run timeout 120 "$dtrain" launch -n 2 --ps 2 -- "$dtrain" "${pbase[@]}" --epochs 2 \
    --strategy parameter_server --model-dir "$tmp/P" --metrics-out "$tmp/p2.json"
p2_status=$status
p2_auc=$(json_field "$tmp/p2.json" test_auc)
run "$dtrain" evaluate --model-dir "$tmp/P" --test-data "csv:$tmp/test.csv"
ev_auc=$(sed -n 's/.*auc = \([0-9.]*\).*/\1/p' "$tmp/out")
cp -r "$tmp/P" "$tmp/P3"
"$dtrain" "${pbase[@]}" --epochs 3 --model-dir "$tmp/P" > "$tmp/on_one.out" 2>&1
timeout 120 "$dtrain" launch -n 1 --ps 3 -- "$dtrain" "${pbase[@]}" --epochs 3 \
    --strategy parameter_server --model-dir "$tmp/P3" > "$tmp/on_3.out" 2>&1
one_line=$(grep -o "Test loss.*" "$tmp/on_one.out")
ps_line=$(grep -o "Test loss.*" "$tmp/on_3.out")
same=$("$py" -c "print(abs(float('${p2_auc:-0}') - float('${ev_auc:-1}')) < 1e-6)")
if [ "$p2_status" -eq 0 ] && [ "$same" = True ] && grep -q "Restoring parameters" "$tmp/on_one.out" &&
    grep -q "onto 3 ps tasks" "$tmp/on_3.out" && [ -n "$one_line" ] && [ "$one_line" = "$ps_line" ]; then
    ok spec_dynamic_ps_checkpoint_restores_anywhere "AUC $p2_auc trained, $ev_auc evaluated; then $one_line both"
else
    fail spec_dynamic_ps_checkpoint_restores_anywhere "exit $p2_status, AUC $p2_auc/$ev_auc, '$one_line' vs '$ps_line': $(tail -2 "$tmp/on_3.out")"
fi

# --- what does not train or export them yet: one line each ---
base=(train --data "csv:$tmp/train.csv" --test-data none --feature-spec "$tmp/dynamic.json"
      "${flags[@]}" --epochs 1)
expect_error spec_dynamic_refused_by_mirrored 1 "dynamic columns train with one_device" \
    "${base[@]}" --strategy mirrored
expect_error spec_dynamic_refused_by_onnx_export 1 "which the ONNX export does not write yet" \
    export --model-dir "$tmp/m_dynamic" --format onnx --out "$tmp/x.onnx"

echo "$passed $failed" > "$counts"
