#!/usr/bin/env bash
# Training feature-spec models on every strategy, with real processes on loopback: mirrored and
# multi_worker_mirrored equal one_device at the same global batch, one parameter-server worker
# equals one_device bit for bit, two workers and two ps tasks train, a killed worker's steps are
# taken over, checkpoints restore and evaluate from the adapted spec saved beside them, and bad
# rows and specs stop training with one line naming the file, line and column.
# usage: tests/spec_train.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
tmp=$(mktemp -d /tmp/dtrain-spec-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
passed=0
failed=0
py=/usr/bin/python3
[ -x "$py" ] || py=python3

. "$(dirname "$0")/lib.sh"

"$dtrain" data gen-ctr --format census --rows 6000 --seed 1 --out "$tmp/train.csv" > /dev/null
"$dtrain" data gen-ctr --format census --rows 2000 --seed 2 --out "$tmp/test.csv" > /dev/null
# A smaller wide & deep than the tutorial's (fewer units), with an adapted vocabulary and a
# standardized column, so that every worker's adapt pass must agree for the runs to.
cat > "$tmp/spec.json" << 'EOF'
{"label": {"key": "income_bracket", "vocabulary": ["<=50K", ">50K"]},
 "columns": [
   {"name": "age", "type": "numeric", "normalizer": "standardize"},
   {"name": "hours_per_week", "type": "numeric", "normalizer": "standardize"},
   {"name": "age_buckets", "type": "bucketized", "source": "age",
    "boundaries": [18, 25, 30, 35, 40, 45, 50, 55, 60, 65]},
   {"name": "education", "type": "vocabulary", "adapt": {"min_count": 5}, "num_oov_buckets": 1},
   {"name": "occupation", "type": "hash_bucket", "hash_bucket_size": 100},
   {"name": "workclass", "type": "vocabulary", "adapt": {}, "num_oov_buckets": 1},
   {"name": "edu_x_occ", "type": "crossed", "keys": ["education", "occupation"],
    "hash_bucket_size": 200}],
 "model": {"type": "wide_deep",
   "linear_feature_columns": ["age_buckets", "edu_x_occ", "education", "occupation"],
   "dnn_feature_columns": ["age", "hours_per_week", {"indicator": "workclass"},
                           {"embedding": "occupation", "dimension": 4},
                           {"embedding": "education", "dimension": 4}],
   "dnn_hidden_units": [16, 8]}}
EOF
flags=(--feature-spec "$tmp/spec.json" --batch-size 128 --shuffle-buffer 0 --progress none --seed 5
       --threads 1)
base=(train --data "csv:$tmp/train.csv" "${flags[@]}")

# --- synchronous strategies: the same parameters as one_device after 5 steps (relative 1e-5) ---
"$dtrain" "${base[@]}" --test-data none --max-steps 5 --model-dir "$tmp/one" > /dev/null 2>&1
"$dtrain" "${base[@]}" --test-data none --max-steps 5 --strategy mirrored --replicas 2 \
    --model-dir "$tmp/mir" > /dev/null 2>&1
timeout 120 "$dtrain" launch -n 2 -- "$dtrain" "${base[@]}" --test-data none --max-steps 5 \
    --model-dir "$tmp/mwm" > "$tmp/launch.out" 2>&1
for s in mir mwm; do
    diff=$("$py" "$(dirname "$0")/progs/ckpt_diff.py" "$tmp/one/ckpt-5.safetensors" \
        "$tmp/$s/ckpt-5.safetensors" 2>&1)
    rel=$(echo "$diff" | sed -n 's/max_rel=\([^ ]*\) tensors=.*/\1/p')
    n=$(echo "$diff" | sed -n 's/.*tensors=\([0-9]*\).*/\1/p')
    if [ -n "$rel" ] && [ "${n:-0}" -ge 10 ] && awk -v r="$rel" 'BEGIN { exit !(r <= 1e-5) }'; then
        ok "spec_${s}_equals_one_device" "$diff after 5 steps"
    else
        fail "spec_${s}_equals_one_device" "$diff $(tail -3 "$tmp/launch.out")"
    fi
done

# --- the parameter server: one worker is one_device bit for bit (ssp:0, async over 2 ps with
# the tables split 3 ways, hybrid); two workers and two ps train to one_device's AUC ---
"$dtrain" "${base[@]}" --test-data "csv:$tmp/test.csv" --epochs 1 --metrics-out "$tmp/one.json" \
    > /dev/null 2>&1
one_sum=$(json_field "$tmp/one.json" param_checksum)
one_auc=$(json_field "$tmp/one.json" test_auc)
for spec in "ssp0|1|--ps-mode ssp:0" "2ps_mod3|2|--partition-strategy mod --partitioner fixed:3" \
    "hybrid|1|--ps-mode hybrid"; do
    IFS='|' read -r label nps extra <<< "$spec"
    # shellcheck disable=SC2086
    run timeout 120 "$dtrain" launch -n 1 --ps "$nps" -- "$dtrain" "${base[@]}" \
        --test-data "csv:$tmp/test.csv" --epochs 1 --strategy parameter_server $extra \
        --metrics-out "$tmp/ps.json"
    sum=$(json_field "$tmp/ps.json" param_checksum)
    if [ "$status" -eq 0 ] && [ -n "$sum" ] && [ "$sum" = "$one_sum" ]; then
        ok "spec_ps_one_worker_${label}_equals_one_device" "checksum=$sum"
    else
        fail "spec_ps_one_worker_${label}_equals_one_device" "exit $status, checksum $sum vs $one_sum: $(tail -3 "$tmp/err")"
    fi
done
run timeout 120 "$dtrain" launch -n 2 --ps 2 -- "$dtrain" "${base[@]}" --test-data "csv:$tmp/test.csv" \
    --epochs 1 --strategy parameter_server --metrics-out "$tmp/ps2.json"
auc=$(json_field "$tmp/ps2.json" test_auc)
if [ "$status" -eq 0 ] && [ -n "$auc" ] && awk -v a="$auc" -v b="$one_auc" 'BEGIN { exit !(a > b - 0.03) }'; then
    ok spec_ps_2_workers_2_ps "auc=$auc one_device=$one_auc"
else
    fail spec_ps_2_workers_2_ps "exit $status, auc $auc vs $one_auc: $(tail -3 "$tmp/err")"
fi

# --- a worker killed mid-run (at step 200): dtrain launch starts it again, it rejoins, and the
# job ends with every step, its AUC near an uninterrupted run's ---
"$dtrain" data gen-ctr --format census --rows 40000 --seed 3 --out "$tmp/big.csv" > /dev/null
long=(train --feature-spec "$tmp/spec.json" --data "csv:$tmp/big.csv" --test-data "csv:$tmp/test.csv"
      --batch-size 64 --shuffle-buffer 0 --progress estimator --threads 1 --epochs 3 --seed 5
      --strategy parameter_server --metrics-out)
timeout 180 "$dtrain" launch -n 2 --ps 1 --max-restarts 1 -- "$dtrain" "${long[@]}" "$tmp/kill.json" \
    > "$tmp/kill.out" 2> "$tmp/kill.err" &
launcher=$!
pids+=("$launcher")
victim=""
for _ in $(seq 1 100); do
    victim=$(task_pid_of "$launcher" worker:1)
    [ -n "$victim" ] && break
    sleep 0.1
done
for _ in $(seq 1 600); do grep -q "step = 200 " "$tmp/kill.out" && break; sleep 0.05; done
[ -n "$victim" ] && kill -9 "$victim"
wait "$launcher"
kstatus=$?
steps=$(json_field "$tmp/kill.json" steps)
kauc=$(json_field "$tmp/kill.json" test_auc)
if [ -n "$victim" ] && [ "$kstatus" -eq 0 ] && [ "${steps:-0}" -ge 1870 ] &&
    grep -q "task worker:1 (pid $victim) was killed by signal 9 (SIGKILL): starting it again" "$tmp/kill.err" &&
    awk -v a="$kauc" -v b="$one_auc" 'BEGIN { exit !(a > b - 0.03) }'; then
    ok spec_ps_killed_worker_restarts_and_the_job_ends "steps=$steps auc=$kauc"
else
    fail spec_ps_killed_worker_restarts_and_the_job_ends "victim '$victim', exit $kstatus, steps '$steps', auc '$kauc': $(tail -4 "$tmp/kill.err")"
fi

# --- checkpoints: a resumed run equals an uninterrupted one; evaluate reads the saved spec ---
"$dtrain" "${base[@]}" --test-data none --epochs 1 --model-dir "$tmp/res" > /dev/null 2>&1
"$dtrain" "${base[@]}" --test-data none --epochs 2 --model-dir "$tmp/res" \
    --metrics-out "$tmp/res.json" > /dev/null 2>&1
"$dtrain" "${base[@]}" --test-data none --epochs 2 --metrics-out "$tmp/two.json" > /dev/null 2>&1
a=$(json_field "$tmp/res.json" param_checksum) b=$(json_field "$tmp/two.json" param_checksum)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ -f "$tmp/res/feature_spec.json" ]; then
    ok spec_resume_equals_uninterrupted "checksum=$a"
else
    fail spec_resume_equals_uninterrupted "checksums $a and $b, files: $(ls "$tmp/res")"
fi
run "$dtrain" evaluate --model-dir "$tmp/res" --test-data "csv:$tmp/test.csv"
if [ "$status" -eq 0 ] && grep -q "auc = 0\.[6-9]" "$tmp/out"; then
    ok spec_evaluate_reads_the_saved_spec "$(tail -1 "$tmp/out" | cut -c1-120)"
else
    fail spec_evaluate_reads_the_saved_spec "exit $status: $(cat "$tmp/out" "$tmp/err" | tail -3)"
fi

# --- bad input: one line naming the file, line and column; or skipped and counted ---
cp "$tmp/test.csv" "$tmp/bad.csv"
sed -i '5s/^[0-9]*,/old,/' "$tmp/bad.csv"
expect_error spec_train_bad_number_names_file_line_column 1 "bad.csv: line 5: column 'age' (key 'age'): 'old' is not a number" \
    train "${flags[@]}" --data "csv:$tmp/bad.csv" --test-data none --epochs 1
run "$dtrain" train "${flags[@]}" --data "csv:$tmp/bad.csv" --test-data none --epochs 1 --skip-bad-records \
    --metrics-out "$tmp/skip.json"
if [ "$status" -eq 0 ] && grep -q "^Skipped 1 bad records" "$tmp/out"; then
    ok spec_train_skip_bad_records "$(grep Skipped "$tmp/out")"
else
    fail spec_train_skip_bad_records "exit $status: $(tail -2 "$tmp/out") $(tail -2 "$tmp/err")"
fi
sed 's/"dimension": 4}\]/"dimension": 0}]/' "$tmp/spec.json" > "$tmp/dim0.json"
expect_error spec_train_dimension_zero 1 "dim0.json: model.dnn_feature_columns[4]: dimension" \
    train --feature-spec "$tmp/dim0.json" --data "csv:$tmp/train.csv" --test-data none
expect_error spec_train_central_storage_refused 1 "central_storage does not train embedding tables" \
    "${base[@]}" --test-data none --strategy central_storage

echo "spec_train: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
[ "$failed" -eq 0 ]
