#!/usr/bin/env bash
# All-reduce against the peers, in one run: 2 ranks over loopback TCP, float32 sum, 4 KiB to
# 64 MiB, by dtrain (tcp communicator, --shm=false: the ranks share this host, and would otherwise
# meet in shared memory), by torch.distributed over Gloo
# (bench/peers/gloo_allreduce.py) and by Open MPI forced onto TCP (`--mca btl tcp,self`,
# bench/peers/mpi_allreduce.c); each program runs REPEAT times, interleaved, and the best run of
# each is reported. Prints every table, then the ratios the goals are stated in: busbw at 64 MiB
# against Gloo and Open MPI, and the 4 KiB latency against Open MPI.
#
# usage: bench/allreduce.sh BUILD_DIR    env: REPEAT=N (default 3), PEERS_DIR, PYTHON
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$(cd "${1:?usage: bench/allreduce.sh BUILD_DIR}" && pwd)
repeat=${REPEAT:-3}
peers=${PEERS_DIR:-$here/peers}
python=${PYTHON:-/usr/bin/python3}
die() { echo "bench/allreduce.sh: error: $*" >&2; exit 1; }
[ -x "$build/dtrain" ] || die "$build/dtrain is missing (make)"
[ -f "$peers/gloo_allreduce.py" ] || die "$peers/gloo_allreduce.py is missing (set PEERS_DIR)"
command -v mpicc > /dev/null && command -v mpirun > /dev/null ||
    die "mpicc and mpirun are missing (apt-get install libopenmpi-dev openmpi-bin)"
"$python" -c "import torch.distributed" 2> /dev/null || die "$python cannot import torch.distributed"
work=$(mktemp -d /tmp/dtrain-allreduce-XXXXXX)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/mpi_allreduce" "$peers/mpi_allreduce.c" || die "mpicc failed"
root_flag=()
[ "$(id -u)" = 0 ] && root_flag=(--allow-run-as-root)

port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_dtrain() { # -> lines "bytes us busbw"
    local p0 p1 w
    p0=$(port); p1=$(port)
    w="\"127.0.0.1:$p0\",\"127.0.0.1:$p1\""
    export DTRAIN_CLUSTER_SECRET=allreduce-bench-secret-0123
    TF_CONFIG="{\"cluster\":{\"worker\":[$w]},\"task\":{\"type\":\"worker\",\"index\":1}}" \
        "$build/dtrain" bench allreduce --sizes 4K..64M --shm=false > /dev/null &
    local pid=$!
    TF_CONFIG="{\"cluster\":{\"worker\":[$w]},\"task\":{\"type\":\"worker\",\"index\":0}}" \
        "$build/dtrain" bench allreduce --sizes 4K..64M --shm=false > "$work/dtrain.out"
    wait "$pid"
    awk '$1 ~ /^[0-9]+$/ { print $1, $3, $5 }' "$work/dtrain.out"
}

run_gloo() {
    local p
    p=$(port)
    "$python" "$peers/gloo_allreduce.py" 1 2 "$p" > /dev/null &
    local pid=$!
    "$python" "$peers/gloo_allreduce.py" 0 2 "$p" > "$work/gloo.out"
    wait "$pid"
    sed -n 's/.*bytes=\([0-9]*\) us=\([0-9.]*\) .*busbw_GBps=\([0-9.]*\).*/\1 \2 \3/p' "$work/gloo.out"
}

run_mpi() {
    mpirun "${root_flag[@]}" --oversubscribe -np 2 --mca btl tcp,self "$work/mpi_allreduce" \
        > "$work/mpi.out" 2> "$work/mpi.err" || die "mpirun failed: $(tail -3 "$work/mpi.err")"
    sed -n 's/.*bytes=\([0-9]*\) us=\([0-9.]*\) .*busbw_GBps=\([0-9.]*\).*/\1 \2 \3/p' "$work/mpi.out"
}

# best (lowest time) per size over the repeats: files of "bytes us busbw"
for rep in $(seq 1 "$repeat"); do
    echo "run $rep of $repeat: dtrain, Gloo, Open MPI (tcp)" >&2
    run_dtrain >> "$work/all.dtrain"
    run_gloo >> "$work/all.gloo"
    run_mpi >> "$work/all.mpi"
done
best() { sort -k1,1n -k2,2g "$1" | awk '!seen[$1]++'; }
for who in dtrain gloo mpi; do best "$work/all.$who" > "$work/best.$who"; done

echo "all-reduce, 2 ranks, loopback TCP, float32 sum, best of $repeat (time in us, busbw in GB/s)"
printf '%10s | %10s %8s | %10s %8s | %10s %8s\n' bytes dtrain busbw gloo busbw "mpi tcp" busbw
join "$work/best.dtrain" "$work/best.gloo" | join - "$work/best.mpi" |
    awk '{ printf "%10d | %10.1f %8.3f | %10.1f %8.3f | %10.1f %8.3f\n", $1, $2, $3, $4, $5, $6, $7 }'
get() { awk -v b="$2" -v f="$3" '$1 == b { print $f }' "$work/best.$1"; }
big=$((64 << 20))
d=$(get dtrain $big 3); g=$(get gloo $big 3); m=$(get mpi $big 3)
dl=$(get dtrain 4096 2); ml=$(get mpi 4096 2)
echo
printf '64 MiB busbw: dtrain %.3f GB/s, Gloo %.3f, Open MPI tcp %.3f: x%.2f Gloo (goal 1.5), x%.2f Open MPI (goal 1.2)\n' \
    "$d" "$g" "$m" "$(echo "$d / $g" | bc -l)" "$(echo "$d / $m" | bc -l)"
printf '4 KiB latency: dtrain %.1f us, Open MPI tcp %.1f us (goal: no worse)\n' "$dl" "$ml"
