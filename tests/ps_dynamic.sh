#!/usr/bin/env bash
# Dynamic tables on the parameter server, under dtrain launch: one worker trains as one_device
# does, bit for bit, on 1 and 3 ps tasks; a checkpoint written while 2 asynchronous workers push
# restores onto 1 ps, 3 ps and one_device key by key (numpy compares keys, rows, slots, counts and
# steps); a job resumed from a checkpoint on 3 ps ends where the uninterrupted job on 1 ps does;
# a ps killed with --max-restarts 1 comes back from its snapshot, says what it lost, and the job
# ends with an uninterrupted run's AUC; nothing is left behind.
# usage: tests/ps_dynamic.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
tmp=$(mktemp -d /tmp/dtrain-ps-dynamic-XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
passed=0
failed=0
. "$(dirname "$0")/lib.sh"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
compare="$(dirname "$0")/progs/dynamic_ckpt.py"

"$dtrain" data gen-ctr --rows 8000 --seed 11 --out "$tmp/train.svm" > /dev/null 2>&1
"$dtrain" data gen-ctr --rows 2000 --seed 12 --out "$tmp/test.svm" > /dev/null 2>&1
ctr=(train --data "libsvm:$tmp/train.svm" --test-data "libsvm:$tmp/test.svm" --dynamic-tables
     --model deepfm --optimizer adam --lr 5e-4 --batch-size 128 --shuffle-buffer 0
     --progress none --seed 1 --threads 1 --admit-min-count 2 --evict-steps-to-live 30
     --evict-every-steps 5)
sum_of() { json_field "$1" param_checksum 2> /dev/null; }

# --- one worker: every pull sees the last push, so the tables are one_device's, bit for bit ---
run "$dtrain" "${ctr[@]}" --max-steps 100 --metrics-out "$tmp/one.json"
one=$(sum_of "$tmp/one.json")
for nps in 1 3; do
    run timeout 120 "$dtrain" launch -n 1 --ps "$nps" -- "$dtrain" "${ctr[@]}" --max-steps 100 \
        --strategy parameter_server --metrics-out "$tmp/ps$nps.json"
    got=$(sum_of "$tmp/ps$nps.json")
    if [ "$status" -eq 0 ] && [ -n "$one" ] && [ "$got" = "$one" ] &&
        [ "$(json_field "$tmp/ps$nps.json" dynamic_live_keys)" = "$(json_field "$tmp/one.json" dynamic_live_keys)" ]; then
        ok "ps_dynamic_one_worker_on_${nps}_ps_equals_one_device" "checksum $got, $(json_field "$tmp/ps$nps.json" dynamic_live_keys) live keys"
    else
        fail "ps_dynamic_one_worker_on_${nps}_ps_equals_one_device" "exit $status, checksum $got vs $one: $(tail -3 "$tmp/err")"
    fi
done

# --- bounded staleness and hybrid training (the dense part all-reduced among the workers) train
#     dynamic tables too ---
for mode in ssp:1 hybrid; do
    run timeout 120 "$dtrain" launch -n 2 --ps 2 -- "$dtrain" "${ctr[@]}" --max-steps 100 \
        --strategy parameter_server --ps-mode "$mode" --metrics-out "$tmp/mode.json"
    auc=$(json_field "$tmp/mode.json" test_auc 2> /dev/null)
    live=$(json_field "$tmp/mode.json" dynamic_live_keys 2> /dev/null)
    if [ "$status" -eq 0 ] && [ "${live:-0}" -gt 1000 ] &&
        "$py" -c "import sys; sys.exit(0 if ${auc:-0} > 0.6 else 1)"; then
        ok "ps_dynamic_trains_in_${mode%%:*}_mode" "$live live keys, AUC $auc"
    else
        fail "ps_dynamic_trains_in_${mode%%:*}_mode" "exit $status, $live keys, AUC $auc: $(tail -3 "$tmp/err")"
    fi
done

# --- a checkpoint taken while 2 asynchronous workers push, restored onto 1 ps, 3 ps and
#     one_device with no step after it: the same keys, rows, slots, counts and steps ---
run timeout 120 "$dtrain" launch -n 2 --ps 2 -- "$dtrain" "${ctr[@]}" --strategy parameter_server \
    --max-steps 100 --save-checkpoints-steps 40 --model-dir "$tmp/W"
s=$(find "$tmp/W" -name 'ckpt-*.ps-0-of-2.safetensors' | sed -n 's/.*ckpt-\([0-9]*\)\.ps.*/\1/p' | sort -n | head -1)
if [ "$status" -eq 0 ] && [ -n "$s" ] && "$dtrain" inspect "$tmp/W/ckpt-$s.safetensors" > "$tmp/inspect" 2>&1 &&
    grep -q "fm_v/part_1 .*strategy=hash .*min_count=2 .*steps_to_live=30" "$tmp/inspect"; then
    ok ps_dynamic_checkpoint_written_shard_by_shard "step $s"
else
    fail ps_dynamic_checkpoint_written_shard_by_shard "exit $status, step '$s': $(tail -2 "$tmp/err") $(grep part "$tmp/inspect" | head -2)"
fi
for target in 1 3 one_device; do
    if [ "$target" = one_device ]; then
        run "$dtrain" "${ctr[@]}" --max-steps "$s" --restore-checkpoint "$tmp/W/ckpt-$s.safetensors" \
            --model-dir "$tmp/R$target"
    else
        run timeout 120 "$dtrain" launch -n 1 --ps "$target" -- "$dtrain" "${ctr[@]}" \
            --strategy parameter_server --max-steps "$s" --restore-checkpoint \
            "$tmp/W/ckpt-$s.safetensors" --model-dir "$tmp/R$target"
    fi
    launch_status=$status
    "$py" "$compare" "$tmp/W/ckpt-$s.safetensors" --compare "$tmp/R$target/ckpt-$s.safetensors" \
        --no-bloom > "$tmp/cmp" 2>&1
    rc=$?
    name="ps_dynamic_checkpoint_of_2_async_workers_restores_onto_$target"
    [ "$target" != one_device ] && name="${name}_ps"
    if [ "$launch_status" -eq 0 ] && [ "$rc" -eq 0 ] && grep -q "equal bit for bit" "$tmp/cmp"; then
        ok "$name" "$(tail -1 "$tmp/cmp")"
    else
        fail "$name" "exit $launch_status, numpy: $(tail -2 "$tmp/cmp") $(tail -2 "$tmp/err")"
    fi
done

# --- resumed: the job restored from its checkpoint (onto 3 ps) continues as the job that wrote
#     it (on 1 ps) did from its memory: each key's row, slots, count and step alike. A save runs
#     a whole eviction pass, and an asynchronous job's save lands where the pause finds it (step
#     60 or 61 for one asked at 60): neither job saves between that checkpoint and its last step ---
run timeout 120 "$dtrain" launch -n 1 --ps 1 -- "$dtrain" "${ctr[@]}" --strategy parameter_server \
    --max-steps 100 --save-checkpoints-steps 60 --model-dir "$tmp/A" --metrics-out "$tmp/A.json"
a_status=$status
s=$(find "$tmp/A" -name 'ckpt-*.ps-0-of-1.safetensors' | sed -n 's/.*ckpt-\([0-9]*\)\.ps.*/\1/p' | sort -n | head -1)
run timeout 120 "$dtrain" launch -n 1 --ps 3 -- "$dtrain" "${ctr[@]}" --strategy parameter_server \
    --max-steps 100 --save-checkpoints-steps 60 --restore-checkpoint "$tmp/A/ckpt-$s.safetensors" \
    --model-dir "$tmp/B" --metrics-out "$tmp/B.json"
"$py" "$compare" "$tmp/A/ckpt-100.safetensors" --compare "$tmp/B/ckpt-100.safetensors" --no-bloom \
    > "$tmp/cmp" 2>&1
rc=$?
if [ "$a_status" -eq 0 ] && [ "$status" -eq 0 ] && [ "$rc" -eq 0 ] && [ -n "$(sum_of "$tmp/A.json")" ] &&
    [ "$(sum_of "$tmp/A.json")" = "$(sum_of "$tmp/B.json")" ] &&
    grep -q "skipped the first $s batches" "$tmp/err"; then
    ok ps_dynamic_resumed_on_3_ps_continues_as_the_job_in_memory "from step $s: $(tail -1 "$tmp/cmp")"
else
    fail ps_dynamic_resumed_on_3_ps_continues_as_the_job_in_memory "exit $a_status/$status, step '$s', checksums $(sum_of "$tmp/A.json")/$(sum_of "$tmp/B.json"): $(tail -1 "$tmp/cmp") $(tail -2 "$tmp/err")"
fi

# --- a ps killed (SIGKILL) with --max-restarts 1: it restores its snapshot and says which keys
#     it lost; the job ends 0 with the AUC of an uninterrupted run ---
"$dtrain" data gen-ctr --rows 100000 --seed 13 --out "$tmp/long.svm" > /dev/null 2>&1
long=(train --data "libsvm:$tmp/long.svm" --test-data "libsvm:$tmp/test.svm" --dynamic-tables
      --model deepfm --batch-size 64 --threads 1 --admit-min-count 2 --evict-steps-to-live 400
      --progress estimator --log-step-count-steps 50 --strategy parameter_server)
run timeout 120 "$dtrain" launch -n 2 --ps 2 -- "$dtrain" "${long[@]}" --metrics-out "$tmp/whole.json"
whole_auc=$(json_field "$tmp/whole.json" test_auc 2> /dev/null)
timeout 120 "$dtrain" launch -n 2 --ps 2 --max-restarts 1 -- "$dtrain" "${long[@]}" \
    --metrics-out "$tmp/killed.json" --model-dir "$tmp/md" --ps-snapshot-secs 0.5 \
    > "$tmp/launch.out" 2> "$tmp/launch.err" &
lpid=$!
pids+=("$lpid")
victim=""
for _ in $(seq 1 100); do
    sleep 0.1
    victim=$(task_pid_of "$lpid" ps:1)
    [ -n "$victim" ] && break
done
# Killed once it has written a snapshot and the job is past step 200.
for _ in $(seq 1 600); do
    grep -q "step = [2-9][0-9][0-9] " "$tmp/launch.out" &&
        grep -q "\[ps:1\] dtrain server: snapshots of this ps go to" "$tmp/launch.err" && break
    sleep 0.05
done
[ -n "$victim" ] && kill -9 "$victim"
wait_pid "$lpid" 120
wait "$lpid" 2> /dev/null
status=$?
killed_auc=$(json_field "$tmp/killed.json" test_auc 2> /dev/null)
gap=$("$py" -c "print(abs(${killed_auc:-0} - ${whole_auc:-1}))")
if [ "$status" -eq 0 ] && [ -n "$victim" ] &&
    grep -q "task ps:1 (pid $victim) was killed by signal 9 (SIGKILL): starting it again (1 of 1)" "$tmp/launch.err" &&
    grep -q "\[ps:1\] dtrain server: its dynamic tables hold the [0-9]* keys they had then: keys admitted after step [0-9]* are lost" "$tmp/launch.err" &&
    grep -q "\[ps:1\] dtrain server: restored shards updated again" "$tmp/launch.err" &&
    "$py" -c "import sys; sys.exit(0 if $gap <= 0.005 else 1)"; then
    ok ps_dynamic_killed_ps_restores_its_snapshot "$(grep -o 'hold the [0-9]* keys they had then: keys admitted after step [0-9]*' "$tmp/launch.err"), auc=$killed_auc uninterrupted=$whole_auc"
else
    fail ps_dynamic_killed_ps_restores_its_snapshot "exit $status, victim '$victim', auc $killed_auc vs $whole_auc: $(grep -v 'bytes per sample' "$tmp/launch.err" | tail -6)"
fi

# --- nothing left: no task of these jobs, no shared-memory segment of a process gone ---
left=""
for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && left="$left $p"; done
for p in $(jobs -p); do kill -0 "$p" 2> /dev/null && left="$left job:$p"; done
for f in /dev/shm/dtrain-*; do
    [ -e "$f" ] || continue
    owner=${f#/dev/shm/dtrain-}
    owner=${owner%%-*}
    kill -0 "$owner" 2> /dev/null || left="$left $f"
done
if [ -z "$left" ]; then ok ps_dynamic_jobs_leave_nothing; else fail ps_dynamic_jobs_leave_nothing "left:$left"; fi

echo "$passed $failed" > "$counts"
