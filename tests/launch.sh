#!/usr/bin/env bash
# Tests of dtrain launch with real processes: small shell commands as tasks check the TF_CONFIG
# and secret every task gets, the prefixed output, how failures, signals and restarts stop and
# reap the cluster, --comm mpi (with a stand-in mpirun) and the usage errors.
# usage: tests/launch.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
tmp=$(mktemp -d /tmp/dtrain-launch-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

. "$(dirname "$0")/lib.sh"

if [ ! -x "$dtrain" ]; then
    fail dtrain_built "$dtrain is missing: build it first (make BUILD=$build)"
    echo "$passed $failed" > "$counts"
    exit 1
fi

# alive PID: the process exists and is not a zombie (PID 1 of a container may never reap).
alive() {
    local state
    state=$(sed -n 's/^[0-9]* (.*) \(.\).*/\1/p' "/proc/$1/stat" 2> /dev/null)
    [ -n "$state" ] && [ "$state" != Z ]
}

# all_dead FILE...: every pid in the files is gone (waiting up to 2 s for a dying one); prints
# the living ones otherwise.
all_dead() {
    local pid left i
    for i in $(seq 40); do
        left=""
        for pid in $(cat "$@" 2> /dev/null); do
            alive "$pid" && left="$left $pid"
        done
        [ -z "$left" ] && return 0
        sleep 0.05
    done
    echo "$left"
    return 1
}

# wait_files N PATTERN: waits (up to 3 s) until N files match PATTERN.
wait_files() {
    local i
    for i in $(seq 60); do
        [ "$(ls $2 2> /dev/null | wc -l)" -ge "$1" ] && return 0
        sleep 0.05
    done
    return 1
}

# --- help and usage errors ---
run "$dtrain" --help
if [ "$status" -eq 0 ] && grep -q "^  launch " "$tmp/out"; then ok help_lists_launch; \
else fail help_lists_launch "status $status"; fi
run "$dtrain" launch --help
if [ "$status" -eq 0 ] && grep -q -- "-n N" "$tmp/out" && grep -q -- "--max-restarts N" "$tmp/out" && \
    grep -q -- "--grace X.*(default: 10)" "$tmp/out"; then
    ok launch_help
else
    fail launch_help "status $status: $(head -c 300 "$tmp/out")"
fi
expect_error missing_separator 2 "expected -- COMMAND" launch -n 2 sh -c true
expect_error missing_command 2 "COMMAND is missing after --" launch -n 2 --
expect_error missing_n 2 "-n N is required" launch -- true
expect_error zero_n 2 "-n: must be in 1..256, got 0" launch -n 0 -- true
expect_error non_numeric_n 2 "-n: expected a number of tasks, got 'two'" launch -n two -- true
expect_error n_without_value 2 "-n: missing value" launch -n -- true
expect_error n_twice 2 "-n: given twice" launch -n 1 -n=2 -- true
expect_error negative_ps 2 "--ps: must be in 0..256" launch -n 1 --ps -1 -- true
expect_error bad_comm 2 "--comm: expected tcp or mpi, got 'udp'" launch -n 1 --comm udp -- true
expect_error ps_with_mpi 2 "--ps needs --comm tcp" launch -n 2 --ps 1 --comm mpi -- true
expect_error evaluator_with_mpi 2 "--evaluator needs --comm tcp" launch -n 2 --evaluator --comm mpi -- true
expect_error negative_grace 2 "--grace: must be in 0..86400" launch -n 1 --grace -1 -- true
expect_error unknown_launch_flag 2 "unknown flag '--workers'" launch --workers 2 -- true
expect_error command_not_found 127 "cannot run '$tmp/no-such-command': No such file" \
    launch -n 2 -- "$tmp/no-such-command"

# --- TF_CONFIG, DTRAIN_TASK and the secret of every task ---
# Each task records its environment and pid, waits until every task has, then ps tasks serve
# until launch stops them (after the chief and workers have exited 0).
cat > "$tmp/record.sh" << 'EOF'
dir=$1 total=$2
printf '%s\n' "$TF_CONFIG" > "$dir/tf.$DTRAIN_TASK"
printf '%s\n' "$DTRAIN_CLUSTER_SECRET" > "$dir/secret.$DTRAIN_TASK"
printf '%s %s\n' "$DTRAIN_JOB_ID" "$DTRAIN_JOB_NONCE" > "$dir/job.$DTRAIN_TASK"
echo $$ > "$dir/pid.$DTRAIN_TASK"
i=0
while [ "$(ls "$dir" | grep -c '^pid\.')" -lt "$total" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
case $DTRAIN_TASK in ps:*) exec sleep 30 ;; esac
EOF
cat > "$tmp/check_tf.py" << 'EOF'
# usage: check_tf.py DIR JOB=COUNT... : every task's TF_CONFIG names it and the same cluster.
import json, os, re, sys
d, want = sys.argv[1], dict(a.split("=") for a in sys.argv[2:])
errors, cluster = [], None
names = sorted(f[3:] for f in os.listdir(d) if f.startswith("tf."))
expected = sorted("%s:%d" % (j, i) for j, n in want.items() for i in range(int(n)))
if names != expected:
    errors.append("tasks %s, expected %s" % (names, expected))
for name in names:
    c = json.load(open(os.path.join(d, "tf." + name)))
    job, index = name.split(":")
    if c.get("task") != {"type": job, "index": int(index)}:
        errors.append("%s: task is %s" % (name, c.get("task")))
    if cluster is None:
        cluster = c.get("cluster")
    elif c.get("cluster") != cluster:
        errors.append("%s: another cluster: %s" % (name, c.get("cluster")))
cluster = cluster or {}
listed = {j: len(v) for j, v in cluster.items()}
if listed != {j: int(n) for j, n in want.items() if j != "evaluator"}:
    errors.append("cluster jobs %s" % listed)
addrs = [a for v in cluster.values() for a in v]
if not all(re.fullmatch(r"127\.0\.0\.1:\d+", a) and 0 < int(a.split(":")[1]) < 65536 for a in addrs):
    errors.append("addresses %s" % addrs)
if len(set(addrs)) != len(addrs):
    errors.append("ports repeat: %s" % addrs)
print("; ".join(errors))
sys.exit(1 if errors else 0)
EOF
mkdir "$tmp/c1"
run "$dtrain" launch -n 3 --chief --ps 2 --evaluator -- sh "$tmp/record.sh" "$tmp/c1" 6
check=$(python3 "$tmp/check_tf.py" "$tmp/c1" chief=1 worker=2 ps=2 evaluator=1 2>&1)
if [ "$status" -eq 0 ] && [ -z "$check" ]; then ok tf_config_per_task; \
else fail tf_config_per_task "exit $status: $check $(head -c 300 "$tmp/err")"; fi
# ps tasks sleep until told to stop: launch stops them (SIGTERM) 2 s after training is done,
# the time a parameter-server chief gives its ps tasks to end on their own.
if [ "$status" -eq 0 ] && [ "$ms" -lt 5000 ] && ! grep -q "error" "$tmp/err"; then ok ps_stopped_after_training; \
else fail ps_stopped_after_training "exit $status in $ms ms: $(head -c 300 "$tmp/err")"; fi
# One job identity for every task (what a ps task's snapshots are bound to), another for the
# next launch.
jobs=$(cat "$tmp"/c1/job.* | sort -u)
mkdir "$tmp/c1b"
"$dtrain" launch -n 1 -- sh "$tmp/record.sh" "$tmp/c1b" 1 > /dev/null 2>&1
if [ "$(echo "$jobs" | wc -l)" -eq 1 ] && echo "$jobs" | grep -qx "launch-[^ ]* [0-9a-f]\{32\}" &&
    [ "$(cut -d' ' -f2 "$tmp/c1b/job.worker:0")" != "$(echo "$jobs" | cut -d' ' -f2)" ]; then
    ok job_identity_per_launch "$jobs"
else
    fail job_identity_per_launch "'$jobs' then '$(cat "$tmp/c1b/job.worker:0" 2>&1)'"
fi
if left=$(all_dead "$tmp"/c1/pid.*); then ok tf_config_no_process_left; \
else fail tf_config_no_process_left "still running:$left"; fi
secrets=$(cat "$tmp"/c1/secret.* | sort -u)
if [ "$(echo "$secrets" | wc -l)" -eq 1 ] && [[ $secrets =~ ^[0-9a-f]{64}$ ]]; then ok one_secret_64_hex; \
else fail one_secret_64_hex "secrets: $secrets"; fi

mkdir "$tmp/c2"
run "$dtrain" launch -n 2 -- sh "$tmp/record.sh" "$tmp/c2" 2
check=$(python3 "$tmp/check_tf.py" "$tmp/c2" worker=2 2>&1)
if [ "$status" -eq 0 ] && [ -z "$check" ]; then ok tf_config_workers_only; \
else fail tf_config_workers_only "exit $status: $check"; fi
second=$(cat "$tmp"/c2/secret.* | sort -u)
if [[ $second =~ ^[0-9a-f]{64}$ ]] && [ "$second" != "$secrets" ]; then ok fresh_secret_per_launch; \
else fail fresh_secret_per_launch "first $secrets, second $second"; fi
run env DTRAIN_CLUSTER_SECRET=given-secret "$dtrain" launch -n 2 -- sh -c 'echo "s=$DTRAIN_CLUSTER_SECRET"'
if [ "$status" -eq 0 ] && [ "$(grep -c '^\[worker:[01]\] s=given-secret$' "$tmp/out")" -eq 2 ]; then
    ok given_secret_passed_on
else
    fail given_secret_passed_on "exit $status: $(cat "$tmp/out")"
fi

# --- output: prefixes, stdout and stderr apart, partial and long lines ---
run "$dtrain" launch -n 2 -- sh -c 'echo "out $DTRAIN_TASK"; echo "err $DTRAIN_TASK" >&2; printf "tail $DTRAIN_TASK"'
if [ "$status" -eq 0 ] && grep -qx "\[worker:0\] out worker:0" "$tmp/out" && grep -qx "\[worker:1\] out worker:1" "$tmp/out" \
    && grep -qx "\[worker:1\] err worker:1" "$tmp/err" && grep -qx "\[worker:0\] tail worker:0" "$tmp/out" \
    && ! grep -q "err" "$tmp/out" && ! grep -q "out" "$tmp/err" && [ "$(wc -l < "$tmp/out")" -eq 4 ]; then
    ok prefixed_lines_and_partial_last_line
else
    fail prefixed_lines_and_partial_last_line "exit $status: $(cat "$tmp/out" "$tmp/err")"
fi
run "$dtrain" launch -n 4 -- sh -c 'i=0; while [ $i -lt 300 ]; do echo "line $i of $DTRAIN_TASK"; i=$((i + 1)); done'
good=0
for w in 0 1 2 3; do
    [ "$(grep -c "^\[worker:$w\] line [0-9]* of worker:$w$" "$tmp/out")" -eq 300 ] && good=$((good + 1))
done
if [ "$status" -eq 0 ] && [ "$good" -eq 4 ] && [ "$(wc -l < "$tmp/out")" -eq 1200 ]; then ok many_lines_never_mixed; \
else fail many_lines_never_mixed "exit $status, $good of 4 tasks intact, $(wc -l < "$tmp/out") lines"; fi
# A 10001-byte line of 2-byte characters (after one ASCII byte) is split into prefixed pieces,
# never inside a character, that join back into the line.
run "$dtrain" launch -n 1 -- awk 'BEGIN { printf "x"; for (i = 0; i < 5000; i++) printf "\303\251"; print "" }'
check=$(python3 -c '
import sys
lines = open(sys.argv[1], "rb").read().split(b"\n")
assert lines[-1] == b"", "no final newline"
pre = b"[worker:0] "
assert len(lines) > 3 and all(l.startswith(pre) for l in lines[:-1]), "%d lines" % len(lines)
pieces = [l[len(pre):].decode("utf-8") for l in lines[:-1]]
assert "".join(pieces) == "x" + "\u00e9" * 5000, "pieces differ"
' "$tmp/out" 2>&1)
if [ "$status" -eq 0 ] && [ -z "$check" ]; then ok long_line_split_safely; \
else fail long_line_split_safely "exit $status: $(echo "$check" | tail -1)"; fi

# --- failures stop the cluster and are reported ---
cat > "$tmp/fail.sh" << 'EOF'
dir=$1
echo $$ > "$dir/pid.$DTRAIN_TASK"
if [ "$DTRAIN_TASK" = worker:1 ]; then sleep 0.3; exit 3; fi
sleep 30 &
echo $! > "$dir/child.$DTRAIN_TASK"
wait
EOF
mkdir "$tmp/f1"
run "$dtrain" launch -n 3 -- sh "$tmp/fail.sh" "$tmp/f1"
pid=$(cat "$tmp/f1/pid.worker:1" 2> /dev/null)
if [ "$status" -eq 3 ] && [ "$ms" -lt 3000 ] && \
    grep -qx "dtrain: error: task worker:1 (pid $pid) exited with status 3" "$tmp/err" && \
    [ "$(wc -l < "$tmp/err")" -eq 1 ]; then
    ok failing_task_stops_the_others
else
    fail failing_task_stops_the_others "exit $status in $ms ms: $(cat "$tmp/err")"
fi
if left=$(all_dead "$tmp"/f1/pid.* "$tmp"/f1/child.*) && [ "$(ls "$tmp"/f1/child.* | wc -l)" -eq 2 ]; then
    ok failure_leaves_no_process
else
    fail failure_leaves_no_process "still running:$left"
fi

mkdir "$tmp/f2"
run "$dtrain" launch -n 2 -- sh -c 'echo $$ > '"$tmp/f2"'/pid.$DTRAIN_TASK; if [ $DTRAIN_TASK = worker:0 ]; then sleep 0.2; kill -9 $$; fi; exec sleep 30'
pid=$(cat "$tmp/f2/pid.worker:0" 2> /dev/null)
if [ "$status" -eq 137 ] && [ "$ms" -lt 3000 ] && grep -q "^dtrain: error: task worker:0 (pid $pid) was killed by signal 9" "$tmp/err"; then
    ok task_killed_by_signal
else
    fail task_killed_by_signal "exit $status in $ms ms: $(cat "$tmp/err")"
fi
if left=$(all_dead "$tmp"/f2/pid.*); then ok signal_leaves_no_process; else fail signal_leaves_no_process "still running:$left"; fi

# A task that ignores SIGTERM is killed after --grace.
mkdir "$tmp/f3"
run "$dtrain" launch -n 2 --grace 1 -- sh -c 'trap "" TERM; echo $$ > '"$tmp/f3"'/pid.$DTRAIN_TASK; if [ $DTRAIN_TASK = worker:1 ]; then sleep 0.2; exit 5; fi; sleep 30'
if [ "$status" -eq 5 ] && [ "$ms" -ge 1000 ] && [ "$ms" -lt 4000 ] && left=$(all_dead "$tmp"/f3/pid.*); then
    ok sigkill_after_grace
else
    fail sigkill_after_grace "exit $status in $ms ms; still running: ${left:-}"
fi

# A task that leaves a process behind: the process is stopped with the task, and launch does
# not wait for it to close the output pipe it holds.
run "$dtrain" launch -n 1 -- sh -c 'sleep 30 & echo $! > '"$tmp"'/bg.pid; echo hi'
if [ "$status" -eq 0 ] && [ "$ms" -lt 3000 ] && left=$(all_dead "$tmp/bg.pid"); then ok leftover_process_stopped; \
else fail leftover_process_stopped "exit $status in $ms ms; still running: ${left:-}"; fi

# The evaluator finishing early does not stop training.
run "$dtrain" launch -n 1 --evaluator -- sh -c 'if [ $DTRAIN_TASK = evaluator:0 ]; then exit 0; fi; sleep 0.4; echo finished'
if [ "$status" -eq 0 ] && grep -qx "\[worker:0\] finished" "$tmp/out"; then ok evaluator_end_keeps_training; \
else fail evaluator_end_keeps_training "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi

# --- restarts ---
# worker:1 fails on the first attempt only (after worker:0 has recorded its TF_CONFIG).
mkdir "$tmp/r1"
cat > "$tmp/restart.sh" << 'EOF'
dir=$1
printf '%s\n' "$TF_CONFIG" >> "$dir/tf.$DTRAIN_TASK"
printf '%s\n' "$DTRAIN_CLUSTER_SECRET" >> "$dir/secrets"
if [ "$DTRAIN_TASK" = worker:1 ] && [ ! -e "$dir/marker" ]; then
    i=0
    while [ ! -s "$dir/tf.worker:0" ] && [ $i -lt 60 ]; do sleep 0.05; i=$((i + 1)); done
    touch "$dir/marker"
    exit 4
fi
sleep 0.2
EOF
run "$dtrain" launch -n 2 --max-restarts 1 -- sh "$tmp/restart.sh" "$tmp/r1"
if [ "$status" -eq 0 ] && grep -qx "dtrain: restarting the cluster (1 of 1) after task worker:1 failed" "$tmp/err" && \
    [ "$(wc -l < "$tmp/r1/tf.worker:0")" -eq 2 ]; then
    ok restart_after_a_failure_succeeds
else
    fail restart_after_a_failure_succeeds "exit $status: $(cat "$tmp/err")"
fi
if [ "$(sort -u "$tmp/r1/secrets" | wc -l)" -eq 1 ] && [ "$(sort -u "$tmp/r1/tf.worker:0" | wc -l)" -eq 1 ]; then
    ok restart_keeps_secret_and_ports
else
    fail restart_keeps_secret_and_ports "$(cat "$tmp/r1/secrets" "$tmp/r1/tf.worker:0")"
fi
run "$dtrain" launch -n 2 --max-restarts 2 -- sh -c 'exit 5'
if [ "$status" -eq 5 ] && [ "$(grep -c "^dtrain: restarting the cluster" "$tmp/err")" -eq 2 ] && \
    grep -q "(2 of 2)" "$tmp/err" && [ "$(grep -c "exited with status 5" "$tmp/err")" -eq 3 ]; then
    ok restarts_exhausted_exit_with_last_status
else
    fail restarts_exhausted_exit_with_last_status "exit $status: $(cat "$tmp/err")"
fi

# --- signals to launch are forwarded ---
mkdir "$tmp/s1"
t0=$(date +%s%N)
"$dtrain" launch -n 2 -- sh -c 'echo $$ > '"$tmp/s1"'/pid.$DTRAIN_TASK; exec sleep 30' > "$tmp/out" 2> "$tmp/err" &
lpid=$!
wait_files 2 "$tmp/s1/pid.*"
kill -TERM "$lpid"
wait "$lpid"
status=$?
ms=$((($(date +%s%N) - t0) / 1000000))
if [ "$status" -eq 143 ] && [ "$ms" -lt 4000 ] && grep -q "received SIGTERM" "$tmp/err" && left=$(all_dead "$tmp"/s1/pid.*); then
    ok sigterm_forwarded
else
    fail sigterm_forwarded "exit $status in $ms ms: $(cat "$tmp/err") ${left:-}"
fi
# Ctrl-C: a task sends SIGINT to launch (its parent). Skipped when this shell was started with
# SIGINT ignored (a background job), which launch rightly keeps.
ign=$(sed -n 's/^SigIgn:\s*//p' /proc/$$/status)
if (((0x$ign >> 1) & 1)); then
    ok "sigint_forwarded (skipped: SIGINT is ignored here)"
else
    mkdir "$tmp/s2"
    run "$dtrain" launch -n 2 --grace 2 -- sh -c 'echo $$ > '"$tmp/s2"'/pid.$DTRAIN_TASK; if [ $DTRAIN_TASK = worker:0 ]; then sleep 0.2; kill -INT $PPID; fi; exec sleep 30'
    if [ "$status" -eq 130 ] && [ "$ms" -lt 4000 ] && grep -q "received SIGINT" "$tmp/err" && left=$(all_dead "$tmp"/s2/pid.*); then
        ok sigint_forwarded
    else
        fail sigint_forwarded "exit $status in $ms ms: $(cat "$tmp/err") ${left:-}"
    fi
fi

# --- COMMAND "dtrain" is this very binary, installed or not ---
run env PATH=/usr/bin:/bin "$dtrain" launch -n 1 -- dtrain --version
if [ "$status" -eq 0 ] && grep -q "^\[worker:0\] dtrain [0-9]" "$tmp/out"; then ok dtrain_command_is_this_binary; \
else fail dtrain_command_is_this_binary "exit $status: $(cat "$tmp/out" "$tmp/err")"; fi

# --- --comm mpi, with a stand-in mpirun that shows what it was given ---
mkdir "$tmp/empty" "$tmp/bin"
run env PATH="$tmp/empty" "$(realpath "$dtrain")" launch -n 2 --comm mpi -- true
if [ "$status" -eq 1 ] && grep -q "mpirun" "$tmp/err" && [ "$(wc -l < "$tmp/err")" -eq 1 ]; then ok mpi_without_mpirun; \
else fail mpi_without_mpirun "exit $status: $(cat "$tmp/err")"; fi
cat > "$tmp/bin/mpirun" << 'EOF'
#!/bin/sh
echo "args: $*"
echo "env: secret=${DTRAIN_CLUSTER_SECRET:-unset} tf=${TF_CONFIG:-unset}"
echo "to stderr" >&2
exit "${FAKE_MPIRUN_EXIT:-0}"
EOF
chmod +x "$tmp/bin/mpirun"
root_flag=""
[ "$(id -u)" -eq 0 ] && root_flag=" --allow-run-as-root"
exe=$(realpath "$dtrain")
run env PATH="$tmp/bin:$PATH" TF_CONFIG=stale "$dtrain" launch -n 3 --comm mpi -- dtrain train --epochs 1
if [ "$status" -eq 0 ] && grep -qx "\[mpi\] args: -np 3$root_flag --oversubscribe -x DTRAIN_CLUSTER_SECRET $exe train --epochs 1" "$tmp/out" \
    && grep -Eqx "\[mpi\] env: secret=[0-9a-f]{64} tf=unset" "$tmp/out" && grep -qx "\[mpi\] to stderr" "$tmp/err"; then
    ok mpi_runs_mpirun
else
    fail mpi_runs_mpirun "exit $status: $(cat "$tmp/out" "$tmp/err")"
fi
run env PATH="$tmp/bin:$PATH" FAKE_MPIRUN_EXIT=6 "$dtrain" launch -n 2 --comm mpi -- true
if [ "$status" -eq 6 ] && grep -q "task mpi (pid [0-9]*) exited with status 6" "$tmp/err"; then ok mpi_failure_status; \
else fail mpi_failure_status "exit $status: $(cat "$tmp/err")"; fi

# --- --print-tf-config: the TF_CONFIG a task would get, from the library's writer ---
run "$dtrain" launch -n 2 --ps 1 --base-port 7000 --print-tf-config worker:1
want='{"cluster":{"chief":["127.0.0.1:7000"],"worker":["127.0.0.1:7001","127.0.0.1:7002"],"ps":["127.0.0.1:7003"]},"task":{"type":"worker","index":1}}'
if [ "$status" -eq 0 ] && [ "$(cat "$tmp/out")" = "$want" ]; then
    ok launch_print_tf_config_writes_the_cluster
else
    fail launch_print_tf_config_writes_the_cluster "exit $status: $(cat "$tmp/out" "$tmp/err")"
fi
expect_error launch_print_tf_config_names_a_missing_task 2 "job 'ps' has 0 tasks" launch -n 2 \
    --base-port 7000 --print-tf-config ps:0
expect_error launch_print_tf_config_needs_a_base_port 2 "--base-port" launch -n 2 \
    --print-tf-config worker:0

echo "launch: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
