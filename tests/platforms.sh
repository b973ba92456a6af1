#!/usr/bin/env bash
# The platforms simulated on this machine, every task (or node) in its own network namespace with
# its own address on a bridge and a hosts file per namespace (ip netns bind-mounts
# /etc/netns/NS/hosts over /etc/hosts) playing DNS:
#   - a Kubeflow TFJob, each task started with the operator's exact TF_CONFIG (hosts
#     NAME-TYPE-I.NAMESPACE.svc:2222, "environment": "cloud", the evaluator apart); the workers'
#     names appear in DNS only 5 s after the chief starts (headless-service records of pods not
#     ready yet); then ps:1 is killed and started again under the same name at a new address, as
#     a restarted pod is; the job completes, its AUC within 0.003 of the same job run whole on
#     loopback;
#   - a Slurm step of 2 nodes x 2 tasks through the slurm resolver: the checksum of launch -n 4;
#   - a SageMaker job on 2 hosts with the ps distribution, Pipe mode and the failure file;
# and no namespace, process or hosts file is left behind.
# usage: tests/platforms.sh BUILD_DIR COUNTS_FILE    (root: network namespaces)
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
tmp=$(mktemp -d /tmp/dtrain-platforms-XXXXXX)
passed=0
failed=0
. "$(dirname "$0")/lib.sh"
tag=dt$$
sw=${tag}sw
namespaces=()
pids=()
cleanup() {
    local p ns
    for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2> /dev/null; done
    for ns in "${namespaces[@]}" "$sw"; do
        ip netns del "$ns" 2> /dev/null
        rm -rf "/etc/netns/$ns"
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
export DTRAIN_CLUSTER_SECRET=platforms-test-secret-0123456789abcdef
# What the manifest gives every pod of one submission (deploy/kubernetes/tfjob.yaml): the job and a
# nonce of its own, so that a ps pod started again restores the snapshots of this job only.
export DTRAIN_JOB_ID=ctr-deepfm
DTRAIN_JOB_NONCE=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export DTRAIN_JOB_NONCE

if [ "$(id -u)" -ne 0 ] || ! command -v ip > /dev/null || ! ip netns add "$sw" 2> "$tmp/err"; then
    fail platforms_network_namespaces "root and ip netns needed (iproute2): $(cat "$tmp/err" 2> /dev/null)"
    echo "$passed $failed" > "$counts"
    exit 0
fi
ip netns exec "$sw" ip link add br0 type bridge
ip netns exec "$sw" ip link set br0 up

# host NAME K: a namespace for a task, with address 10.213.0.K on the bridge and its own hosts file.
host() {
    local ns=$tag$1
    ip netns add "$ns" || return 1
    namespaces+=("$ns")
    mkdir -p "/etc/netns/$ns"
    : > "/etc/netns/$ns/hosts"
    ip link add "v$tag$2" netns "$sw" type veth peer name eth0 netns "$ns"
    ip netns exec "$sw" ip link set "v$tag$2" master br0 up
    ip netns exec "$ns" ip addr add "10.213.0.$2/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
}
# wait_all SECONDS PID...: waits for each (wait_pid); sets statuses to their exit statuses, one
# after the other ("0000" when all four succeeded).
wait_all() {
    local limit=$1 p
    shift
    statuses=""
    for p in "$@"; do
        wait_pid "$p" "$limit"
        statuses="$statuses$status"
    done
}
# dns: every namespace's hosts file from $tmp/dns, written in place (the bind mounts stay).
dns() {
    local ns
    for ns in "${namespaces[@]}"; do
        { echo "127.0.0.1 localhost"; cat "$tmp/dns"; } > "/etc/netns/$ns/hosts"
    done
}

"$dtrain" data gen-ctr --rows 60000 --seed 13 --out "$tmp/train.svm" > "$tmp/gen" 2>&1
"$dtrain" data gen-ctr --rows 4000 --seed 14 --out "$tmp/test.svm" > /dev/null 2>&1
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/gen")
job=(train --data "libsvm:$tmp/train.svm" --test-data "libsvm:$tmp/test.svm" --model deepfm
     --feature-size "$fs"
     --batch-size 64 --threads 1 --progress estimator --log-step-count-steps 50
     --strategy parameter_server --seed 1 --connect-timeout 60)

# --- the reference: the same job whole, on loopback ---
run timeout 300 "$dtrain" launch -n 3 --ps 2 --chief -- "$dtrain" "${job[@]}" \
    --metrics-out "$tmp/whole.json"
whole_auc=$(json_field "$tmp/whole.json" test_auc 2> /dev/null)

# --- the TFJob: chief, 2 workers, 2 ps, evaluator ---
name=ctr-deepfm
svc() { echo "$name-$1-$2.ml.svc"; }
k=1
for t in chief:0 worker:0 worker:1 ps:0 ps:1 evaluator:0; do
    host "${t/:/}" "$k" || { fail platforms_tfjob_namespaces "ip netns add failed"; break; }
    echo "10.213.0.$k $(svc "${t%:*}" "${t#*:}")" >> "$tmp/all"
    k=$((k + 1))
done
cluster="{\"chief\": [\"$(svc chief 0):2222\"], \"worker\": [\"$(svc worker 0):2222\", \"$(svc worker 1):2222\"], \"ps\": [\"$(svc ps 0):2222\", \"$(svc ps 1):2222\"]}"
tf_config() { echo "{\"cluster\": $cluster, \"task\": {\"type\": \"$1\", \"index\": $2}, \"environment\": \"cloud\"}"; }
# start TYPE INDEX: the task's pod, its pid in task_pid[TYPE:INDEX]
declare -A task_pid
start() {
    local ns=$tag$1$2
    if [ "$1" = evaluator ]; then
        ip netns exec "$ns" env TF_CONFIG="$(tf_config "$1" "$2")" "$dtrain" evaluate \
            --model-dir "$tmp/model" --test-data "libsvm:$tmp/test.svm" --field-size 39 --watch \
            --watch-timeout 120 > "$tmp/$1$2.out" 2> "$tmp/$1$2.err" &
    else
        ip netns exec "$ns" env TF_CONFIG="$(tf_config "$1" "$2")" "$dtrain" "${job[@]}" \
            --model-dir "$tmp/model" --ps-snapshot-secs 0.5 --metrics-out "$tmp/$1$2.json" \
            >> "$tmp/$1$2.out" 2>> "$tmp/$1$2.err" &
    fi
    task_pid[$1:$2]=$!
    pids+=($!)
}
# The workers' pods are not ready yet: their names are not in DNS.
grep -v -- "-worker-" "$tmp/all" > "$tmp/dns"
dns
for t in ps:0 ps:1 chief:0 evaluator:0 worker:0 worker:1; do start "${t%:*}" "${t#*:}"; done
sleep 5
cp "$tmp/all" "$tmp/dns"
dns
# ps:1's pod killed once it has written a snapshot and the job is past step 300, then started
# again under its name at a new address.
for _ in $(seq 1 1200); do
    grep -q "step = [3-9][0-9][0-9] " "$tmp/chief0.out" 2> /dev/null &&
        grep -q "snapshots of this ps go to" "$tmp/ps1.err" 2> /dev/null && break
    sleep 0.05
done
waited_for_workers=$(grep -c "does not resolve" "$tmp/worker0.err" "$tmp/worker1.err" "$tmp/chief0.err" 2> /dev/null | awk -F: '{s += $2} END {print s + 0}')
kill -9 "${task_pid[ps:1]}"
wait "${task_pid[ps:1]}" 2> /dev/null
ip netns del "${tag}ps1"
host ps1b 50
sed -i "s/^10\.213\.0\.5 /10.213.0.50 /" "$tmp/all"
cp "$tmp/all" "$tmp/dns"
dns
# The pod comes back as the same task: its namespace is new, its name the old one.
task_ns_of_ps1=${tag}ps1b
ip netns exec "$task_ns_of_ps1" env TF_CONFIG="$(tf_config ps 1)" "$dtrain" "${job[@]}" \
    --model-dir "$tmp/model" --ps-snapshot-secs 0.5 >> "$tmp/ps1.out" 2>> "$tmp/ps1.err" &
task_pid[ps:1]=$!
pids+=($!)
wait_pid "${task_pid[chief:0]}" 240
chief_status=$status
statuses="chief:$chief_status"
for t in worker:0 worker:1 ps:0 ps:1 evaluator:0; do
    wait_pid "${task_pid[$t]}" 120
    statuses="$statuses $t:$status"
done
auc=$(json_field "$tmp/chief0.json" test_auc 2> /dev/null)
gap=$(python3 -c "print(abs(float('${auc:-0}') - float('${whole_auc:-1}')))")
if [ "$statuses" = "chief:0 worker:0:0 worker:1:0 ps:0:0 ps:1:0 evaluator:0:0" ] &&
    python3 -c "import sys; sys.exit(0 if $gap <= 0.003 else 1)" &&
    grep -q "dtrain server: restored [1-9][0-9]* table shards" "$tmp/ps1.err" && [ "$waited_for_workers" -gt 0 ]; then
    ok platforms_tfjob_late_dns_and_a_ps_at_a_new_address "AUC $auc vs $whole_auc whole (gap $gap); $waited_for_workers waits for unresolved names; ps:1 back at 10.213.0.50: $(grep -m1 "dtrain server: restored" "$tmp/ps1.err")"
else
    fail platforms_tfjob_late_dns_and_a_ps_at_a_new_address "exits $statuses, AUC $auc vs $whole_auc, waits $waited_for_workers: $(tail -2 "$tmp/chief0.err") | $(tail -2 "$tmp/ps1.err") | $(tail -1 "$tmp/worker0.err")"
fi

# --- Slurm: an srun step of 2 nodes x 2 tasks, each node a namespace (cn01, cn02 in DNS), the
#     variables srun sets with a compressed node list; the slurm resolver finds the cluster and
#     synchronous training ends with the checksum of dtrain launch -n 4 ---
sync=(train --data "libsvm:$tmp/train.svm" --test-data none --feature-size "$fs" --model deepfm
      --optimizer adam --lr 5e-4 --batch-size 64 --shuffle-buffer 0 --progress none --seed 1
      --threads 1 --max-steps 20 --connect-timeout 60)
run timeout 120 "$dtrain" launch -n 4 -- "$dtrain" "${sync[@]}" --metrics-out "$tmp/launch4.json"
want=$(json_field "$tmp/launch4.json" param_checksum 2> /dev/null)
: > "$tmp/all"
for n in 1 2; do
    host "cn0$n" $((20 + n))
    echo "10.213.0.$((20 + n)) cn0$n" >> "$tmp/all"
done
cp "$tmp/all" "$tmp/dns"
dns
step_pids=()
for r in 0 1 2 3; do
    ip netns exec "${tag}cn0$((r / 2 + 1))" env SLURM_PROCID=$r SLURM_NTASKS=4 \
        SLURM_STEP_NUM_TASKS=4 SLURM_NNODES=2 SLURM_NODEID=$((r / 2)) SLURM_LOCALID=$((r % 2)) \
        SLURM_JOB_NODELIST='cn[01-02]' SLURM_STEP_NODELIST='cn[01-02]' \
        SLURM_STEP_TASKS_PER_NODE='2(x2)' "$dtrain" "${sync[@]}" --port-base 8888 \
        --metrics-out "$tmp/slurm.$r.json" > "$tmp/slurm.$r.out" 2> "$tmp/slurm.$r.err" &
    step_pids+=($!)
    pids+=($!)
done
wait_all 120 "${step_pids[@]}"
got=$(json_field "$tmp/slurm.0.json" param_checksum 2> /dev/null)
if [ "$statuses" = 0000 ] && [ -n "$want" ] && [ "$got" = "$want" ] &&
    grep -q "the slurm resolver places this process as worker:3 (cn02:8889), of 4 training tasks" "$tmp/slurm.3.err"; then
    ok platforms_slurm_step_equals_launch "checksum $got, dtrain launch -n 4's; nodes cn01, cn02 in namespaces"
else
    fail platforms_slurm_step_equals_launch "exits $statuses, checksum $got vs $want: $(tail -2 "$tmp/slurm.0.err" "$tmp/slurm.3.err")"
fi

# --- SageMaker: two hosts (algo-1, algo-2 in DNS), each a namespace with its own /opt/ml
#     (resourceconfig.json, hyperparameters.json with the ps distribution on), the container's
#     entry (deploy/sagemaker/entry.sh) running the host's ps beside its master or worker; the
#     training channel in Pipe mode (a FIFO per epoch, fed by a writer per host); the model lands
#     in the model directory. A bad hyperparameter writes its reason to /opt/ml/output/failure ---
: > "$tmp/all"
for h in 1 2; do
    host "algo$h" $((30 + h))
    echo "10.213.0.$((30 + h)) algo-$h" >> "$tmp/all"
done
cp "$tmp/all" "$tmp/dns"
dns
head -n 6400 "$tmp/train.svm" > "$tmp/half.svm"
sm_pids=()
for h in 1 2; do
    root=$tmp/sm$h
    mkdir -p "$root/input/config" "$root/input/data" "$root/model"
    printf '{"current_host": "algo-%d", "hosts": ["algo-1", "algo-2"], "network_interface_name": "eth0"}' \
        "$h" > "$root/input/config/resourceconfig.json"
    cat > "$root/input/config/hyperparameters.json" << EOF
{"sagemaker_parameter_server_enabled": true, "sagemaker_program": "train",
 "data": "libsvm:$root/input/data/train_{epoch}", "test_data": "libsvm:$tmp/test.svm",
 "feature_size": "$fs", "model": "deepfm", "batch_size": "64", "epochs": "2", "seed": "1",
 "threads": "1", "progress": "none", "strategy": "parameter_server", "shuffle_buffer": "0",
 "connect_timeout": "60", "metrics_out": "$tmp/sm$h.json"}
EOF
    mkfifo "$root/input/data/train_0" "$root/input/data/train_1"
    (cat "$tmp/half.svm" > "$root/input/data/train_0" && cat "$tmp/half.svm" > "$root/input/data/train_1") &
    pids+=($!)
    ip netns exec "${tag}algo$h" env DTRAIN_SAGEMAKER_ROOT="$root" SM_MODEL_DIR="$root/model" \
        DTRAIN_MODEL_DIR="$tmp/sm_model" DTRAIN="$dtrain" \
        sh "$(dirname "$0")/../deploy/sagemaker/entry.sh" train --model-dir "$tmp/sm_model" \
        > "$tmp/sm$h.out" 2> "$tmp/sm$h.err" &
    sm_pids+=($!)
    pids+=($!)
done
wait_all 180 "${sm_pids[@]}"
steps=$(json_field "$tmp/sm1.json" steps 2> /dev/null)
run "$dtrain" evaluate --model-dir "$tmp/sm_model" --test-data "libsvm:$tmp/test.svm" --field-size 39
if [ "$statuses" = 00 ] && [ "${steps:-0}" -ge 190 ] && [ "$status" -eq 0 ] &&
    grep -q "the sagemaker resolver places this process as chief:0 (algo-1:2222)" "$tmp/sm1.err" &&
    grep -q "as ps:1 (algo-2:2223)" "$tmp/sm2.err" && [ ! -e "$tmp/sm1/output/failure" ]; then
    ok platforms_sagemaker_ps_distribution_in_pipe_mode "$steps steps over 2 hosts x (ps + master/worker), 2 epochs from FIFOs; $(grep -o "auc = [0-9.]*" "$tmp/out") from the model directory"
else
    fail platforms_sagemaker_ps_distribution_in_pipe_mode "exits $statuses, steps $steps, evaluate $status: $(tail -2 "$tmp/sm1.err" "$tmp/sm2.err" "$tmp/err")"
fi
sed -i 's/"epochs": "2"/"epochs": "two"/' "$tmp/sm1/input/config/hyperparameters.json"
ip netns exec "${tag}algo1" env DTRAIN_SAGEMAKER_ROOT="$tmp/sm1" "$dtrain" train > "$tmp/out" 2> "$tmp/err"
status=$?
if [ "$status" -eq 2 ] && grep -q -- "--epochs" "$tmp/sm1/output/failure" 2> /dev/null; then
    ok platforms_sagemaker_failure_file "$(cat "$tmp/sm1/output/failure")"
else fail platforms_sagemaker_failure_file "exit $status: $(cat "$tmp/err")"; fi

# --- nothing left: processes, namespaces, hosts files ---
for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
for ns in "${namespaces[@]}" "$sw"; do ip netns del "$ns" 2> /dev/null; rm -rf "/etc/netns/$ns"; done
left=$(ip netns list | grep -c "^$tag")
left_files=$(ls -d /etc/netns/"$tag"* 2> /dev/null | wc -l)
alive=""
for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && alive="$alive $p"; done
if [ "$left" -eq 0 ] && [ "$left_files" -eq 0 ] && [ -z "$alive" ]; then
    ok platforms_leave_nothing "namespaces, hosts files and processes gone"
else fail platforms_leave_nothing "$left namespaces, $left_files hosts dirs, processes$alive"; fi
namespaces=()
echo "$passed $failed" > "$counts"
