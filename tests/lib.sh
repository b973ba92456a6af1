# Helpers shared by the shell test suites (sourced). The suite sets passed=0, failed=0, tmp (a
# scratch directory), dtrain (the binary under test) for expect_error and start_rank, and pids=()
# for start_rank (whose pids its exit trap kills).

# ok NAME [FIGURES]: a check passed, with what it measured; fail NAME WHY: it did not.
ok() { echo "ok   $1${2:+ $2}"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

# run COMMAND...: runs it, keeping stdout, stderr, the status and the time taken in ms.
run() {
    local t0
    t0=$(date +%s%N)
    "$@" > "$tmp/out" 2> "$tmp/err"
    status=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
}

# json_field FILE KEY: the value of a top-level scalar in a one-line JSON object.
json_field() {
    sed -n "s/.*\"$2\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" "$1" | tr -d '"'
}

# expect_error NAME STATUS NEEDLE ARGS...: dtrain exits with STATUS and prints exactly one
# stderr line that contains NEEDLE.
expect_error() {
    local name=$1 want=$2 needle=$3
    shift 3
    run "$dtrain" "$@"
    local lines
    lines=$(wc -l < "$tmp/err")
    if [ "$status" -ne "$want" ]; then
        fail "$name" "exit $status, expected $want; stderr: $(head -c 300 "$tmp/err")"
    elif [ "$lines" -ne 1 ]; then
        fail "$name" "expected one line on stderr, got $lines: $(head -c 300 "$tmp/err")"
    elif ! grep -qF -- "$needle" "$tmp/err"; then
        fail "$name" "stderr lacks '$needle': $(cat "$tmp/err")"
    else
        ok "$name"
    fi
}

# free_base N: a base port with N free ports after it (the kernel's ephemeral range stays clear).
free_base() {
    python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
while True:
    base = random.randrange(20000, 30000)
    socks = []
    try:
        for i in range(n):
            s = socket.socket(); s.bind(("127.0.0.1", base + i)); socks.append(s)
        print(base); break
    except OSError:
        pass
    finally:
        for s in socks: s.close()
PY
}

# start_rank N BASE I ARGS...: starts rank I of an N-worker cluster in the background; its pid
# goes to pids[I], its output to $tmp/rI.out and $tmp/rI.err.
start_rank() {
    local n=$1 base=$2 i=$3
    shift 3
    # Written before the rank starts, so that its pid is dtrain's from the first moment.
    local tf_config
    tf_config=$("$dtrain" launch -n "$n" --base-port "$base" --print-tf-config "worker:$i")
    TF_CONFIG="$tf_config" "$dtrain" "$@" > "$tmp/r$i.out" 2> "$tmp/r$i.err" &
    pids[$i]=$!
}

# start_tf_task TASK OUT TF_CONFIG ARGS...: dtrain ARGS as TASK of a cluster, in the background,
# with that TF_CONFIG; its pid in task_pid[TASK] (and pids), its output in $tmp/OUT.out and .err.
# finish_tasks SECONDS TASK...: each task's exit status into task_status (124: killed at the end
# of SECONDS).
declare -A task_pid task_status
start_tf_task() {
    local task=$1 out=$2 config=$3
    shift 3
    TF_CONFIG="$config" "$dtrain" "$@" > "$tmp/$out.out" 2> "$tmp/$out.err" &
    task_pid[$task]=$!
    pids+=($!)
}
finish_tasks() {
    local limit=$1 task
    shift
    for task in "$@"; do
        wait_pid "${task_pid[$task]}" "$limit"
        task_status[$task]=$status
    done
}

# wait_pid PID SECONDS: waits for PID up to SECONDS; sets status (124 when it had to be killed).
wait_pid() {
    local pid=$1 limit=$2 waited=0
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$(echo "$waited >= $limit" | bc)" = 1 ]; then
            kill -9 "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            status=124
            return
        fi
        sleep 0.05
        waited=$(echo "$waited + 0.05" | bc)
    done
    wait "$pid"
    status=$?
}
# task_pid_of LAUNCH_PID TASK: the pid of a task of the launch under `timeout` LAUNCH_PID.
task_pid_of() {
    local c
    # timeout's child is launch, whose children are the tasks.
    for c in $(pgrep -P "$(pgrep -P "$1" | head -1)" 2>/dev/null); do
        tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | grep -qx "DTRAIN_TASK=$2" && echo "$c"
    done
}
# listening BASE N: the ports of BASE..BASE+N something listens on (such a port cannot be bound,
# even with SO_REUSEADDR).
listening() {
    python3 -c "
import socket
for p in range($1, $1 + $2 + 1):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try: s.bind(('127.0.0.1', p))
    except OSError: print(p)
    s.close()"
}
