#!/usr/bin/env bash
# The parameter checksums of the seed CNN after the same flags under every synchronous strategy:
# one_device on 1 and 2 threads, mirrored and central_storage with 2 replicas, and 2-worker
# multi_worker_mirrored over tcp (shared memory), tcp alone (--shm=false) and mpi. A change that
# claims to leave training alone must print the same lines before and after.
# usage: scripts/checksums.sh BUILD_DIR     prints "NAME CHECKSUM FINAL_LOSS" per run
set -euo pipefail
build=$(cd "${1:?usage: scripts/checksums.sh BUILD_DIR}" && pwd)
dtrain=$build/dtrain
tmp=$(mktemp -d /tmp/dtrain-sums-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
common=(--model mnist_cnn --data fashion-mnist --max-steps 40 --batch-size 64 --optimizer adam
        --lr 0.001 --seed 7 --test-data none --progress none)

field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

run() {
    local name=$1
    shift
    "$@" > "$tmp/$name.log" 2>&1 || { echo "$name: failed"; cat "$tmp/$name.log"; exit 1; }
    echo "$name $(field "$tmp/$name.json" param_checksum) $(field "$tmp/$name.json" final_loss)"
}

run one_device_1 "$dtrain" train "${common[@]}" --threads 1 --metrics-out "$tmp/one_device_1.json"
run one_device_2 "$dtrain" train "${common[@]}" --threads 2 --metrics-out "$tmp/one_device_2.json"
run mirrored_2 "$dtrain" train "${common[@]}" --strategy mirrored --replicas 2 \
    --metrics-out "$tmp/mirrored_2.json"
run central_storage_2 "$dtrain" train "${common[@]}" --strategy central_storage --replicas 2 \
    --metrics-out "$tmp/central_storage_2.json"
run mwm_tcp_shm_2 "$dtrain" launch -n 2 -- "$dtrain" train "${common[@]}" \
    --metrics-out "$tmp/mwm_tcp_shm_2.json"
run mwm_tcp_2 "$dtrain" launch -n 2 -- "$dtrain" train "${common[@]}" --shm=false \
    --metrics-out "$tmp/mwm_tcp_2.json"
run mwm_tcp_buckets_2 "$dtrain" launch -n 2 -- "$dtrain" train "${common[@]}" --bucket-mb 0.25 \
    --metrics-out "$tmp/mwm_tcp_buckets_2.json"
DTRAIN_MPI_PLUGIN=$build/libdtrain_mpi.so run mwm_mpi_2 mpirun --allow-run-as-root \
    --oversubscribe -x DTRAIN_MPI_PLUGIN -np 2 "$dtrain" train "${common[@]}" --comm mpi \
    --metrics-out "$tmp/mwm_mpi_2.json"
