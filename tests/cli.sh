#!/usr/bin/env bash
# Tests of the dtrain command line: flags, exit codes, one-line errors for bad input, and short
# end-to-end training runs on Fashion-MNIST. usage: tests/cli.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
tmp=$(mktemp -d /tmp/dtrain-cli-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fm=/usr/share/datasets/fashion-mnist
passed=0
failed=0

. "$(dirname "$0")/lib.sh"

# --- help and flags ---
run "$dtrain" --help
if [ "$status" -eq 0 ] && grep -q "train" "$tmp/out"; then ok help_lists_commands; else fail help_lists_commands "status $status"; fi

run "$dtrain" train --help
missing=""
for flag in model model-file data test-data epochs steps-per-epoch max-steps batch-size shuffle-buffer \
    optimizer lr momentum nesterov beta1 beta2 epsilon lr-schedule threads seed strategy metrics-out loss-reduction; do
    grep -q -- "--$flag" "$tmp/out" || missing="$missing --$flag"
done
if [ "$status" -eq 0 ] && [ -z "$missing" ] && grep -q -- "--batch-size N.*(default: 64)" "$tmp/out" \
    && grep -q -- "--epochs N.*(default: 1)" "$tmp/out"; then
    ok train_help_lists_every_flag_with_its_default
else
    fail train_help_lists_every_flag_with_its_default "status $status, missing:$missing"
fi

expect_error unknown_command 2 "unknown command 'trian'" trian

# Every command and subcommand: --help prints its usage and exits 0; a flag it does not know is a
# usage error (exit 2, one line).
for cmd in train data "data head" convert evaluate inspect export launch bench "bench allreduce"; do
    # shellcheck disable=SC2086
    run "$dtrain" $cmd --help
    name=$(printf '%s' "$cmd" | tr ' ' _)
    if [ "$status" -eq 0 ] && grep -qi "usage" "$tmp/out" && [ ! -s "$tmp/err" ]; then
        ok "help_of_$name"
    else
        fail "help_of_$name" "exit $status; $(head -c 200 "$tmp/err")"
    fi
    # shellcheck disable=SC2086
    run "$dtrain" $cmd --no-such-flag x y
    if [ "$status" -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "dtrain: error:" "$tmp/err"; then
        ok "usage_error_of_$name"
    else
        fail "usage_error_of_$name" "exit $status; $(head -c 200 "$tmp/err")"
    fi
done
expect_error bench_with_one_rank 2 "nothing to reduce" bench allreduce --sizes 4K

# DTRAIN_LOG sets the library's log level: Estimator's "Saving checkpoints" line is information.
for level in info warn bogus; do
    rm -rf "$tmp/logdir"
    DTRAIN_LOG=$level run "$dtrain" train --max-steps 3 --test-data none --progress none \
        --model-dir "$tmp/logdir"
    saved=$(grep -c "Saving checkpoints for 3" "$tmp/out")
    case "$level" in
        info) want_saved=1 want_err=0 ;;
        warn) want_saved=0 want_err=0 ;;
        bogus) want_saved=1 want_err=1 ;;
    esac
    complained=$(grep -c "DTRAIN_LOG: 'bogus' is not debug, info, warn or off" "$tmp/err")
    if [ "$status" -eq 0 ] && [ "$saved" -eq "$want_saved" ] && [ "$complained" -eq "$want_err" ]; then
        ok "dtrain_log_$level"
    else
        fail "dtrain_log_$level" "exit $status, saved lines $saved, complaints $complained: $(head -c 300 "$tmp/err")"
    fi
done

# --- A TF_CONFIG that is not valid is the same named error whatever the flags ---
bad_configs=(
    'not json|TF_CONFIG: not valid JSON'
    '{"cluster":{"worker":["127.0.0.1:1"]},"task":{"type":"worker","index":3}}|task.index: 3 is out of range'
    '{"cluster":{"worker":["127.0.0.1:1"]},"task":{"type":"boss","index":0}}|task.type: unknown job'
    '{"cluster":{"worker":["nohostport"]},"task":{"type":"worker","index":0}}|cluster.worker[0]'
)
for entry in "${bad_configs[@]}"; do
    cfg=${entry%%|*} needle=${entry#*|}
    field=$(printf '%s' "${needle%%:*}" | tr -c 'a-zA-Z0-9\n' _)
    for strategy in "" multi_worker_mirrored one_device; do
        TF_CONFIG=$cfg expect_error "bad_tf_config_${field}_strategy_${strategy:-unset}" 1 \
            "$needle" train --max-steps 1 --test-data none ${strategy:+--strategy "$strategy"}
    done
done
# A cluster with ps tasks trains with parameter_server, which needs a chief: every task of one
# without says so at once (tests/ps.sh trains real ones).
ps_cluster='{"cluster":{"worker":["127.0.0.1:1","127.0.0.1:2"],"ps":["127.0.0.1:3"]},'
TF_CONFIG="$ps_cluster"'"task":{"type":"ps","index":0}}' expect_error ps_task_needs_chief 1 \
    "parameter-server training needs one chief" train --max-steps 1
TF_CONFIG="$ps_cluster"'"task":{"type":"worker","index":1}}' expect_error ps_worker_needs_chief 1 \
    "parameter-server training needs one chief" train --max-steps 1
expect_error unknown_flag 2 "unknown flag '--epoch'" train --epoch 3
expect_error flag_without_value 2 "--epochs: missing value" train --epochs
expect_error non_numeric_epochs 2 "--epochs: expected an integer, got 'five'" train --epochs five
expect_error zero_epochs 2 "--epochs: must be at least 1" train --epochs 0
expect_error negative_batch 2 "--batch-size: must be in" train --batch-size -4
expect_error zero_threads 2 "--threads: must be in 1..1024" train --threads 0
expect_error bad_lr 2 "--lr: expected a number, got '1e'" train --lr 1e
expect_error negative_lr 2 "--lr: must be positive" train --lr -0.1
expect_error unknown_optimizer 2 "--optimizer: unknown optimizer 'rmsprop'" train --optimizer rmsprop
expect_error bad_schedule 2 "--lr-schedule: unknown learning-rate schedule" train --lr-schedule linear
expect_error schedule_without_steps 2 "--lr-decay-steps: the cosine schedule needs a positive value" \
    train --lr-schedule cosine
expect_error bad_shuffle_buffer 2 "--shuffle-buffer: expected a count" train --shuffle-buffer lots
expect_error bad_loss_reduction 2 "--loss-reduction: expected mean or sum_over_global_batch" train --loss-reduction sum
expect_error flag_given_twice 2 "--seed: given twice" train --seed 1 --seed 2
expect_error positional_argument 2 "unexpected argument 'extra'" train extra
expect_error tfrecord_needs_features 1 "--features: tfrecord data needs the features" train --data "tfrecord:$0"
expect_error bad_prefetch 2 "--prefetch: must be in 0..4096" train --prefetch -1
expect_error bad_gradient_wire 2 "--gradient-wire" train --gradient-wire fp8
expect_error bad_index_base 2 "--index-base: must be 0 or 1, got 2" train --index-base 2
expect_error evaluate_bad_index_base 2 "--index-base: must be 0 or 1, got 2" evaluate --model-dir x --index-base 2
expect_error evaluate_bad_num_features 2 "--num-features: must be in 0..16777216, got -1" \
    evaluate --model-dir x --num-features -1
expect_error evaluate_bad_compression 2 "--compression: compression 'lz4'" evaluate --model-dir x --compression lz4
expect_error bad_auto_shard 2 "--auto-shard: unknown auto-shard policy 'rows' (off, auto, file, data)" \
    train --auto-shard rows
expect_error test_data_of_another_form 1 "--test-data: 'fashion-mnist': with libsvm --data, give" \
    train --data "libsvm:$0" --test-data fashion-mnist --num-features 2
expect_error replicas_need_mirrored 2 "--replicas: 1..256 model copies, with --strategy mirrored or central_storage" \
    train --replicas 2
expect_error replicas_divide_the_batch 1 "the global batch 64 is not divisible by the 3 replicas" \
    train --strategy mirrored --replicas 3 --max-steps 1
expect_error parameter_server_needs_ps 1 "--strategy parameter_server: TF_CONFIG's cluster names no ps task" \
    train --strategy parameter_server
expect_error unknown_strategy 2 "--strategy: unknown strategy 'horovod'" train --strategy horovod
expect_error model_and_model_file 2 "give one, not both" train --model mlp --model-file x.json

# --- bad data and model files: one line naming the file, exit 1 ---
expect_error unknown_data 1 "--data: unknown data 'cifar10'" train --data cifar10
expect_error empty_glob 1 "$tmp/none-*.tfrecord: the pattern matches no file" train --data "tfrecord:$tmp/none-*.tfrecord" --features x:1
expect_error missing_idx 1 "$tmp/none.idx: No such file or directory" train --data "idx:$tmp/none.idx,$tmp/none2.idx"
expect_error missing_dataset_dir 1 "$tmp/nodir: No such file or directory" train --data "fashion-mnist:$tmp/nodir"
printf 'not an idx file at all' > "$tmp/junk.idx"
expect_error bad_magic 1 "$tmp/junk.idx: offset 0: bad magic" train --data "idx:$tmp/junk.idx,$tmp/junk.idx"
expect_error unknown_model 1 "--model: unknown model 'vgg'" train --model vgg

if [ -d "$fm" ]; then
    # A truncated copy of the real images file.
    zcat "$fm/t10k-images-idx3-ubyte.gz" | head -c 100000 > "$tmp/short-images.idx"
    expect_error truncated_images 1 "short-images.idx: offset 100000: truncated" \
        train --data "idx:$tmp/short-images.idx,$fm/t10k-labels-idx1-ubyte.gz"
    expect_error count_mismatch 1 "has 10000 images but $fm/train-labels-idx1-ubyte.gz has 60000 labels" \
        train --data "idx:$fm/t10k-images-idx3-ubyte.gz,$fm/train-labels-idx1-ubyte.gz"
    printf '{"layers": [{"type": "dense", "units": 10,\n "activation": "swish"}]}' > "$tmp/bad-act.json"
    expect_error model_file_bad_field 1 "$tmp/bad-act.json: layers[0].activation" train --model-file "$tmp/bad-act.json"
    printf '{"layers": [\n  {"type": "flatten"},\n  {"type": "dense" "units": 10}]}' > "$tmp/bad-syntax.json"
    expect_error model_file_syntax_error 1 "$tmp/bad-syntax.json: line 3, column" train --model-file "$tmp/bad-syntax.json"
    printf '{"input_shape": [32, 32, 3], "layers": [{"type": "flatten"}, {"type": "dense", "units": 10}]}' > "$tmp/shape.json"
    expect_error model_file_wrong_input_shape 1 "input_shape is [32, 32, 3] but" train --model-file "$tmp/shape.json"
    printf '{"layers": [{"type": "flatten"}, {"type": "dense", "units": 4}]}' > "$tmp/four.json"
    expect_error labels_beyond_outputs 1 "label 9, but the model has 4 outputs" train --model-file "$tmp/four.json"
    expect_error unwritable_metrics 1 "--metrics-out: $tmp/no/dir/m.json.tmp" \
        train --max-steps 2 --progress none --test-data none --metrics-out "$tmp/no/dir/m.json"

    # The matrix-multiply kernel: DTRAIN_GEMM picks it (a bad name is a usage error), the default
    # is dtrain's own where the CPU has AVX-512F, and --metrics-out names the one that ran.
    DTRAIN_GEMM=sse expect_error bad_gemm_kernel 2 "DTRAIN_GEMM: matrix-multiply kernel 'sse'" train
    want_kernel=blas
    grep -qw avx512f /proc/cpuinfo && want_kernel=avx512
    for g in "" blas; do
        DTRAIN_GEMM=$g run "$dtrain" train --max-steps 2 --progress none --test-data none \
            --metrics-out "$tmp/g.json"
        got=$(json_field "$tmp/g.json" gemm_kernel)
        if [ "$status" -eq 0 ] && [ "$got" = "${g:-$want_kernel}" ]; then ok "gemm_kernel_${g:-default}"
        else fail "gemm_kernel_${g:-default}" "exit $status, kernel '$got', expected '${g:-$want_kernel}'"; fi
    done

    # --- file data: convert, data head, training from TFRecord and LibSVM, streams ---
    printf '{"layers": [{"type": "dense", "units": 4, "activation": "relu"}, {"type": "dense", "units": 2}]}' > "$tmp/svm-model.json"
    run "$dtrain" convert --from idx "$fm/t10k-images-idx3-ubyte.gz,$fm/t10k-labels-idx1-ubyte.gz" "$tmp/t10k.tfrecord"
    if [ "$status" -eq 0 ] && grep -q "Wrote 10000 records" "$tmp/out"; then ok convert_idx_to_tfrecord; \
    else fail convert_idx_to_tfrecord "exit $status: $(cat "$tmp/err")"; fi
    run "$dtrain" data head "$tmp/t10k.tfrecord" --format tfrecord -n 2
    if [ "$status" -eq 0 ] && [ "$(wc -l < "$tmp/out")" -eq 2 ] && grep -q '"label": \[9\]' "$tmp/out"; then
        ok data_head_tfrecord
    else
        fail data_head_tfrecord "exit $status: $(head -c 200 "$tmp/out") $(cat "$tmp/err")"
    fi
    run "$dtrain" data head "$fm/t10k-labels-idx1-ubyte.gz" --format idx -n 3
    if [ "$status" -eq 0 ] && [ "$(sed -n 3p "$tmp/out")" = '{"index": 2, "shape": [], "values": [1]}' ]; then
        ok data_head_idx; else fail data_head_idx "$(cat "$tmp/out" "$tmp/err")"; fi
    # The same examples from TFRecord and from IDX train to the same parameters, bit for bit.
    "$dtrain" train --data "idx:$fm/t10k-images-idx3-ubyte.gz,$fm/t10k-labels-idx1-ubyte.gz" --max-steps 60 \
        --batch-size 32 --threads 1 --seed 5 --progress none --test-data none --metrics-out "$tmp/i.json" > /dev/null 2>&1
    run "$dtrain" train --data "tfrecord:$tmp/t10k.tfrecord" --features image:784:1/255 --input-shape 28,28,1 \
        --max-steps 60 --batch-size 32 --threads 1 --seed 5 --progress none --metrics-out "$tmp/t.json"
    a=$(json_field "$tmp/i.json" param_checksum)
    b=$(json_field "$tmp/t.json" param_checksum)
    if [ "$status" -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ]; then ok tfrecord_trains_like_idx; \
    else fail tfrecord_trains_like_idx "exit $status, checksums idx=$a tfrecord=$b: $(cat "$tmp/err")"; fi
    # A corrupt record names the file and its offset; --skip-bad-records counts it instead.
    cp "$tmp/t10k.tfrecord" "$tmp/bad.tfrecord"
    printf '\xff' | dd of="$tmp/bad.tfrecord" bs=1 seek=$((838 * 5 + 100)) conv=notrunc 2> /dev/null
    expect_error corrupt_tfrecord_record 1 "bad.tfrecord: offset 4190: corrupt record: data CRC mismatch" \
        train --data "tfrecord:$tmp/bad.tfrecord" --features image:784:1/255 --input-shape 28,28,1 --epochs 1 \
        --shuffle-buffer 0 --progress none
    run "$dtrain" train --data "tfrecord:$tmp/bad.tfrecord" --features image:784:1/255 --input-shape 28,28,1 \
        --epochs 1 --skip-bad-records --progress none
    if [ "$status" -eq 0 ] && grep -q "Skipped 1 bad records" "$tmp/out"; then ok skip_bad_records; \
    else fail skip_bad_records "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi
    # convert never destroys an existing output when its input is bad.
    echo keep > "$tmp/existing.tfrecord"
    expect_error convert_bad_input_keeps_output 1 "nope.svm: No such file" \
        convert --from libsvm "$tmp/nope.svm" "$tmp/existing.tfrecord"
    if [ "$(cat "$tmp/existing.tfrecord")" = keep ] && ! ls "$tmp"/existing.tfrecord.tmp.* > /dev/null 2>&1; then
        ok convert_output_untouched; else fail convert_output_untouched "the output changed or a temp file stayed"; fi
    run "$dtrain" data head --format=tfrecord "$tmp/t10k.tfrecord" --n=1
    if [ "$status" -eq 0 ] && [ "$(wc -l < "$tmp/out")" -eq 1 ]; then ok data_head_flags_before_file; \
    else fail data_head_flags_before_file "exit $status: $(cat "$tmp/err")"; fi
    # CSV: the width comes from the file's first line; from a stream, from --num-features.
    printf 'x1,x2,x3,y\n0.5,1,0,1\n-0.5,0,1,0\n0.25,1,1,1\n-1,0,0,0\n' > "$tmp/d.csv"
    run "$dtrain" train --data "csv:$tmp/d.csv" --csv-header --label-column y --model-file "$tmp/svm-model.json" \
        --batch-size 2 --epochs 2 --progress none
    if [ "$status" -eq 0 ] && grep -q "Trained 4 steps (8 examples)" "$tmp/out"; then ok csv_training; \
    else fail csv_training "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi
    run bash -c "cat '$tmp/d.csv' | '$dtrain' train --data csv:- --csv-header --label-column y --num-features 3 --model-file '$tmp/svm-model.json' --batch-size 2 --progress none"
    if [ "$status" -eq 0 ] && grep -q "Trained 2 steps" "$tmp/out"; then ok csv_from_stdin; \
    else fail csv_from_stdin "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi
    # Two replicas over two LibSVM files with a bad line each: both are skipped and counted,
    # whether each replica reads one whole file (file) or every other line of both (data).
    for part in 0 1; do
        { for i in 1 2 3 4 5 6 7 8; do echo "$((i % 2)) 1:$i 2:0.5"; done; echo "not a line"
          for i in 1 2 3 4 5 6 7 8; do echo "$((i % 2)) 1:$i 2:0.1"; done; } > "$tmp/bad-$part.svm"
    done
    for shard in file data; do
        run "$dtrain" train --data "libsvm:$tmp/bad-*.svm" --num-features 2 --model mlp --strategy mirrored \
            --replicas 2 --batch-size 4 --skip-bad-records --auto-shard $shard --test-data none --progress none
        if [ "$status" -eq 0 ] && grep -q "Trained 8 steps (32 examples)" "$tmp/out" \
            && grep -q "Skipped 2 bad records" "$tmp/out"; then ok "bad_records_of_replicas_by_$shard"; \
        else fail "bad_records_of_replicas_by_$shard" "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi
    done

    # LibSVM from stdin, streamed once: one epoch works, a second needs --cache.
    printf '1 1:0.5 2:1\n0 1:-0.5 3:1\n1 2:0.25 3:-1\n0 1:-1 2:0.5\n' > "$tmp/small.svm"
    for i in 1 2 3 4 5 6; do cat "$tmp/small.svm"; done > "$tmp/train.svm"
    run bash -c "cat '$tmp/train.svm' | '$dtrain' train --data libsvm:- --num-features 3 --model-file '$tmp/svm-model.json' --batch-size 4 --progress none"
    if [ "$status" -eq 0 ] && grep -q "Trained 6 steps (24 examples)" "$tmp/out"; then ok libsvm_from_stdin; \
    else fail libsvm_from_stdin "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi
    run bash -c "cat '$tmp/train.svm' | '$dtrain' train --data libsvm:- --num-features 3 --model-file '$tmp/svm-model.json' --batch-size 4 --epochs 2 --progress none"
    if [ "$status" -eq 1 ] && grep -q "stdin: a stream is read once" "$tmp/err"; then ok stream_second_epoch_needs_cache; \
    else fail stream_second_epoch_needs_cache "exit $status: $(cat "$tmp/err")"; fi
    run bash -c "cat '$tmp/train.svm' | '$dtrain' train --data libsvm:- --num-features 3 --model-file '$tmp/svm-model.json' --batch-size 4 --epochs 2 --cache memory --progress none"
    if [ "$status" -eq 0 ] && grep -q "Trained 12 steps" "$tmp/out"; then ok stream_with_cache; \
    else fail stream_with_cache "exit $status: $(cat "$tmp/err")"; fi
    printf '1 1:0.5 2:oops\n' > "$tmp/bad.svm"
    expect_error libsvm_bad_line 1 "bad.svm: line 1, column" \
        train --data "libsvm:$tmp/bad.svm" --num-features 3 --model-file "$tmp/svm-model.json" --batch-size 1

    # --- end to end: loss falls and accuracy rises over three short epochs ---
    run "$dtrain" train --model mnist_cnn --epochs 3 --steps-per-epoch 100 --batch-size 32 \
        --optimizer adam --lr 0.001 --threads 1 --seed 3 --progress lines --metrics-out "$tmp/e2e.json"
    losses=$(sed -n 's/^100\/100 - .* loss: \([0-9.]*\) - accuracy: \([0-9.]*\).*/\1/p' "$tmp/out" | tr '\n' ' ')
    accs=$(sed -n 's/^100\/100 - .* loss: \([0-9.]*\) - accuracy: \([0-9.]*\).*/\2/p' "$tmp/out" | tr '\n' ' ')
    if [ "$status" -ne 0 ]; then
        fail e2e_loss_falls_and_accuracy_rises "exit $status: $(cat "$tmp/err")"
    elif awk -v l="$losses" -v a="$accs" 'BEGIN { n = split(l, L, " "); split(a, A, " ");
            exit !(n == 3 && L[1] > L[2] && L[2] > L[3] && A[1] < A[3] && L[3] < 0.8 * L[1]) }'; then
        ok e2e_loss_falls_and_accuracy_rises
    else
        fail e2e_loss_falls_and_accuracy_rises "epoch losses: $losses accuracies: $accs"
    fi
    acc=$(json_field "$tmp/e2e.json" test_accuracy)
    keys_missing=""
    for k in samples_per_sec epochs steps train_seconds final_loss test_accuracy peak_rss_mb param_checksum; do
        grep -q "\"$k\":" "$tmp/e2e.json" || keys_missing="$keys_missing $k"
    done
    if [ -z "$keys_missing" ] && [ "$(json_field "$tmp/e2e.json" steps)" = 300 ] && \
        awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }'; then
        ok metrics_out_holds_the_run
    else
        fail metrics_out_holds_the_run "missing:$keys_missing steps=$(json_field "$tmp/e2e.json" steps) acc=$acc"
    fi
    if grep -q "^Epoch 1/3$" "$tmp/out" && grep -q "^Test loss: .* - test accuracy: " "$tmp/out" && \
        ! grep -q $'\r' "$tmp/out"; then
        ok plain_lines_when_not_a_terminal
    else
        fail plain_lines_when_not_a_terminal "$(head -5 "$tmp/out")"
    fi

    # --- Estimator's log lines ---
    "$dtrain" train --max-steps 250 --progress estimator --log-step-count-steps 100 \
        --test-data none > "$tmp/est" 2>&1
    if grep -Eq '^loss = [0-9.]+, step = 0$' "$tmp/est" &&
        grep -Eq '^loss = [0-9.]+, step = 100 \([0-9.]+ sec\)$' "$tmp/est" &&
        grep -Eq '^loss = [0-9.]+, step = 200 \([0-9.]+ sec\)$' "$tmp/est" &&
        [ "$(grep -c '^global_step/sec: [0-9.]*$' "$tmp/est")" = 2 ] && ! grep -q '^Epoch' "$tmp/est"; then
        ok estimator_log_lines
    else
        fail estimator_log_lines "$(head -8 "$tmp/est")"
    fi

    # --- train_and_evaluate: --max-steps past an epoch, evaluation every N steps and at the end ---
    "$dtrain" train --model mlp --max-steps 1000 --progress estimator --eval-every-steps 400 \
        --eval-steps 5 --metrics-out "$tmp/tae.json" > "$tmp/tae" 2>&1
    if [ "$(grep -c '^Saving dict for global step' "$tmp/tae")" = 3 ] &&
        grep -Eq '^Saving dict for global step 400: global_step = 400, loss = [0-9.]+, accuracy = 0\.[0-9]+$' "$tmp/tae" &&
        grep -q '^Saving dict for global step 800: ' "$tmp/tae" &&
        grep -q '^Saving dict for global step 1000: ' "$tmp/tae" &&
        [ "$(json_field "$tmp/tae.json" steps)" = 1000 ] && [ "$(json_field "$tmp/tae.json" epochs)" = 2 ] &&
        grep -q '^Test loss: ' "$tmp/tae"; then
        ok train_and_evaluate_every_n_steps
    else
        fail train_and_evaluate_every_n_steps "$(grep -v '^loss\|^global' "$tmp/tae" | head -8)"
    fi
    expect_error eval_needs_test_data 1 "no test data to evaluate" train --model mlp --max-steps 2 --test-data none \
        --eval-every-steps 1
    expect_error eval_throttle_checked 2 "--eval-throttle-secs" train --model mlp --max-steps 2 \
        --eval-throttle-secs -1

    # --- mirrored and central_storage: 2 and 4 replicas on threads train as one device does ---
    "$dtrain" train --max-steps 60 --batch-size 64 --optimizer adam --threads 2 --progress none \
        --test-data none --metrics-out "$tmp/m1.json" > /dev/null 2>&1
    for strategy in mirrored central_storage; do
        for r in 2 4; do
            "$dtrain" train --strategy $strategy --replicas $r --max-steps 60 --batch-size 64 \
                --optimizer adam --threads 2 --progress none --test-data none \
                --metrics-out "$tmp/m$r.json" > "$tmp/mout" 2>&1
            a=$(json_field "$tmp/m1.json" final_loss)
            b=$(json_field "$tmp/m$r.json" final_loss)
            if [ -n "$a" ] && [ -n "$b" ] && grep -q "^$strategy: $r replicas (local)" "$tmp/mout" &&
                [ "$(json_field "$tmp/m$r.json" workers)" = $r ] &&
                awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * a) }'; then
                ok "${strategy}_${r}_replicas_equal_one_device"
            else
                fail "${strategy}_${r}_replicas_equal_one_device" "final loss $b vs $a: $(tail -2 "$tmp/mout")"
            fi
        done
    done

    # --- determinism: same flags and seed give the same parameters, per thread count ---
    for threads in 1 2; do
        sums=""
        for rep in 1 2; do
            "$dtrain" train --max-steps 40 --batch-size 64 --optimizer momentum --threads $threads --seed 9 \
                --progress none --test-data none --metrics-out "$tmp/d$rep.json" > /dev/null 2>&1
            sums="$sums $(json_field "$tmp/d$rep.json" param_checksum)"
        done
        set -- $sums
        if [ $# -eq 2 ] && [ "$1" = "$2" ]; then ok "bit_identical_runs_on_${threads}_threads"; \
        else fail "bit_identical_runs_on_${threads}_threads" "checksums:$sums"; fi
    done
    "$dtrain" train --max-steps 40 --batch-size 64 --optimizer momentum --threads 1 --seed 10 \
        --progress none --test-data none --metrics-out "$tmp/d3.json" > /dev/null 2>&1
    if [ "$(json_field "$tmp/d3.json" param_checksum)" != "$(json_field "$tmp/d1.json" param_checksum)" ]; then
        ok other_seed_other_parameters
    else
        fail other_seed_other_parameters "seeds 9 and 10 gave the same checksum"
    fi

    # --metrics-out through a symlink updates the link's target; /dev/stdout is written in place.
    echo old > "$tmp/target.json"
    ln -s "$tmp/target.json" "$tmp/link.json"
    run "$dtrain" train --model mlp --max-steps 2 --progress none --test-data none --metrics-out "$tmp/link.json"
    if [ "$status" -eq 0 ] && [ -L "$tmp/link.json" ] && grep -q '"steps":2' "$tmp/target.json"; then
        ok metrics_out_follows_a_symlink
    else
        fail metrics_out_follows_a_symlink "exit $status; target: $(head -c 100 "$tmp/target.json")"
    fi
    "$dtrain" train --model mlp --max-steps 2 --progress none --test-data none --metrics-out /dev/stdout \
        2> "$tmp/err" | cat > "$tmp/out"
    status=${PIPESTATUS[0]}
    if [ "$status" -eq 0 ] && tail -1 "$tmp/out" | grep -q '^{.*"steps":2'; then
        ok metrics_out_to_dev_stdout
    else
        fail metrics_out_to_dev_stdout "exit $status: $(cat "$tmp/err")"
    fi
    if [ -c /dev/full ]; then
        "$dtrain" train --model mlp --max-steps 2 --progress lines --test-data none > /dev/full 2> "$tmp/err"
        st=$?
        if [ "$st" -eq 1 ] && grep -q "stdout: write failed" "$tmp/err"; then ok full_stdout_is_a_failure; \
        else fail full_stdout_is_a_failure "exit $st: $(cat "$tmp/err")"; fi
    fi
    expect_error batch_larger_than_dataset 1 "10000 examples make no full batch of 20000" \
        train --data "idx:$fm/t10k-images-idx3-ubyte.gz,$fm/t10k-labels-idx1-ubyte.gz" --batch-size 20000
    run "$dtrain" train --model mlp --max-steps 20 --validate --progress none --metrics-out "$tmp/v.json"
    if [ "$status" -eq 0 ] && [ -n "$(json_field "$tmp/v.json" test_accuracy)" ] && \
        [ "$(json_field "$tmp/v.json" test_accuracy)" != null ]; then
        ok validate_without_progress
    else
        fail validate_without_progress "exit $status: $(cat "$tmp/err")"
    fi

    # The default --data runs the mlp too, and the progress bar redraws in place when asked.
    run "$dtrain" train --model mlp --max-steps 30 --progress bar --test-data none
    if [ "$status" -eq 0 ] && grep -q $'\r' "$tmp/out" && grep -q "30/30 \[=*\]" "$tmp/out"; then
        ok progress_bar_and_mlp
    else
        fail progress_bar_and_mlp "exit $status: $(head -c 300 "$tmp/out") $(cat "$tmp/err")"
    fi
else
    fail fashion_mnist_present "$fm is missing: install dataset-fashion-mnist (scripts/deps.sh test)"
fi

# --- a stalled input: a FIFO whose writer stops feeding it (and keeps it open, so no end of file
# comes) ends training within --input-timeout and a few seconds, naming the FIFO and the line ---
"$dtrain" data gen-ctr --rows 600 --seed 3 --out "$tmp/fifo_src.svm" > "$tmp/fifo_gen" 2>&1
fifo_fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/fifo_gen")
mkfifo "$tmp/feed"
# exec: the writer is one process, ended by its pid, holding the FIFO open without writing.
(head -n 300 "$tmp/fifo_src.svm"; exec sleep 60) > "$tmp/feed" &
fifo_writer=$!
run timeout 30 "$dtrain" train --data "libsvm:$tmp/feed" --test-data none --feature-size "$fifo_fs" \
    --model lr --batch-size 32 --shuffle-buffer 0 --progress none --threads 1 --input-timeout 2
kill "$fifo_writer" 2>/dev/null
wait "$fifo_writer" 2>/dev/null
if [ "$status" -eq 1 ] && [ "$ms" -lt 8000 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] &&
    grep -q "$tmp/feed: no data for 2 s \(at line 301 \)\?(input_timeout): the input has stalled" "$tmp/err"; then
    ok stalled_fifo_input_fails_naming_it "${ms} ms"
else
    fail stalled_fifo_input_fails_naming_it "exit $status after $ms ms: $(head -c 300 "$tmp/err")"
fi
expect_error input_timeout_must_not_be_negative 2 "--input-timeout: must be in 0..1e9" \
    train --data "libsvm:$tmp/fifo_src.svm" --feature-size "$fifo_fs" --input-timeout -1

echo "cli: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
