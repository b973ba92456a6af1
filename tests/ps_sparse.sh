#!/usr/bin/env bash
# TFJob's sparseCluster (enableDynamicWorker), trained between-graph on loopback from the
# TF_CONFIGs its controller writes: each worker knows the ps tasks and itself, each ps task
# itself. One worker and one ps train as one_device does, bit for bit; 2 workers and 2 ps tasks
# (--num-workers 2) end with the test AUC of the coordinated job of the same shape, their steps
# adding up to the job's count ps:0 kept, worker 0's sharded checkpoint at that step; a worker
# killed mid-run and started again rejoins and the job ends, every task exiting 0; one killed
# for good is waited for only until it has been silent for --coordinator-timeout; a stranger
# without the secret is refused; a ps with no worker gives up; a worker whose address is taken
# says so on its last line; a chief in the sparse form, a hybrid mode and a worker beyond
# --num-workers are named errors. Nothing is left behind.
# usage: tests/ps_sparse.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$(cd "$build" && pwd)/dtrain"
tmp=$(mktemp -d /tmp/dtrain-ps-sparse-XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
passed=0
failed=0
. "$(dirname "$0")/lib.sh"
export DTRAIN_CLUSTER_SECRET=ps-sparse-secret-0123456789abcdef
py=/usr/bin/python3
[ -x "$py" ] || py=python3

"$dtrain" data gen-ctr --rows 8000 --seed 11 --out "$tmp/train.svm" > "$tmp/gen" 2>&1
"$dtrain" data gen-ctr --rows 2000 --seed 12 --out "$tmp/test.svm" > /dev/null 2>&1
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/gen")
ctr=(train --data "libsvm:$tmp/train.svm" --test-data "libsvm:$tmp/test.svm" --feature-size "$fs"
     --model deepfm --optimizer adam --lr 5e-4 --batch-size 128 --shuffle-buffer 0 --progress none
     --seed 1 --threads 1)

# ps_config BASE I: ps:I's TF_CONFIG as TFJob writes it (its own address alone).
ps_config() {
    echo "{\"sparseCluster\": {\"worker\": {}, \"ps\": [\"127.0.0.1:$(($1 + $2))\"]}, \"task\": {\"type\": \"ps\", \"index\": $2}}"
}
# worker_config BASE N_PS I: worker:I's (every ps, and itself; workers from BASE + 10).
worker_config() {
    local ps="" k
    for ((k = 0; k < $2; k++)); do ps="$ps${ps:+, }\"127.0.0.1:$(($1 + k))\""; done
    echo "{\"sparseCluster\": {\"worker\": {\"$3\": \"127.0.0.1:$(($1 + 10 + $3))\"}, \"ps\": [$ps]}, \"task\": {\"type\": \"worker\", \"index\": $3}}"
}
# job_count FILE: the job's step count a worker's log gives at its end.
job_count() { sed -n 's/.*ends its training; the job.s count is at step \([0-9]*\).*/\1/p' "$1" | tail -1; }
# own_steps FILE: a worker's own steps, from its figures line.
own_steps() { sed -n 's/.*): \([0-9]*\) steps, [0-9]* samples;.*/\1/p' "$1" | tail -1; }

# --- one worker, one ps: one_device's parameters bit for bit (one_device's steps, in order) ---
run "$dtrain" "${ctr[@]}" --metrics-out "$tmp/one.json"
one_sum=$(json_field "$tmp/one.json" param_checksum)
one_steps=$(json_field "$tmp/one.json" steps)
base=$(free_base 12)
start_tf_task ps:0 ps0 "$(ps_config "$base" 0)" "${ctr[@]}"
start_tf_task worker:0 w0 "$(worker_config "$base" 1 0)" "${ctr[@]}" --metrics-out "$tmp/w0.json"
finish_tasks 120 worker:0 ps:0
sum=$(json_field "$tmp/w0.json" param_checksum 2> /dev/null)
steps=$(json_field "$tmp/w0.json" steps 2> /dev/null)
if [ "${task_status[worker:0]}" -eq 0 ] && [ "${task_status[ps:0]}" -eq 0 ] &&
    [ -n "$one_sum" ] && [ "$sum" = "$one_sum" ] && [ "$steps" = "$one_steps" ] &&
    [ "$(job_count "$tmp/w0.err")" = "$one_steps" ] &&
    grep -q "between-graph (TF_CONFIG's sparseCluster), worker:0 leading" "$tmp/w0.out"; then
    ok ps_sparse_one_worker_equals_one_device "checksum=$sum steps=$steps"
else
    fail ps_sparse_one_worker_equals_one_device "exit ${task_status[worker:0]}/${task_status[ps:0]}, checksum '$sum' steps '$steps' (one_device $one_sum, $one_steps): $(tail -3 "$tmp/w0.err") $(tail -2 "$tmp/ps0.err")"
fi

# --- 2 workers, 2 ps tasks: the coordinated job's AUC; the workers' steps are the job's count,
# and worker 0's last checkpoint is at it, each ps task's shard beside it ---
three=("${ctr[@]}" --epochs 3)
run timeout 120 "$dtrain" launch -n 2 --ps 2 -- "$dtrain" "${three[@]}" --strategy parameter_server \
    --metrics-out "$tmp/co.json"
co_status=$status
co_auc=$(json_field "$tmp/co.json" test_auc 2> /dev/null)
base=$(free_base 12)
start_tf_task ps:0 ps0 "$(ps_config "$base" 0)" "${three[@]}" --model-dir "$tmp/md"
start_tf_task ps:1 ps1 "$(ps_config "$base" 1)" "${three[@]}" --model-dir "$tmp/md"
start_tf_task worker:1 w1 "$(worker_config "$base" 2 1)" "${three[@]}" --num-workers 2 \
    --model-dir "$tmp/md"
start_tf_task worker:0 w0 "$(worker_config "$base" 2 0)" "${three[@]}" --num-workers 2 \
    --model-dir "$tmp/md" \
    --metrics-out "$tmp/w0.json"
finish_tasks 120 worker:0 worker:1 ps:0 ps:1
auc=$(json_field "$tmp/w0.json" test_auc 2> /dev/null)
count=$(job_count "$tmp/w0.err")
s0=$(own_steps "$tmp/w0.err")
s1=$(own_steps "$tmp/w1.err")
if [ "$co_status" -eq 0 ] && [ "${task_status[worker:0]}" -eq 0 ] && [ "${task_status[worker:1]}" -eq 0 ] &&
    [ "${task_status[ps:0]}" -eq 0 ] && [ "${task_status[ps:1]}" -eq 0 ] && [ -n "$auc" ] &&
    [ -n "$count" ] && [ "$count" -eq "$((${s0:-0} + ${s1:-0}))" ] &&
    [ -s "$tmp/md/ckpt-$count.safetensors" ] && [ -s "$tmp/md/ckpt-$count.ps-0-of-2.safetensors" ] &&
    [ -s "$tmp/md/ckpt-$count.ps-1-of-2.safetensors" ] &&
    grep -q "worker:0 leading, 128 examples per step, asynchronous; data shard 0 of 2" "$tmp/w0.out" &&
    "$py" -c "import sys; sys.exit(0 if abs($auc - ${co_auc:-9}) <= 0.01 else 1)"; then
    ok ps_sparse_two_workers_two_ps_train_as_the_coordinated_job "auc=$auc coordinated=$co_auc; job's count $count = $s0 + $s1, worker 0's checkpoint ckpt-$count of 2 ps shards"
else
    fail ps_sparse_two_workers_two_ps_train_as_the_coordinated_job "exit ${task_status[worker:0]}/${task_status[worker:1]}/${task_status[ps:0]}/${task_status[ps:1]} (coordinated $co_status), auc '$auc' vs '$co_auc', count '$count' steps '$s0' '$s1': $(tail -3 "$tmp/w0.err") $(tail -2 "$tmp/w1.err")"
fi

# --- a worker killed mid-run and started again within --coordinator-timeout: it rejoins (its
# shard read again from the start, as TF 1.x's input_fn), worker 0 waits for it, the job ends
# and every task exits 0 ---
"$dtrain" data gen-ctr --rows 60000 --seed 13 --out "$tmp/long.svm" > "$tmp/gen2" 2>&1
fs2=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/gen2")
long=(train --data "libsvm:$tmp/long.svm" --test-data "libsvm:$tmp/test.svm" --feature-size "$fs2"
      --model deepfm --batch-size 64 --threads 1 --connect-timeout 20)
base=$(free_base 12)
again=("${long[@]}" --num-workers 2 --coordinator-timeout 20 --epochs 4)
start_tf_task ps:0 ps0 "$(ps_config "$base" 0)" "${again[@]}"
start_tf_task worker:0 w0 "$(worker_config "$base" 1 0)" "${again[@]}" --progress none \
    --metrics-out "$tmp/w0.json"
start_tf_task worker:1 w1 "$(worker_config "$base" 1 1)" "${again[@]}" --progress estimator
for _ in $(seq 1 600); do grep -q "step = 200 " "$tmp/w1.out" && break; sleep 0.1; done
kill -9 "${task_pid[worker:1]}"
wait "${task_pid[worker:1]}" 2> /dev/null
sleep 1
start_tf_task worker:1 w1b "$(worker_config "$base" 1 1)" "${again[@]}" --progress none
finish_tasks 180 worker:0 worker:1 ps:0
auc=$(json_field "$tmp/w0.json" test_auc 2> /dev/null)
if [ "${task_status[worker:0]}" -eq 0 ] && [ "${task_status[worker:1]}" -eq 0 ] &&
    [ "${task_status[ps:0]}" -eq 0 ] && grep -q "step = 200 " "$tmp/w1.out" &&
    grep -q "this worker ends its training" "$tmp/w1b.err" && [ -n "$auc" ] &&
    "$py" -c "import sys; sys.exit(0 if $auc > 0.6 else 1)"; then
    ok ps_sparse_worker_killed_and_started_again_rejoins "auc=$auc; worker:1 again: $(own_steps "$tmp/w1b.err") steps"
else
    fail ps_sparse_worker_killed_and_started_again_rejoins "exit ${task_status[worker:0]}/${task_status[worker:1]}/${task_status[ps:0]}, auc '$auc': $(tail -3 "$tmp/w0.err") $(tail -3 "$tmp/w1b.err")"
fi

# --- a worker killed for good: worker 0, done with its own data while worker 1 still trains,
# waits for it; killed, worker 1 is waited for only until its silence outlasts
# --coordinator-timeout, then worker 0 ends the job ---
base=$(free_base 12)
gone=("${long[@]}" --num-workers 4 --coordinator-timeout 4 --progress none)
start_tf_task ps:0 ps0 "$(ps_config "$base" 0)" "${gone[@]}"
start_tf_task worker:1 w1 "$(worker_config "$base" 1 1)" "${gone[@]}" --epochs 100
start_tf_task worker:0 w0 "$(worker_config "$base" 1 0)" "${gone[@]}" --epochs 2 \
    --metrics-out "$tmp/w0.json"
for _ in $(seq 1 1200); do grep -q "waits for 1 other worker" "$tmp/w0.err" && break; sleep 0.1; done
kill -9 "${task_pid[worker:1]}"
wait "${task_pid[worker:1]}" 2> /dev/null
t0=$(date +%s%N)
finish_tasks 60 worker:0 ps:0
waited=$((($(date +%s%N) - t0) / 1000000))
if [ "${task_status[worker:0]}" -eq 0 ] && [ "${task_status[ps:0]}" -eq 0 ] &&
    grep -q "worker:0 waits for 1 other worker to end" "$tmp/w0.err" &&
    grep -q "worker:0 ends its training" "$tmp/w0.err" && [ "$waited" -lt 30000 ]; then
    ok ps_sparse_worker_lost_for_good_is_waited_for_its_timeout "worker 0 ended ${waited} ms after the kill (--coordinator-timeout 4)"
else
    fail ps_sparse_worker_lost_for_good_is_waited_for_its_timeout "exit ${task_status[worker:0]}/${task_status[ps:0]} after $waited ms: $(tail -3 "$tmp/w0.err")"
fi

# --- strangers and named errors ---
base=$(free_base 12)
start_tf_task ps:0 ps0 "$(ps_config "$base" 0)" "${ctr[@]}" --coordinator-timeout 4
DTRAIN_CLUSTER_SECRET=not-the-job-secret-0123456789abcdef TF_CONFIG="$(worker_config "$base" 1 0)" \
    run "$dtrain" "${ctr[@]}" --connect-timeout 3
finish_tasks 30 ps:0
if [ "$status" -ne 0 ] && [ "${task_status[ps:0]}" -eq 138 ] &&
    grep -q "no worker has been heard from for 4 s" "$tmp/ps0.err"; then
    ok ps_sparse_stranger_refused_and_ps_without_workers_gives_up "stranger exit $status: $(tail -1 "$tmp/err" | head -c 160); ps exit 138"
else
    fail ps_sparse_stranger_refused_and_ps_without_workers_gives_up "stranger exit $status, ps exit ${task_status[ps:0]}: $(tail -2 "$tmp/err") $(tail -2 "$tmp/ps0.err")"
fi
# A worker whose own address is taken: its last line names that, not its coordinator's wait.
base=$(free_base 12)
"$py" -c "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', $((base + 10)))); s.listen(); time.sleep(60)" &
holder=$!
pids+=($holder)
sleep 0.5
start_tf_task ps:0 ps0 "$(ps_config "$base" 0)" "${ctr[@]}" --coordinator-timeout 20
TF_CONFIG="$(worker_config "$base" 1 0)" run "$dtrain" "${ctr[@]}" --connect-timeout 5
bind_status=$status
kill "$holder"
wait "$holder" 2> /dev/null
finish_tasks 30 ps:0
if [ "$bind_status" -ne 0 ] &&
    tail -1 "$tmp/err" | grep -q "binding tcp://127.0.0.1:$((base + 10)): Address already in use" &&
    [ "${task_status[ps:0]}" -eq 0 ]; then
    ok ps_sparse_worker_that_cannot_bind_names_why "exit $bind_status: $(tail -1 "$tmp/err")"
else
    fail ps_sparse_worker_that_cannot_bind_names_why "exit $bind_status, ps ${task_status[ps:0]}: $(tail -2 "$tmp/err")"
fi
TF_CONFIG='{"sparseCluster": {"worker": {}, "ps": []}, "task": {"type": "chief", "index": 0}}' \
    expect_error ps_sparse_chief_is_named 1 "sparseCluster (TFJob's enableDynamicWorker) gives a chief task no cluster" \
    "${ctr[@]}"
TF_CONFIG="$(worker_config "$base" 1 0)" expect_error ps_sparse_hybrid_is_named 1 \
    "trains between-graph, each worker on its own against the ps tasks: asynchronously only" \
    "${ctr[@]}" --ps-mode hybrid
TF_CONFIG="$(worker_config "$base" 1 3)" expect_error ps_sparse_worker_beyond_num_workers_is_named 1 \
    "worker:3 is not among the 2 workers of --num-workers" "${ctr[@]}" --num-workers 2

# --- nothing left ---
left=""
for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && left="$left $p"; done
open=$(listening "$base" 12)
if [ -z "$left" ] && [ -z "$open" ]; then ok ps_sparse_jobs_leave_nothing; else fail ps_sparse_jobs_leave_nothing "left:$left ports:$open"; fi
echo "$passed $failed" > "$counts"
