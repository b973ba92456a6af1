#!/usr/bin/env bash
# Parameter-server tasks as real processes on loopback: `dtrain server` ps tasks hold a table's
# shards (div and mod placement) and train it against tests/progs/ps_check as the chief, bit for
# bit as one table in one process; they exit 0 when the chief stops them, and 1 naming the
# coordinator when it never comes or is killed (--coordinator-timeout); strangers (random bytes,
# a wrong secret) are refused while the job completes; invalid clusters are named errors. After
# each check no process of ours and no listening port is left. usage: tests/ps.sh BUILD COUNTS
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

chief_task='"task":{"type":"chief","index":0}'
# cluster BASE N_PS: TF_CONFIG's cluster with the chief at BASE and N_PS ps tasks after it.
cluster() {
    local base=$1 n=$2 ps="" k
    for ((k = 0; k < n; k++)); do ps="$ps${ps:+,}\"127.0.0.1:$((base + 1 + k))\""; done
    echo "{\"chief\":[\"127.0.0.1:$base\"],\"ps\":[$ps]}"
}

# start_ps BASE N_PS [FLAGS...]: starts the N_PS ps tasks; their pids in ps_pids.
start_ps() {
    local base=$1 n=$2 k
    shift 2
    ps_pids=()
    for ((k = 0; k < n; k++)); do
        TF_CONFIG="{\"cluster\":$(cluster "$base" "$n"),\"task\":{\"type\":\"ps\",\"index\":$k}}" \
            "$dtrain" server "$@" > "$tmp/ps$k.out" 2> "$tmp/ps$k.err" &
        ps_pids[$k]=$!
        pids+=($!)
    done
}

# no_leftovers NAME BASE N: none of our processes runs and no port BASE..BASE+N listens.
no_leftovers() {
    local name=$1 base=$2 n=$3 p live="" port
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && live="$live $p"; done
    for ((port = base; port <= base + n; port++)); do
        ss -ltnH "sport = :$port" 2>/dev/null | grep -q . && live="$live port:$port"
    done
    if [ -z "$live" ]; then ok "$name"; else fail "$name" "left behind:$live"; fi
}

# ---- a table trained through 2 and 3 ps tasks, div and mod, equal to one local table ----
for spec in "2 1000 8 5 div" "3 997 16 3 mod" "2 50 4 2 mod"; do
    read -r nps rows dim shards strat <<< "$spec"
    base=$(free_base $((nps + 1)))
    start_ps "$base" "$nps" --coordinator-timeout 20
    TF_CONFIG="{\"cluster\":$(cluster "$base" "$nps"),$chief_task}" run "$check" "$rows" "$dim" "$shards" "$strat" 40
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

# ---- no coordinator ever: the ps gives up naming it ----
base=$(free_base 2)
start_ps "$base" 1 --coordinator-timeout 1
wait_pid "${ps_pids[0]}" 10
if [ "$status" -eq 1 ] && grep -q "coordinator (chief:0 (127.0.0.1:$base)) has not been connected" "$tmp/ps0.err" &&
    [ "$(wc -l < "$tmp/ps0.err")" -eq 1 ]; then
    ok ps_without_coordinator_gives_up
else
    fail ps_without_coordinator_gives_up "exit $status: $(cat "$tmp/ps0.err")"
fi
no_leftovers ps_without_coordinator_leaves_nothing "$base" 1

# ---- the coordinator killed while connected: the ps exits within the timeout ----
base=$(free_base 3)
start_ps "$base" 2 --coordinator-timeout 2
TF_CONFIG="{\"cluster\":$(cluster "$base" 2),$chief_task}" "$check" 100 4 2 mod 5 --no-stop --hold 30 \
    > "$tmp/chief.out" 2> "$tmp/chief.err" &
chief=$!
pids+=("$chief")
sleep 1.5
kill -9 "$chief" 2>/dev/null
wait "$chief" 2>/dev/null
bad=""
for k in 0 1; do
    wait_pid "${ps_pids[$k]}" 10
    [ "$status" -eq 1 ] && grep -q "has not been connected for 2 s" "$tmp/ps$k.err" ||
        bad="$bad ps:$k exit $status $(head -c 200 "$tmp/ps$k.err")"
done
if [ -z "$bad" ]; then ok ps_coordinator_killed_ps_exit; else fail ps_coordinator_killed_ps_exit "$bad"; fi
no_leftovers ps_coordinator_killed_leaves_nothing "$base" 2

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
DTRAIN_CLUSTER_SECRET=not-the-secret-0123456789abcdef TF_CONFIG="{\"cluster\":$(cluster "$base" 2),$chief_task}" \
    run "$check" 100 4 2 div 3
wrong_status=$status wrong_err=$(head -c 300 "$tmp/err")
TF_CONFIG="{\"cluster\":$(cluster "$base" 2),$chief_task}" run "$check" 100 4 2 div 10
if [ "$wrong_status" -ne 0 ] && echo "$wrong_err" | grep -qi "auth\|secret\|MAC\|refused" &&
    [ "$status" -eq 0 ] && grep -q "not a dtrain peer" "$tmp/ps0.err"; then
    ok ps_refuses_strangers_job_completes
else
    fail ps_refuses_strangers_job_completes "wrong secret: exit $wrong_status ($wrong_err); good: exit $status $(head -c 200 "$tmp/err"); ps:0 log: $(head -c 300 "$tmp/ps0.err")"
fi
for k in 0 1; do wait_pid "${ps_pids[$k]}" 10; done
no_leftovers ps_strangers_leave_nothing "$base" 2

# ---- invalid clusters: named errors, no hang ----
base=$(free_base 3)
TF_CONFIG="{\"cluster\":$(cluster "$base" 2),\"task\":{\"type\":\"chief\",\"index\":0}}" \
    expect_error ps_server_on_chief_task 1 "is not a ps task" server --coordinator-timeout 1
TF_CONFIG="{\"cluster\":{\"ps\":[\"127.0.0.1:$base\"],\"worker\":[\"127.0.0.1:$((base + 1))\"]},\"task\":{\"type\":\"ps\",\"index\":0}}" \
    expect_error ps_cluster_without_chief 1 "needs one chief" server --coordinator-timeout 1
TF_CONFIG="{\"cluster\":$(cluster "$base" 2),\"task\":{\"type\":\"ps\",\"index\":0}}" \
    expect_error ps_index_out_of_range 1 "ps:5" server --task ps:5
expect_error ps_without_tf_config 1 "TF_CONFIG" server
expect_error ps_bad_coordinator_timeout 2 "--coordinator-timeout" server --coordinator-timeout 0
# A ps address already taken by another task: a named error at once.
python3 -c "import socket,time,sys; s=socket.socket(); s.bind(('127.0.0.1', $((base + 1)))); s.listen(); time.sleep(3)" &
holder=$!
pids+=("$holder")
sleep 0.3
TF_CONFIG="{\"cluster\":$(cluster "$base" 2),\"task\":{\"type\":\"ps\",\"index\":0}}" \
    expect_error ps_address_in_use 1 "127.0.0.1" server --coordinator-timeout 5
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

echo "$passed $failed" > "$counts"
