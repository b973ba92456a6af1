#!/usr/bin/env bash
# The TF_CONFIGs the platforms write, run as they write them: tasks named by host names (as
# Kubernetes names pods: "job-worker-0.team.svc:2222"), here "localhost", bind the address their
# name resolves to and find each other by name; the chief called "master" (TF 1.x, SageMaker) is
# the chief. Each job ends 0 with one_device's parameters (one worker), and leaves nothing behind.
# The files of deploy/ run as their platforms would run them; SageMaker's failure file and Pipe
# mode; --bind-all. Exit codes: 2 for usage, 1 for a bad config, 138 (retryable) for a lost peer.
# (tests/platforms.sh runs whole TFJob, Slurm and SageMaker jobs in network namespaces.)
# usage: tests/deploy.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
tmp=$(mktemp -d /tmp/dtrain-deploy-XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; done; rm -rf "$tmp"' EXIT
passed=0
failed=0
. "$(dirname "$0")/lib.sh"
export DTRAIN_CLUSTER_SECRET=deploy-test-secret-0123456789abcdef

"$dtrain" data gen-ctr --rows 4000 --seed 11 --out "$tmp/train.svm" > "$tmp/gen" 2>&1
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/gen")
ctr=(train --data "libsvm:$tmp/train.svm" --test-data none --feature-size "$fs" --model deepfm
     --optimizer adam --lr 5e-4 --batch-size 128 --shuffle-buffer 0 --progress none --seed 1
     --threads 1 --max-steps 30 --connect-timeout 30)
run "$dtrain" "${ctr[@]}" --metrics-out "$tmp/one.json"
one=$(json_field "$tmp/one.json" param_checksum 2> /dev/null)

# run_cluster NAME CHIEF_JOB HOST: a chief (under CHIEF_JOB, "chief" or "master"), a worker and a
# ps, every address HOST:port, each task started with its TF_CONFIG by hand, as an operator does;
# the chief's status in status, its metrics in $tmp/NAME.json.
run_cluster() {
    local name=$1 chief=$2 host=$3 base task config k
    base=$(free_base 3)
    local cluster="{\"$chief\": [\"$host:$base\"], \"worker\": [\"$host:$((base + 1))\"], \"ps\": [\"$host:$((base + 2))\"]}"
    local task_pids=()
    for task in "ps 0" "worker 0" "$chief 0"; do
        read -r type k <<< "$task"
        config="{\"cluster\": $cluster, \"task\": {\"type\": \"$type\", \"index\": $k}, \"environment\": \"cloud\"}"
        if [ "$type" = ps ]; then
            TF_CONFIG="$config" "$dtrain" server > "$tmp/$name.$type.out" 2> "$tmp/$name.$type.err" &
        else
            TF_CONFIG="$config" "$dtrain" "${ctr[@]}" --strategy parameter_server \
                --metrics-out "$tmp/$name.$type.json" > "$tmp/$name.$type.out" 2> "$tmp/$name.$type.err" &
        fi
        task_pids+=($!)
        pids+=($!)
    done
    wait_pid "${task_pids[2]}" 120
    wait "${task_pids[2]}" 2> /dev/null
    status=$?
    for k in 0 1; do
        wait_pid "${task_pids[$k]}" 30
        kill -9 "${task_pids[$k]}" 2> /dev/null
        wait "${task_pids[$k]}" 2> /dev/null
    done
    cp "$tmp/$name.$chief.json" "$tmp/$name.json" 2> /dev/null
    cluster_base=$base
}

for spec in "names_not_addresses|chief|localhost" "master_is_the_chief|master|127.0.0.1"; do
    IFS='|' read -r name chief host <<< "$spec"
    run_cluster "$name" "$chief" "$host"
    got=$(json_field "$tmp/$name.json" param_checksum 2> /dev/null)
    if [ "$status" -eq 0 ] && [ -n "$one" ] && [ "$got" = "$one" ]; then
        ok "deploy_$name" "checksum $got, one_device's"
    else
        fail "deploy_$name" "exit $status, checksum $got vs $one: $(tail -2 "$tmp/$name.$chief.err") $(tail -2 "$tmp/$name.worker.err")"
    fi
    left=""
    for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && left="$left $p"; done
    for port in $(listening "$cluster_base" 2); do left="$left port:$port"; done
    if [ -z "$left" ]; then ok "deploy_${name}_leaves_nothing"; else fail "deploy_${name}_leaves_nothing" "left:$left"; fi
done

# --- SageMaker's failure file: a job whose hyperparameter is bad fails with its reason in
#     /opt/ml/output/failure (tests/platforms.sh runs whole SageMaker jobs in namespaces) ---
mkdir -p "$tmp/sm1/input/config"
printf '{"current_host": "127.0.0.1", "hosts": ["127.0.0.1"]}' > "$tmp/sm1/input/config/resourceconfig.json"
printf '{"sagemaker_program": "train", "data": "libsvm:%s", "max_steps": "30"}' "$tmp/train.svm" \
    > "$tmp/sm1/input/config/hyperparameters.json"
sed -i 's/"max_steps": "30"/"max_steps": "none"/' "$tmp/sm1/input/config/hyperparameters.json"
DTRAIN_SAGEMAKER_ROOT="$tmp/sm1" run "$dtrain" train
if [ "$status" -eq 2 ] && grep -q -- "--max-steps" "$tmp/sm1/output/failure" 2> /dev/null &&
    [ "$(head -c 2000 "$tmp/sm1/output/failure")" = "$(tail -1 "$tmp/err" | sed 's/^dtrain: error: //')" ]; then
    ok deploy_sagemaker_failure_file "$(cat "$tmp/sm1/output/failure")"
else fail deploy_sagemaker_failure_file "exit $status: $(cat "$tmp/err") / $(cat "$tmp/sm1/output/failure" 2> /dev/null)"; fi

# --- SageMaker's channels: without --data, SM_CHANNEL_TRAIN's files are the data and
#     SM_CHANNEL_TEST's the test data, in the format of the data_format hyperparameter; the
#     checkpoints go to SM_MODEL_DIR ---
mkdir -p "$tmp/smc/input/config" "$tmp/smc/input/data/train" "$tmp/smc/input/data/test"
printf '{"current_host": "algo-1", "hosts": ["algo-1"]}' > "$tmp/smc/input/config/resourceconfig.json"
printf '{"data_format": "libsvm", "max_steps": "5", "feature_size": "%s", "model": "lr", "progress": "none"}' \
    "$fs" > "$tmp/smc/input/config/hyperparameters.json"
head -n 1000 "$tmp/train.svm" > "$tmp/smc/input/data/train/part-0.svm"
head -n 500 "$tmp/train.svm" > "$tmp/smc/input/data/test/part-0.svm"
DTRAIN_SAGEMAKER_ROOT="$tmp/smc" SM_CHANNEL_TRAIN="$tmp/smc/input/data/train" \
    SM_CHANNEL_TEST="$tmp/smc/input/data/test" SM_MODEL_DIR="$tmp/smc/model" run "$dtrain" train
if [ "$status" -eq 0 ] && grep -q "^Trained 5 steps" "$tmp/out" && grep -q "^Test loss" "$tmp/out" &&
    [ -e "$tmp/smc/model/ckpt-5.safetensors" ]; then
    ok deploy_sagemaker_channels_and_model_dir "$(grep "^Test loss" "$tmp/out")"
else fail deploy_sagemaker_channels_and_model_dir "exit $status: $(tail -2 "$tmp/out" "$tmp/err")"; fi

# --- deploy/: every file parsed, the TF_CONFIG or environment its platform gives each task run
#     through dtrain cluster check, every dtrain command line it holds parsed by dtrain ---
py=/usr/bin/python3
[ -x "$py" ] || py=python3
mkdir -p "$tmp/deploy_files"
"$py" "$(dirname "$0")/progs/deploy_files.py" "$dtrain" "$(dirname "$0")/../deploy" \
    "$tmp/deploy_files" > "$tmp/deploy_files.out" 2>&1
df_status=$?
n_ok=$(grep -c "^ok " "$tmp/deploy_files.out")
if [ "$df_status" -eq 0 ] && [ "$n_ok" -ge 36 ] && ! grep -q "^FAIL" "$tmp/deploy_files.out"; then
    ok deploy_files_run_as_their_platforms_run_them "$n_ok checks: TFJob (and its dynamic workers), Indexed Job, MPIJob, Slurm, SageMaker"
else
    fail deploy_files_run_as_their_platforms_run_them "exit $df_status, $n_ok ok: $(grep -v "^ok " "$tmp/deploy_files.out" | head -5)"
fi

# --- SageMaker's Pipe mode: epoch e of a channel is the FIFO CHANNEL_e, fed by a writer as
#     SageMaker feeds it; --data libsvm:DIR/train_{epoch} reads each pass from its own FIFO ---
mkdir -p "$tmp/pipe"
head -n 2000 "$tmp/train.svm" > "$tmp/pipe.svm"
mkfifo "$tmp/pipe/train_0" "$tmp/pipe/train_1"
(cat "$tmp/pipe.svm" > "$tmp/pipe/train_0" && cat "$tmp/pipe.svm" > "$tmp/pipe/train_1") &
writer=$!
pids+=("$writer")
run timeout 60 "$dtrain" train --data "libsvm:$tmp/pipe/train_{epoch}" --test-data none \
    --feature-size "$fs" --model deepfm --batch-size 100 --epochs 2 --shuffle-buffer 0 \
    --threads 1 --progress none --metrics-out "$tmp/pipe.json"
wait_pid "$writer" 5
pipe_steps=$(json_field "$tmp/pipe.json" steps 2> /dev/null)
if [ "$pipe_steps" = 40 ] && [ "$status" -eq 0 ]; then
    ok deploy_sagemaker_pipe_mode_a_fifo_per_epoch "2 epochs of 20 steps, each from its own FIFO"
else fail deploy_sagemaker_pipe_mode_a_fifo_per_epoch "steps $pipe_steps, writer $status: $(tail -2 "$tmp/err")"; fi

# --- --bind-all: a task listens on every interface instead of its own address (a ps task
#     here at 127.0.0.1: there without the flag, 0.0.0.0 with it), as /proc/net/tcp shows ---
base=$(free_base 2)
bound=""
for flag in "" --bind-all; do
    TF_CONFIG="{\"cluster\": {\"chief\": [\"127.0.0.1:$base\"], \"ps\": [\"127.0.0.1:$((base + 1))\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}" \
        "$dtrain" server $flag --coordinator-timeout 10 > "$tmp/bind.out" 2>&1 &
    bind_pid=$!
    pids+=("$bind_pid")
    hex=$(printf ':%04X' $((base + 1)))
    addr=""
    for _ in $(seq 1 100); do
        addr=$(awk -v h="$hex" '$2 ~ h"$" && $4 == "0A" {print $2}' /proc/net/tcp)
        [ -n "$addr" ] && break
        sleep 0.05
    done
    bound="$bound ${addr:-none}"
    kill "$bind_pid" 2> /dev/null
    wait "$bind_pid" 2> /dev/null
done
if [ "$bound" = " 0100007F$hex 00000000$hex" ]; then
    ok deploy_bind_all_listens_on_every_interface "listening at$bound (127.0.0.1, then 0.0.0.0)"
else fail deploy_bind_all_listens_on_every_interface "listening at$bound: $(cat "$tmp/bind.out")"; fi

# --- dtrain cluster check: the platforms' TF_CONFIGs as their tasks see them ---
run "$dtrain" cluster check --tf-config '{"cluster": {"master": ["algo-1:2222"], "ps": ["algo-1:2223", "algo-2:2223"], "worker": ["algo-2:2222"]}, "environment": "cloud", "task": {"type": "master", "index": 0}}'
if [ "$status" -eq 0 ] && grep -qx "task: chief:0 (algo-1:2222), training rank 0 of 2, the chief" "$tmp/out" &&
    grep -qx "ps:1 (algo-2:2223)" "$tmp/out" && grep -q "^chief:0 (algo-1:2222)  (this task)  (TF_CONFIG's master)" "$tmp/out"; then
    ok deploy_cluster_check_of_sagemaker_tf_config "$(head -1 "$tmp/out")"
else fail deploy_cluster_check_of_sagemaker_tf_config "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi
TF_CONFIG='{"cluster": {"chief": ["localhost:2222"], "worker": ["ctr-worker-0.team.svc.cluster.local:2222"]}, "environment": "cloud", "task": {"type": "chief", "index": 0}}' \
    run "$dtrain" cluster check --resolve
if [ "$status" -eq 138 ] && grep -q "^chief:0 (localhost:2222) at 127.0.0.1" "$tmp/out" &&
    grep -q "worker:0 (ctr-worker-0.team.svc.cluster.local:2222): ctr-worker-0.team.svc.cluster.local does not resolve" "$tmp/err"; then
    ok deploy_cluster_check_names_a_host_that_does_not_resolve "$(tail -1 "$tmp/err")"
else fail deploy_cluster_check_names_a_host_that_does_not_resolve "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi

# --- exit codes an operator acts on: usage 2, a permanent failure 1, a transient one 138, the
#     reason on the last line ---
run "$dtrain" train --no-such-flag
last=$(tail -1 "$tmp/err")
if [ "$status" -eq 2 ] && [[ "$last" == "dtrain: error: "* ]]; then
    ok deploy_exit_2_for_usage "$last"
else fail deploy_exit_2_for_usage "exit $status: $last"; fi
TF_CONFIG='{"cluster": {"chief": ["127.0.0.1:2222"], "master": ["127.0.0.1:2223"]}, "task": {"type": "chief", "index": 0}}' \
    run "$dtrain" "${ctr[@]}" --strategy parameter_server
last=$(tail -1 "$tmp/err")
if [ "$status" -eq 1 ] && [[ "$last" == *"both 'chief' and 'master'"* ]]; then
    ok deploy_exit_1_for_a_bad_config "$last"
else fail deploy_exit_1_for_a_bad_config "exit $status: $last"; fi
# A ps killed for good (no operator restarts it here): the chief waits --ps-recovery-timeout,
# then exits 138 naming the ps.
base=$(free_base 3)
cluster="{\"chief\": [\"127.0.0.1:$base\"], \"worker\": [\"127.0.0.1:$((base + 1))\"], \"ps\": [\"127.0.0.1:$((base + 2))\"]}"
long=(train --data "libsvm:$tmp/train.svm" --test-data none --feature-size "$fs" --model deepfm
      --batch-size 32 --threads 1 --epochs 20 --connect-timeout 30 --strategy parameter_server
      --ps-recovery-timeout 2)
TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"ps\", \"index\": 0}}" \
    "$dtrain" server > "$tmp/lost.ps.out" 2>&1 &
ps_pid=$!
pids+=("$ps_pid")
TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": 0}}" \
    "$dtrain" "${long[@]}" --progress none > "$tmp/lost.worker.out" 2> "$tmp/lost.worker.err" &
worker_pid=$!
pids+=("$worker_pid")
TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"chief\", \"index\": 0}}" \
    "$dtrain" "${long[@]}" --progress estimator --log-step-count-steps 10 \
    > "$tmp/lost.chief.out" 2> "$tmp/lost.chief.err" &
chief_pid=$!
pids+=("$chief_pid")
for _ in $(seq 1 300); do grep -q "step = [1-9][0-9]* " "$tmp/lost.chief.out" && break; sleep 0.05; done
kill -9 "$ps_pid"
wait_pid "$chief_pid" 60
wait "$chief_pid" 2> /dev/null
chief_status=$?
wait_pid "$worker_pid" 60
kill -9 "$worker_pid" 2> /dev/null
wait "$worker_pid" 2> /dev/null
wait "$ps_pid" 2> /dev/null
last=$(tail -1 "$tmp/lost.chief.err")
if [ "$chief_status" -eq 138 ] && [[ "$last" == *"ps:0"*"(exit 138: transient, a restart may succeed)" ]]; then
    ok deploy_exit_138_for_a_lost_peer "$last"
else fail deploy_exit_138_for_a_lost_peer "exit $chief_status: $last"; fi
left=""
for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && left="$left $p"; done
for port in $(listening "$base" 2); do left="$left port:$port"; done
if [ -z "$left" ]; then ok deploy_lost_peer_leaves_nothing; else fail deploy_lost_peer_leaves_nothing "left:$left"; fi

echo "$passed $failed" > "$counts"
