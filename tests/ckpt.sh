#!/usr/bin/env bash
# Checkpoints, backups, summaries and the sidecar evaluator, with real processes and real kills:
#   - a run killed with SIGKILL and rerun from its --backup-dir ends with the parameters of an
#     uninterrupted run, bit for bit (one_device, mirrored, 2-worker multi_worker_mirrored);
#   - kill -9 at many moments while checkpoints are saved every step: the latest always loads
#     and the state file never names a torn file;
#   - checkpoints read by numpy (tests/progs/read_safetensors.py) hold the trained parameters;
#   - event files decoded with python3-protobuf (tests/progs/read_events.py) hold the scalars;
#   - dtrain evaluate --watch and an evaluator task follow training to its final checkpoint;
#   - dtrain launch --max-restarts 1 with a worker killed completes, as an undisturbed run.
# usage: tests/ckpt.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$(cd "$build" && pwd)/dtrain"
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/dtrain-ckpt-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
passed=0
failed=0
. "$here/lib.sh"
fm=/usr/share/datasets/fashion-mnist
export DTRAIN_CLUSTER_SECRET=ckpt-test-secret-0123456789

# Debian's python3, which has python3-numpy and python3-protobuf (another python3 may be first on
# PATH).
py=/usr/bin/python3
[ -x "$py" ] || py=python3

# A small, quick job on the 10,000 test images: the MLP (with dropout, whose masks a resume
# must continue) for 3 epochs of 156 steps.
small=(train --model mlp --data "idx:$fm/t10k-images-idx3-ubyte.gz,$fm/t10k-labels-idx1-ubyte.gz"
       --test-data none --epochs 3 --batch-size 64 --optimizer adam --threads 1 --seed 7
       --progress none)

# wait_for_file PATTERN SECONDS: true once a file matches.
wait_for_file() {
    local i
    for i in $(seq 1 $(($2 * 100))); do
        compgen -G "$1" > /dev/null && return 0
        sleep 0.01
    done
    return 1
}

# interrupted_equals_uninterrupted NAME KILL_WHAT ARGS...: runs ARGS (a dtrain command line without
# --backup-dir and --metrics-out) uninterrupted; then again with a backup every 20 steps, killed
# with SIGKILL once the first backup exists (KILL_WHAT: self, or worker1: a worker of a launch),
# then rerun to completion. Both final parameter checksums must be equal.
interrupted_equals_uninterrupted() {
    local name=$1 what=$2
    shift 2
    local dir="$tmp/$name"
    mkdir -p "$dir"
    "$dtrain" "$@" --metrics-out "$dir/whole.json" > "$dir/whole.out" 2>&1
    "$dtrain" "$@" --backup-dir "$dir/backup" --backup-freq 20 --metrics-out "$dir/cut.json" \
        > "$dir/cut1.out" 2>&1 &
    local pid=$!
    pids+=("$pid")
    local killed=no
    if wait_for_file "$dir/backup/ckpt-*.safetensors" 60; then
        if [ "$what" = self ]; then
            kill -9 "$pid" 2> /dev/null && killed=yes
        else
            # Kill one worker of the launch: launch then stops the other and fails.
            local child
            child=$(ps -o pid= --ppid "$pid" | tail -1 | tr -d ' ')
            [ -n "$child" ] && kill -9 "$child" 2> /dev/null && killed=yes
        fi
    fi
    wait "$pid" 2> /dev/null
    local first=$?
    "$dtrain" "$@" --backup-dir "$dir/backup" --backup-freq 20 --metrics-out "$dir/cut.json" \
        > "$dir/cut2.out" 2>&1
    local second=$?
    local a b
    a=$(json_field "$dir/whole.json" param_checksum)
    b=$(json_field "$dir/cut.json" param_checksum)
    if [ "$killed" != yes ] || [ "$first" -eq 0 ]; then
        fail "$name" "the first run was not interrupted (killed=$killed, exit $first)"
    elif [ "$second" -ne 0 ] || ! grep -q "Restoring parameters from .*backup/ckpt-" "$dir/cut2.out"; then
        fail "$name" "the rerun (exit $second) did not resume: $(tail -3 "$dir/cut2.out")"
    elif [ -z "$a" ] || [ "$a" != "$b" ]; then
        fail "$name" "parameters differ: uninterrupted $a, resumed $b"
    elif [ -e "$dir/backup" ]; then
        fail "$name" "the backup was not removed after the run completed"
    else
        ok "$name ($(grep -o 'global step [0-9]*' "$dir/cut2.out" | head -1), checksum $a)"
    fi
}

if [ ! -d "$fm" ]; then
    fail fashion_mnist_present "$fm is missing (apt-get install dataset-fashion-mnist)"
else
    interrupted_equals_uninterrupted resume_one_device_is_exact self "${small[@]}"
    interrupted_equals_uninterrupted resume_mirrored_is_exact self "${small[@]}" \
        --strategy mirrored --replicas 2
    interrupted_equals_uninterrupted resume_two_workers_is_exact worker1 launch -n 2 -- "$dtrain" \
        "${small[@]}"

    # Backups each epoch: a kill after the first epoch's backup resumes at the second epoch.
    dir="$tmp/epoch"
    mkdir -p "$dir"
    "$dtrain" "${small[@]}" --metrics-out "$dir/whole.json" > /dev/null 2>&1
    "$dtrain" "${small[@]}" --backup-dir "$dir/b" --metrics-out "$dir/cut.json" > /dev/null 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_for_file "$dir/b/ckpt-*.safetensors" 60 && kill -9 "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
    "$dtrain" "${small[@]}" --backup-dir "$dir/b" --metrics-out "$dir/cut.json" > "$dir/out" 2>&1
    if grep -q "Restoring parameters from .*ckpt-156.safetensors (global step 156)" "$dir/out" &&
        [ "$(json_field "$dir/whole.json" param_checksum)" = "$(json_field "$dir/cut.json" param_checksum)" ]; then
        ok resume_from_an_epoch_backup_is_exact
    else
        fail resume_from_an_epoch_backup_is_exact "$(head -3 "$dir/out")"
    fi

    # --- kill -9 while a checkpoint is saved at every step: the latest always loads ---
    dir="$tmp/crash"
    torn=""
    for rep in $(seq 1 20); do
        rm -rf "$dir"
        "$dtrain" "${small[@]}" --model-dir "$dir" --save-checkpoints-steps 1 --keep-checkpoint-max 3 \
            --save-summary-steps 0 > /dev/null 2>&1 &
        pid=$!
        pids+=("$pid")
        wait_for_file "$dir/ckpt-*.safetensors" 30
        sleep "0.0$((RANDOM % 10))$((RANDOM % 10))"
        kill -9 "$pid" 2> /dev/null
        wait "$pid" 2> /dev/null
        if ! "$dtrain" inspect "$dir" > "$tmp/inspect" 2> "$tmp/inspect.err"; then
            torn="$torn rep $rep: latest does not load: $(head -2 "$tmp/inspect.err")"
            continue
        fi
        named=$(sed -n 's/^model_checkpoint_path: "\(.*\)"$/\1/p' "$dir/checkpoint" 2> /dev/null)
        if [ -n "$named" ] && ! "$dtrain" inspect "$dir/$named" > /dev/null 2>&1; then
            torn="$torn rep $rep: the state file names $named, which does not load;"
        fi
    done
    if [ -z "$torn" ]; then ok kill_during_saves_never_leaves_a_torn_latest; \
    else fail kill_during_saves_never_leaves_a_torn_latest "$torn"; fi

    # --- numpy reads our checkpoint, and it holds the parameters in memory ---
    dir="$tmp/np"
    "$dtrain" train --model mnist_cnn --max-steps 30 --threads 2 --optimizer adam --progress none \
        --test-data none --model-dir "$dir" --metrics-out "$tmp/np.json" > /dev/null 2>&1
    names=$("$dtrain" inspect "$dir/ckpt-30.safetensors" 2> /dev/null | awk 'NR > 1 && /crc32c/ && $1 !~ /^adam\// { print $1 }' | paste -sd,)
    got=$("$py" "$here/progs/read_safetensors.py" "$dir/ckpt-30.safetensors" --names "$names" 2>&1)
    want=$(json_field "$tmp/np.json" param_checksum)
    if echo "$got" | grep -q "^combined $want$" && echo "$got" | grep -q "^adam/m/conv2d/kernel \[3,3,1,32\] "; then
        ok numpy_reads_the_trained_parameters
    else
        fail numpy_reads_the_trained_parameters "want combined $want, names $names: $(echo "$got" | tail -4)"
    fi

    # --- TensorBoard event files decode with python3-protobuf ---
    dir="$tmp/tb"
    "$dtrain" train --model mlp --max-steps 100 --threads 1 --progress estimator \
        --log-step-count-steps 50 --eval-every-steps 50 --eval-steps 2 --model-dir "$dir" \
        --save-summary-steps 20 > "$tmp/tb.out" 2>&1
    "$py" "$here/progs/read_events.py" "$dir"/events.out.tfevents.* > "$tmp/train.ev" 2>&1
    "$py" "$here/progs/read_events.py" "$dir"/eval/events.out.tfevents.* > "$tmp/eval.ev" 2>&1
    want_eval=$(sed -n 's/^Saving dict for global step 100: .*loss = \([0-9.e-]*\),.*/\1/p' "$tmp/tb.out")
    if head -1 "$tmp/train.ev" | grep -q "^version brain.Event:2 " &&
        [ "$(grep -c '^scalar [0-9]* loss ' "$tmp/train.ev")" = 5 ] &&
        grep -q '^scalar 100 accuracy ' "$tmp/train.ev" && grep -q '^scalar 20 learning_rate 0.00999999' "$tmp/train.ev" &&
        grep -q '^scalar 40 global_step/sec ' "$tmp/train.ev" &&
        grep -q '^scalar 50 loss ' "$tmp/eval.ev" && grep -q '^scalar 100 accuracy ' "$tmp/eval.ev" &&
        awk -v w="$want_eval" '$1 == "scalar" && $2 == 100 && $3 == "loss" { d = $4 - w; if (d < 0) d = -d; found = d < 1e-5 } END { exit !found }' "$tmp/eval.ev"; then
        ok event_files_decode_with_protobuf
    else
        fail event_files_decode_with_protobuf "$(head -3 "$tmp/train.ev") / $(head -3 "$tmp/eval.ev") / eval loss $want_eval"
    fi

    # --- dtrain inspect lists tensors and metadata; a corrupt file is one clear error ---
    run "$dtrain" inspect "$tmp/np/ckpt-30.safetensors"
    if [ "$status" -eq 0 ] && grep -q "^conv2d/kernel .*\[3, 3, 1, 32\] .*F32 .*crc32c [0-9a-f]\{8\}$" "$tmp/out" &&
        grep -q "^  global_step = 30$" "$tmp/out" && grep -q '^  model_spec = {"name":"mnist_cnn"' "$tmp/out"; then
        ok inspect_lists_tensors_and_metadata
    else
        fail inspect_lists_tensors_and_metadata "exit $status: $(head -4 "$tmp/out")"
    fi
    cp "$tmp/np/ckpt-30.safetensors" "$tmp/bad.safetensors"
    printf '\x01' | dd of="$tmp/bad.safetensors" bs=1 seek=5000 conv=notrunc 2> /dev/null
    expect_error inspect_names_a_corrupt_file 1 "bad.safetensors: checksum mismatch" inspect "$tmp/bad.safetensors"
    head -c 3000 "$tmp/np/ckpt-30.safetensors" > "$tmp/short.safetensors"
    expect_error inspect_names_a_truncated_file 1 "short.safetensors" inspect "$tmp/short.safetensors"

    # --- checkpoints by time: every --save-checkpoints-secs, and one after the last step ---
    run "$dtrain" train --model mnist_cnn --max-steps 400 --threads 1 --progress none --test-data none \
        --model-dir "$tmp/secs" --save-checkpoints-secs 0.1 --keep-checkpoint-max 2
    n=$(grep -c "^Saving checkpoints for [0-9]* into .*/secs/ckpt-[0-9]*.safetensors.$" "$tmp/out")
    kept=$(ls "$tmp/secs"/ckpt-*.safetensors 2> /dev/null | wc -l)
    if [ "$status" -eq 0 ] && [ "$n" -ge 3 ] && grep -q "^Saving checkpoints for 400 " "$tmp/out" &&
        [ "$kept" -eq 2 ] && grep -qx 'model_checkpoint_path: "ckpt-400.safetensors"' "$tmp/secs/checkpoint"; then
        ok checkpoints_every_n_seconds "($n saves, $kept kept)"
    else
        fail checkpoints_every_n_seconds "exit $status, $n saves, $kept kept: $(head -3 "$tmp/out")"
    fi

    # --- temporary files of saves a killed run left are removed; a live process's are kept ---
    mkdir -p "$tmp/stale"
    dead=$(sh -c 'echo $$')
    touch "$tmp/stale/ckpt-7.safetensors.tmp.$dead" "$tmp/stale/checkpoint.tmp.$dead" \
        "$tmp/stale/ckpt-8.safetensors.tmp.$$" "$tmp/stale/notes.tmp.$dead"
    run "$dtrain" train --model mlp --max-steps 3 --test-data none --progress none --model-dir "$tmp/stale"
    if [ "$status" -eq 0 ] && [ ! -e "$tmp/stale/ckpt-7.safetensors.tmp.$dead" ] &&
        [ ! -e "$tmp/stale/checkpoint.tmp.$dead" ] && [ -e "$tmp/stale/ckpt-8.safetensors.tmp.$$" ] &&
        [ -e "$tmp/stale/notes.tmp.$dead" ] && [ -e "$tmp/stale/ckpt-3.safetensors" ] &&
        grep -q "removed .*ckpt-7.safetensors.tmp.$dead, left by a run that stopped while saving" "$tmp/out"; then
        ok stale_temporary_files_are_removed
    else
        fail stale_temporary_files_are_removed "exit $status: $(ls "$tmp/stale" | tr '\n' ' ') $(head -c 300 "$tmp/err")"
    fi

    # --- a named checkpoint to start from: checked against the model, and resumed ---
    expect_error restore_refuses_another_model 1 "written for another model" train --model mlp \
        --max-steps 5 --test-data none --progress none --restore-checkpoint "$tmp/np/ckpt-30.safetensors"
    expect_error restore_refuses_a_corrupt_file 1 "checksum mismatch" train --model mnist_cnn \
        --optimizer adam --max-steps 5 --test-data none --progress none --restore-checkpoint "$tmp/bad.safetensors"
    # Rank 0 reads the checkpoint for everyone: when it cannot, the other replicas and workers
    # stop at once with its reason, not after the collective timeout (60 s here).
    run timeout 30 "$dtrain" train --model mnist_cnn --optimizer adam --max-steps 5 --test-data none \
        --progress none --strategy mirrored --replicas 2 --batch-size 64 --timeout 60 \
        --restore-checkpoint "$tmp/bad.safetensors"
    if [ "$status" -eq 1 ] && grep -q "bad.safetensors: checksum mismatch" "$tmp/err" &&
        ! grep -q "has not entered" "$tmp/err"; then
        ok restore_failure_on_rank_0_stops_the_replicas "(${ms} ms)"
    else
        fail restore_failure_on_rank_0_stops_the_replicas "exit $status: $(head -c 400 "$tmp/err")"
    fi
    # The same across processes, started by hand: under dtrain launch, the launcher's SIGTERM
    # (sent as worker 0 fails) may end worker 1 before it prints anything.
    base=$(free_base 2)
    t0=$(date +%s%N)
    for i in 0 1; do
        start_rank 2 "$base" "$i" train --model mnist_cnn --optimizer adam --max-steps 5 \
            --test-data none --progress none --batch-size 64 --timeout 60 \
            --restore-checkpoint "$tmp/bad.safetensors"
    done
    wait_pid "${pids[0]}" 30
    status0=$status
    wait_pid "${pids[1]}" 30
    ms=$((($(date +%s%N) - t0) / 1000000))
    if [ "$status0" -eq 1 ] && [ "$status" -eq 1 ] &&
        grep -q "bad.safetensors: checksum mismatch" "$tmp/r0.err" &&
        grep -q "^dtrain: error: worker 0 could not restore a checkpoint: .*bad.safetensors: checksum mismatch" "$tmp/r1.err"; then
        ok restore_failure_on_worker_0_stops_the_workers "(${ms} ms)"
    else
        fail restore_failure_on_worker_0_stops_the_workers "exits $status0 and $status: $(cat "$tmp/r0.err" "$tmp/r1.err" | head -c 600)"
    fi
    run "$dtrain" train --model mnist_cnn --optimizer adam --max-steps 40 --threads 2 --progress none \
        --test-data none --restore-checkpoint "$tmp/np/ckpt-30.safetensors" --metrics-out "$tmp/r40.json"
    "$dtrain" train --model mnist_cnn --max-steps 40 --threads 2 --optimizer adam --progress none \
        --test-data none --metrics-out "$tmp/w40.json" > /dev/null 2>&1
    if [ "$status" -eq 0 ] && grep -q "Restoring parameters from .*ckpt-30.safetensors (global step 30)" "$tmp/out" &&
        [ "$(json_field "$tmp/r40.json" steps)" = 40 ] &&
        [ "$(json_field "$tmp/r40.json" param_checksum)" = "$(json_field "$tmp/w40.json" param_checksum)" ]; then
        ok restore_named_checkpoint_continues_exactly
    else
        fail restore_named_checkpoint_continues_exactly "exit $status: $(head -3 "$tmp/out") $(cat "$tmp/err")"
    fi

    # --- two workers sharing the optimizer's update (in shared memory, or over the TCP ring): a
    # checkpoint taken by time holds the whole optimizer state (each worker keeps its own share
    # current), so training continued from one ends where the uninterrupted run did ---
    for shm in true false; do
        w2=(train --model mnist_cnn --optimizer adam --max-steps 150 --threads 1 --progress none
            --test-data none --batch-size 64 --shm="$shm")
        rm -rf "$tmp/w2"
        run "$dtrain" launch -n 2 -- "$dtrain" "${w2[@]}" --model-dir "$tmp/w2" \
            --save-checkpoints-secs 0.02 --keep-checkpoint-max 0 --metrics-out "$tmp/w2whole.json"
        mid=$(ls "$tmp/w2"/ckpt-*.safetensors 2> /dev/null | grep -v "ckpt-150\." | sort -t- -k2 -n | tail -1)
        name="two_workers_checkpoint_by_time_holds_the_optimizer_state (--shm=$shm)"
        if [ "$status" -ne 0 ] || [ -z "$mid" ]; then
            fail "$name" "exit $status, no checkpoint before the last: $(ls "$tmp/w2") $(tail -2 "$tmp/err")"
            continue
        fi
        run "$dtrain" launch -n 2 -- "$dtrain" "${w2[@]}" --restore-checkpoint "$mid" \
            --metrics-out "$tmp/w2cont.json"
        a=$(json_field "$tmp/w2whole.json" param_checksum)
        b=$(json_field "$tmp/w2cont.json" param_checksum)
        if [ "$status" -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ]; then
            ok "$name, from $(basename "$mid")"
        else
            fail "$name" "exit $status, from $mid: checksum $b, uninterrupted $a: $(tail -2 "$tmp/err")"
        fi
    done

    # --- a sidecar evaluator follows training to its final checkpoint, passing over a torn one ---
    dir="$tmp/side"
    mkdir -p "$dir"
    head -c 700 "$tmp/np/ckpt-30.safetensors" > "$dir/ckpt-5.safetensors"
    "$dtrain" evaluate --model-dir "$dir" --watch --poll-secs 0.05 --watch-timeout 60 > "$tmp/side.out" 2>&1 &
    epid=$!
    pids+=("$epid")
    "$dtrain" train --model mnist_cnn --max-steps 300 --threads 1 --progress none --model-dir "$dir" \
        --save-checkpoints-steps 100 --metrics-out "$tmp/side.json" > "$tmp/side.train" 2>&1
    wait "$epid"
    estatus=$?
    acc=$(json_field "$tmp/side.json" test_accuracy)
    if [ "$estatus" -eq 0 ] &&
        grep -Eq "^Saving dict for global step 300: global_step = 300, loss = [0-9.]+, accuracy = " "$tmp/side.out" &&
        awk -v a="$acc" '/global step 300:/ { split($0, p, "accuracy = "); d = p[2] - a; if (d < 0) d = -d; found = d < 1e-6 } END { exit !found }' "$tmp/side.out" &&
        [ -n "$(ls "$dir"/eval/events.out.tfevents.* 2> /dev/null)" ]; then
        ok sidecar_evaluator_follows_training "($(grep -c '^Saving dict' "$tmp/side.out") evaluations)"
    else
        fail sidecar_evaluator_follows_training "exit $estatus, accuracy $acc: $(cat "$tmp/side.out" | head -5)"
    fi

    # --- the evaluator task of a launched cluster ---
    dir="$tmp/launch-eval"
    run "$dtrain" launch -n 2 --evaluator -- "$dtrain" train --model mlp --max-steps 200 --threads 1 \
        --progress none --model-dir "$dir" --save-checkpoints-steps 100
    if [ "$status" -eq 0 ] && grep -q "^\[evaluator:0\] Saving dict for global step 200: " "$tmp/out" &&
        ! grep -q "^\[worker:1\] Saving" "$tmp/out"; then
        ok evaluator_task_evaluates_the_final_checkpoint
    else
        fail evaluator_task_evaluates_the_final_checkpoint "exit $status: $(tail -4 "$tmp/out") $(tail -2 "$tmp/err")"
    fi

    # --- file data: the evaluator task and dtrain evaluate read LibSVM test data as training does ---
    dir="$tmp/svm-eval"
    awk 'BEGIN { for (i = 0; i < 96; i++) { x = (i * 37 % 96) / 48 - 1; y = (i * 11 % 96) / 96;
        printf "%d 1:%.4f 2:%.4f\n", (x > 0), x, y } }' > "$tmp/e.svm"
    run "$dtrain" launch -n 2 --evaluator -- "$dtrain" train --model mlp --data "libsvm:$tmp/e.svm" \
        --num-features 2 --test-data "libsvm:$tmp/e.svm" --max-steps 24 --batch-size 8 --threads 1 \
        --progress none --model-dir "$dir" --save-checkpoints-steps 12 --metrics-out "$tmp/svm.json"
    acc=$(json_field "$tmp/svm.json" test_accuracy)
    same_acc() { # file with a "global step 24:" line, accuracy to match
        awk -v a="$2" '/global step 24:/ { split($0, p, "accuracy = "); d = p[2] - a; if (d < 0) d = -d; found = d < 1e-6 } END { exit !found }' "$1"
    }
    if [ "$status" -eq 0 ] && [ -n "$acc" ] && grep -q "^\[evaluator:0\] Saving dict for global step 24: " "$tmp/out" &&
        same_acc "$tmp/out" "$acc"; then
        ok evaluator_task_reads_file_data
    else
        fail evaluator_task_reads_file_data "exit $status, accuracy $acc: $(tail -4 "$tmp/out") $(tail -2 "$tmp/err")"
    fi
    run "$dtrain" evaluate --model-dir "$dir" --test-data "libsvm:$tmp/e.svm" --num-features 2
    if [ "$status" -eq 0 ] && [ -n "$acc" ] && same_acc "$tmp/out" "$acc"; then
        ok evaluate_reads_file_data
    else
        fail evaluate_reads_file_data "exit $status, accuracy $acc: $(cat "$tmp/out" "$tmp/err")"
    fi
    run "$dtrain" evaluate --model-dir "$dir" --test-data "libsvm:$tmp/e.svm" --num-features 3
    if [ "$status" -eq 1 ] && grep -q "gives 3 values per example; the checkpoint's model mlp takes 2" "$tmp/err"; then
        ok evaluate_names_a_width_mismatch
    else
        fail evaluate_names_a_width_mismatch "exit $status: $(cat "$tmp/err")"
    fi

    # --- launch --max-restarts 1 with a worker killed: the cluster resumes and completes ---
    dir="$tmp/restart"
    mkdir -p "$dir"
    job=(train --model mnist_cnn --epochs 2 --steps-per-epoch 150 --threads 1 --progress none
         --optimizer adam --seed 3)
    "$dtrain" launch -n 2 -- "$dtrain" "${job[@]}" --metrics-out "$dir/calm.json" > /dev/null 2>&1
    "$dtrain" launch -n 2 --max-restarts 1 -- "$dtrain" "${job[@]}" --backup-dir "$dir/b" \
        --backup-freq 30 --metrics-out "$dir/storm.json" > "$dir/out" 2> "$dir/err" &
    pid=$!
    pids+=("$pid")
    killed=no
    if wait_for_file "$dir/b/ckpt-*.safetensors" 60; then
        child=$(ps -o pid= --ppid "$pid" | tail -1 | tr -d ' ')
        [ -n "$child" ] && kill -9 "$child" 2> /dev/null && killed=yes
    fi
    wait "$pid"
    status=$?
    a=$(json_field "$dir/calm.json" test_accuracy)
    b=$(json_field "$dir/storm.json" test_accuracy)
    if [ "$killed" = yes ] && [ "$status" -eq 0 ] && grep -q "restarting the cluster (1 of 1)" "$dir/err" &&
        grep -q "Restoring parameters from" "$dir/out" && [ -n "$a" ] && [ "$a" = "$b" ]; then
        ok launch_restarts_and_resumes_after_a_kill "(test accuracy $a both)"
    else
        fail launch_restarts_and_resumes_after_a_kill "killed=$killed exit $status, accuracy $a vs $b: $(tail -3 "$dir/err")"
    fi
fi

echo "ckpt: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
