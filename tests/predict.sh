#!/usr/bin/env bash
# Tests of dtrain predict: scores in input order, the same bytes on 1 and 2 threads and at any
# batch, agreeing with dtrain evaluate (the log loss of its probabilities is evaluate's), a
# parameter-server checkpoint scoring as the one_device model it equals, stdin to stdout, tsv,
# jsonl and npy, kept columns, rows without a label, bad rows named or skipped, and one clear
# error for each kind of bad input. usage: tests/predict.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
tmp=$(mktemp -d /tmp/dtrain-predict-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
py=/usr/bin/python3
[ -x "$py" ] || py=python3

. "$(dirname "$0")/lib.sh"

"$dtrain" data gen-ctr --format census --rows 4000 --seed 1 --out "$tmp/train.csv" > /dev/null
"$dtrain" data gen-ctr --format census --rows 1500 --seed 2 --out "$tmp/test.csv" > /dev/null
cat > "$tmp/spec.json" << 'EOF'
{"label": {"key": "income_bracket", "vocabulary": ["<=50K", ">50K"]},
 "columns": [
   {"name": "age", "type": "numeric", "normalizer": "standardize"},
   {"name": "age_buckets", "type": "bucketized", "source": "age",
    "boundaries": [18, 25, 30, 35, 40, 45, 50, 55, 60, 65]},
   {"name": "education", "type": "vocabulary", "adapt": {"min_count": 5}, "num_oov_buckets": 1},
   {"name": "occupation", "type": "hash_bucket", "hash_bucket_size": 100},
   {"name": "edu_x_occ", "type": "crossed", "keys": ["education", "occupation"],
    "hash_bucket_size": 200}],
 "model": {"type": "wide_deep",
   "linear_feature_columns": ["age_buckets", "edu_x_occ", "education", "occupation"],
   "dnn_feature_columns": ["age", {"embedding": "occupation", "dimension": 4},
                           {"embedding": "education", "dimension": 4}],
   "dnn_hidden_units": [16, 8]}}
EOF
train=(train --data "csv:$tmp/train.csv" --feature-spec "$tmp/spec.json" --batch-size 128
       --shuffle-buffer 0 --progress none --seed 5 --threads 1 --epochs 1 --test-data none)
run "$dtrain" "${train[@]}" --model-dir "$tmp/one" --metrics-out "$tmp/one.json"
[ "$status" -eq 0 ] || fail predict_setup_training "exit $status: $(tail -3 "$tmp/err")"

# --- order and determinism: 1, 2 and 9 threads, batches of 256, 7 and 2, the same bytes (9
# threads on batches of 2 park batches ahead of their turn and fill the window of slots) ---
run "$dtrain" predict --model-dir "$tmp/one" --data "csv:$tmp/test.csv" --out "$tmp/p1.tsv"
s1=$status
run "$dtrain" predict --model-dir "$tmp/one" --data "csv:$tmp/test.csv" --threads 2 \
    --batch-size 7 --out "$tmp/p2.tsv"
s2=$status
run "$dtrain" predict --model-dir "$tmp/one" --data "csv:$tmp/test.csv" --threads 9 \
    --batch-size 2 --out "$tmp/p9.tsv"
rows=$(wc -l < "$tmp/p1.tsv")
if [ "$s1" -eq 0 ] && [ "$s2" -eq 0 ] && [ "$status" -eq 0 ] && [ "$rows" -eq 1500 ] &&
    cmp -s "$tmp/p1.tsv" "$tmp/p2.tsv" && cmp -s "$tmp/p1.tsv" "$tmp/p9.tsv"; then
    ok predict_same_bytes_on_1_and_2_threads_at_any_batch "$rows rows"
else
    fail predict_same_bytes_on_1_and_2_threads_at_any_batch "exit $s1/$s2/$status, $rows rows, $(cmp "$tmp/p1.tsv" "$tmp/p2.tsv" 2>&1 | head -1) $(cmp "$tmp/p1.tsv" "$tmp/p9.tsv" 2>&1 | head -1): $(head -c 300 "$tmp/err")"
fi

# --- the scores are evaluate's: the log loss of the probabilities against the kept labels ---
run "$dtrain" predict --model-dir "$tmp/one" --data "csv:$tmp/test.csv" --keep-columns \
    income_bracket,age --logits --out "$tmp/keep.tsv"
ks=$status
run "$dtrain" evaluate --model-dir "$tmp/one" --test-data "csv:$tmp/test.csv"
eval_ll=$(sed -n 's/.*logloss = \([0-9.e+-]*\).*/\1/p' "$tmp/out")
res=$("$py" - "$tmp/keep.tsv" "$tmp/test.csv" "${eval_ll:-nan}" <<'PY' 2>&1
import csv, math, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
src = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == len(src), (len(rows), len(src))
ll = 0.0
for r, s in zip(rows, src):
    label, age, p, z = r[0], r[1], float(r[2]), float(r[3])
    assert label == s["income_bracket"].strip() and age == s["age"].strip(), (r, s)
    assert abs(p - 1 / (1 + math.exp(-z))) < 1e-6, (p, z)
    y = 1.0 if label == ">50K" else 0.0
    q = min(max(p, 1e-7), 1 - 1e-7)
    ll -= y * math.log(q) + (1 - y) * math.log(1 - q)
ll /= len(rows)
want = float(sys.argv[3])
print("logloss=%.7f evaluate=%.7f" % (ll, want))
sys.exit(0 if abs(ll - want) < 2e-6 else 1)
PY
)
if [ "$ks" -eq 0 ] && [ "$?" -eq 0 ] && [ -n "$eval_ll" ] && echo "$res" | grep -q "^logloss"; then
    "$py" -c "import sys; a,b=[float(x.split('=')[1]) for x in sys.argv[1].split()]; sys.exit(abs(a-b)>=2e-6)" "$res" &&
        ok predict_scores_are_evaluates "$res" || fail predict_scores_are_evaluates "$res"
else
    fail predict_scores_are_evaluates "exit $ks, evaluate '$eval_ll': $res $(head -c 300 "$tmp/err")"
fi

# --- a filter: csv from stdin to stdout; rows without the label column score the same ---
cat "$tmp/test.csv" | "$dtrain" predict --model-dir "$tmp/one" --data csv:- > "$tmp/stdin.tsv" 2> "$tmp/err"
st=$?
"$py" - "$tmp/test.csv" "$tmp/nolabel.csv" <<'PY'
import csv, sys
r = list(csv.reader(open(sys.argv[1])))
i = r[0].index("income_bracket")
with open(sys.argv[2], "w", newline="") as f:
    csv.writer(f, lineterminator="\n").writerows([x[:i] + x[i + 1:] for x in r])
PY
run "$dtrain" predict --model-dir "$tmp/one" --data "csv:$tmp/nolabel.csv" --out "$tmp/nolabel.tsv"
if [ "$st" -eq 0 ] && [ "$status" -eq 0 ] && cmp -s "$tmp/stdin.tsv" "$tmp/p1.tsv" && cmp -s "$tmp/nolabel.tsv" "$tmp/p1.tsv"; then
    ok predict_stdin_filter_and_unlabeled_rows
else
    fail predict_stdin_filter_and_unlabeled_rows "exit $st/$status: $(head -c 300 "$tmp/err")"
fi

# --- jsonl and npy hold the tsv's numbers ---
run "$dtrain" predict --model-dir "$tmp/one" --data "csv:$tmp/test.csv" --format jsonl --logits \
    --keep-columns age --out "$tmp/p.jsonl"
js=$status
run "$dtrain" predict --model-dir "$tmp/one" --data "csv:$tmp/test.csv" --format npy --logits \
    --out "$tmp/p.npy"
res=$("$py" - "$tmp/p.jsonl" "$tmp/p.npy" "$tmp/keep.tsv" <<'PY' 2>&1
import json, sys
import numpy as np
js = [json.loads(l) for l in open(sys.argv[1])]
a = np.load(sys.argv[2])
t = [l.rstrip("\n").split("\t") for l in open(sys.argv[3])]
assert a.dtype == np.float32 and a.shape == (len(t), 2), a.shape
for j, row, tr in zip(js, a, t):
    assert j["age"] == tr[1] and j["probability"] == float(tr[2]) and j["logit"] == float(tr[3])
    assert np.float32(tr[2]) == row[0] and np.float32(tr[3]) == row[1]
print("rows=%d" % len(js))
PY
)
if [ "$js" -eq 0 ] && [ "$status" -eq 0 ] && echo "$res" | grep -q "^rows=1500$"; then
    ok predict_jsonl_and_npy_hold_the_same_numbers "$res"
else
    fail predict_jsonl_and_npy_hold_the_same_numbers "exit $js/$status: $res $(head -c 300 "$tmp/err")"
fi

# --- a bad row: named by file and line, or skipped and counted with the others in place ---
{ head -101 "$tmp/test.csv"; echo "abc,Private,1,Bachelors,13,Divorced,Sales,Wife,White,Male,0,0,40,United-States,<=50K"; tail -n +102 "$tmp/test.csv"; } > "$tmp/bad.csv"
expect_error predict_bad_row_names_file_and_line 1 "bad.csv: line 102: column 'age'" predict --model-dir "$tmp/one" \
    --data "csv:$tmp/bad.csv"
run "$dtrain" predict --model-dir "$tmp/one" --data "csv:$tmp/bad.csv" --skip-bad-records \
    --threads 2 --out "$tmp/skip.tsv"
if [ "$status" -eq 0 ] && grep -q "skipped 1 bad record" "$tmp/err" && cmp -s "$tmp/skip.tsv" "$tmp/p1.tsv"; then
    ok predict_skip_bad_records_keeps_the_rest_in_place
else
    fail predict_skip_bad_records_keeps_the_rest_in_place "exit $status: $(head -c 300 "$tmp/err")"
fi

# --- a parameter-server checkpoint (tables in 2 ps tasks' files) scores as one_device ---
run timeout 120 "$dtrain" launch -n 1 --ps 2 -- "$dtrain" "${train[@]}" --strategy \
    parameter_server --ps-mode ssp:0 --partition-strategy mod --partitioner fixed:3 \
    --model-dir "$tmp/ps"
pst=$status
run "$dtrain" predict --model-dir "$tmp/ps" --data "csv:$tmp/test.csv" --out "$tmp/ps.tsv"
if [ "$pst" -eq 0 ] && [ "$status" -eq 0 ] && ls "$tmp/ps" | grep -q "ps-1-of-2" && cmp -s "$tmp/ps.tsv" "$tmp/p1.tsv"; then
    ok predict_ps_checkpoint_scores_as_one_device
else
    fail predict_ps_checkpoint_scores_as_one_device "exit $pst/$status: $(ls "$tmp/ps" | tr '\n' ' ') $(head -c 300 "$tmp/err")"
fi

# --- dtrain's own export: the variables alone, the ps checkpoint's tables whole, the same tensors
# as one_device's, and the same scores from the exported directory ---
run "$dtrain" export --model-dir "$tmp/one" --format dtrain --out "$tmp/one_x"
s1=$status
run "$dtrain" export --model-dir "$tmp/ps" --format dtrain --out "$tmp/ps_x"
s2=$status
"$dtrain" inspect "$tmp/one_x/model.safetensors" | grep -v "^ \|safetensors:" > "$tmp/one_x.t" 2>&1
"$dtrain" inspect "$tmp/ps_x/model.safetensors" | grep -v "^ \|safetensors:" > "$tmp/ps_x.t" 2>&1
run "$dtrain" predict --model-dir "$tmp/ps_x" --data "csv:$tmp/test.csv" --out "$tmp/ps_x.tsv"
ck=$(ls "$tmp/one"/ckpt-*.safetensors | head -1)
if [ "$s1" -eq 0 ] && [ "$s2" -eq 0 ] && [ "$status" -eq 0 ] && [ -s "$tmp/one_x.t" ] &&
    cmp -s "$tmp/one_x.t" "$tmp/ps_x.t" && cmp -s "$tmp/ps_x.tsv" "$tmp/p1.tsv" &&
    [ -f "$tmp/ps_x/feature_spec.json" ] && [ -f "$tmp/ps_x/signature.json" ] &&
    ! grep -q "adagrad\|ftrl\|adam" "$tmp/one_x.t" &&
    [ "$(stat -c %s "$tmp/one_x/model.safetensors")" -lt "$(stat -c %s "$ck")" ]; then
    ok predict_export_dtrain_of_ps_equals_one_device "$(wc -l < "$tmp/one_x.t") tensors"
else
    fail predict_export_dtrain_of_ps_equals_one_device "exit $s1/$s2/$status: $(diff "$tmp/one_x.t" "$tmp/ps_x.t" | head -3) $(head -c 300 "$tmp/err")"
fi

# --- built-in deepfm on libsvm: the log loss is evaluate's; the label kept ---
"$dtrain" data gen-ctr --rows 3000 --seed 3 --format libsvm --out "$tmp/ctr.libsvm" > "$tmp/gen" 2>&1
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/gen")
run "$dtrain" train --model deepfm --data "libsvm:$tmp/ctr.libsvm" --field-size 39 --feature-size \
    "$fs" --embedding-size 4 --deep-layers 16,8 --epochs 1 --batch-size 128 --test-data none \
    --progress none --model-dir "$tmp/dfm"
run "$dtrain" predict --model-dir "$tmp/dfm" --data "libsvm:$tmp/ctr.libsvm" --keep-columns label \
    --threads 2 --out "$tmp/dfm.tsv"
ps_=$status
run "$dtrain" evaluate --model-dir "$tmp/dfm" --test-data "libsvm:$tmp/ctr.libsvm" --field-size 39
eval_ll=$(sed -n 's/.*logloss = \([0-9.e+-]*\).*/\1/p' "$tmp/out")
res=$("$py" - "$tmp/dfm.tsv" "${eval_ll:-nan}" <<'PY' 2>&1
import math, sys
rows = [l.split("\t") for l in open(sys.argv[1])]
ll = 0.0
for r in rows:
    y, p = float(r[0]), min(max(float(r[1]), 1e-7), 1 - 1e-7)
    ll -= y * math.log(p) + (1 - y) * math.log(1 - p)
ll /= len(rows)
print("rows=%d logloss=%.7f evaluate=%s" % (len(rows), ll, sys.argv[2]))
sys.exit(0 if len(rows) == 3000 and abs(ll - float(sys.argv[2])) < 2e-6 else 1)
PY
)
if [ "$ps_" -eq 0 ] && [ $? -eq 0 ] && "$py" -c "import sys; sys.exit(0)" && echo "$res" | grep -q "^rows=3000" &&
    "$py" -c "import sys; v=sys.argv[1].split(); a=float(v[1].split('=')[1]); b=float(v[2].split('=')[1]); sys.exit(abs(a-b)>=2e-6)" "$res"; then
    ok predict_deepfm_libsvm_scores_are_evaluates "$res"
else
    fail predict_deepfm_libsvm_scores_are_evaluates "exit $ps_: $res $(head -c 300 "$tmp/err")"
fi

# --- bad input: one clear error each ---
expect_error predict_wrong_format_is_a_usage_error 2 "expected tsv, jsonl or npy" predict \
    --model-dir "$tmp/one" --data "csv:$tmp/test.csv" --format parquet
expect_error predict_missing_checkpoint 1 "$tmp/nowhere" predict --checkpoint "$tmp/nowhere" \
    --data "csv:$tmp/test.csv"
ck=$(ls "$tmp/dfm"/ckpt-*.safetensors | head -1)
head -c 5000 "$ck" > "$tmp/cut.safetensors"
expect_error predict_truncated_checkpoint 1 "cut.safetensors" predict --checkpoint \
    "$tmp/cut.safetensors" --data "libsvm:$tmp/ctr.libsvm"
# A damaged checkpoint (its last byte, an optimizer slot's, flipped): the checksum pass runs
# while the rows are scored, and no score is written before it has found the file whole.
cp "$ck" "$tmp/flipped.safetensors"
"$py" - "$tmp/flipped.safetensors" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-1, 2)
    b = f.read(1)
    f.seek(-1, 2)
    f.write(bytes([b[0] ^ 0x40]))
PY
expect_error predict_damaged_checkpoint_writes_no_score 1 "checksum mismatch" predict \
    --checkpoint "$tmp/flipped.safetensors" --data "libsvm:$tmp/ctr.libsvm" --threads 2 \
    --out "$tmp/flipped.tsv"
if [ -s "$tmp/flipped.tsv" ]; then
    fail predict_damaged_checkpoint_writes_no_score "$(wc -l < "$tmp/flipped.tsv") scores written"
fi
mkdir -p "$tmp/mismatch"
cp "$tmp/one"/ckpt-*.safetensors "$tmp/mismatch/"
"$py" - "$tmp/one/feature_spec.json" "$tmp/mismatch/feature_spec.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["model"]["dnn_hidden_units"] = [8, 8]
json.dump(s, open(sys.argv[2], "w"))
PY
expect_error predict_spec_not_of_the_checkpoint 2 "another model" predict --model-dir \
    "$tmp/mismatch" --data "csv:$tmp/test.csv"
expect_error predict_npy_to_a_pipe 2 "give --out FILE" predict --model-dir "$tmp/one" \
    --data "csv:$tmp/test.csv" --format npy
expect_error predict_builtin_keeps_only_the_label 2 "keep only" predict --model-dir "$tmp/dfm" \
    --data "libsvm:$tmp/ctr.libsvm" --keep-columns C1

echo "predict: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
