#!/usr/bin/env bash
# Multi-process tests of the cluster transport and the tcp communicator: real dtrain processes on
# loopback, started here with their own TF_CONFIG. Every collective's result is checked on 2 to 5
# ranks; strangers are refused while the cluster completes; a rank killed with SIGKILL in the
# middle of an all-reduce makes the others fail within the bound, naming it (20 times); a stopped
# rank makes the others time out naming it. usage: tests/net.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$(cd "$build" && pwd)/dtrain"
tmp=$(mktemp -d /tmp/dtrain-net-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
passed=0
failed=0
. "$(dirname "$0")/lib.sh"
export DTRAIN_CLUSTER_SECRET=net-test-secret-0123456789

# ---- every collective checked, 2 to 5 ranks ----
for n in 2 3 4 5; do
    base=$(free_base "$n")
    for ((i = 0; i < n; i++)); do
        start_rank "$n" "$base" "$i" bench allreduce --check --sizes 4..4M --factor 8 --iters 2 \
            --warmup 1 --connect-timeout 20 --timeout 20
    done
    bad=""
    for ((i = 0; i < n; i++)); do
        wait_pid "${pids[$i]}" 60
        [ "$status" -eq 0 ] || bad="$bad rank $i exit $status: $(head -c 300 "$tmp/r$i.err");"
    done
    lines=$(grep -c ' ok$' "$tmp/r0.out")
    if [ -n "$bad" ]; then
        fail "allreduce_checked_$n""_processes" "$bad"
    elif [ "$lines" -ne 7 ] || grep -q WRONG "$tmp/r0.out"; then
        fail "allreduce_checked_$n""_processes" "$(cat "$tmp/r0.out")"
    else
        ok "allreduce_checked_$n""_processes"
    fi
done

# ---- the same under dtrain launch (its own ports and a fresh secret) ----
env -u DTRAIN_CLUSTER_SECRET "$dtrain" launch -n 3 -- dtrain bench allreduce --check \
    --sizes 4K..1M --iters 2 > "$tmp/launch.out" 2> "$tmp/launch.err"
status=$?
if [ "$status" -ne 0 ] || [ "$(grep -c '^\[worker:0\] .* ok$' "$tmp/launch.out")" -ne 5 ]; then
    fail allreduce_checked_under_launch "exit $status: $(head -c 600 "$tmp/launch.out" "$tmp/launch.err")"
else
    ok allreduce_checked_under_launch
fi

# ---- coll_check (every collective, signed zeros, infinities, NaN, bitwise agreement) ----
# All-reduce and barrier go through shared memory (the processes share this host), and once more
# over TCP alone.
for run in 2:1 3:1 4:1 5:1 3:0 5:0; do
    n=${run%:*} shm=${run#*:}
    name="coll_check_tcp_$n""_processes$([ "$shm" = 0 ] && echo _without_shm)"
    "$dtrain" launch -n "$n" -- "$(dirname "$dtrain")/tests/coll_check" --comm tcp --shm "$shm" \
        --counts 0,1,2,7,13,97,100003 > "$tmp/cc.out" 2> "$tmp/cc.err"
    status=$?
    if [ "$status" -ne 0 ] || ! grep -q "tcp: rank 0: [0-9]* checks, 0 failed" "$tmp/cc.out"; then
        fail "$name" "exit $status: $(grep -v '^\[worker:0\] ok' "$tmp/cc.out" | head -c 600) $(head -c 300 "$tmp/cc.err")"
    else
        ok "$name"
    fi
done

# Tensors larger than a round of the shared segment (1 Mi floats a rank), and than a slice of the
# ring (2 x 64 Ki floats a rank): the sharded update and the gathering of what each rank owns
# must split the elements the same way.
for run in 1:2097157 0:600001; do
    shm=${run%:*} n=${run#*:}
    name="coll_check_tcp_2_processes_beyond_a_$([ "$shm" = 1 ] && echo round || echo ring_slice)"
    "$dtrain" launch -n 2 -- "$(dirname "$dtrain")/tests/coll_check" --comm tcp --shm "$shm" \
        --counts "$n" > "$tmp/cc.out" 2> "$tmp/cc.err"
    status=$?
    if [ "$status" -ne 0 ] || ! grep -q "tcp: rank 0: [0-9]* checks, 0 failed" "$tmp/cc.out" ||
        ! grep -q "ok   all-reduce and update n=$n (2 ranks, sharded)" "$tmp/cc.out" ||
        ! grep -q "ok   share of owned state n=$n" "$tmp/cc.out"; then
        fail "$name" "exit $status: $(grep -v '^\[worker:0\] ok' "$tmp/cc.out" | head -c 600) $(head -c 300 "$tmp/cc.err")"
    else
        ok "$name"
    fi
done

# ---- a name a creator killed during setup left in /dev/shm is removed by the next cluster; one
# of a live process stays ----
if [ -w /dev/shm ]; then
    sh -c 'exit 0' &
    dead=$!
    wait "$dead"
    stale="/dev/shm/dtrain-$dead-0123456789abcdef0123456789abcdef"
    live="/dev/shm/dtrain-$$-00112233445566778899aabbccddeeff"
    : > "$stale"
    : > "$live"
    "$dtrain" launch -n 2 -- "$(dirname "$dtrain")/tests/coll_check" --comm tcp --counts 7 \
        > "$tmp/cc.out" 2> "$tmp/cc.err"
    status=$?
    if [ "$status" -eq 0 ] && [ ! -e "$stale" ] && [ -e "$live" ] &&
        grep -q "removed $stale, left by a process that stopped" "$tmp/cc.out" "$tmp/cc.err"; then
        ok stale_shared_memory_names_are_removed
    else
        fail stale_shared_memory_names_are_removed "exit $status, stale $([ -e "$stale" ] && echo kept || echo removed), live $([ -e "$live" ] && echo kept || echo removed): $(head -c 300 "$tmp/cc.err")"
    fi
    rm -f "$stale" "$live"
else
    echo "skip stale_shared_memory_names_are_removed: /dev/shm is not writable"
fi

# ---- multi_worker_mirrored: k processes at global batch 64 train as one process does ----
# K:BUCKET_MB:SHM. Without buckets each worker updates its own share of the parameters (the
# optimizer sharded), in shared memory or over the TCP ring; buckets during backward leave every
# worker to update all of them.
train_args=(train --max-steps 50 --threads 1 --optimizer adam --lr 0.001 --progress none)
for run in 2:0:true 3:0:true 3:0:false 4:0.1:true; do
    IFS=: read -r k bucket shm <<< "$run"
    batch=$((k == 3 ? 63 : 64))
    name="multi_worker_$k""_processes_equal_one$([ "$shm" = false ] && echo _over_tcp)$([ "$bucket" != 0 ] && echo _in_buckets)"
    "$dtrain" "${train_args[@]}" --batch-size "$batch" --metrics-out "$tmp/single$k.json" \
        > /dev/null 2>&1
    "$dtrain" launch -n "$k" -- dtrain "${train_args[@]}" --batch-size "$batch" \
        --bucket-mb "$bucket" --shm="$shm" --metrics-out "$tmp/multi$k.json" > "$tmp/multi.out" 2>&1
    status=$?
    verdict=$(python3 - "$tmp/single$k.json" "$tmp/multi$k.json" "$k" <<'PY2' 2>&1
import json, sys
a, b, k = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
rel = abs(a["final_loss"] - b["final_loss"]) / abs(a["final_loss"])
ok = rel <= 1e-5 and b["workers"] == k and b["steps"] == a["steps"] == 50 and \
     b["samples"] == a["samples"] and b["strategy"] == "multi_worker_mirrored"
print("ok" if ok else "differ", "final loss %.9g vs %.9g (relative %.2g), %s workers" %
      (b["final_loss"], a["final_loss"], rel, b["workers"]))
PY2
)
    if [ "$status" -ne 0 ] || [ "${verdict%% *}" != ok ]; then
        fail "$name" "exit $status: $verdict $(tail -3 "$tmp/multi.out")"
    else
        ok "$name ($verdict)"
    fi
done

# Two workers sum a + b in either order: the sharded update in shared memory, the sharded update
# over the TCP ring, and every worker updating everything (gradients in buckets) must give the
# same parameters, bit for bit.
"$dtrain" launch -n 2 -- dtrain "${train_args[@]}" --batch-size 64 --shm=false \
    --metrics-out "$tmp/multi2tcp.json" > "$tmp/multi.out" 2>&1
status=$?
"$dtrain" launch -n 2 -- dtrain "${train_args[@]}" --batch-size 64 --bucket-mb 0.1 \
    --metrics-out "$tmp/multi2all.json" >> "$tmp/multi.out" 2>&1
status=$((status + $?))
a=$(json_field "$tmp/multi2.json" param_checksum)
b=$(json_field "$tmp/multi2tcp.json" param_checksum)
c=$(json_field "$tmp/multi2all.json" param_checksum)
if [ "$status" -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ]; then
    ok "sharded_update_equals_replicated_update_bitwise (checksum $a)"
else
    fail sharded_update_equals_replicated_update_bitwise "exit $status: checksums $a (shared memory) vs $b (tcp ring) vs $c (every worker updates all): $(tail -2 "$tmp/multi.out")"
fi

# ---- uneven shards: worker 0's file holds 20 batches of 32, worker 1's 21; every epoch ends
# for both after 20 steps (the last batch is not trained on), whether the workers learn of the
# end with the step's sums (shared memory, or TCP alone) or agree before each step (buckets) ----
python3 - "$tmp" <<'PY2'
import random, sys
random.seed(1)
for name, n in (("a", 640), ("b", 700)):
    with open("%s/uneven_%s.svm" % (sys.argv[1], name), "w") as f:
        for i in range(n):
            y = random.randrange(10)
            f.write("%d %d:1 %d:0.5\n" % (y, y * 7 + 1, 700 + y))
PY2
for extra in --shm=true --shm=false --bucket-mb=0.01; do
    run timeout 60 "$dtrain" launch -n 2 -- "$dtrain" train --model mlp --num-features 784 \
        --data "libsvm:$tmp/uneven_a.svm,$tmp/uneven_b.svm" --input-shape 28,28,1 --batch-size 64 \
        --epochs 2 --threads 1 --test-data none --progress none "$extra" --metrics-out "$tmp/uneven.json"
    steps=$(json_field "$tmp/uneven.json" steps)
    samples=$(json_field "$tmp/uneven.json" samples)
    if [ "$status" -eq 0 ] && [ "$steps" = 40 ] && [ "$samples" = 2560 ]; then
        ok "uneven_shards_end_each_epoch_together ($extra, ${ms} ms)"
    else
        fail "uneven_shards_end_each_epoch_together ($extra)" "exit $status, $steps steps, $samples samples: $(tail -3 "$tmp/err")"
    fi
    rm -f "$tmp/uneven.json"
done

# ---- workers on one machine share out its cores unless --threads says otherwise, and read
# their input on their own thread unless --prefetch says otherwise ----
want=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
run "$dtrain" launch -n 2 -- "$dtrain" train --model mlp --max-steps 5 --batch-size 64 \
    --progress none --test-data none --metrics-out "$tmp/shared.json"
run2_out=$(cat "$tmp/out")
run "$dtrain" launch -n 2 -- "$dtrain" train --model mlp --max-steps 5 --batch-size 64 \
    --progress none --test-data none --threads 1 --metrics-out "$tmp/one.json"
one_pf=$(( 2 >= $(nproc) ? 0 : 2 )) # no prefetch thread once the workers' threads fill the cores
run "$dtrain" launch -n 2 -- "$dtrain" train --model mlp --max-steps 5 --batch-size 64 \
    --progress none --test-data none --threads 2 --prefetch 3 --metrics-out "$tmp/given.json"
if grep -q "^\[worker:0\] Trained 5 steps .* on $want thread" <<< "$run2_out" &&
    grep -q "^\[worker:0\] Trained 5 steps .* on 2 threads" "$tmp/out" &&
    [ "$(json_field "$tmp/shared.json" prefetch)" = 0 ] &&
    [ "$(json_field "$tmp/one.json" prefetch)" = "$one_pf" ] &&
    [ "$(json_field "$tmp/given.json" prefetch)" = 3 ]; then
    ok "workers_share_out_the_cores ($want each of $(nproc), prefetch 0, $one_pf with --threads 1)"
else
    fail workers_share_out_the_cores "expected $want thread(s) each by default and prefetch 0, $one_pf with --threads 1, 2 threads and prefetch 3 with --threads 2 --prefetch 3: $(grep Trained <<< "$run2_out") / $(grep Trained "$tmp/out"), prefetch $(json_field "$tmp/shared.json" prefetch) / $(json_field "$tmp/one.json" prefetch) / $(json_field "$tmp/given.json" prefetch)"
fi

# ---- train_and_evaluate across 2 workers: the chief alone evaluates and logs ----
"$dtrain" launch -n 2 -- dtrain train --model mlp --max-steps 120 --threads 1 --batch-size 64 \
    --progress estimator --log-step-count-steps 50 --eval-every-steps 50 --eval-steps 4 \
    > "$tmp/tae.out" 2>&1
status=$?
if [ "$status" -eq 0 ] && [ "$(grep -c '^\[worker:0\] Saving dict for global step' "$tmp/tae.out")" = 3 ] &&
   grep -q '^\[worker:0\] Saving dict for global step 120: ' "$tmp/tae.out" &&
   ! grep -q '^\[worker:1\] \(Saving\|loss\)' "$tmp/tae.out"; then
    ok train_and_evaluate_on_two_workers
else
    fail train_and_evaluate_on_two_workers "exit $status: $(grep -v 'loss =\|global_step/sec' "$tmp/tae.out" | head -8)"
fi

# ---- strangers knock while the cluster forms ----
base=$(free_base 2)
start_rank 2 "$base" 0 bench allreduce --check --sizes 4K..64K --iters 2 --connect-timeout 20
python3 - "$base" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
def knock(payload):
    for _ in range(200):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2); break
        except OSError:
            time.sleep(0.02)
    if payload is not None:
        s.sendall(payload)
        s.settimeout(2)
        try:
            while s.recv(4096): pass
        except OSError:
            pass
    s.close()
knock(None)                       # a port scan
knock(b"GET / HTTP/1.0\r\n\r\n" + b"x" * 64)  # garbage
knock(b"dtrainHS" + b"\x09\x00" + b"\x00" * 54)  # another protocol version
PY
start_rank 2 "$base" 1 bench allreduce --check --sizes 4K..64K --iters 2 --connect-timeout 20
wait_pid "${pids[0]}" 30; s0=$status
wait_pid "${pids[1]}" 30; s1=$status
refusals=$(grep -c "refused the connection from 127.0.0.1" "$tmp/r0.err")
if [ "$s0" -ne 0 ] || [ "$s1" -ne 0 ]; then
    fail strangers_are_refused_and_the_cluster_runs "exit $s0/$s1: $(cat "$tmp/r0.err" "$tmp/r1.err")"
elif [ "$refusals" -ne 3 ] || ! grep -q "protocol version 9" "$tmp/r0.err" ||
     ! grep -q "not a dtrain peer" "$tmp/r0.err"; then
    fail strangers_are_refused_and_the_cluster_runs "$refusals refusals: $(cat "$tmp/r0.err")"
else
    ok strangers_are_refused_and_the_cluster_runs
fi

# ---- a task with another secret is refused, and named ----
base=$(free_base 2)
start_rank 2 "$base" 0 bench allreduce --sizes 4K --connect-timeout 3
DTRAIN_CLUSTER_SECRET=another-secret-0123456789 start_rank 2 "$base" 1 bench allreduce --sizes 4K \
    --connect-timeout 3
wait_pid "${pids[0]}" 20; s0=$status
wait_pid "${pids[1]}" 20; s1=$status
if [ "$s0" -ne 1 ] || [ "$s1" -ne 1 ] || ! grep -q "worker:1 (127.0.0.1:" "$tmp/r0.err" ||
   ! grep -q "cluster secret" "$tmp/r1.err"; then
    fail wrong_secret_refused_and_named "exit $s0/$s1: $(cat "$tmp/r0.err" "$tmp/r1.err")"
else
    ok wrong_secret_refused_and_named
fi

# ---- kill -9 of one rank in the middle of an all-reduce, 20 times ----
bound=15 # the 10 s collective timeout, and slack for a loaded machine
worst=0
kill_failures=""
for rep in $(seq 1 20); do
    base=$(free_base 3)
    for i in 0 1 2; do
        # odd repetitions over TCP alone, even ones through shared memory
        start_rank 3 "$base" "$i" bench allreduce --sizes 16M --iters 1000000 --timeout 10 \
            --connect-timeout 20 --shm="$([ $((rep % 2)) = 1 ] && echo false || echo true)"
    done
    victim=$((rep % 3))
    # Running once rank 0 has printed its header (every rank is connected), then a moment more.
    for _ in $(seq 1 200); do grep -q "^ *size" "$tmp/r0.out" 2>/dev/null && break; sleep 0.02; done
    sleep 0.$((RANDOM % 5 + 1))
    kill -9 "${pids[$victim]}"
    wait "${pids[$victim]}" 2>/dev/null
    t0=$(date +%s.%N)
    for i in 0 1 2; do
        [ "$i" -eq "$victim" ] && continue
        wait_pid "${pids[$i]}" "$bound"
        if [ "$status" -eq 124 ]; then
            kill_failures="$kill_failures rep $rep: rank $i still running after ${bound}s;"
        elif [ "$status" -eq 0 ]; then
            kill_failures="$kill_failures rep $rep: rank $i exited 0;"
        elif ! grep -q "worker:$victim (127.0.0.1:" "$tmp/r$i.err"; then
            kill_failures="$kill_failures rep $rep: rank $i did not name worker:$victim: $(cat "$tmp/r$i.err");"
        fi
    done
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    worst=$(echo "if ($t > $worst) $t else $worst" | bc)
done
if [ -n "$kill_failures" ]; then
    fail kill_9_mid_allreduce_20_times "$kill_failures"
else
    ok "kill_9_mid_allreduce_20_times (slowest exit of the survivors: ${worst}s)"
fi

# ---- ranks that share a host but not its /dev/shm (two containers, say) keep to TCP ----
# Rank 1 runs in a mount namespace of its own with a private /dev/shm: rank 0's segment is not
# there, so every rank falls back to TCP, and the results are still checked.
if [ "$(id -u)" = 0 ] && command -v unshare > /dev/null && unshare -m true 2> /dev/null; then
    base=$(free_base 2)
    start_rank 2 "$base" 0 bench allreduce --check --sizes 4K..1M --iters 2 --connect-timeout 20
    config=$("$dtrain" launch -n 2 --base-port "$base" --print-tf-config worker:1)
    TF_CONFIG="$config" \
        unshare -m sh -c 'mount -t tmpfs tmpfs /dev/shm && exec "$0" "$@"' "$dtrain" bench allreduce \
        --check --sizes 4K..1M --iters 2 --connect-timeout 20 > "$tmp/r1.out" 2> "$tmp/r1.err" &
    pids[1]=$!
    wait_pid "${pids[0]}" 30; s0=$status
    wait_pid "${pids[1]}" 30; s1=$status
    if [ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] && grep -q "2 ranks (tcp)," "$tmp/r0.out" &&
        ! grep -q "shared memory" "$tmp/r0.out"; then
        ok private_dev_shm_keeps_to_tcp
    else
        fail private_dev_shm_keeps_to_tcp "exit $s0/$s1: $(head -3 "$tmp/r0.out") $(cat "$tmp/r0.err" "$tmp/r1.err" | head -c 400)"
    fi
else
    echo "skip private_dev_shm_keeps_to_tcp: needs root and unshare -m"
fi

# ---- a stopped rank: the others time out naming it ----
base=$(free_base 2)
for i in 0 1; do
    start_rank 2 "$base" "$i" bench allreduce --sizes 1M --iters 1000000 --timeout 2 --connect-timeout 20
done
for _ in $(seq 1 200); do grep -q "^ *size" "$tmp/r0.out" 2>/dev/null && break; sleep 0.02; done
kill -STOP "${pids[1]}"
wait_pid "${pids[0]}" 10
kill -9 "${pids[1]}"; wait "${pids[1]}" 2>/dev/null
if [ "$status" -ne 1 ] || ! grep -q "timed out after 2 s waiting for worker:1 (127.0.0.1:" "$tmp/r0.err"; then
    fail stopped_rank_times_out_named "exit $status: $(cat "$tmp/r0.err")"
else
    ok stopped_rank_times_out_named
fi

echo "net: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
