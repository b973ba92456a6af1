#!/usr/bin/env bash
# Multi-worker training speed, in one run: the tutorial CNN on Fashion-MNIST with Adam 1e-3,
# per-worker batch 64, 1 thread per process, STEPS steps:
#   - dtrain, one process (batch 64);
#   - dtrain multi_worker_mirrored, 2 processes under dtrain launch (global batch 128, tcp; as the
#     two share this host, one copy of the parameters in shared memory, each worker summing the
#     gradients of its half and updating it there);
#   - PyTorch DistributedDataParallel over Gloo, 2 processes (bench/peers/torch_cnn.py).
# Each runs REPEAT times, interleaved; the median is reported, with the two ratios the goals are
# stated in (2 workers against DDP, and against twice one process) and the share of the 2-worker
# step time spent in collectives (waiting for the other worker included). A fourth figure shows
# what this machine gives two processes: two independent single processes run at the same time
# (no communication, no lock-step, but each updating all of its parameters), summed. The ratios
# are also taken within each repetition, whose runs are seconds apart, and their medians printed.
# usage: bench/multiworker.sh BUILD_DIR    env: REPEAT (3), STEPS (600), PEERS_DIR, PYTHON
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$(cd "${1:?usage: bench/multiworker.sh BUILD_DIR}" && pwd)
repeat=${REPEAT:-3}
steps=${STEPS:-600}
peers=${PEERS_DIR:-$here/peers}
python=${PYTHON:-/usr/bin/python3}
die() { echo "bench/multiworker.sh: error: $*" >&2; exit 1; }
[ -x "$build/dtrain" ] || die "$build/dtrain is missing (make)"
[ -f "$peers/torch_cnn.py" ] || die "$peers/torch_cnn.py is missing (set PEERS_DIR)"
"$python" -c "import torch.distributed" 2> /dev/null || die "$python cannot import torch.distributed"
work=$(mktemp -d /tmp/dtrain-multiworker-XXXXXX)
trap 'rm -rf "$work"' EXIT
common=(train --model mnist_cnn --data fashion-mnist --optimizer adam --lr 0.001 --threads 1
        --max-steps "$steps" --progress none --seed 1)
json() { "$python" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }

for rep in $(seq 1 "$repeat"); do
    echo "run $rep of $repeat" >&2
    "$build/dtrain" "${common[@]}" --batch-size 64 --metrics-out "$work/one.json" > /dev/null
    json "$work/one.json" samples_per_sec >> "$work/one"
    "$build/dtrain" "${common[@]}" --batch-size 64 --metrics-out "$work/pair0.json" > /dev/null &
    pair=$!
    "$build/dtrain" "${common[@]}" --batch-size 64 --metrics-out "$work/pair1.json" > /dev/null
    wait "$pair" || die "the concurrent single process failed"
    echo "$(json "$work/pair0.json" samples_per_sec) $(json "$work/pair1.json" samples_per_sec)" |
        awk '{ print $1 + $2 }' >> "$work/pair"
    "$build/dtrain" launch -n 2 -- "$build/dtrain" "${common[@]}" --batch-size 128 \
        --metrics-out "$work/two.json" > /dev/null
    json "$work/two.json" samples_per_sec >> "$work/two"
    echo "$(json "$work/two.json" comm_seconds) $(json "$work/two.json" train_seconds)" |
        awk '{ print $1 / $2 }' >> "$work/share"
    port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    for r in 0 1; do
        "$python" "$peers/torch_cnn.py" --threads 1 --opt adam --lr 0.001 --steps "$steps" \
            --ddp-rank "$r" --ddp-world 2 --port "$port" > "$work/ddp$r.out" 2>&1 &
        eval "pid$r=\$!"
    done
    wait "$pid0" "$pid1" || die "DDP failed: $(tail -3 "$work/ddp0.out")"
    # Each DDP rank prints its own samples/s at batch 64: the cluster's is the sum.
    cat "$work/ddp0.out" "$work/ddp1.out" | sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' |
        awk '{ s += $1 } END { print s }' >> "$work/ddp"
    # This repetition's own ratios, its runs a few seconds apart: the machine's load drifts over
    # minutes, and a ratio of runs taken together follows less of it.
    echo "$(tail -1 "$work/two") $(tail -1 "$work/one") $(tail -1 "$work/ddp")" |
        awk '{ print $1 / (2 * $2), $1 / $3 }' >> "$work/ratios"
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
one=$(median "$work/one"); two=$(median "$work/two"); ddp=$(median "$work/ddp"); share=$(median "$work/share")
pair=$(median "$work/pair")
echo "tutorial CNN, Adam, per-worker batch 64, 1 thread per process, $steps steps, median of $repeat"
printf '  dtrain, 1 process:                  %8.0f samples/s\n' "$one"
printf '  dtrain, 2 workers (tcp, shm):       %8.0f samples/s   (%.1f%% of the step time in collectives)\n' "$two" "$(echo "$share * 100" | bc -l)"
printf '  PyTorch DDP over Gloo, 2 processes: %8.0f samples/s\n' "$ddp"
printf '  2 independent processes at once:    %8.0f samples/s   (%.1f%% of twice one process)\n' \
    "$pair" "$(echo "$pair / (2 * $one) * 100" | bc -l)"
printf '  2 workers: x%.2f DDP (goal 4), %.1f%% of twice one process (goal 80%%)\n' \
    "$(echo "$two / $ddp" | bc -l)" "$(echo "$two / (2 * $one) * 100" | bc -l)"
cut -d' ' -f1 "$work/ratios" > "$work/r_one"
cut -d' ' -f2 "$work/ratios" > "$work/r_ddp"
printf '  per repetition (its own runs): x%.2f DDP, %.1f%% of twice one process (medians; each: %s)\n' \
    "$(median "$work/r_ddp")" "$(echo "$(median "$work/r_one") * 100" | bc -l)" \
    "$(awk '{ printf "%s%.1f%%", (NR > 1 ? " " : ""), $1 * 100 }' "$work/r_one")"
