#!/usr/bin/env bash
# ONNX export (dtrain export --format onnx): tiny models of every kind are trained on generated
# or Fashion-MNIST data and exported; each file passes python3-onnx's full check, and ONNX
# Runtime (onnxruntime-node, fetched by scripts/onnxruntime.sh) scores 10,000 held-out rows
# within 1e-5 of dtrain's own scores. Tensors go to external data under a lowered threshold and
# score the same; a checkpoint of two ps tasks exports the same tensors as one_device's; bad
# exports stop with one line. usage: tests/onnx.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/dtrain-onnx-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
py=/usr/bin/python3
[ -x "$py" ] || py=python3
fmnist=/usr/share/datasets/fashion-mnist

. "$(dirname "$0")/lib.sh"

finish() {
    echo "onnx: $passed passed, $failed failed"
    echo "$passed $failed" > "$counts"
    [ "$failed" -eq 0 ]
    exit
}

# --- what the checks need: ONNX Runtime for Node, python3-onnx ---
if ort=$(bash "$root/scripts/onnxruntime.sh" "$build/onnxruntime" 2> "$tmp/ort.err"); then
    ok onnxruntime_node_is_available "$ort"
else
    fail onnxruntime_node_is_available "$(cat "$tmp/ort.err")"
    finish
fi
if "$py" -c 'import onnx' 2> /dev/null; then
    ok python3_onnx_is_available "$("$py" -c 'import onnx; print(onnx.__version__)')"
else
    fail python3_onnx_is_available "import onnx failed: install python3-onnx (scripts/deps.sh test)"
    finish
fi

# score NAME MODEL_DIR DATA TOL ORT_ARGS...: exports MODEL_DIR, checks the file, scores DATA with
# dtrain predict and the same rows (ORT_ARGS) with ONNX Runtime, and compares them.
score() {
    local name=$1 dir=$2 ref=$3 tol=$4
    shift 4
    local out="$tmp/export_$name"
    run "$dtrain" export --model-dir "$dir" --format onnx --out "$out/model.onnx"
    if [ "$status" -ne 0 ]; then
        fail "onnx_${name}_exports" "exit $status: $(cat "$tmp/err")"
        return
    fi
    local check
    if ! check=$("$py" "$root/tests/progs/onnx_check.py" "$out/model.onnx" 2>&1); then
        fail "onnx_${name}_passes_the_checker" "$check"
        return
    fi
    if ! "$dtrain" predict --model-dir "$dir" --data "$ref" > "$tmp/ref_$name.tsv" 2> "$tmp/ref.err"; then
        fail "onnx_${name}_scores_as_dtrain" "dtrain's scores: $(cat "$tmp/ref.err")"
        return
    fi
    local res
    if res=$(node "$root/tests/progs/ort_score.js" --ort "$ort" --model "$out/model.onnx" \
        --signature "$out/signature.json" --expect "$tmp/ref_$name.tsv" --tol "$tol" "$@" 2>&1); then
        ok "onnx_${name}_scores_as_dtrain" "$res $(echo "$check" | cut -d' ' -f2-3)"
    else
        fail "onnx_${name}_scores_as_dtrain" "$res"
    fi
}

# --- built-in CTR models: lr, fm, deepfm (with batch normalisation too) ---
"$dtrain" data gen-ctr --rows 3000 --seed 1 --out "$tmp/ctr_train.svm" > "$tmp/gen.out"
"$dtrain" data gen-ctr --rows 10000 --seed 2 --out "$tmp/ctr_test.svm" > /dev/null
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/gen.out")
ctr=(train --data "libsvm:$tmp/ctr_train.svm" --test-data none --feature-size "$fs"
     --embedding-size 4 --deep-layers 8,4 --max-steps 20 --batch-size 128 --threads 1
     --progress none --optimizer adam --lr 0.01)
for m in "lr|--model lr" "fm|--model fm" "deepfm|--model deepfm" \
    "deepfm_bn|--model deepfm --batch-norm --dropout-keep 0.8"; do
    IFS='|' read -r name flags <<< "$m"
    # shellcheck disable=SC2086
    "$dtrain" "${ctr[@]}" $flags --model-dir "$tmp/m_$name" > "$tmp/train.out" 2>&1 ||
        fail "onnx_${name}_trains" "$(tail -2 "$tmp/train.out")"
    score "$name" "$tmp/m_$name" "libsvm:$tmp/ctr_test.svm" 1e-5 --libsvm "$tmp/ctr_test.svm"
done

# --- dynamic tables (ids as keys, some not admitted): an ai.onnx.ml LabelEncoder from the live
#     keys to their rows, any other id to the zero row ---
for m in "lr_dynamic|--model lr" "deepfm_dynamic|--model deepfm"; do
    IFS='|' read -r name flags <<< "$m"
    # shellcheck disable=SC2086
    "$dtrain" train --data "libsvm:$tmp/ctr_train.svm" --test-data none "${ctr[@]:7}" $flags \
        --dynamic-tables --admit-min-count 2 --model-dir "$tmp/m_$name" > "$tmp/train.out" 2>&1 ||
        fail "onnx_${name}_trains" "$(tail -2 "$tmp/train.out")"
    score "$name" "$tmp/m_$name" "libsvm:$tmp/ctr_test.svm" 1e-5 --libsvm "$tmp/ctr_test.svm"
done

# --- sequential models: mlp, the tutorial CNN, and a model file with every layer kind ---
cat > "$tmp/cnn.json" << 'EOF'
{"name": "cnn_all", "input_shape": [28, 28, 1], "loss": "sparse_categorical_crossentropy",
 "layers": [
   {"type": "conv2d", "filters": 6, "kernel_size": 3, "strides": 2, "padding": "same",
    "activation": "tanh"},
   {"type": "max_pooling2d", "pool_size": 3, "strides": 2, "padding": "same"},
   {"type": "conv2d", "filters": 4, "kernel_size": [2, 3], "activation": "relu"},
   {"type": "max_pooling2d", "pool_size": 2},
   {"type": "flatten"},
   {"type": "dense", "units": 16, "activation": "sigmoid"},
   {"type": "batch_normalization"},
   {"type": "relu"},
   {"type": "dropout", "rate": 0.3},
   {"type": "dense", "units": 10}]}
EOF
for m in "mlp|--model mlp" "mnist_cnn|--model mnist_cnn" "cnn_all|--model-file $tmp/cnn.json"; do
    IFS='|' read -r name flags <<< "$m"
    # shellcheck disable=SC2086
    "$dtrain" train $flags --data fashion-mnist --test-data none --max-steps 20 --batch-size 64 \
        --threads 2 --progress none --model-dir "$tmp/m_$name" > "$tmp/train.out" 2>&1 ||
        fail "onnx_${name}_trains" "$(tail -2 "$tmp/train.out")"
    score "$name" "$tmp/m_$name" fashion-mnist 1e-5 --idx "$fmnist/t10k-images-idx3-ubyte.gz"
done

# --- feature-spec models on census-style rows, with a multivalent weighted column (tags:
# empty lists, zero weights and weights that sum to 0 included) ---
"$dtrain" data gen-ctr --format census --rows 3000 --seed 1 --out "$tmp/census_train0.csv" > /dev/null
"$dtrain" data gen-ctr --format census --rows 10000 --seed 2 --out "$tmp/census_test0.csv" > /dev/null
add_tags() {
    awk -F, -v OFS=, 'NR == 1 { print $0, "tags", "tag_w"; next }
        { k = NR % 4
          if (k == 0) { t = ""; w = "" }
          else if (k == 1) { t = $9; w = "1.5" }
          else if (k == 2) { t = $9 "|" $10; w = "0.5|2" }
          else { t = $7 "|" $9 "|" $10; w = "-1|0.5|0.5" }
          print $0, t, w }' "$1" > "$2"
}
add_tags "$tmp/census_train0.csv" "$tmp/census_train.csv"
add_tags "$tmp/census_test0.csv" "$tmp/census_test.csv"

cat > "$tmp/dnn_multiclass.json" << 'EOF'
{"label": {"key": "race",
           "vocabulary": ["White", "Black", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other"]},
 "columns": [
   {"name": "age", "type": "numeric", "normalizer": {"mean": 40, "std": 12}},
   {"name": "hours", "type": "numeric", "key": "hours_per_week", "normalizer": "standardize"},
   {"name": "gain", "type": "numeric", "key": "capital_gain", "default_value": 0,
    "normalizer": "log1p"},
   {"name": "education", "type": "vocabulary", "adapt": {}, "num_oov_buckets": 2},
   {"name": "occupation", "type": "hash_bucket", "hash_bucket_size": 50},
   {"name": "country", "type": "hash_bucket", "key": "native_country", "hash_bucket_size": 50},
   {"name": "edu_num", "type": "identity", "key": "education_num", "num_buckets": 17,
    "default_value": 0},
   {"name": "tags", "type": "vocabulary", "separator": "|", "adapt": {}, "num_oov_buckets": 1},
   {"name": "tag_weights", "type": "weighted", "categorical": "tags", "weight_key": "tag_w"}],
 "model": {"type": "dnn", "head": "multiclass:5",
   "dnn_feature_columns": ["age", "hours", "gain",
     {"embedding": "education", "dimension": 3, "combiner": "sum"},
     {"shared_embedding": ["occupation", "country"], "dimension": 4},
     {"indicator": "edu_num"},
     {"embedding": "tag_weights", "dimension": 3, "combiner": "mean"},
     {"embedding": "tags", "dimension": 2, "combiner": "sqrtn"}],
   "dnn_hidden_units": [16, 8], "dnn_dropout": 0.1}}
EOF
cat > "$tmp/linear_regression.json" << 'EOF'
{"label": "age",
 "columns": [
   {"name": "hours", "type": "numeric", "key": "hours_per_week", "normalizer": "standardize"},
   {"name": "hours_b", "type": "bucketized", "source": "hours", "boundaries": {"num_bins": 4}},
   {"name": "marital_status", "type": "vocabulary_list",
    "vocabulary": ["Married-civ-spouse", "Divorced", "Never-married"], "num_oov_buckets": 1},
   {"name": "relationship", "type": "vocabulary", "adapt": {}},
   {"name": "occupation", "type": "hash_bucket", "hash_bucket_size": 30},
   {"name": "occ_w", "type": "weighted", "categorical": "occupation", "weight_key": "education_num"},
   {"name": "rel_x_hours", "type": "crossed", "keys": ["relationship", {"column": "hours_b"}],
    "hash_bucket_size": 40}],
 "model": {"type": "linear", "head": "regression",
   "linear_feature_columns": ["hours", "hours_b", "marital_status", "relationship", "occ_w",
                              "rel_x_hours"],
   "optimizer": {"type": "ftrl", "learning_rate": 0.5}}}
EOF
cat > "$tmp/deepfm.json" << 'EOF'
{"label": {"key": "income_bracket", "vocabulary": ["<=50K", ">50K"]},
 "columns": [
   {"name": "age", "type": "numeric", "normalizer": "standardize"},
   {"name": "education", "type": "vocabulary", "adapt": {}, "num_oov_buckets": 1},
   {"name": "occupation", "type": "hash_bucket", "hash_bucket_size": 64},
   {"name": "country", "type": "hash_bucket", "key": "native_country", "hash_bucket_size": 64},
   {"name": "tags", "type": "vocabulary", "separator": "|", "adapt": {}, "num_oov_buckets": 1},
   {"name": "tag_weights", "type": "weighted", "categorical": "tags", "weight_key": "tag_w"}],
 "model": {"type": "deepfm",
   "dnn_feature_columns": ["age", {"embedding": "education", "dimension": 4},
     {"shared_embedding": ["occupation", "country"], "dimension": 4},
     {"embedding": "tag_weights", "dimension": 4, "combiner": "sqrtn"}],
   "dnn_hidden_units": [8], "optimizer": {"type": "adam", "learning_rate": 0.05}}}
EOF
cat > "$tmp/dcn_parallel.json" << 'EOF'
{"label": {"key": "income_bracket", "vocabulary": ["<=50K", ">50K"]},
 "columns": [
   {"name": "age", "type": "numeric", "normalizer": "standardize"},
   {"name": "hours", "type": "numeric", "key": "hours_per_week", "normalizer": "standardize"},
   {"name": "education", "type": "vocabulary", "adapt": {}, "num_oov_buckets": 1},
   {"name": "occupation", "type": "hash_bucket", "hash_bucket_size": 40},
   {"name": "workclass", "type": "vocabulary", "adapt": {}, "num_oov_buckets": 1}],
 "model": {"type": "dcn_v2",
   "dnn_feature_columns": ["age", "hours", {"embedding": "education", "dimension": 3},
     {"embedding": "occupation", "dimension": 3}, {"indicator": "workclass"}],
   "num_cross_layers": 2, "dnn_hidden_units": [8],
   "optimizer": {"type": "adam", "learning_rate": 0.01}}}
EOF
cat > "$tmp/dcn_stacked.json" << 'EOF'
{"label": {"key": "relationship",
           "vocabulary": ["Husband", "Not-in-family", "Wife", "Own-child", "Unmarried",
                          "Other-relative"]},
 "columns": [
   {"name": "age", "type": "numeric", "normalizer": "standardize"},
   {"name": "marital_status", "type": "vocabulary", "adapt": {}, "num_oov_buckets": 1},
   {"name": "gender", "type": "vocabulary_list", "vocabulary": ["Male", "Female"]},
   {"name": "tags", "type": "vocabulary", "separator": "|", "adapt": {}, "num_oov_buckets": 1}],
 "model": {"type": "dcn_v2", "head": "multiclass:6", "structure": "stacked",
   "projection_dim": 2, "num_cross_layers": 3,
   "dnn_feature_columns": ["age", {"embedding": "marital_status", "dimension": 3},
     {"indicator": "gender"}, {"embedding": "tags", "dimension": 3, "combiner": "mean"}],
   "dnn_hidden_units": [8, 8], "optimizer": {"type": "adam", "learning_rate": 0.01}}}
EOF
spec_flags=(--data "csv:$tmp/census_train.csv" --test-data none --max-steps 30 --batch-size 64
            --threads 1 --progress none --shuffle-buffer 0 --seed 3)
for m in "wide_deep|$root/examples/census_wide_deep.json" "dnn_multiclass|$tmp/dnn_multiclass.json" \
    "linear_regression|$tmp/linear_regression.json" "deepfm_spec|$tmp/deepfm.json" \
    "dcn_v2_parallel|$tmp/dcn_parallel.json" "dcn_v2_stacked|$tmp/dcn_stacked.json"; do
    IFS='|' read -r name spec <<< "$m"
    "$dtrain" train --feature-spec "$spec" "${spec_flags[@]}" --model-dir "$tmp/m_$name" \
        > "$tmp/train.out" 2>&1 || fail "onnx_${name}_trains" "$(tail -2 "$tmp/train.out")"
    "$dtrain" data transform --feature-spec "$tmp/m_$name/feature_spec.json" \
        --data "csv:$tmp/census_test.csv" -n 0 > "$tmp/rows_$name.jsonl" 2> "$tmp/tr.err" ||
        fail "onnx_${name}_rows_transform" "$(cat "$tmp/tr.err")"
    # A regression's values are tens of years: compared relative to their size.
    tol=1e-5
    [ "$name" = linear_regression ] && tol=rel:1e-6
    score "$name" "$tmp/m_$name" "csv:$tmp/census_test.csv" "$tol" \
        --transform "$tmp/rows_$name.jsonl" --csv "$tmp/census_test.csv"
done

# --- external data: every tensor over 4 KB in model.onnx.data, the same scores ---
run "$dtrain" export --model-dir "$tmp/m_deepfm" --format onnx --out "$tmp/ext/model.onnx" \
    --external-data-threshold 4096
ext=$("$py" "$root/tests/progs/onnx_check.py" "$tmp/ext/model.onnx" 2>&1)
n_ext=$(echo "$ext" | sed -n 's/.*external=\([0-9]*\).*/\1/p')
inline=$(stat -c %s "$tmp/ext/model.onnx" 2> /dev/null || echo 0)
if [ "$status" -eq 0 ] && [ "${n_ext:-0}" -ge 3 ] && [ -s "$tmp/ext/model.onnx.data" ] &&
    [ "$inline" -lt 100000 ] && grep -q '"external_data":.*"model.onnx.data"' "$tmp/ext/signature.json"; then
    ok onnx_external_data_is_written "$ext; model.onnx $inline bytes, data $(stat -c %s "$tmp/ext/model.onnx.data") bytes"
else
    fail onnx_external_data_is_written "exit $status, $ext, model.onnx $inline bytes: $(cat "$tmp/out" "$tmp/err")"
fi
if res=$(node "$root/tests/progs/ort_score.js" --ort "$ort" --model "$tmp/ext/model.onnx" \
    --signature "$tmp/ext/signature.json" --libsvm "$tmp/ctr_test.svm" \
    --expect "$tmp/ref_deepfm.tsv" --tol 1e-5 2>&1); then
    ok onnx_external_data_scores_as_dtrain "$res"
else
    fail onnx_external_data_scores_as_dtrain "$res"
fi
same=$("$py" "$root/tests/progs/onnx_check.py" --same "$tmp/ext/model.onnx" \
    "$tmp/export_deepfm/model.onnx" 2>&1)
if [ $? -eq 0 ]; then ok onnx_external_data_holds_the_same_tensors "$same"
else fail onnx_external_data_holds_the_same_tensors "$same"; fi
# Exported again without the threshold: the data file an earlier export left is gone.
run "$dtrain" export --model-dir "$tmp/m_deepfm" --format onnx --out "$tmp/ext/model.onnx"
if [ "$status" -eq 0 ] && [ ! -e "$tmp/ext/model.onnx.data" ] &&
    "$py" "$root/tests/progs/onnx_check.py" "$tmp/ext/model.onnx" > /dev/null 2>&1; then
    ok onnx_reexport_drops_stale_external_data
else
    fail onnx_reexport_drops_stale_external_data "exit $status, $(ls "$tmp/ext"): $(cat "$tmp/err")"
fi

# --- a parameter-server checkpoint (2 ps tasks, tables split 3 ways, one worker at ssp:0)
# exports the very tensors of one_device's with the same seed ---
ps_flags=(--feature-spec "$tmp/deepfm.json" "${spec_flags[@]}")
"$dtrain" train "${ps_flags[@]}" --model-dir "$tmp/ps_one" > "$tmp/one.out" 2>&1
run timeout 120 "$dtrain" launch -n 1 --ps 2 -- "$dtrain" train "${ps_flags[@]}" \
    --strategy parameter_server --ps-mode ssp:0 --partitioner fixed:3 --model-dir "$tmp/ps_two"
ps_status=$status
"$dtrain" export --model-dir "$tmp/ps_one" --format onnx --out "$tmp/ps_one_x/model.onnx" > /dev/null 2>&1
run "$dtrain" export --model-dir "$tmp/ps_two" --format onnx --out "$tmp/ps_two_x/model.onnx"
shards=$(ls "$tmp/ps_two" | grep -c '\.ps-[0-9]-of-2\.safetensors')
same=$("$py" "$root/tests/progs/onnx_check.py" --same "$tmp/ps_one_x/model.onnx" \
    "$tmp/ps_two_x/model.onnx" 2>&1)
same_status=$?
if [ "$ps_status" -eq 0 ] && [ "$status" -eq 0 ] && [ "$shards" -ge 2 ] && [ "$same_status" -eq 0 ]; then
    ok onnx_ps_checkpoint_exports_one_devices_tensors "$same from $shards shard files"
else
    fail onnx_ps_checkpoint_exports_one_devices_tensors "launch exit $ps_status, export exit $status, $shards shard files: $same $(tail -2 "$tmp/err")"
fi

# --- bad exports: one line each ---
expect_error onnx_wrong_format_lists_the_formats 2 "unknown format 'tflite' (formats: onnx, dtrain)" \
    export --model-dir "$tmp/m_lr" --format tflite --out "$tmp/x.onnx"
expect_error onnx_needs_a_model 2 "give --model-dir DIR or --checkpoint FILE" \
    export --format onnx --out "$tmp/x.onnx"
expect_error onnx_missing_checkpoint 1 "$tmp/none.safetensors" \
    export --checkpoint "$tmp/none.safetensors" --format onnx --out "$tmp/x.onnx"
mkdir -p "$tmp/empty"
expect_error onnx_model_dir_without_checkpoints 1 "$tmp/empty: no checkpoint to export" \
    export --model-dir "$tmp/empty" --format onnx --out "$tmp/x.onnx"
ck=$(ls "$tmp"/m_mlp/ckpt-*.safetensors | head -1)
head -c 2000 "$ck" > "$tmp/trunc.safetensors"
expect_error onnx_truncated_checkpoint 1 "$tmp/trunc.safetensors" \
    export --checkpoint "$tmp/trunc.safetensors" --format onnx --out "$tmp/x.onnx"
mkdir -p "$tmp/mismatch"
cp "$tmp"/m_dcn_v2_parallel/ckpt-*.safetensors "$tmp/mismatch/"
cp "$tmp/m_deepfm_spec/feature_spec.json" "$tmp/mismatch/"
expect_error onnx_feature_spec_not_the_checkpoints 1 "written for another model than feature_spec.json describes" \
    export --model-dir "$tmp/mismatch" --format onnx --out "$tmp/x.onnx"
if [ ! -e "$tmp/x.onnx" ] && [ -z "$(ls "$tmp" | grep 'x\.onnx')" ]; then
    ok onnx_failed_exports_leave_no_file
else
    fail onnx_failed_exports_leave_no_file "$(ls "$tmp" | grep 'x\.onnx')"
fi
expect_error onnx_unwritable_output 1 "$tmp/ctr_test.svm/m.onnx: cannot write: Not a directory" \
    export --model-dir "$tmp/m_lr" --format onnx --out "$tmp/ctr_test.svm/m.onnx"

finish
