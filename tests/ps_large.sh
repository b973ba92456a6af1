#!/usr/bin/env bash
# A 2 GiB shard through the parameter server: an FM whose factor table is 2^20 rows of 256
# (1 GiB) with Adagrad's accumulators beside it (1 GiB more) on one ps task. Trained 3 steps by
# one worker, it is read back whole at the end (the parameters equal one_device's bit for bit),
# written as a sharded checkpoint, and restored onto a ps task again (ASSIGN messages of rows
# and slots of 64 MiB each, far below a message's limit). Needs about 10 GB of memory
# and 5 GB of disk under /tmp, so it is not part of `make test`: `make test-large` runs it.
# usage: tests/ps_large.sh BUILD COUNTS
set -u
build=$1
counts=$2
dtrain="$(cd "$build" && pwd)/dtrain"
tmp=$(mktemp -d /tmp/dtrain-ps-large-XXXXXX)
pids=()
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
passed=0
failed=0
. "$(dirname "$0")/lib.sh"
export DTRAIN_CLUSTER_SECRET=ps-large-test-secret-0123456789abcdef

"$dtrain" data gen-ctr --rows 2000 --seed 11 --out "$tmp/train.svm" > /dev/null 2>&1
fm=(train --data "libsvm:$tmp/train.svm" --test-data none --hash-buckets 1048576
    --embedding-size 256 --model fm --optimizer adagrad --lr 0.01 --batch-size 128
    --shuffle-buffer 0 --progress none --seed 1 --threads 1 --max-steps 3)

run timeout 600 "$dtrain" "${fm[@]}" --metrics-out "$tmp/one.json"
one=$(json_field "$tmp/one.json" param_checksum 2>/dev/null)
[ "$status" -eq 0 ] && [ -n "$one" ] || fail one_device_2gib_table "exit $status: $(tail -2 "$tmp/err")"

# The job's end reads the whole shard back: 16 requests of 64 MiB, not one of 1 GiB as it once was.
run timeout 900 "$dtrain" launch -n 1 --ps 1 -- "$dtrain" "${fm[@]}" --strategy parameter_server \
    --model-dir "$tmp/ck" --metrics-out "$tmp/ps.json"
sum=$(json_field "$tmp/ps.json" param_checksum 2>/dev/null)
if [ "$status" -eq 0 ] && [ "$sum" = "$one" ] && [ -f "$tmp/ck/ckpt-3.ps-0-of-1.safetensors" ]; then
    ok ps_2gib_shard_read_back_equals_one_device "checksum=$sum, $ms ms"
else
    fail ps_2gib_shard_read_back_equals_one_device "exit $status, checksum $sum vs $one: $(tail -3 "$tmp/err")"
fi

fm4=("${fm[@]:0:${#fm[@]}-1}" 4)
# Restored onto a ps task: the 2 GiB of rows and accumulators go out in ASSIGNs of 64 MiB, then
# one more step; one_device restoring the same checkpoint takes the same step.
run timeout 900 "$dtrain" launch -n 1 --ps 1 -- "$dtrain" "${fm4[@]}" --strategy parameter_server \
    --restore-checkpoint "$tmp/ck/ckpt-3.safetensors" --metrics-out "$tmp/ps_restored.json"
restored=$(json_field "$tmp/ps_restored.json" param_checksum 2>/dev/null)
ps_status=$status ps_err=$(tail -3 "$tmp/err")
run timeout 600 "$dtrain" "${fm4[@]}" --restore-checkpoint "$tmp/ck/ckpt-3.safetensors" \
    --metrics-out "$tmp/one_restored.json"
one_restored=$(json_field "$tmp/one_restored.json" param_checksum 2>/dev/null)
if [ "$ps_status" -eq 0 ] && [ "$status" -eq 0 ] && [ -n "$restored" ] && [ "$restored" = "$one_restored" ]; then
    ok ps_2gib_shard_restored_in_chunks "checksum=$restored"
else
    fail ps_2gib_shard_restored_in_chunks "exit $ps_status/$status, checksum $restored vs $one_restored: $ps_err $(tail -2 "$tmp/err")"
fi

# Nothing of the job is left: launch waits for its tasks, so no dtrain of this test runs on.
left=$(pgrep -f -- "$tmp/" | grep -v "^$$\$" || true)
if [ -z "$left" ]; then ok ps_large_no_leftovers; else fail ps_large_no_leftovers "still running: $left"; fi
echo "$passed $failed" > "$counts"
