#!/usr/bin/env bash
# Tests of the CTR models from the command line: generated data, LR < FM, DeepFM < the teacher
# in held-out AUC, the report's AUC and logloss, and one-line errors naming the file and line for
# bad CTR input. usage: tests/ctr.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
tmp=$(mktemp -d /tmp/dtrain-ctr-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

. "$(dirname "$0")/lib.sh"

# --- the generator: fixed teacher, rows by seed, the same bytes whatever the threads ---
run "$dtrain" data gen-ctr --rows 60000 --seed 11 --out "$tmp/train.svm" --threads 2
gen_out=$(cat "$tmp/out")
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/out")
teacher=$(sed -n 's/.*teacher_auc=\([0-9.]*\).*/\1/p' "$tmp/out")
"$dtrain" data gen-ctr --rows 60000 --seed 11 --out "$tmp/again.svm" --threads 1 > /dev/null
"$dtrain" data gen-ctr --rows 20000 --seed 12 --out "$tmp/test.svm" > "$tmp/out2"
fs2=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/out2")
fields=$(head -1 "$tmp/train.svm" | awk '{print NF - 1}')
if [ "$status" -eq 0 ] && [ -n "$fs" ] && [ "$fs" = "$fs2" ] && [ "$fields" = 39 ] && \
    cmp -s "$tmp/train.svm" "$tmp/again.svm" && ! cmp -s "$tmp/train.svm" "$tmp/test.svm"; then
    ok gen_ctr_is_reproducible_and_field_positional "$gen_out"
else
    fail gen_ctr_is_reproducible_and_field_positional "exit $status, fs $fs/$fs2, fields $fields: $gen_out $(cat "$tmp/err")"
fi
run "$dtrain" data gen-ctr --rows 300 --seed 3 --format criteo --out "$tmp/c.tsv"
cols=$(head -1 "$tmp/c.tsv" | awk -F'\t' '{print NF}')
if [ "$status" -eq 0 ] && [ "$cols" = 40 ] && [ "$(wc -l < "$tmp/c.tsv")" = 300 ] && \
    grep -qP '\t[0-9a-f]{8}(\t|$)' "$tmp/c.tsv"; then ok gen_ctr_writes_criteo_tsv; \
else fail gen_ctr_writes_criteo_tsv "exit $status, $cols columns: $(head -c 200 "$tmp/c.tsv")"; fi
run "$dtrain" data gen-ctr --rows 50 --seed 3 --format tfrecord --out "$tmp/g.tfrecord"
run2=$("$dtrain" data head "$tmp/g.tfrecord" --format tfrecord -n 1 2>&1)
if [ "$status" -eq 0 ] && echo "$run2" | grep -q '"ids"' && echo "$run2" | grep -q '"values"'; then
    ok gen_ctr_writes_tfrecord_examples; else fail gen_ctr_writes_tfrecord_examples "exit $status: $run2"; fi

# A write that fails (a full device, written in place) is one error naming the file, whichever
# round of blocks it falls in.
if [ -c /dev/full ]; then
    expect_error gen_ctr_write_failure_names_the_file 1 "/dev/full: write failed" \
        data gen-ctr --rows 100000 --seed 3 --out /dev/full
else
    fail gen_ctr_write_failure_names_the_file "/dev/full is missing"
fi

# --- LR < FM and LR < DeepFM < teacher, on held-out rows ---
declare -A auc
for m in lr fm deepfm; do
    run "$dtrain" train --model "$m" --data "libsvm:$tmp/train.svm" --test-data "libsvm:$tmp/test.svm" \
        --feature-size "$fs" --embedding-size 8 --deep-layers 32,16 --dropout-keep 1 \
        --optimizer adagrad --lr 0.05 --batch-size 256 --epochs 2 --threads 1 --progress none \
        --metrics-out "$tmp/$m.json"
    auc[$m]=$(json_field "$tmp/$m.json" test_auc)
    if [ "$status" -ne 0 ] || [ -z "${auc[$m]}" ]; then
        fail "ctr_${m}_trains" "exit $status: $(cat "$tmp/err")"
    else
        ok "ctr_${m}_trains" "test_auc=${auc[$m]} test_logloss=$(json_field "$tmp/$m.json" test_logloss)"
    fi
done
if awk -v l="${auc[lr]:-1}" -v f="${auc[fm]:-0}" -v d="${auc[deepfm]:-0}" -v t="$teacher" \
    'BEGIN { exit !(l < f && l < d && d < t && f < t) }'; then
    ok ctr_auc_order "lr ${auc[lr]} < fm ${auc[fm]}, deepfm ${auc[deepfm]} < teacher $teacher"
else
    fail ctr_auc_order "lr ${auc[lr]:-?} fm ${auc[fm]:-?} deepfm ${auc[deepfm]:-?} teacher $teacher"
fi
run "$dtrain" train --model deepfm --data "libsvm:$tmp/train.svm" --test-data "libsvm:$tmp/test.svm" \
    --feature-size "$fs" --embedding-size 4 --deep-layers 8 --max-steps 5 --threads 1 --progress none
if [ "$status" -eq 0 ] && grep -q "test AUC: 0\.[0-9]* - test logloss: 0\.[0-9]*" "$tmp/out"; then
    ok ctr_report_line_has_auc_and_logloss
else fail ctr_report_line_has_auc_and_logloss "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi

# --- bad input: one line naming the file and the line ---
good=$(sed -n 1p "$tmp/train.svm")
# The good line with its 14th field (the first categorical) as ID:VALUE.
field14() { echo "$good" | awk -v f="$1" '{ $15 = f; print }'; }
bad_case() { # NAME NEEDLE LINE [FLAGS...]
    local name=$1 needle=$2 line=$3
    shift 3
    { echo "$good"; echo "$good"; echo "$line"; echo "$good"; } > "$tmp/bad.svm"
    expect_error "$name" 1 "$needle" train --model lr --data "libsvm:$tmp/bad.svm" --test-data none \
        --feature-size "$fs" --batch-size 2 --threads 1 --progress none "$@"
}
bad_case ctr_wrong_field_count "bad.svm: line 3, column" "$(echo "$good" | cut -d' ' -f1-30)"
bad_case ctr_label_not_click "line 3, column 1: label 2 is not 0 or 1" "2${good#?}"
bad_case ctr_id_outside_table "line 3, column" "$(field14 "$fs:1")"
bad_case ctr_negative_id "line 3, column" "$(field14 "-13:1")"
bad_case ctr_nan_value "line 3, column" "$(field14 "13:nan")"
bad_case ctr_infinite_value "line 3, column" "$(field14 "13:1e999")"
bad_case ctr_empty_field_list "0 fields, the model takes 39" "1"
# The field count names the numbers; the id check names the table.
bad_case ctr_field_count_message "30 fields, the model takes 39 (--field-size)" "$(echo "$good" | cut -d' ' -f1-31)"
bad_case ctr_id_message "field 14: id $fs is outside the table's $fs rows" "$(field14 "$fs:1")"
# --skip-bad-records counts them and trains on the rest.
{ echo "$good"; echo "2${good#?}"; echo "$good"; echo "1 0:1"; echo "$good"; } > "$tmp/skip.svm"
run "$dtrain" train --model lr --data "libsvm:$tmp/skip.svm" --test-data none --feature-size "$fs" \
    --batch-size 1 --threads 1 --progress none --skip-bad-records
if [ "$status" -eq 0 ] && grep -q "Skipped 2 bad records" "$tmp/out" && grep -q "(3 examples)" "$tmp/out"; then
    ok ctr_skip_bad_records_counts_them
else fail ctr_skip_bad_records_counts_them "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi
# Hashing takes raw ids of any size into the buckets.
field14 "999999999999:1" > "$tmp/raw.svm"
run "$dtrain" train --model fm --data "libsvm:$tmp/raw.svm" --test-data none --hash-buckets 1000 \
    --embedding-size 4 --batch-size 1 --threads 1 --progress none
if [ "$status" -eq 0 ]; then ok ctr_hash_buckets_take_raw_ids; \
else fail ctr_hash_buckets_take_raw_ids "exit $status: $(cat "$tmp/err")"; fi
expect_error ctr_needs_feature_size 1 "--feature-size: model deepfm needs" \
    train --model deepfm --data "libsvm:$tmp/raw.svm" --test-data none
expect_error ctr_bad_deep_layers 2 "--deep-layers: expected up to 16" train --model deepfm --deep-layers 128,x
expect_error ctr_bad_dropout_keep 2 "--dropout-keep: keep probabilities in (0, 1]" train --model deepfm --dropout-keep 0
expect_error ctr_bad_table_optimizer 2 "--table-optimizer: unknown table optimizer 'rms'" train --table-optimizer rms

# --- checkpoints: tables and their slots saved, exact resume after kill -9, evaluate, numpy ---
py=/usr/bin/python3
[ -x "$py" ] || py=python3
head -12000 "$tmp/train.svm" > "$tmp/small.svm"
rc=(train --model deepfm --data "libsvm:$tmp/small.svm" --test-data none --hash-buckets 3000
    --embedding-size 8 --deep-layers 16 --optimizer adam --batch-size 128 --threads 1
    --progress none --epochs 40 --seed 3)
"$dtrain" "${rc[@]}" --metrics-out "$tmp/full.json" > /dev/null 2> "$tmp/err"
"$dtrain" "${rc[@]}" --backup-dir "$tmp/bk" --backup-freq 20 > /dev/null 2>&1 &
victim=$!
# Killed as soon as a backup exists (the backup directory keeps only the newest), long before
# the 3,720 steps are done.
for _ in $(seq 1 3000); do ls "$tmp"/bk/ckpt-*.safetensors > /dev/null 2>&1 && break; sleep 0.005; done
kill -9 "$victim" 2> /dev/null
wait "$victim" 2> /dev/null
run "$dtrain" "${rc[@]}" --backup-dir "$tmp/bk" --backup-freq 20 --metrics-out "$tmp/resumed.json"
full=$(json_field "$tmp/full.json" param_checksum)
resumed=$(json_field "$tmp/resumed.json" param_checksum)
if [ "$status" -eq 0 ] && grep -q "Restoring parameters from" "$tmp/out" && [ -n "$full" ] && \
    [ "$full" = "$resumed" ]; then
    ok ctr_resume_after_kill_is_exact "param_checksum $full (tables included)"
else
    fail ctr_resume_after_kill_is_exact "exit $status, checksums $full / $resumed: $(head -c 300 "$tmp/out") $(cat "$tmp/err")"
fi
head -3000 "$tmp/test.svm" > "$tmp/small_test.svm"
"$dtrain" "${rc[@]}" --model-dir "$tmp/md" --max-steps 30 > /dev/null 2>&1
run "$dtrain" evaluate --model-dir "$tmp/md" --test-data "libsvm:$tmp/small_test.svm" --field-size 39 \
    --hash-buckets 3000
if [ "$status" -eq 0 ] && grep -q "Saving dict for global step 30: .*, auc = 0\.[0-9]*, logloss = " "$tmp/out"; then
    ok ctr_evaluate_reports_auc "$(cat "$tmp/out")"
else fail ctr_evaluate_reports_auc "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi
ck=$(ls "$tmp"/md/ckpt-*.safetensors 2> /dev/null | head -1)
if [ -n "$ck" ] && "$py" "$(dirname "$0")/progs/read_safetensors.py" "$ck" > "$tmp/np" 2>&1 && \
    run "$dtrain" inspect "$ck" && [ "$status" -eq 0 ]; then
    np_crc=$(awk '$1 == "fm_v" { print $3 }' "$tmp/np")
    dt_crc=$(awk '$1 == "fm_v" { print $NF }' "$tmp/out")
    if [ -n "$np_crc" ] && [ "$np_crc" = "$dt_crc" ] && grep -q "^adam/m/fm_v \[3000,8\]" "$tmp/np" && \
        grep -q "^fm_w \[3000,1\]" "$tmp/np"; then
        ok ctr_checkpoint_tables_read_by_numpy "fm_v crc $np_crc"
    else
        fail ctr_checkpoint_tables_read_by_numpy "numpy $np_crc, dtrain $dt_crc: $(head -5 "$tmp/np")"
    fi
else
    fail ctr_checkpoint_tables_read_by_numpy "no checkpoint or unreadable: $(cat "$tmp/np" 2> /dev/null)"
fi
# The same model from a model file: the same training, bit for bit.
cat > "$tmp/deepfm.json" <<JSON
{"type": "deepfm", "field_size": 39, "feature_size": 3000, "embedding_size": 8,
 "deep_layers": [16], "dropout_rate": [0.5]}
JSON
run "$dtrain" train --model-file "$tmp/deepfm.json" --data "libsvm:$tmp/small.svm" --test-data none \
    --hash-buckets 3000 --optimizer adam --batch-size 128 --threads 1 --progress none --epochs 40 \
    --seed 3 --metrics-out "$tmp/file.json"
if [ "$status" -eq 0 ] && [ "$(json_field "$tmp/file.json" param_checksum)" = "$full" ]; then
    ok ctr_model_file_equals_builtin
else fail ctr_model_file_equals_builtin "exit $status, $(json_field "$tmp/file.json" param_checksum) vs $full: $(cat "$tmp/err")"; fi
echo '{"type": "deepfm", "feature_size": 10, "dropout_keep": [0.5], "dropout_rate": [0.5]}' > "$tmp/bad.json"
expect_error ctr_model_file_keep_and_rate 1 "dropout_rate: give dropout_keep" \
    train --model-file "$tmp/bad.json" --data "libsvm:$tmp/small.svm"

# --- synchronous strategies: mirrored and multi_worker_mirrored equal one_device at the same
# global batch, and send the tables' rows, never a table-sized gradient ---
sync=(train --model deepfm --data "libsvm:$tmp/small.svm" --test-data none --hash-buckets 200000
      --embedding-size 8 --deep-layers 16 --dropout-keep 1 --optimizer adam --lr 0.01
      --batch-size 256 --progress none --max-steps 20 --seed 3 --shuffle-buffer 0 --threads 1)
"$dtrain" "${sync[@]}" --model-dir "$tmp/s_one" > /dev/null 2>&1
"$dtrain" "${sync[@]}" --strategy mirrored --replicas 2 --model-dir "$tmp/s_mir" \
    --metrics-out "$tmp/s_mir.json" > /dev/null 2>&1
"$dtrain" launch -n 2 -- "$dtrain" "${sync[@]}" --model-dir "$tmp/s_mwm" \
    --metrics-out "$tmp/s_mwm.json" > "$tmp/launch.out" 2>&1
for s in mir mwm; do
    diff=$("$py" "$(dirname "$0")/progs/ckpt_diff.py" "$tmp/s_one/ckpt-20.safetensors" \
        "$tmp/s_$s/ckpt-20.safetensors" 2>&1)
    rel=$(echo "$diff" | sed -n 's/max_rel=\([^ ]*\) tensors=7/\1/p')
    if [ -n "$rel" ] && awk -v r="$rel" 'BEGIN { exit !(r <= 1e-5) }'; then
        ok "ctr_${s}_equals_one_device" "$diff after 20 steps"
    else
        fail "ctr_${s}_equals_one_device" "$diff $(tail -3 "$tmp/launch.out")"
    fi
    # Per step and replica, at most one id and row per place of its half batch (128 x 39), for
    # fm_w (1 float) and fm_v (8): a dense gradient would be 200000 x 9 floats.
    bytes=$(json_field "$tmp/s_$s.json" table_grad_bytes)
    bound=$(( 2 * 8 + 128 * 39 * (8 + 4) + 128 * 39 * (8 + 32) ))
    dense=$(( 200000 * 9 * 4 ))
    if [ -n "$bytes" ] && [ "$bytes" -gt 0 ] && [ $((bytes / 20)) -le "$bound" ]; then
        ok "ctr_${s}_sends_rows_not_tables" "$((bytes / 20)) bytes per step, bound $bound, a dense table gradient $dense"
    else
        fail "ctr_${s}_sends_rows_not_tables" "table_grad_bytes $bytes over 20 steps, bound $bound per step"
    fi
done
expect_error ctr_central_storage_refused 1 "central_storage does not train embedding tables" \
    "${sync[@]}" --strategy central_storage --replicas 2

# --- raw Criteo TSV with hashed categories ---
"$dtrain" data gen-ctr --rows 20000 --seed 21 --format criteo --out "$tmp/tr.tsv" > /dev/null
"$dtrain" data gen-ctr --rows 5000 --seed 22 --format criteo --out "$tmp/te.tsv" > /dev/null
run "$dtrain" train --model fm --data "criteo:$tmp/tr.tsv" --test-data "criteo:$tmp/te.tsv" \
    --hash-buckets 100000 --embedding-size 8 --optimizer adagrad --lr 0.05 --batch-size 256 \
    --threads 1 --progress none --metrics-out "$tmp/criteo.json"
cauc=$(json_field "$tmp/criteo.json" test_auc)
if [ "$status" -eq 0 ] && awk -v a="${cauc:-0}" 'BEGIN { exit !(a > 0.6) }'; then
    ok ctr_trains_on_criteo_tsv "test_auc=$cauc"
else fail ctr_trains_on_criteo_tsv "exit $status, auc $cauc: $(cat "$tmp/err")"; fi
printf '1\t5\t7\n' > "$tmp/short.tsv"
expect_error ctr_criteo_short_line 1 "short.tsv: line 1: column 6: 3 columns, Criteo rows have 40" \
    train --model lr --data "criteo:$tmp/short.tsv" --test-data none --hash-buckets 1000 --progress none
expect_error ctr_criteo_needs_buckets 1 "--hash-buckets: criteo data hashes its categories" \
    train --model lr --data "criteo:$tmp/tr.tsv" --test-data none --progress none

# --- TFRecord Examples of label, ids, values, as the DeepFM sample writes them ---
"$dtrain" data gen-ctr --rows 20000 --seed 21 --format tfrecord --out "$tmp/tr.tfrecord" > /dev/null
"$dtrain" data gen-ctr --rows 20000 --seed 21 --out "$tmp/tr21.svm" > /dev/null
run "$dtrain" train --model lr --data "tfrecord:$tmp/tr.tfrecord" --test-data "libsvm:$tmp/tr21.svm" \
    --feature-size "$fs" --optimizer adagrad --lr 0.05 --batch-size 256 --threads 1 --progress none \
    --metrics-out "$tmp/tfr.json"
run2=$(json_field "$tmp/tfr.json" test_auc)
if [ "$status" -eq 0 ] && awk -v a="${run2:-0}" 'BEGIN { exit !(a > 0.6) }'; then
    ok ctr_trains_on_tfrecord_examples "train AUC on the same rows as libsvm: $run2"
else fail ctr_trains_on_tfrecord_examples "exit $status: $(cat "$tmp/err")"; fi
expect_error ctr_tfrecord_wrong_ids_key 1 "feature 'feat_ids': no ids (missing or empty)" \
    train --model lr --data "tfrecord:$tmp/tr.tfrecord" --test-data none --feature-size "$fs" \
    --ids-key feat_ids --progress none

# --- AUC while training: the validation line, Estimator's evaluation lines, TensorBoard ---
run "$dtrain" train --model fm --data "libsvm:$tmp/small.svm" --test-data "libsvm:$tmp/small_test.svm" \
    --hash-buckets 3000 --embedding-size 4 --batch-size 256 --threads 1 --progress lines --validate \
    --eval-every-steps 20 --model-dir "$tmp/tb" --save-summary-steps 10
"$py" "$(dirname "$0")/progs/read_events.py" "$tmp"/tb/eval/events.* > "$tmp/events" 2>&1
if [ "$status" -eq 0 ] && grep -q " - val_auc: 0\.[0-9]*" "$tmp/out" && \
    grep -q "Saving dict for global step 20: .*, auc = 0\.[0-9]*, logloss = " "$tmp/out" && \
    grep -q "^scalar 20 auc 0\." "$tmp/events"; then
    ok ctr_auc_in_progress_evaluation_and_tensorboard
else
    fail ctr_auc_in_progress_evaluation_and_tensorboard "exit $status: $(grep -i auc "$tmp/out" | head -3) / $(head -5 "$tmp/events")"
fi

# --- one column per field: Criteo's TSV, TFRecord of feature columns and CSV are the same rows ---
"$dtrain" data gen-ctr --rows 8000 --seed 5 --format tfrecord-columns --out "$tmp/c5.tfrecord" > /dev/null
"$dtrain" data gen-ctr --rows 8000 --seed 5 --format csv --out "$tmp/c5.csv" > /dev/null
"$dtrain" data gen-ctr --rows 8000 --seed 5 --format criteo --out "$tmp/c5.tsv" > /dev/null
cols_i=I1,I2,I3,I4,I5,I6,I7,I8,I9,I10,I11,I12,I13
cols_c=C1,C2,C3,C4,C5,C6,C7,C8,C9,C10,C11,C12,C13,C14,C15,C16,C17,C18,C19,C20,C21,C22,C23,C24,C25,C26
same=(train --model fm --test-data none --hash-buckets 50000 --embedding-size 4 --batch-size 256
      --threads 1 --progress none)
"$dtrain" "${same[@]}" --data "criteo:$tmp/c5.tsv" --metrics-out "$tmp/s_tsv.json" > /dev/null 2>&1
"$dtrain" "${same[@]}" --data "tfrecord:$tmp/c5.tfrecord" --numeric-columns "$cols_i" \
    --categorical-columns "$cols_c" --log1p-numeric --metrics-out "$tmp/s_tfr.json" > /dev/null 2>&1
"$dtrain" "${same[@]}" --data "csv:$tmp/c5.csv" --numeric-columns "$cols_i" \
    --categorical-columns "$cols_c" --log1p-numeric --metrics-out "$tmp/s_csv.json" > /dev/null 2>&1
a=$(json_field "$tmp/s_tsv.json" param_checksum)
b=$(json_field "$tmp/s_tfr.json" param_checksum)
c=$(json_field "$tmp/s_csv.json" param_checksum)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ]; then
    ok ctr_criteo_tfrecord_columns_and_csv_train_alike "param_checksum $a"
else fail ctr_criteo_tfrecord_columns_and_csv_train_alike "tsv $a, tfrecord $b, csv $c"; fi
"$dtrain" convert --from criteo --hash-buckets 50000 "$tmp/c5.tsv" "$tmp/c5conv.tfrecord" > /dev/null
"$dtrain" train --model fm --test-data none --feature-size 50000 --embedding-size 4 --batch-size 256 \
    --threads 1 --progress none --data "tfrecord:$tmp/c5conv.tfrecord" --metrics-out "$tmp/s_conv.json" > /dev/null 2>&1
d=$(json_field "$tmp/s_conv.json" param_checksum)
if [ -n "$a" ] && [ "$a" = "$d" ]; then ok ctr_convert_criteo_to_tfrecord_trains_alike "param_checksum $d"
else fail ctr_convert_criteo_to_tfrecord_trains_alike "tsv $a, converted $d"; fi
expect_error ctr_csv_unknown_column 1 "--categorical-columns: the header has no column 'C27'" \
    "${same[@]}" --data "csv:$tmp/c5.csv" --numeric-columns "$cols_i" \
    --categorical-columns "${cols_c#C1,},C27"
{ head -3 "$tmp/c5.csv"; echo "1,x$(head -2 "$tmp/c5.csv" | tail -1 | cut -c3-)"; } > "$tmp/bad.csv"
expect_error ctr_csv_bad_number 1 "bad.csv: line 4: column 3 (I1): 'x" \
    "${same[@]}" --data "csv:$tmp/bad.csv" --numeric-columns "$cols_i" --categorical-columns "$cols_c"
expect_error ctr_columns_count_fields 1 "14 columns are 14 fields, the model takes 39" \
    "${same[@]}" --data "tfrecord:$tmp/c5.tfrecord" --numeric-columns "$cols_i" --categorical-columns C1

# --- batch normalisation: its moving averages in checkpoints, an exact resume of the test figures ---
bn=(train --model deepfm --batch-norm --data "libsvm:$tmp/small.svm" --test-data "libsvm:$tmp/small_test.svm"
    --hash-buckets 3000 --embedding-size 8 --deep-layers 16 --optimizer adam --batch-size 128
    --threads 1 --progress none --epochs 30 --seed 3)
"$dtrain" "${bn[@]}" --metrics-out "$tmp/bn_full.json" > /dev/null 2>&1
"$dtrain" "${bn[@]}" --backup-dir "$tmp/bnk" --backup-freq 20 > /dev/null 2>&1 &
victim=$!
for _ in $(seq 1 3000); do ls "$tmp"/bnk/ckpt-*.safetensors > /dev/null 2>&1 && break; sleep 0.005; done
kill -9 "$victim" 2> /dev/null
wait "$victim" 2> /dev/null
run "$dtrain" "${bn[@]}" --backup-dir "$tmp/bnk" --backup-freq 20 --metrics-out "$tmp/bn_res.json"
l1=$(json_field "$tmp/bn_full.json" test_loss); l2=$(json_field "$tmp/bn_res.json" test_loss)
if [ "$status" -eq 0 ] && grep -q "Restoring parameters" "$tmp/out" && [ -n "$l1" ] && [ "$l1" = "$l2" ]; then
    ok ctr_batch_norm_resume_is_exact "test_loss $l1 (moving averages restored)"
else fail ctr_batch_norm_resume_is_exact "test_loss $l1 vs $l2: $(head -c 300 "$tmp/out") $(cat "$tmp/err")"; fi

echo "ctr: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
