#!/usr/bin/env bash
# Parameter-server tasks as real processes on loopback: `dtrain server` ps tasks hold a table's
# shards (div and mod placement) and train it against tests/progs/ps_check as the chief, bit for
# bit as one table in one process; they exit 0 when the chief stops them, and 1 naming the
# coordinator when it never comes or is killed (--coordinator-timeout); strangers (random bytes,
# a wrong secret) are refused while the job completes; a push altered or replayed on the path
# is dropped with its connection and never applied; invalid clusters are named errors.
# Training under `dtrain launch`: one worker equals one_device bit for bit in every mode, hybrid
# equals multi_worker_mirrored; a worker killed or gone silent is lost, its function re-queued,
# and it rejoins when started again. After each check no process of ours, no listening port and
# no shared-memory segment is left. usage: tests/ps.sh BUILD COUNTS
set -u
build=$1
counts=$2
dtrain="$(cd "$build" && pwd)/dtrain"
check="$(cd "$build" && pwd)/tests/ps_check"
tmp=$(mktemp -d /tmp/dtrain-ps-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
passed=0
failed=0
. "$(dirname "$0")/lib.sh"
export DTRAIN_CLUSTER_SECRET=ps-test-secret-0123456789abcdef
[ -x "$check" ] || { fail ps_check_built "$check is missing (make unit-tests)"; echo "$passed $failed" > "$counts"; exit 0; }

# tf_config BASE N_PS TASK: the TF_CONFIG of TASK in a cluster of the chief at BASE and N_PS ps
# tasks after it, as dtrain launch writes it.
tf_config() {
    "$dtrain" launch -n 0 --ps "$2" --base-port "$1" --print-tf-config "$3"
}

# start_ps BASE N_PS [FLAGS...]: starts the N_PS ps tasks; their pids in ps_pids.
start_ps() {
    local base=$1 n=$2 k
    shift 2
    ps_pids=()
    for ((k = 0; k < n; k++)); do
        local config
        config=$(tf_config "$base" "$n" "ps:$k")
        TF_CONFIG="$config" "$dtrain" server "$@" > "$tmp/ps$k.out" 2> "$tmp/ps$k.err" &
        ps_pids[$k]=$!
        pids+=($!)
    done
}


# no_leftovers NAME BASE N: none of our processes runs, no port BASE..BASE+N listens, and no
# shared-memory segment (hybrid's ring meets in one, named dtrain-<creator pid>-...) outlived
# the process that made it.
no_leftovers() {
    local name=$1 base=$2 n=$3 p live="" port owner
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && live="$live $p"; done
    for p in /dev/shm/dtrain-*; do
        [ -e "$p" ] || continue
        owner=${p#/dev/shm/dtrain-}
        owner=${owner%%-*}
        kill -0 "$owner" 2>/dev/null || live="$live $p"
    done
    for port in $(listening "$base" "$n"); do live="$live port:$port"; done
    if [ -z "$live" ]; then ok "$name"; else fail "$name" "left behind:$live"; fi
}

# ---- a table trained through 2 and 3 ps tasks, div and mod, equal to one local table ----
for spec in "2 1000 8 5 div" "3 997 16 3 mod" "2 50 4 2 mod"; do
    read -r nps rows dim shards strat <<< "$spec"
    base=$(free_base $((nps + 1)))
    start_ps "$base" "$nps" --coordinator-timeout 20
    TF_CONFIG="$(tf_config "$base" "$nps" chief:0)" run "$check" "$rows" "$dim" "$shards" "$strat" 40
    name="ps_${nps}ps_${shards}shards_$strat"
    if [ "$status" -ne 0 ] || ! grep -q "ps_check: ok" "$tmp/out"; then
        fail "$name" "ps_check exit $status: $(head -c 400 "$tmp/err")"
        for p in "${ps_pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    else
        bad=""
        for ((k = 0; k < nps; k++)); do
            wait_pid "${ps_pids[$k]}" 10
            [ "$status" -eq 0 ] && grep -q "stopped by the coordinator" "$tmp/ps$k.err" ||
                bad="$bad ps:$k exit $status $(head -c 200 "$tmp/ps$k.err")"
        done
        if [ -z "$bad" ]; then ok "$name" "$(cut -d' ' -f6 "$tmp/out")"; else fail "$name" "$bad"; fi
    fi
    no_leftovers "${name}_leaves_nothing" "$base" "$nps"
done

# ---- every row of 8 tables of 500k rows x 16 from one ps in one round: the client reads replies
# while it still sends, where sending every request first deadlocked (each side's send waiting on
# the other's read) until the request timeout ----
base=$(free_base 2)
start_ps "$base" 1 --coordinator-timeout 60 --request-timeout 20
TF_CONFIG="$(tf_config "$base" 1 chief:0)" run timeout 60 "$check" 500000 16 1 div 3 --big-round 8
if [ "$status" -eq 0 ] && grep -q "ps_check: one round of 8 tables of 500000 rows x 16" "$tmp/out" &&
    grep -q "ps_check: ok" "$tmp/out"; then
    wait_pid "${ps_pids[0]}" 10
    ok ps_client_one_round_of_8_tables_of_500k_ids "$(grep -o 'one round.*' "$tmp/out")"
else
    fail ps_client_one_round_of_8_tables_of_500k_ids "exit $status: $(head -c 300 "$tmp/err") ps: $(tail -2 "$tmp/ps0.err")"
    kill -9 "${ps_pids[0]}" 2> /dev/null
    wait "${ps_pids[0]}" 2> /dev/null
fi
no_leftovers ps_client_big_round_leaves_nothing "$base" 1

# ---- no coordinator ever: the ps gives up naming it ----
base=$(free_base 2)
start_ps "$base" 1 --coordinator-timeout 1
wait_pid "${ps_pids[0]}" 10
if [ "$status" -eq 138 ] && grep -q "coordinator (chief:0 (127.0.0.1:$base)) has not been heard from" "$tmp/ps0.err" &&
    [ "$(wc -l < "$tmp/ps0.err")" -eq 1 ]; then
    ok ps_without_coordinator_gives_up
else
    fail ps_without_coordinator_gives_up "exit $status: $(cat "$tmp/ps0.err")"
fi
no_leftovers ps_without_coordinator_leaves_nothing "$base" 1

# holding_chief BASE: 2 ps tasks at BASE+1.. with a 2 s coordinator timeout, and a chief (pid in
# chief) that trains a little, then holds its connections for 30 s without a word.
holding_chief() {
    start_ps "$1" 2 --coordinator-timeout 2
    TF_CONFIG="$(tf_config "$1" 2 chief:0)" "$check" 100 4 2 mod 5 --no-stop --hold 30 \
        > "$tmp/chief.out" 2> "$tmp/chief.err" &
    chief=$!
    pids+=("$chief")
}

# ---- the coordinator killed while connected: the ps exits within the timeout ----
base=$(free_base 3)
holding_chief "$base"
sleep 1.5
kill -9 "$chief" 2>/dev/null
wait "$chief" 2>/dev/null
bad=""
for k in 0 1; do
    wait_pid "${ps_pids[$k]}" 10
    [ "$status" -eq 138 ] && grep -q "has not been heard from for 2 s" "$tmp/ps$k.err" ||
        bad="$bad ps:$k exit $status $(head -c 200 "$tmp/ps$k.err")"
done
if [ -z "$bad" ]; then ok ps_coordinator_killed_ps_exit; else fail ps_coordinator_killed_ps_exit "$bad"; fi
no_leftovers ps_coordinator_killed_leaves_nothing "$base" 2

# ---- the coordinator connected but silent (stopped, or its host cut off: the connection stays
# open): the ps tasks exit within the timeout, naming it, while it still holds its connections ----
base=$(free_base 3)
holding_chief "$base"
t0=$(date +%s%N)
bad=""
for k in 0 1; do
    wait_pid "${ps_pids[$k]}" 10
    [ "$status" -eq 138 ] && grep -q "coordinator (chief:0 (127.0.0.1:$base)) has not been heard from for 2 s" "$tmp/ps$k.err" ||
        bad="$bad ps:$k exit $status $(head -c 200 "$tmp/ps$k.err")"
done
gone_ms=$((($(date +%s%N) - t0) / 1000000))
kill -0 "$chief" 2> /dev/null || bad="$bad (the chief had ended: the test proves nothing)"
kill -9 "$chief" 2> /dev/null
wait "$chief" 2> /dev/null
if [ -z "$bad" ] && [ "$gone_ms" -lt 7000 ]; then
    ok ps_silent_coordinator_ps_exit "both ps gone after ${gone_ms} ms"
else
    fail ps_silent_coordinator_ps_exit "after ${gone_ms} ms:$bad"
fi
no_leftovers ps_silent_coordinator_leaves_nothing "$base" 2

# ---- strangers: random bytes and a wrong secret are refused; the job completes ----
base=$(free_base 3)
start_ps "$base" 2 --coordinator-timeout 20
sleep 0.3
python3 - "$((base + 1))" <<'PY' 2> /dev/null
import os, socket, sys
for _ in range(3):
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
        s.sendall(os.urandom(512)); s.close()
    except OSError:
        pass
PY
DTRAIN_CLUSTER_SECRET=not-the-secret-0123456789abcdef PS_CHECK_CONNECT_TIMEOUT=3 \
    TF_CONFIG="$(tf_config "$base" 2 chief:0)" run "$check" 100 4 2 div 3
wrong_status=$status wrong_err=$(head -c 300 "$tmp/err")
TF_CONFIG="$(tf_config "$base" 2 chief:0)" run "$check" 100 4 2 div 10
if [ "$wrong_status" -ne 0 ] && echo "$wrong_err" | grep -qi "auth\|secret\|MAC\|refused" &&
    [ "$status" -eq 0 ] && grep -q "not a dtrain peer" "$tmp/ps0.err"; then
    ok ps_refuses_strangers_job_completes
else
    fail ps_refuses_strangers_job_completes "wrong secret: exit $wrong_status ($wrong_err); good: exit $status $(head -c 200 "$tmp/err"); ps:0 log: $(head -c 300 "$tmp/ps0.err")"
fi
for k in 0 1; do wait_pid "${ps_pids[$k]}" 10; done
no_leftovers ps_strangers_leave_nothing "$base" 2

# ---- someone on the path (tests/progs/ps_proxy.py between the chief and ps:0): a PUSH_ROWS with
# a bit of a row flipped and its checksums made right, or a PUSH_ROWS sent twice, fails its MAC;
# the ps drops the connection naming the peer and applies nothing of it (the table stays equal
# to ps_check's local one bit for bit), the client connects again and the job completes ----
for spec in "alter 2 an_altered" "replay 1 a_replayed"; do
    read -r mode shards what <<< "$spec"
    base=$(free_base 3)
    start_ps "$base" 1 --coordinator-timeout 20
    python3 "$(dirname "$0")/progs/ps_proxy.py" "$((base + 2))" "$((base + 1))" "$mode" \
        2> "$tmp/proxy.err" &
    proxy=$!
    pids+=("$proxy")
    sleep 0.5
    PS_CHECK_VIA=$((base + 2)) TF_CONFIG="$(tf_config "$base" 1 chief:0)" \
        run timeout 60 "$check" 300 8 "$shards" div 10
    wait_pid "${ps_pids[0]}" 10
    ps_status=$status
    kill "$proxy" 2> /dev/null
    wait "$proxy" 2> /dev/null
    name="ps_drops_${what}_push_and_applies_none_of_it"
    if grep -q "ps_check: ok" "$tmp/out" && grep -q "ps_proxy: ${mode}ed PUSH_ROWS" "$tmp/proxy.err" &&
        grep -q "dropping chief:0 (127.0.0.1:$base): .*failed its MAC" "$tmp/ps0.err" &&
        grep -q "connected again after" "$tmp/err" && [ "$ps_status" -eq 0 ]; then
        ok "$name" "$(grep -o 'message [0-9]* of the connection failed its MAC' "$tmp/ps0.err")"
    else
        fail "$name" "ps_check: $(head -c 300 "$tmp/out") $(head -c 300 "$tmp/err"); proxy: $(cat "$tmp/proxy.err"); ps exit $ps_status: $(head -c 400 "$tmp/ps0.err")"
    fi
    no_leftovers "${name}_leaves_nothing" "$base" 2
done

# ---- a SAVE writes within the job's model directory only: "..", another absolute directory and
# a symbolic link out of it are refused with an ERROR naming the directory, and nothing is
# written there, while a directory within it takes the shards ----
base=$(free_base 2)
mkdir -p "$tmp/md/sub" "$tmp/outside"
ln -s "$tmp/outside" "$tmp/md/link"
start_ps "$base" 1 --coordinator-timeout 20 --model-dir "$tmp/md"
TF_CONFIG="$(tf_config "$base" 1 chief:0)" run "$check" 50 4 1 div 2 --save "$tmp/md" \
    --save "$tmp/md/sub" --save "$tmp/md/../outside" --save "$tmp/outside" --save "$tmp/md/link"
refused=$(grep -c "refused: .*SAVE to .* refused: it is $tmp/outside, outside the job's model directory $tmp/md" "$tmp/out")
wait_pid "${ps_pids[0]}" 10
if [ "$refused" -eq 3 ] && grep -q "save $tmp/md: ok" "$tmp/out" && grep -q "save $tmp/md/sub: ok" "$tmp/out" &&
    [ -z "$(ls "$tmp/outside")" ] && ls "$tmp/md" | grep -q "ckpt-2.ps-0-of-1.safetensors" &&
    ls "$tmp/md/sub" | grep -q "ckpt-2.ps-0-of-1.safetensors" && grep -q "SAVE to $tmp/md/link refused" "$tmp/ps0.err"; then
    ok ps_save_stays_in_the_model_dir
else
    fail ps_save_stays_in_the_model_dir "refused $refused, outside: $(ls "$tmp/outside"), md: $(ls "$tmp/md"): $(cat "$tmp/out") $(head -c 300 "$tmp/err") ps: $(head -c 300 "$tmp/ps0.err")"
fi
no_leftovers ps_save_leaves_nothing "$base" 1

# ---- a task's connections to a ps are capped: 20 held by worker:0 leave it 4 (its oldest
# closed, logged), the ps's threads grow by no more than those, and the chief is served ----
base=$(free_base 3)
TF_CONFIG="$("$dtrain" launch -n 1 --ps 1 --base-port "$base" --print-tf-config ps:0)" \
    "$dtrain" server --coordinator-timeout 20 > "$tmp/ps0.out" 2> "$tmp/ps0.err" &
flood_ps=$!
pids+=("$flood_ps")
sleep 0.5
threads_before=$(awk '/^Threads:/ {print $2}' "/proc/$flood_ps/status")
TF_CONFIG="$("$dtrain" launch -n 1 --ps 1 --base-port "$base" --print-tf-config worker:0)" \
    "$check" --flood 20 2 > "$tmp/flood.out" 2>&1 &
flood_pid=$!
pids+=("$flood_pid")
for _ in $(seq 1 200); do grep -qs "flood: .* opened" "$tmp/flood.out" && break; sleep 0.05; done
sleep 0.3
threads_held=$(awk '/^Threads:/ {print $2}' "/proc/$flood_ps/status")
wait_pid "$flood_pid" 30
TF_CONFIG="$("$dtrain" launch -n 1 --ps 1 --base-port "$base" --print-tf-config chief:0)" \
    run "$check" 50 4 1 div 2
wait_pid "$flood_ps" 10
if [ "$status" -eq 0 ] && grep -q "ps_check: ok" "$tmp/out" &&
    grep -q "flood: 4 of 20 connections answer (20 opened)" "$tmp/flood.out" &&
    [ $((threads_held - threads_before)) -le 5 ] &&
    grep -q "dtrain server: worker:0 (127.0.0.1:$((base + 1))) opened connection 5: its oldest is closed (a task holds at most 4)" "$tmp/ps0.err"; then
    ok ps_connections_capped_per_task "threads $threads_before, then $threads_held with 20 connections of worker:0"
else
    fail ps_connections_capped_per_task "threads $threads_before then $threads_held; $(cat "$tmp/flood.out"); chief: $(head -c 200 "$tmp/err"); ps: $(head -c 300 "$tmp/ps0.err")"
fi
no_leftovers ps_connections_cap_leaves_nothing "$base" 2

# ---- invalid clusters: named errors, no hang ----
base=$(free_base 3)
TF_CONFIG="$(tf_config "$base" 2 chief:0)" \
    expect_error ps_server_on_chief_task 1 "is not a ps task" server --coordinator-timeout 1
# A cluster no launch writes: a ps and a worker without a chief.
TF_CONFIG="{\"cluster\":{\"ps\":[\"127.0.0.1:$base\"],\"worker\":[\"127.0.0.1:$((base + 1))\"]},\"task\":{\"type\":\"ps\",\"index\":0}}" \
    expect_error ps_cluster_without_chief 1 "needs one chief" server --coordinator-timeout 1
TF_CONFIG="$(tf_config "$base" 2 ps:0)" \
    expect_error ps_index_out_of_range 1 "ps:5" server --task ps:5
expect_error ps_without_tf_config 1 "TF_CONFIG" server
# Without a secret a ps task refuses to start, though its cluster is on loopback (any local user
# could join it, stop the job or have it write anywhere), naming the flag that allows it.
DTRAIN_CLUSTER_SECRET= TF_CONFIG="$(tf_config "$base" 2 ps:0)" \
    expect_error ps_without_secret_is_refused 1 "no secret: set DTRAIN_CLUSTER_SECRET" server \
    --coordinator-timeout 1
if grep -qF -- "--insecure" "$tmp/err"; then ok ps_without_secret_names_insecure;
else fail ps_without_secret_names_insecure "$(cat "$tmp/err")"; fi
expect_error ps_bad_coordinator_timeout 2 "--coordinator-timeout" server --coordinator-timeout 0
# A ps address already taken by another task: a named error at once.
python3 -c "import socket,time,sys; s=socket.socket(); s.bind(('127.0.0.1', $((base + 1)))); s.listen(); time.sleep(3)" &
holder=$!
pids+=("$holder")
sleep 0.3
TF_CONFIG="$(tf_config "$base" 2 ps:0)" \
    expect_error ps_address_in_use 1 "127.0.0.1" server --coordinator-timeout 5
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null


# ---- training: dtrain train --strategy parameter_server under dtrain launch ----
"$dtrain" data gen-ctr --rows 8000 --seed 11 --out "$tmp/train.svm" > "$tmp/gen" 2>&1
"$dtrain" data gen-ctr --rows 2000 --seed 12 --out "$tmp/test.svm" > /dev/null 2>&1
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/gen")
ctr=(train --data "libsvm:$tmp/train.svm" --test-data "libsvm:$tmp/test.svm" --feature-size "$fs"
     --model deepfm --optimizer adam --lr 5e-4 --batch-size 128 --shuffle-buffer 0 --progress none
     --seed 1 --threads 1)
# metrics NAME FILE: "checksum auc steps" of a run's --metrics-out.
metrics() { echo "$(json_field "$2" param_checksum) $(json_field "$2" test_auc) $(json_field "$2" steps)"; }
run "$dtrain" "${ctr[@]}" --metrics-out "$tmp/one.json"
read -r one_sum one_auc one_steps <<< "$(metrics one "$tmp/one.json")"
# One worker: every step pulls what the last one pushed, so the parameters are one_device's, bit
# for bit, however the tables are split and whatever the steps per function.
for spec in "1ps|1|" "2ps_mod_fixed3_4steps|2|--partition-strategy mod --partitioner fixed:3 --steps-per-execution 4" \
    "1ps_ssp0|1|--ps-mode ssp:0"; do
    IFS='|' read -r label nps extra <<< "$spec"
    # shellcheck disable=SC2086
    run timeout 120 "$dtrain" launch -n 1 --ps "$nps" -- "$dtrain" "${ctr[@]}" --strategy parameter_server \
        $extra --metrics-out "$tmp/ps.json"
    name="ps_train_one_worker_${label}_equals_one_device"
    if [ "$status" -ne 0 ]; then
        fail "$name" "exit $status: $(tail -3 "$tmp/err")"
    else
        read -r sum auc steps <<< "$(metrics ps "$tmp/ps.json")"
        if [ "$sum" = "$one_sum" ] && [ "$steps" = "$one_steps" ]; then
            ok "$name" "checksum=$sum steps=$steps"
        else
            fail "$name" "checksum $sum steps $steps, one_device $one_sum steps $one_steps"
        fi
    fi
done
# A dense model (the MLP on Fashion-MNIST), its variables round-robin over 2 ps tasks.
mlp=(train --model mlp --data fashion-mnist --max-steps 20 --batch-size 64 --optimizer adam
     --lr 0.001 --seed 7 --test-data none --progress none --threads 1)
run "$dtrain" "${mlp[@]}" --metrics-out "$tmp/mlp1.json"
run timeout 120 "$dtrain" launch -n 1 --ps 2 -- "$dtrain" "${mlp[@]}" --metrics-out "$tmp/mlp2.json"
a=$(json_field "$tmp/mlp1.json" param_checksum) b=$(json_field "$tmp/mlp2.json" param_checksum 2>/dev/null)
if [ "$status" -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ]; then
    ok ps_train_dense_model_equals_one_device "checksum=$a"
else
    fail ps_train_dense_model_equals_one_device "exit $status, checksums $a and $b: $(tail -3 "$tmp/err")"
fi
# Two workers, two ps: asynchronous, the same examples; the AUC close to one_device's.
run timeout 120 "$dtrain" launch -n 2 --ps 2 -- "$dtrain" "${ctr[@]}" --metrics-out "$tmp/ps22.json"
if [ "$status" -ne 0 ]; then
    fail ps_train_async_2_workers_2_ps "exit $status: $(tail -3 "$tmp/err")"
else
    read -r sum auc steps <<< "$(metrics ps "$tmp/ps22.json")"
    gap=$(python3 -c "print(abs($auc - $one_auc))")
    if [ "$steps" = "$one_steps" ] && python3 -c "import sys; sys.exit(0 if $gap <= 0.01 else 1)"; then
        ok ps_train_async_2_workers_2_ps "auc=$auc one_device=$one_auc gap=$gap steps=$steps"
    else
        fail ps_train_async_2_workers_2_ps "auc $auc vs one_device $one_auc, steps $steps vs $one_steps"
    fi
fi

# Bounded staleness over two workers: ssp:0 keeps them in lockstep, ssp:2 lets one run ahead by
# at most 2 steps; both train to one_device's AUC.
for mode in ssp:0 ssp:2; do
    run timeout 120 "$dtrain" launch -n 2 --ps 1 -- "$dtrain" "${ctr[@]}" --ps-mode "$mode" \
        --metrics-out "$tmp/ssp.json"
    name="ps_train_${mode/:/}_2_workers"
    if [ "$status" -ne 0 ]; then
        fail "$name" "exit $status: $(tail -3 "$tmp/err")"
    else
        read -r sum auc steps <<< "$(metrics ps "$tmp/ssp.json")"
        gap=$(python3 -c "print(abs($auc - $one_auc))")
        if grep -q "bounded staleness ${mode#ssp:}" "$tmp/out" && [ "$steps" = "$one_steps" ] &&
            python3 -c "import sys; sys.exit(0 if $gap <= 0.01 else 1)"; then
            ok "$name" "auc=$auc gap=$gap"
        else
            fail "$name" "auc $auc vs $one_auc, steps $steps vs $one_steps: $(grep parameter_server "$tmp/out")"
        fi
    fi
done

# Hybrid: the dense variables all-reduced among the workers over a ring of their own, the
# tables on the ps tasks. One worker is one_device bit for bit; with two, each step's pushes are
# in before the all-reduce lets a worker on, so plain SGD gives multi_worker_mirrored's model up
# to rounding (the tables' two updates against one of the summed rows, in either order): the
# AUCs agree within 1e-4 or so.
run timeout 120 "$dtrain" launch -n 1 --ps 1 -- "$dtrain" "${ctr[@]}" --ps-mode hybrid \
    --metrics-out "$tmp/h1.json"
read -r sum auc steps <<< "$(metrics ps "$tmp/h1.json" 2>/dev/null)"
if [ "$status" -eq 0 ] && [ "$sum" = "$one_sum" ] && [ "$steps" = "$one_steps" ] &&
    grep -q "hybrid (dense variables all-reduced among the workers" "$tmp/out"; then
    ok ps_train_hybrid_one_worker_equals_one_device "checksum=$sum"
else
    fail ps_train_hybrid_one_worker_equals_one_device "exit $status, checksum $sum steps $steps, one_device $one_sum $one_steps: $(tail -3 "$tmp/err")"
fi
sgd=()
for a in "${ctr[@]}"; do
    case $a in adam) sgd+=(sgd) ;; 5e-4) sgd+=(0.05) ;; *) sgd+=("$a") ;; esac
done
run timeout 120 "$dtrain" launch -n 2 -- "$dtrain" "${sgd[@]}" --metrics-out "$tmp/m2.json"
read -r msum mauc msteps <<< "$(metrics mwm "$tmp/m2.json" 2>/dev/null)"
run timeout 120 "$dtrain" launch -n 2 --ps 2 -- "$dtrain" "${sgd[@]}" --ps-mode hybrid \
    --metrics-out "$tmp/h2.json"
read -r sum auc steps <<< "$(metrics ps "$tmp/h2.json" 2>/dev/null)"
gap=$(python3 -c "print(abs(${auc:-0} - ${mauc:-1}))")
if [ "$status" -eq 0 ] && [ -n "$mauc" ] && [ "$steps" = "$msteps" ] &&
    python3 -c "import sys; sys.exit(0 if $gap <= 1e-3 else 1)"; then
    ok ps_train_hybrid_2_workers_2_ps_is_multi_worker_mirrored "auc=$auc mwm=$mauc gap=$gap steps=$steps"
else
    fail ps_train_hybrid_2_workers_2_ps_is_multi_worker_mirrored "exit $status, auc $auc steps $steps vs mwm $mauc $msteps: $(tail -3 "$tmp/err")"
fi

# ---- a snapshot is bound to its job: the snapshot a job left behind (a copy taken while it
# ran, put back after it ended, as a job that died leaves it) is not restored by the next job
# over the same --model-dir, which says so and trains from its own definitions ----
sj=(train --data "libsvm:$tmp/train.svm" --test-data none --hash-buckets 3000 --embedding-size 8
    --deep-layers 16 --model deepfm --batch-size 128 --shuffle-buffer 0 --progress none --threads 1
    --model-dir "$tmp/sj" --ps-snapshot-secs 0.2)
# Epochs enough for the copy to be taken however fast this machine trains (4 were over before
# the first snapshot on a quick one).
timeout 120 "$dtrain" launch -n 1 --ps 1 -- "$dtrain" "${sj[@]}" --epochs 16 > "$tmp/sja.out" 2> "$tmp/sja.err" &
sj_launch=$!
pids+=("$sj_launch")
for _ in $(seq 1 1000); do
    [ -s "$tmp/sj/ps/ps-0.snapshot" ] && cp "$tmp/sj/ps/ps-0.snapshot" "$tmp/sj.keep" 2>/dev/null && break
    sleep 0.02
done
wait_pid "$sj_launch" 120
sja_status=$status
[ -f "$tmp/sj.keep" ] && cp "$tmp/sj.keep" "$tmp/sj/ps/ps-0.snapshot"
# Without the chief's checkpoints: a new job from the start, not the first one resumed.
find "$tmp/sj" -maxdepth 1 -type f -delete
run timeout 120 "$dtrain" launch -n 1 --ps 1 -- "$dtrain" "${sj[@]}" --max-steps 20
if [ "$sja_status" -eq 0 ] && [ -f "$tmp/sj.keep" ] && [ "$status" -eq 0 ] &&
    grep -q "\[ps:0\] dtrain server: warning: not restored: $tmp/sj/ps/ps-0.snapshot: the snapshot of another job (job 'launch-[^']*', nonce [0-9a-f]\{32\}; this is job 'launch-[^']*', nonce [0-9a-f]\{32\})" "$tmp/err" &&
    ! grep -q "dtrain server: restored" "$tmp/err"; then
    ok ps_snapshot_of_another_job_not_restored
else
    fail ps_snapshot_of_another_job_not_restored "first job $sja_status (kept: $(ls "$tmp/sj.keep" 2>&1)), second $status: $(grep -i 'restor\|error' "$tmp/err" | head -3)"
fi
rm -f "$tmp/sj.keep"

# ---- a ps task sweeps the temporaries its own killed writes left on its host (a dead pid's),
# at its start, and leaves a running process's, another host's and another ps task's ----
mkdir -p "$tmp/sw/ps"
dead=$(sh -c 'echo $$')
host=$(hostname)
sw_gone=("ps/ps-0.snapshot.tmp.$dead.$host" "ckpt-5.ps-0-of-1.safetensors.tmp.$dead.$host")
sw_kept=("ps/ps-0.snapshot.tmp.$$.$host" "ps/ps-0.snapshot.tmp.$dead.another-host"
         "ps/ps-1.snapshot.tmp.$dead.$host")
for f in "${sw_gone[@]}" "${sw_kept[@]}"; do touch "$tmp/sw/$f"; done
run timeout 120 "$dtrain" launch -n 1 --ps 1 -- "$dtrain" "${sj[@]/"$tmp/sj"/$tmp/sw}" --max-steps 10 \
    --save-checkpoints-steps 5
bad=""
for f in "${sw_gone[@]}"; do [ -e "$tmp/sw/$f" ] && bad="$bad left:$f"; done
for f in "${sw_kept[@]}"; do [ -e "$tmp/sw/$f" ] || bad="$bad removed:$f"; done
if [ "$status" -eq 0 ] && [ -z "$bad" ] &&
    grep -q "\[ps:0\] dtrain server: removed $tmp/sw/ps/ps-0.snapshot.tmp.$dead.$host, left by a write of this ps task" "$tmp/err"; then
    ok ps_sweeps_its_own_orphaned_temporaries
else
    fail ps_sweeps_its_own_orphaned_temporaries "exit $status:$bad $(grep -i 'removed\|error' "$tmp/err" "$tmp/out" | head -3)"
fi

# ---- a full disk during a periodic checkpoint: reported, training goes on, the last good
# checkpoint stays the latest, no file of the refused one is left, and the job completes. The
# model directory is a 16 MB tmpfs in a mount namespace of the test's own (unshare -m), which
# nothing else sees; once the first checkpoint is in, a filler takes the rest of it, removed once
# a save has been refused. ----
cat > "$tmp/full_disk.sh" << 'EOF'
set -u
dtrain=$1 tmp=$2
shift 2
mkdir -p "$tmp/full"
mount -t tmpfs -o size=16m tmpfs "$tmp/full" || exit 99
"$dtrain" launch -n 1 --ps 1 -- "$dtrain" "$@" --model-dir "$tmp/full/md" > "$tmp/full.out" 2> "$tmp/full.err" &
job=$!
for _ in $(seq 1 1500); do [ -s "$tmp/full/md/checkpoint" ] && break; sleep 0.02; done
dd if=/dev/zero of="$tmp/full/filler" bs=64k > /dev/null 2>&1
for _ in $(seq 1 1500); do grep -q "not saved" "$tmp/full.out" && break; sleep 0.02; done
cp "$tmp/full/md/checkpoint" "$tmp/full.state" 2>/dev/null
ls "$tmp/full/md" > "$tmp/full.ls_when_full"
rm -f "$tmp/full/filler"
wait "$job"
echo $? > "$tmp/full.status"
ls "$tmp/full/md" > "$tmp/full.ls_end"
umount "$tmp/full"
EOF
# In a chroot (scripts/bare_root_test.sh) "/" is no mount point, so unshare cannot make the new
# namespace's mounts private; it then keeps the propagation it finds, and the script's umount
# takes the tmpfs away wherever it was seen.
full_ns=()
if unshare -m true 2>/dev/null; then
    full_ns=(unshare -m)
elif unshare -m --propagation unchanged true 2>/dev/null; then
    full_ns=(unshare -m --propagation unchanged)
fi
if [ "${#full_ns[@]}" -gt 0 ]; then
    timeout 180 "${full_ns[@]}" bash "$tmp/full_disk.sh" "$dtrain" "$tmp" train --data "libsvm:$tmp/train.svm" \
        --test-data none --hash-buckets 3000 --embedding-size 8 --deep-layers 16 --model deepfm \
        --batch-size 128 --shuffle-buffer 0 --progress none --threads 1 --max-steps 1500 \
        --save-checkpoints-steps 100 --metrics-out "$tmp/full.json"
    full_status=$(cat "$tmp/full.status" 2>/dev/null || echo none)
    kept=$(sed -n 's/^model_checkpoint_path: "\(.*\)"/\1/p' "$tmp/full.state" 2>/dev/null)
    refused=$(grep -o "checkpoint at step [0-9]* not saved: .*No space left on device; training goes on, and the latest checkpoint stays ckpt-[0-9]*" "$tmp/full.out" | head -1)
    if [ "$full_status" = 0 ] && [ -n "$refused" ] && [ -n "$kept" ] &&
        [ "${refused##* }.safetensors" = "$kept" ] && grep -qx "$kept" "$tmp/full.ls_when_full" &&
        grep -q "Saving checkpoints for 1500 into" "$tmp/full.out" &&
        ! grep -q "^ckpt-$(echo "$refused" | cut -d' ' -f4)\.ps-" "$tmp/full.ls_end" &&
        [ "$(json_field "$tmp/full.json" checkpoints_failed)" -ge 1 ] && ! grep -q "$tmp/full" /proc/mounts; then
        ok ps_full_disk_during_a_checkpoint_goes_on "${refused%%:*}; kept $kept; $(json_field "$tmp/full.json" checkpoints_failed) refused"
    else
        fail ps_full_disk_during_a_checkpoint_goes_on "job $full_status, kept '$kept', refused '$refused': $(grep -i 'error\|warning' "$tmp/full.err" "$tmp/full.out" | head -3)"
    fi
else
    fail ps_full_disk_during_a_checkpoint_goes_on "unshare -m is refused here: the test needs root for its private tmpfs"
fi

# One ps task's SAVE refused (its shard file's name taken by a directory), the other's written:
# the checkpoint is reported and skipped, and the other ps task's shard file, which no manifest
# names, is removed.
mkdir -p "$tmp/half"
for step in $(seq 90 115); do mkdir -p "$tmp/half/ckpt-$step.ps-1-of-2.safetensors"; done
run timeout 120 "$dtrain" launch -n 1 --ps 2 -- "$dtrain" "${sj[@]/"$tmp/sj"/$tmp/half}" \
    --max-steps 250 --save-checkpoints-steps 100
half_step=$(sed -n 's/.*checkpoint at step \([0-9]*\) not saved: .*ps:1 .*; training goes on.*/\1/p' "$tmp/out" | head -1)
if [ "$status" -eq 0 ] && [ -n "$half_step" ] && [ ! -e "$tmp/half/ckpt-$half_step.ps-0-of-2.safetensors" ] &&
    [ ! -e "$tmp/half/ckpt-$half_step.safetensors" ] && [ -f "$tmp/half/ckpt-250.safetensors" ]; then
    ok ps_checkpoint_refused_by_one_ps_leaves_no_shard "step $half_step skipped"
else
    fail ps_checkpoint_refused_by_one_ps_leaves_no_shard "exit $status, step '$half_step': $(ls "$tmp/half" | grep -v '^ckpt-[0-9]*.ps-1' | tr '\n' ' ') $(grep -i 'error\|not saved' "$tmp/out" "$tmp/err" | head -2)"
fi
rm -rf "$tmp/half"

# ---- sharded checkpoints: written by 2 ps, restored with 1 and 3 and into one_device ----
# Hashed into 3000 rows of 8: small files, the same code paths.
ck=(train --data "libsvm:$tmp/train.svm" --test-data "libsvm:$tmp/test.svm" --hash-buckets 3000
    --embedding-size 8 --deep-layers 16 --model deepfm --optimizer adam --lr 5e-4 --batch-size 128
    --shuffle-buffer 0 --progress none --seed 1 --threads 1 --max-steps 40)
reassemble="$(dirname "$0")/progs/ps_ckpt.py"
run timeout 120 "$dtrain" launch -n 2 --ps 2 -- "$dtrain" "${ck[@]}" --model-dir "$tmp/ck2" \
    --metrics-out "$tmp/ck2.json"
sum2=$(json_field "$tmp/ck2.json" param_checksum 2>/dev/null)
if [ "$status" -eq 0 ] && [ -f "$tmp/ck2/ckpt-40.safetensors" ] && [ -f "$tmp/ck2/ckpt-40.ps-0-of-2.safetensors" ] &&
    [ -f "$tmp/ck2/ckpt-40.ps-1-of-2.safetensors" ] && grep -q "Saving checkpoints for 40 into" "$tmp/out" &&
    "$dtrain" inspect "$tmp/ck2" 2> /dev/null | grep -q "fm_v/part_1 .*rows_total=3000 dim=8 shards=2 shard=1 strategy=div"; then
    ok ps_checkpoint_written_shard_by_shard "checksum=$sum2"
else
    fail ps_checkpoint_written_shard_by_shard "exit $status: $(ls "$tmp/ck2" 2>&1 | tr '\n' ' ') $(tail -2 "$tmp/err")"
fi
run "$dtrain" "${ck[@]}" --restore-checkpoint "$tmp/ck2/ckpt-40.safetensors" --model-dir "$tmp/ck1d" \
    --metrics-out "$tmp/ck1d.json"
sum1d=$(json_field "$tmp/ck1d.json" param_checksum 2>/dev/null)
/usr/bin/python3 "$reassemble" "$tmp/ck2/ckpt-40.safetensors" --compare "$tmp/ck1d/ckpt-40.safetensors" > "$tmp/re" 2>&1
rc=$?
if [ "$status" -eq 0 ] && [ -n "$sum2" ] && [ "$sum1d" = "$sum2" ] && [ "$rc" -eq 0 ] && grep -q "bit for bit" "$tmp/re"; then
    ok ps_checkpoint_restores_into_one_device "checksum=$sum1d, $(tail -1 "$tmp/re")"
else
    fail ps_checkpoint_restores_into_one_device "exit $status, checksum $sum1d vs $sum2, numpy: $(tail -1 "$tmp/re")"
fi
for nps in 1 3; do
    run timeout 120 "$dtrain" launch -n 1 --ps "$nps" -- "$dtrain" "${ck[@]}" \
        --restore-checkpoint "$tmp/ck2/ckpt-40.safetensors" --model-dir "$tmp/ck$nps" \
        --metrics-out "$tmp/ck$nps.json"
    /usr/bin/python3 "$reassemble" "$tmp/ck$nps/ckpt-40.safetensors" --compare "$tmp/ck1d/ckpt-40.safetensors" > "$tmp/re" 2>&1
    rc=$?
    if [ "$status" -eq 0 ] && [ "$rc" -eq 0 ] && grep -q "in $nps shards" "$tmp/re" &&
        grep -q "Restoring parameters from .*ckpt-40.safetensors (global step 40) onto $nps ps task" "$tmp/out" &&
        [ "$(json_field "$tmp/ck$nps.json" param_checksum)" = "$sum2" ]; then
        ok "ps_checkpoint_of_2_ps_restores_on_${nps}_ps" "$(tail -1 "$tmp/re")"
    else
        fail "ps_checkpoint_of_2_ps_restores_on_${nps}_ps" "exit $status: $(tail -2 "$tmp/err") numpy: $(tail -1 "$tmp/re")"
    fi
done

# The sidecar evaluator of a launched parameter-server job reads its sharded checkpoints: its
# AUC of the last one is the chief's. The chief writes TensorBoard's training scalars.
run timeout 120 "$dtrain" launch -n 2 --ps 2 --evaluator -- "$dtrain" "${ck[@]:0:${#ck[@]}-2}" \
    --max-steps 60 --model-dir "$tmp/cke" --save-checkpoints-steps 20 --save-summary-steps 20
/usr/bin/python3 "$(dirname "$0")/progs/read_events.py" "$tmp"/cke/events.out.tfevents.* > "$tmp/ev" 2>&1
if grep -q "^scalar 20 loss" "$tmp/ev" && grep -q "^scalar 60 global_step/sec" "$tmp/ev" &&
    [ "$(grep -c '^scalar' "$tmp/ev")" -eq 12 ]; then
    ok ps_chief_writes_tensorboard_scalars "$(grep '^scalar 60 loss' "$tmp/ev")"
else
    fail ps_chief_writes_tensorboard_scalars "$(head -c 300 "$tmp/ev")"
fi
eval_auc=$(sed -n 's/^\[evaluator:0\] Saving dict for global step 60: .*auc = \([0-9.]*\),.*/\1/p' "$tmp/out")
chief_auc=$(sed -n 's/^\[chief:0\] .*test AUC: \([0-9.]*\).*/\1/p' "$tmp/out")
if [ "$status" -eq 0 ] && [ -n "$eval_auc" ] &&
    python3 -c "import sys; sys.exit(0 if abs($eval_auc - ${chief_auc:-9}) < 1e-4 else 1)"; then
    ok ps_sidecar_evaluator_reads_sharded_checkpoints "auc=$eval_auc chief=$chief_auc"
else
    fail ps_sidecar_evaluator_reads_sharded_checkpoints "exit $status, evaluator '$eval_auc', chief '$chief_auc': $(tail -3 "$tmp/err")"
fi

# A shard file of the newest checkpoint damaged, or missing: the coordinator started again says
# what was wrong and restores the whole checkpoint before it (of those near steps 20, 40, 60).
for how in damaged missing; do
    rm -rf "$tmp/ckf"
    cp -r "$tmp/cke" "$tmp/ckf"
    shard="$tmp/ckf/ckpt-60.ps-1-of-2.safetensors"
    if [ "$how" = damaged ]; then
        python3 -c "
import sys
f = open(sys.argv[1], 'r+b'); f.seek(-100, 2); b = f.read(1); f.seek(-100, 2)
f.write(bytes([b[0] ^ 0x10])); f.close()" "$shard"
    else
        rm -f "$shard"
    fi
    run timeout 120 "$dtrain" launch -n 1 --ps 2 -- "$dtrain" "${ck[@]:0:${#ck[@]}-2}" \
        --max-steps 70 --model-dir "$tmp/ckf" --save-checkpoints-steps 0
    if [ "$status" -eq 0 ] &&
        grep -q "\[chief:0\] dtrain: warning: .*ckpt-60.safetensors names its shard file: .*ckpt-60.ps-1-of-2.safetensors: .*; restoring the checkpoint before it" "$tmp/out" &&
        grep -q "\[chief:0\] Restoring parameters from $tmp/ckf/ckpt-\([1-5][0-9]\).safetensors (global step \1)" "$tmp/out"; then
        ok "ps_checkpoint_with_a_${how}_shard_falls_back_to_the_one_before" "$(grep -o 'ckpt-60.ps-1-of-2.safetensors: [^;]*' "$tmp/out" | head -1)"
    else
        fail "ps_checkpoint_with_a_${how}_shard_falls_back_to_the_one_before" "exit $status: $(grep -i 'warning\|error\|Restoring' "$tmp/err" "$tmp/out" | head -4)"
    fi
done
rm -rf "$tmp/ckf"

# The chief's log follows fit's flags: Estimator's lines every --log-step-count-steps steps of
# the global count (0, 20 and 40 of 60), and Keras's epoch line with --progress lines.
pg=(train --data "libsvm:$tmp/train.svm" --test-data none --hash-buckets 3000 --embedding-size 8
    --deep-layers 16 --model deepfm --batch-size 128 --shuffle-buffer 0 --seed 1 --threads 1
    --max-steps 60)
run timeout 120 "$dtrain" launch -n 2 --ps 1 -- "$dtrain" "${pg[@]}" --progress estimator \
    --log-step-count-steps 20
logged=$(sed -n 's/^\[chief:0\] loss = [0-9.e-]*, step = \([0-9]*\).*/\1/p' "$tmp/out" | tr '\n' ' ')
run timeout 120 "$dtrain" launch -n 2 --ps 1 -- "$dtrain" "${pg[@]}" --progress lines \
    --steps-per-epoch 30
epochs=$(grep -c '^\[chief:0\] 30/30 - .* - loss: [0-9.]* - accuracy: ' "$tmp/out")
if [ "$status" -eq 0 ] && [ "$logged" = "0 20 40 " ] && [ "$epochs" -eq 2 ] &&
    grep -qx '\[chief:0\] Epoch 2' "$tmp/out"; then
    ok ps_chief_progress_follows_the_flags "estimator steps: $logged; epoch lines: $epochs"
else
    fail ps_chief_progress_follows_the_flags "exit $status, estimator steps '$logged', epoch lines $epochs: $(tail -5 "$tmp/out")"
fi

# Validation and periodic evaluation of a ps job go through the callbacks too, on the variables
# read back from the ps tasks: the last evaluation's AUC is the final test's.
run timeout 120 "$dtrain" launch -n 2 --ps 1 -- "$dtrain" "${pg[@]/none/libsvm:$tmp/test.svm}" \
    --progress lines --steps-per-epoch 30 --validate --eval-every-steps 25
evals=$(sed -n 's/^\[chief:0\] Saving dict for global step \([0-9]*\): .*/\1/p' "$tmp/out" | tr '\n' ' ')
last_auc=$(sed -n 's/^\[chief:0\] Saving dict for global step 60: .*auc = \([0-9.]*\),.*/\1/p' "$tmp/out")
test_auc=$(sed -n 's/^\[chief:0\] .*test AUC: \([0-9.]*\).*/\1/p' "$tmp/out")
if [ "$status" -eq 0 ] && [ "$evals" = "25 50 60 " ] && [ -n "$last_auc" ] &&
    [ "$(grep -c '^\[chief:0\] 30/30 - .* - val_auc: ' "$tmp/out")" -eq 2 ] &&
    python3 -c "import sys; sys.exit(0 if abs($last_auc - ${test_auc:-9}) < 1e-4 else 1)"; then
    ok ps_chief_evaluates_through_the_callbacks "evaluations at $evals; auc $last_auc, test $test_auc"
else
    fail ps_chief_evaluates_through_the_callbacks "exit $status, evaluations '$evals', auc '$last_auc' test '$test_auc': $(tail -4 "$tmp/out")"
fi

# ---- failures: a worker or the coordinator killed mid-run; nothing hangs or stays ----
"$dtrain" data gen-ctr --rows 200000 --seed 13 --out "$tmp/long.svm" > "$tmp/gen2" 2>&1
"$dtrain" data gen-ctr --rows 20000 --seed 14 --out "$tmp/long_test.svm" > /dev/null 2>&1
fs2=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/gen2")
long=(train --data "libsvm:$tmp/long.svm" --feature-size "$fs2" --model deepfm --batch-size 64
      --threads 1 --coordinator-timeout 8 --connect-timeout 30)
# start_task BASE TASK OUT ARGS...: one task (chief:0, worker:0, worker:1 or ps:0) of the cluster
# at BASE..BASE+3 running dtrain ARGS, its output in $tmp/OUT.out and .err.
start_task() {
    local base=$1 task=$2 out=$3
    shift 3
    start_tf_task "$task" "$out" \
        "$("$dtrain" launch -n 2 --ps 1 --base-port "$base" --print-tf-config "$task")" "$@"
}
# start_cluster BASE [FLAGS...]: the chief, 2 workers and 1 ps of a cluster at BASE..BASE+3.
start_cluster() {
    local base=$1 task
    shift
    for task in chief:0 worker:0 worker:1 ps:0; do
        start_task "$base" "$task" "${task%%:*}${task#*:}" "${long[@]}" --test-data none \
            --progress estimator "$@"
    done
}
# training_runs: waits (up to 60 s) for the chief's log line of step 200, so that a task is
# killed or stopped in the middle of training, however slowly the build starts.
training_runs() {
    for _ in $(seq 1 600); do grep -q "step = 200 " "$tmp/chief0.out" && return; sleep 0.1; done
}
# wait_tasks SECONDS: every task's exit status into task_status.
wait_tasks() { finish_tasks "$1" chief:0 worker:0 worker:1 ps:0; }
# A worker killed: the coordinator sees its connection close at once, gives its function to the
# other worker, and the job completes without it; every task that is left exits 0.
base=$(free_base 4)
start_cluster "$base" --epochs 1
training_runs
kill -9 "${task_pid[worker:1]}"
wait_tasks 60
if [ "${task_status[chief:0]}" -eq 0 ] && [ "${task_status[worker:0]}" -eq 0 ] &&
    [ "${task_status[ps:0]}" -eq 0 ] &&
    grep -q "worker:1 (127.0.0.1:$((base + 2))) lost: .* closed the connection.*; its steps [0-9]*-[0-9]* go back to the queue" "$tmp/chief0.err" &&
    grep -q "worker:0 (127.0.0.1:$((base + 1))) takes steps [0-9]*-[0-9]* again" "$tmp/chief0.err"; then
    ok ps_train_worker_killed_job_goes_on "$(grep -o 'its steps [0-9-]*' "$tmp/chief0.err")"
else
    fail ps_train_worker_killed_job_goes_on "chief ${task_status[chief:0]} ($(tail -2 "$tmp/chief0.err")), worker:0 ${task_status[worker:0]} ($(tail -1 "$tmp/worker0.err")), ps ${task_status[ps:0]} ($(tail -1 "$tmp/ps0.err"))"
fi
no_leftovers ps_train_worker_killed_leaves_nothing "$base" 3
# The ps task started 5 s after the others: the coordinator waits for it to define the tables,
# and meanwhile calls the roll of its workers every second, so that workers with
# --coordinator-timeout 2 wait for it (as they do while a ps defines a large table or a
# checkpoint is restored) and the job completes.
base=$(free_base 4)
brief=("${long[@]}")
for i in "${!brief[@]}"; do
    [ "${brief[$i]}" = --coordinator-timeout ] && brief[$((i + 1))]=2
done
for task in chief:0 worker:0 worker:1; do
    start_task "$base" "$task" "${task%%:*}${task#*:}" "${brief[@]}" --test-data none \
        --max-steps 60
done
sleep 5
start_task "$base" ps:0 ps0 "${long[@]}" --test-data none --max-steps 60
wait_tasks 60
if [ "${task_status[chief:0]}" -eq 0 ] && [ "${task_status[worker:0]}" -eq 0 ] &&
    [ "${task_status[worker:1]}" -eq 0 ] && [ "${task_status[ps:0]}" -eq 0 ]; then
    ok ps_train_workers_wait_for_a_coordinator_that_waits_for_its_ps
else
    fail ps_train_workers_wait_for_a_coordinator_that_waits_for_its_ps "chief ${task_status[chief:0]} ($(tail -1 "$tmp/chief0.err")), worker:0 ${task_status[worker:0]} ($(tail -1 "$tmp/worker0.err")), worker:1 ${task_status[worker:1]}, ps ${task_status[ps:0]} ($(tail -1 "$tmp/ps0.err"))"
fi
no_leftovers ps_train_late_ps_leaves_nothing "$base" 4
# A malformed message on a worker's control socket (from a task holding the secret: bytes that
# are no message, then a request a worker does not take) is logged, naming where it came from,
# and dropped (the request answered with an ERROR): the worker trains on, the job completes and
# every task exits 0.
base=$(free_base 4)
start_cluster "$base" --epochs 1
training_runs
TF_CONFIG="$("$dtrain" launch -n 2 --ps 1 --base-port "$base" --print-tf-config chief:0)" \
    run "$check" --poke worker:1
poke_out=$(cat "$tmp/out" "$tmp/err")
wait_tasks 60
if [ "${task_status[chief:0]}" -eq 0 ] && [ "${task_status[worker:0]}" -eq 0 ] &&
    [ "${task_status[worker:1]}" -eq 0 ] && [ "${task_status[ps:0]}" -eq 0 ] &&
    echo "$poke_out" | grep -q "ps_check: poke: ERROR: a PULL_ROWS request, a worker takes RUN" &&
    [ "$(grep -c "dropped a message from 127.0.0.1 on this worker's control socket" "$tmp/worker1.err")" -eq 2 ]; then
    ok ps_train_malformed_control_message_dropped "$(grep -m1 "dropped a message" "$tmp/worker1.err" | cut -c1-200)"
else
    fail ps_train_malformed_control_message_dropped "poke: $poke_out; chief ${task_status[chief:0]} ($(tail -2 "$tmp/chief0.err")), worker:1 ${task_status[worker:1]} ($(tail -3 "$tmp/worker1.err"))"
fi
no_leftovers ps_train_malformed_control_message_leaves_nothing "$base" 3
# The coordinator's side: a worker's link that delivers bytes that are no message before each
# reply (a fake worker:1 that answers PING and STOP so, and never a RUN) has them logged, naming
# the worker, and dropped; the worker is lost, and the job completes on worker:0.
base=$(free_base 4)
for task in chief:0 worker:0 ps:0; do
    start_task "$base" "$task" "${task%%:*}${task#*:}" "${ctr[@]}" --strategy parameter_server \
        --coordinator-timeout 20 --epochs 1
done
TF_CONFIG="$("$dtrain" launch -n 2 --ps 1 --base-port "$base" --print-tf-config worker:1)" \
    "$check" --fake-worker worker:1 5 > "$tmp/fake.out" 2>&1 &
task_pid[worker:1]=$!
pids+=("${task_pid[worker:1]}")
wait_tasks 90
if [ "${task_status[chief:0]}" -eq 0 ] && [ "${task_status[worker:0]}" -eq 0 ] &&
    [ "${task_status[ps:0]}" -eq 0 ] && [ "${task_status[worker:1]}" -eq 0 ] &&
    grep -q "dtrain: warning: dropped a message from worker:1 (127.0.0.1:$((base + 2))): .*not a dtrain ps message" "$tmp/chief0.err"; then
    ok ps_train_coordinator_drops_malformed_replies "$(grep -c "dropped a message" "$tmp/chief0.err") dropped"
else
    fail ps_train_coordinator_drops_malformed_replies "chief ${task_status[chief:0]} ($(tail -3 "$tmp/chief0.err")), worker:0 ${task_status[worker:0]}, fake ${task_status[worker:1]} ($(cat "$tmp/fake.out"))"
fi
no_leftovers ps_train_coordinator_drops_malformed_replies_leaves_nothing "$base" 3
# A worker gone silent (stopped: its connection stays open, its heartbeats stop) is lost after
# --heartbeat-timeout; once it runs again it answers, rejoins and takes steps.
base=$(free_base 4)
start_cluster "$base" --epochs 2 --heartbeat-timeout 1.5 --worker-timeout 60
training_runs
kill -STOP "${task_pid[worker:1]}"
t0=$(date +%s%N)
for _ in $(seq 1 100); do grep -q "worker:1 .* lost" "$tmp/chief0.err" && break; sleep 0.1; done
lost_ms=$((($(date +%s%N) - t0) / 1000000))
kill -CONT "${task_pid[worker:1]}"
wait_tasks 60
if [ "${task_status[chief:0]}" -eq 0 ] && [ "$lost_ms" -lt 8000 ] &&
    grep -q "worker:1 .* lost: .*silent for 1.5 s" "$tmp/chief0.err" &&
    grep -q "worker:1 .* rejoined: it takes steps again" "$tmp/chief0.err" &&
    grep -q "worker:1 .* took steps [0-9]*-[0-9]* after rejoining" "$tmp/chief0.err"; then
    ok ps_train_silent_worker_lost_by_heartbeat_then_rejoins "lost after ${lost_ms} ms"
else
    fail ps_train_silent_worker_lost_by_heartbeat_then_rejoins "chief ${task_status[chief:0]}, lost after ${lost_ms} ms: $(grep -c . "$tmp/chief0.err") lines: $(tail -3 "$tmp/chief0.err")"
fi
no_leftovers ps_train_silent_worker_leaves_nothing "$base" 3
# The chief stopped mid-training (SIGSTOP: its connections stay open, its ZeroMQ heartbeats and
# PINGs stop): the ps and both workers exit within --coordinator-timeout (8 s) and 5 s more,
# each naming the chief.
base=$(free_base 4)
start_cluster "$base" --epochs 2
training_runs
kill -STOP "${task_pid[chief:0]}"
t0=$(date +%s%N)
bad=""
for task in ps:0 worker:0 worker:1; do
    wait_pid "${task_pid[$task]}" 30
    [ "$status" -eq 138 ] && grep -q "coordinator (chief:0 (127.0.0.1:$base)) has not been heard from for 8 s" "$tmp/${task%%:*}${task#*:}.err" ||
        bad="$bad $task exit $status: $(tail -1 "$tmp/${task%%:*}${task#*:}.err")"
done
stopped_ms=$((($(date +%s%N) - t0) / 1000000))
kill -9 "${task_pid[chief:0]}" 2> /dev/null
wait "${task_pid[chief:0]}" 2> /dev/null
if [ -z "$bad" ] && [ "$stopped_ms" -lt 13000 ]; then
    ok ps_train_stopped_chief_every_task_exits_naming_it "ps and workers gone ${stopped_ms} ms after the SIGSTOP"
else
    fail ps_train_stopped_chief_every_task_exits_naming_it "after ${stopped_ms} ms:$bad"
fi
no_leftovers ps_train_stopped_chief_leaves_nothing "$base" 3
# A ps gone silent (stopped: its connections stay open and accept bytes) fails every round after
# --ps-timeout, not after --worker-timeout: the workers and the chief wait out
# --ps-recovery-timeout for it and fail, naming it, well before the 300 s the job waited before.
base=$(free_base 4)
start_cluster "$base" --epochs 2 --ps-timeout 2 --ps-recovery-timeout 3
training_runs
kill -STOP "${task_pid[ps:0]}"
t0=$(date +%s%N)
for task in chief:0 worker:0 worker:1; do
    wait_pid "${task_pid[$task]}" 40
    task_status[$task]=$status
done
silent_ms=$((($(date +%s%N) - t0) / 1000000))
kill -9 "${task_pid[ps:0]}" 2> /dev/null
wait "${task_pid[ps:0]}" 2> /dev/null
if [ "${task_status[chief:0]}" -ne 0 ] && [ "${task_status[chief:0]}" -ne 124 ] &&
    [ "${task_status[worker:0]}" -ne 124 ] && [ "${task_status[worker:1]}" -ne 124 ] &&
    [ "$silent_ms" -lt 30000 ] && grep -q "not back within 3 s (--ps-recovery-timeout): .*ps:0 (127.0.0.1:$((base + 3)))" "$tmp/chief0.err"; then
    ok ps_train_silent_ps_fails_the_job_in_ps_timeout "all exited after ${silent_ms} ms: $(tail -1 "$tmp/chief0.err" | cut -c1-160)"
else
    fail ps_train_silent_ps_fails_the_job_in_ps_timeout "after ${silent_ms} ms: chief ${task_status[chief:0]} ($(tail -2 "$tmp/chief0.err")), workers ${task_status[worker:0]} ${task_status[worker:1]} ($(tail -1 "$tmp/worker0.err"))"
fi
no_leftovers ps_train_silent_ps_leaves_nothing "$base" 3
# A worker whose input stalls (a FIFO its writer stops feeding and keeps open) while its
# heartbeats still answer: it fails within --input-timeout and a few seconds naming the FIFO, the
# chief ends the job with its message, and the ps is stopped.
base=$(free_base 3)
mkfifo "$tmp/feed"
# exec: the writer is one process, ended by its pid, holding the FIFO open without writing.
(head -n 500 "$tmp/long.svm"; exec sleep 60) > "$tmp/feed" &
fifo_writer=$!
pids+=("$fifo_writer")
t0=$(date +%s%N)
for task in chief:0 worker:0 ps:0; do
    data="libsvm:$tmp/long.svm"
    [ "$task" = worker:0 ] && data="libsvm:$tmp/feed"
    config=$("$dtrain" launch -n 1 --ps 1 --base-port "$base" --print-tf-config "$task")
    TF_CONFIG="$config" "$dtrain" "${long[@]/"libsvm:$tmp/long.svm"/$data}" --test-data none --shuffle-buffer 0 \
        --input-timeout 2 > "$tmp/${task%%:*}0.out" 2> "$tmp/${task%%:*}0.err" &
    task_pid[$task]=$!
    pids+=($!)
done
wait_pid "${task_pid[worker:0]}" 30
worker_status=$status
stall_ms=$((($(date +%s%N) - t0) / 1000000))
wait_pid "${task_pid[chief:0]}" 20
chief_status=$status
wait_pid "${task_pid[ps:0]}" 20
ps_status=$status
kill "$fifo_writer" 2>/dev/null
wait "$fifo_writer" 2>/dev/null
# The reader polling the FIFO or the prefetch thread waiting for it, whichever sees it first.
stall_msg="$tmp/feed: no data for 2 s \(at line 501 \)\?(input_timeout): the input has stalled"
if [ "$worker_status" -eq 1 ] && [ "$chief_status" -eq 1 ] && [ "$ps_status" -eq 0 ] &&
    [ "$stall_ms" -lt 15000 ] && grep -q "error: $stall_msg" "$tmp/worker0.err" &&
    grep -q "worker:0 (127.0.0.1:$((base + 1))): $stall_msg; training stopped" "$tmp/chief0.err"; then
    ok ps_train_stalled_worker_input_fails_the_job "worker out after ${stall_ms} ms"
else
    fail ps_train_stalled_worker_input_fails_the_job "worker $worker_status after ${stall_ms} ms ($(tail -1 "$tmp/worker0.err")), chief $chief_status ($(tail -1 "$tmp/chief0.err")), ps $ps_status"
fi
no_leftovers ps_train_stalled_worker_input_leaves_nothing "$base" 2
# dtrain launch --max-restarts 1: the killed worker alone is started again, rejoins and takes
# steps; the job ends 0, its AUC within 0.003 of an uninterrupted run's.
lt=("${long[@]}" --test-data "libsvm:$tmp/long_test.svm" --epochs 1 --progress estimator --metrics-out)
run timeout 120 "$dtrain" launch -n 2 --ps 2 -- "$dtrain" "${lt[@]}" "$tmp/whole.json"
whole_auc=$(json_field "$tmp/whole.json" test_auc 2>/dev/null)
# launch_and_kill TASK RESTARTS METRICS [FLAGS...]: a launched job whose TASK is killed at step 200;
# the victim's pid in victim, the chief's in chief_before and chief_after (alive after the
# kill), how the kill went in kill_note, launch's status in status, its stderr in
# $tmp/launch.err.
launch_and_kill() {
    local task=$1 restarts=$2 metrics=$3
    shift 3
    timeout 120 "$dtrain" launch -n 2 --ps 2 --max-restarts "$restarts" -- "$dtrain" "${lt[@]}" \
        "$metrics" "$@" > "$tmp/launch.out" 2> "$tmp/launch.err" &
    local lpid=$!
    pids+=("$lpid")
    victim=""
    for _ in $(seq 1 50); do
        sleep 0.1
        victim=$(task_pid_of "$lpid" "$task")
        [ -n "$victim" ] && break
    done
    chief_before=$(task_pid_of "$lpid" chief:0)
    # flood=N: a stranger at 127.0.0.2 holds N idle connections to every ps and worker port.
    flooder=""
    if [ -n "${flood:-}" ] && [ -n "$victim" ]; then
        python3 "$(dirname "$0")/progs/idle_flood.py" "$victim" "$flood" 127.0.0.2 \
            2> "$tmp/flood.err" &
        flooder=$!
        pids+=("$flooder")
    fi
    # Killed once the chief reports step 200 of the 3,125: early enough that the job is still
    # running when the victim is back, however fast or slow this build trains.
    kill_note="step 200 not seen in 60 s"
    for _ in $(seq 1 600); do
        grep -q "step = 200 " "$tmp/launch.out" && kill_note="killed at step 200" && break
        sleep 0.1
    done
    # after=PATTERN: the kill waits for that line of launch's stderr too (a ps's first snapshot,
    # which a loaded machine may finish after step 200).
    if [ -n "${after:-}" ]; then
        for _ in $(seq 1 300); do grep -q "$after" "$tmp/launch.err" && break; sleep 0.1; done
        grep -q "$after" "$tmp/launch.err" && kill_note="$kill_note, after '$after'" ||
            kill_note="$kill_note, '$after' not seen in 30 s"
    fi
    # What a failure needs told: whether the victim was still there to kill.
    if [ -n "$victim" ] && ! kill -9 "$victim" 2> /dev/null; then
        kill_note="$kill_note, but $task (pid $victim) was already gone"
    fi
    local t0
    t0=$(date +%s%N)
    sleep 1
    chief_after=$(task_pid_of "$lpid" chief:0)
    # Until the job ends: when a restored ps first applied an update again, from the kill.
    recovered_ms=""
    while kill -0 "$lpid" 2>/dev/null; do
        [ -z "$recovered_ms" ] && grep -q "restored shards updated again" "$tmp/launch.err" &&
            recovered_ms=$((($(date +%s%N) - t0) / 1000000))
        sleep 0.1
    done
    wait_pid "$lpid" 120
    if [ -n "$flooder" ]; then
        kill "$flooder" 2> /dev/null
        wait "$flooder" 2> /dev/null
    fi
}
launch_and_kill worker:1 1 "$tmp/killed.json"
killed_auc=$(json_field "$tmp/killed.json" test_auc 2>/dev/null)
gap=$(python3 -c "print(abs(${killed_auc:-0} - ${whole_auc:-1}))")
if [ "$status" -eq 0 ] && [ -n "$victim" ] &&
    grep -q "task worker:1 (pid $victim) was killed by signal 9 (SIGKILL): starting it again (1 of 1)" "$tmp/launch.err" &&
    grep -q "worker:1 .* rejoined" "$tmp/launch.err" && grep -q "worker:1 .* after rejoining" "$tmp/launch.err" &&
    grep -q "\[worker:1\] dtrain: skipped the first [0-9]* batches" "$tmp/launch.err" &&
    python3 -c "import sys; sys.exit(0 if $gap <= 0.003 else 1)"; then
    ok ps_train_launch_restarts_a_killed_worker "auc=$killed_auc uninterrupted=$whole_auc gap=$gap"
else
    fail ps_train_launch_restarts_a_killed_worker "exit $status, victim '$victim' ($kill_note), auc $killed_auc vs $whole_auc: $(grep -v 'bytes per sample' "$tmp/launch.err" | tail -4)"
fi
# Without restarts launch leaves the killed worker out: the other worker, its own data used up,
# takes over the lost one's from where it stopped; the job ends 0 with an uninterrupted run's AUC.
launch_and_kill worker:1 0 "$tmp/killed0.json"
auc0=$(json_field "$tmp/killed0.json" test_auc 2>/dev/null)
gap=$(python3 -c "print(abs(${auc0:-0} - ${whole_auc:-1}))")
if [ "$status" -eq 0 ] && [ -n "$victim" ] &&
    grep -q "warning: task worker:1 (pid $victim) was killed by signal 9 (SIGKILL); the chief goes on without it" "$tmp/launch.err" &&
    grep -q "worker:0 .* takes over the data of worker:1, lost, from its batch [0-9]*" "$tmp/launch.err" &&
    python3 -c "import sys; sys.exit(0 if $gap <= 0.003 else 1)"; then
    ok ps_train_launch_goes_on_without_a_killed_worker "auc=$auc0 uninterrupted=$whole_auc gap=$gap"
else
    fail ps_train_launch_goes_on_without_a_killed_worker "exit $status, victim '$victim' ($kill_note): $(grep -v 'bytes per sample' "$tmp/launch.err" | tail -4)"
fi
# A ps killed with --max-restarts 1 while a stranger holds 200 idle connections to every ps and
# worker port, once its first snapshot is written: launch starts it again, it restores its
# shards from its snapshot (--model-dir/ps), the workers and the coordinator (the same process
# throughout) wait for it and go on past the strangers; the job ends 0 with the AUC of an
# uninterrupted run, the snapshot removed.
flood=200 after="\[ps:1\] dtrain server: snapshots of this ps go to" \
    launch_and_kill ps:1 1 "$tmp/pskilled.json" --model-dir "$tmp/md" --ps-snapshot-secs 0.5
ps_auc=$(json_field "$tmp/pskilled.json" test_auc 2>/dev/null)
gap=$(python3 -c "print(abs(${ps_auc:-0} - ${whole_auc:-1}))")
if [ "$status" -eq 0 ] && [ -n "$victim" ] && [ -n "$chief_before" ] && [ "$chief_before" = "$chief_after" ] &&
    grep -q "task ps:1 (pid $victim) was killed by signal 9 (SIGKILL): starting it again (1 of 1)" "$tmp/launch.err" &&
    grep -q "\[ps:1\] dtrain server: restored 2 table shards and [0-9]* dense variables from .*ps-1.snapshot (taken .*, updates up to step [0-9]*): the updates after it are lost" "$tmp/launch.err" &&
    grep -q "\[chief:0\] dtrain: the ps tasks are back [0-9.]* s after" "$tmp/launch.err" &&
    grep -q "\[ps:1\] dtrain server: restored shards updated again" "$tmp/launch.err" &&
    ! grep -q "starting it again.*chief\|task chief:0.*starting it again" "$tmp/launch.err" &&
    [ ! -e "$tmp/md/ps/ps-1.snapshot" ] && python3 -c "import sys; sys.exit(0 if $gap <= 0.003 else 1)" &&
    grep -q "idle_flood: held 200 connections to each of 4 ports" "$tmp/flood.err"; then
    ok ps_train_ps_killed_beside_idle_strangers_restores_its_snapshot "$(cat "$tmp/flood.err"); kill to the first update on the restored ps ${recovered_ms} ms, $(grep -o 'updates up to step [0-9]*' "$tmp/launch.err"), $(grep -o 'up to step [0-9]* are lost' "$tmp/launch.err"), auc=$ps_auc gap=$gap"
else
    fail ps_train_ps_killed_beside_idle_strangers_restores_its_snapshot "exit $status, victim '$victim' ($kill_note), snapshot left: $([ -e "$tmp/md/ps/ps-1.snapshot" ] && echo yes || echo no), chief's last line: $(grep -v 'bytes per sample' "$tmp/launch.out" | tail -1), flood: $(cat "$tmp/flood.err" 2>/dev/null), chief $chief_before/$chief_after, auc $ps_auc vs $whole_auc: $(grep -v 'bytes per sample' "$tmp/launch.err" | grep -v '^\[ps:[0-9]\] dtrain server: dropping' | head -20)"
fi
no_leftovers ps_train_launch_kills_leave_nothing "$base" 3
# A ps whose snapshot write hangs (its writer stopped, as on a stalled network file system)
# still answers: the job completes, and the stopping ps kills the hung writer.
timeout 120 "$dtrain" launch -n 2 --ps 1 -- "$dtrain" "${lt[@]}" "$tmp/hung.json" \
    --model-dir "$tmp/mdh" --ps-snapshot-secs 0.3 > "$tmp/hung.out" 2> "$tmp/hung.err" &
launcher=$!
pids+=("$launcher")
stopped=""
for _ in $(seq 1 600); do
    kill -0 "$launcher" 2> /dev/null || break
    ps_task=$(task_pid_of "$launcher" ps:0)
    if [ -n "$ps_task" ]; then
        # The ps task's only children are its writers.
        for c in $(pgrep -P "$ps_task" 2> /dev/null); do
            kill -STOP "$c" 2> /dev/null && stopped="$stopped $c"
        done
    fi
    [ -n "$stopped" ] && break
    sleep 0.05
done
wait "$launcher"
status=$?
if [ "$status" -eq 0 ] && [ -n "$stopped" ] &&
    grep -q "\[ps:0\] dtrain server: warning: a snapshot still being written is stopped" "$tmp/hung.err"; then
    ok ps_train_hung_snapshot_write_holds_nothing "writer$stopped stopped; the job completed"
else
    fail ps_train_hung_snapshot_write_holds_nothing "exit $status, writers stopped: '$stopped': $(grep -v 'bytes per sample' "$tmp/hung.err" | tail -5)"
fi
for c in $stopped; do kill -0 "$c" 2> /dev/null && kill -9 "$c"; done
# Hybrid: the other worker's all-reduce fails at once naming the lost one; every task ends.
base=$(free_base 4)
start_cluster "$base" --ps-mode hybrid --epochs 5
training_runs
kill -9 "${task_pid[worker:1]}"
wait_tasks 60
if [ "${task_status[chief:0]}" -eq 138 ] && tail -1 "$tmp/chief0.err" | grep -q "worker:1" &&
    [ "${task_status[worker:0]}" -eq 138 ] && grep -q "worker:1" "$tmp/worker0.err" &&
    [ "${task_status[ps:0]}" -eq 0 ]; then
    ok ps_train_hybrid_worker_killed_fails_naming_it "$(tail -1 "$tmp/chief0.err" | head -c 160)"
else
    fail ps_train_hybrid_worker_killed_fails_naming_it "chief ${task_status[chief:0]} ($(tail -1 "$tmp/chief0.err")), worker:0 ${task_status[worker:0]} ($(tail -1 "$tmp/worker0.err")), ps ${task_status[ps:0]} ($(tail -1 "$tmp/ps0.err"))"
fi
no_leftovers ps_train_hybrid_worker_killed_leaves_nothing "$base" 3
base=$(free_base 4)
start_cluster "$base" --epochs 5
sleep 3
kill -9 "${task_pid[chief:0]}"
wait_tasks 60
bad=""
for task in worker:0 worker:1 ps:0; do
    f="$tmp/${task%%:*}${task#*:}.err"
    [ "${task_status[$task]}" -eq 138 ] && grep -q "coordinator (chief:0" "$f" ||
        bad="$bad $task exit ${task_status[$task]} ($(tail -1 "$f"))"
done
if [ -z "$bad" ]; then ok ps_train_coordinator_killed_tasks_exit; else fail ps_train_coordinator_killed_tasks_exit "$bad"; fi
no_leftovers ps_train_coordinator_killed_leaves_nothing "$base" 3
# Starts chief, 2 workers and a ps saving checkpoints into $tmp/$1 every 0.5 s (the rest of
# the arguments added to the command line), and kills task $2 once its ps is writing a shard
# file while the state file names an earlier checkpoint. Sets base, caught (the shard file
# being written, empty if none was seen) and mid_save (the command line).
kill_mid_save() {
    local dir=$1 victim=$2
    shift 2
    mid_save=(train --data "libsvm:$tmp/long.svm" --test-data none --hash-buckets 300000
              --embedding-size 64 --deep-layers 16 --model deepfm --batch-size 64 --epochs 2
              --progress none --threads 1 --coordinator-timeout 20 --connect-timeout 30
              --model-dir "$tmp/$dir" --save-checkpoints-secs 0.5 "$@")
    base=$(free_base 4)
    local task f
    for task in chief:0 worker:0 worker:1 ps:0; do
        start_task "$base" "$task" "${task%%:*}${task#*:}" "${mid_save[@]}"
    done
    caught=""
    for _ in $(seq 1 400); do
        for f in "$tmp/$dir"/ckpt-*.ps-0-of-1.safetensors.tmp.*; do
            [ -e "$f" ] && [ -s "$tmp/$dir/checkpoint" ] && caught=$f && break 2
        done
        sleep 0.02
    done
    [ -n "$caught" ] && kill -9 "${task_pid[$victim]}"
}
# The coordinator killed in the middle of a checkpoint (its ps still writing its shards): the
# ps and workers keep serving; the chief started again restores the previous checkpoint, which
# the state file still names, and the job completes.
kill_mid_save mdk chief:0
torn=$(basename "${caught%%.ps-*}")
before=$(sed -n 's/^model_checkpoint_path: "\(.*\)"/\1/p' "$tmp/mdk/checkpoint" 2>/dev/null)
sleep 1
start_task "$base" chief:0 chief0b "${mid_save[@]}"
wait_tasks 120
if [ -n "$caught" ] && [ "${task_status[chief:0]}" -eq 0 ] && [ "${task_status[worker:0]}" -eq 0 ] &&
    [ "${task_status[ps:0]}" -eq 0 ] && [ ! -e "$tmp/mdk/$torn.safetensors" -o "$torn.safetensors" != "$before" ] &&
    grep -q "Restoring parameters from .*$before (global step" "$tmp/chief0b.out"; then
    ok ps_train_coordinator_killed_mid_save_restarts_from_the_previous "killed while $torn was written; restored $before"
else
    fail ps_train_coordinator_killed_mid_save_restarts_from_the_previous "caught '$caught', before '$before', chief ${task_status[chief:0]}: $(tail -2 "$tmp/chief0b.err") $(head -3 "$tmp/chief0b.out")"
fi
no_leftovers ps_train_coordinator_restart_leaves_nothing "$base" 3
# The ps killed in the middle of a checkpoint, and started again: the checkpoint it was writing
# never gets a manifest, the job goes on and completes, and every checkpoint the state file
# names is whole.
kill_mid_save mdp ps:0 --ps-snapshot-secs 0
sleep 0.5
start_task "$base" ps:0 ps0b "${mid_save[@]}"
wait_tasks 120
whole=yes
for m in $(sed -n 's/^all_model_checkpoint_paths: "\(.*\)\.safetensors"/\1/p' "$tmp/mdp/checkpoint" 2>/dev/null); do
    [ -e "$tmp/mdp/$m.safetensors" ] && [ -e "$tmp/mdp/$m.ps-0-of-1.safetensors" ] || whole="no: $m"
done
if [ -n "$caught" ] && [ "${task_status[chief:0]}" -eq 0 ] && [ "${task_status[ps:0]}" -eq 0 ] &&
    [ "$whole" = yes ] && grep -q "a ps task is lost" "$tmp/chief0.err" &&
    "$dtrain" inspect "$tmp/mdp" > /dev/null 2>&1; then
    ok ps_train_ps_killed_mid_save_leaves_whole_checkpoints "killed while $(basename "${caught%%.ps-*}") was written"
else
    fail ps_train_ps_killed_mid_save_leaves_whole_checkpoints "caught '$caught', chief ${task_status[chief:0]}, ps ${task_status[ps:0]}, whole $whole: $(tail -2 "$tmp/chief0.err")"
fi
no_leftovers ps_train_ps_restart_leaves_nothing "$base" 3

# ---- invalid parameter-server clusters and flags: named errors at once ----
base=$(free_base 4)
# The chief, one worker and one ps at BASE..BASE+2, as dtrain launch writes them.
psc_worker=$("$dtrain" launch -n 1 --ps 1 --base-port "$base" --print-tf-config worker:0)
# A cluster no launch writes: a worker and a ps without a chief.
TF_CONFIG="{\"cluster\":{\"worker\":[\"127.0.0.1:$base\"],\"ps\":[\"127.0.0.1:$((base + 1))\"]},\"task\":{\"type\":\"worker\",\"index\":0}}" \
    expect_error ps_train_without_chief 1 "needs one chief" "${ctr[@]}"
# Without a secret the coordinator and the workers refuse to start too, naming --insecure.
for task in chief:0 worker:0; do
    DTRAIN_CLUSTER_SECRET= TF_CONFIG="$("$dtrain" launch -n 1 --ps 1 --base-port "$base" --print-tf-config "$task")" \
        expect_error "ps_train_${task%%:*}_without_secret_is_refused" 1 "or give --insecure" "${ctr[@]}"
done
TF_CONFIG="$psc_worker" \
    expect_error ps_train_other_strategy 1 "only --strategy parameter_server" "${ctr[@]}" --strategy multi_worker_mirrored
TF_CONFIG="$("$dtrain" launch -n 2 --chief --base-port "$base" --print-tf-config chief:0)" \
    expect_error ps_train_without_ps 1 "names no ps task" "${ctr[@]}" --strategy parameter_server
# No ps answers: the chief fails naming it, and tells the waiting worker to stop at once rather
# than leave it to its --coordinator-timeout.
TF_CONFIG="$psc_worker" \
    "$dtrain" "${ctr[@]}" --coordinator-timeout 60 > "$tmp/w.out" 2> "$tmp/w.err" &
wpid=$!
pids+=("$wpid")
TF_CONFIG="$("$dtrain" launch -n 1 --ps 1 --base-port "$base" --print-tf-config chief:0)" \
    expect_error ps_train_unreachable_ps 138 "could not connect to ps:0" "${ctr[@]}" --connect-timeout 1
wait_pid "$wpid" 20
if [ "$status" -eq 0 ]; then ok ps_train_chief_failing_stops_workers;
else fail ps_train_chief_failing_stops_workers "worker exit $status (124: still waiting 20 s later): $(tail -1 "$tmp/w.err")"; fi
expect_error ps_train_bad_mode 2 "--ps-mode" "${ctr[@]}" --ps-mode sometimes
expect_error ps_train_bad_partitioner 2 "--partitioner" "${ctr[@]}" --partitioner fixed:0
# Hybrid's dense variables stay on the workers: a periodic evaluation is refused by name.
run timeout 60 "$dtrain" launch -n 1 --ps 1 -- "$dtrain" "${ctr[@]}" --ps-mode hybrid \
    --eval-every-steps 5 --max-steps 20
if [ "$status" -eq 1 ] &&
    grep -q "\[chief:0\] dtrain: error: --eval-every-steps, --eval-throttle-secs: --ps-mode hybrid keeps the dense variables on the workers" "$tmp/err"; then
    ok ps_train_hybrid_refuses_periodic_evaluation
else
    fail ps_train_hybrid_refuses_periodic_evaluation "exit $status: $(tail -3 "$tmp/err")"
fi
no_leftovers ps_train_errors_leave_nothing "$base" 3

echo "$passed $failed" > "$counts"
