#!/usr/bin/env bash
# Parameter-server training speed and AUC, in one run: DeepFM (F=39, K=32, deep 128,64,32, keep
# 0.5, Adagrad 0.05, batch 1024) on ROWS generated training rows and ROWS/5 test rows, one epoch:
#   - dtrain one_device, 2 threads (the single-process figure the goal is stated against);
#   - dtrain parameter_server, async, 1 ps + 2 workers (dtrain launch -n 2 --ps 1);
#   - the same in hybrid mode (tables on the ps, dense variables all-reduced by the workers);
#   - dtrain multi_worker_mirrored, 2 workers (synchronous, the AUC to compare with);
#   - PyTorch, 1 ps + 2 workers (bench/peers/torch_ps_deepfm.py: torch.distributed.rpc), run as
#     bench/peer_env.sh says (TCMalloc preloaded, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset);
#     its BLAS kernel is printed, and the cores its processes kept busy over the whole run.
# All on this machine's cores: the chief, the workers and the ps tasks share them (the workers
# take one thread each; the ps and the coordinator mostly wait). Each runs REPEAT times,
# interleaved; medians are reported with the ratios the goals are stated in, the AUCs, and the
# ps's rows served (pulled) and updated (pushed) per second.
# usage: bench/ps.sh BUILD_DIR    env: REPEAT (3), ROWS (1000000), PEERS_DIR, PYTHON, TCMALLOC
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: bench/ps.sh BUILD_DIR}" && pwd)
repeat=${REPEAT:-3}
rows=${ROWS:-1000000}
peers=${PEERS_DIR:-$here/peers}
python=${PYTHON:-/usr/bin/python3}
die() { echo "bench/ps.sh: error: $*" >&2; exit 1; }
[ -x "$build/dtrain" ] || die "$build/dtrain is missing (make)"
[ -f "$peers/torch_ps_deepfm.py" ] || die "$peers/torch_ps_deepfm.py is missing (set PEERS_DIR)"
"$python" -c "import torch, numpy" 2> /dev/null || die "$python cannot import torch and numpy"
PEER_PYTHON=$python
. "$here/peer_env.sh"
peer_env_check
work=$(mktemp -d /tmp/dtrain-ps-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
json() { "$python" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }

peer_info 1 > "$work/peer_blas" || die "$python cannot load torch in the peers' environment"
echo "generating $rows + $((rows / 5)) rows" >&2
"$build/dtrain" data gen-ctr --rows "$rows" --seed 11 --out "$work/train.svm" > "$work/gen"
"$build/dtrain" data gen-ctr --rows $((rows / 5)) --seed 12 --out "$work/test.svm" > /dev/null
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$work/gen")
common=(train --data "libsvm:$work/train.svm" --test-data "libsvm:$work/test.svm"
        --feature-size "$fs" --model deepfm --optimizer adagrad --lr 0.05 --batch-size 1024
        --shuffle-buffer 0 --progress none --seed 1)

record() { # NAME JSON: samples/s, AUC, train seconds
    echo "$(json "$2" samples_per_sec) $(json "$2" test_auc) $(json "$2" train_seconds)" >> "$work/$1"
}
for rep in $(seq 1 "$repeat"); do
    echo "run $rep of $repeat" >&2
    "$build/dtrain" "${common[@]}" --threads 2 --metrics-out "$work/one.json" > /dev/null
    record one "$work/one.json"
    "$build/dtrain" launch -n 2 --ps 1 -- "$build/dtrain" "${common[@]}" \
        --strategy parameter_server --metrics-out "$work/ps.json" > "$work/ps.out" 2>&1 ||
        die "parameter_server failed: $(tail -3 "$work/ps.out")"
    record ps "$work/ps.json"
    # What the ps served during training: pulls and pushes, less the chief's reading back of
    # every row of both tables at the end.
    sed -n 's/.*: [0-9]* requests, \([0-9]*\) rows pulled, \([0-9]*\) rows pushed/\1 \2/p' \
        "$work/ps.out" >> "$work/ps_rows"
    # Each worker's pull times and traffic per sample.
    sed -n 's/.*pulls p50 \([0-9.]*\) ms, p99 \([0-9.]*\) ms; \([0-9]*\) bytes per sample to the ps tasks, \([0-9]*\) from them/\1 \2 \3 \4/p' \
        "$work/ps.out" >> "$work/ps_workers"
    "$build/dtrain" launch -n 2 --ps 1 -- "$build/dtrain" "${common[@]}" \
        --strategy parameter_server --ps-mode hybrid --metrics-out "$work/hyb.json" \
        > "$work/hyb.out" 2>&1 || die "hybrid failed: $(tail -3 "$work/hyb.out")"
    record hyb "$work/hyb.json"
    "$build/dtrain" launch -n 2 -- "$build/dtrain" "${common[@]}" \
        --metrics-out "$work/mwm.json" > "$work/mwm.out" 2>&1 ||
        die "multi_worker_mirrored failed: $(tail -3 "$work/mwm.out")"
    record mwm "$work/mwm.json"
    # Its processes' CPU time over the run's wall time (the peer prints no cores= of its own):
    # loading, the rpc setup and the evaluation included.
    usage=$(peer_cores "$work/torch.out" "$work/torch.err" "${PEER_ENV[@]}" "$python" \
        "$peers/torch_ps_deepfm.py" --launch --ps 1 --workers 2 --train "$work/train.svm" \
        --test "$work/test.svm" --feature-size "$fs" --port $((29500 + RANDOM % 400))) ||
        die "the PyTorch peer failed: $(tail -3 "$work/torch.err")"
    echo "$(tail -1 "$work/torch.out" | sed 's/[a-z_]*=//g' | awk '{ print $1, $4, $2 }')" \
         "$(echo "$usage" | awk '{ print $3 }')" >> "$work/torch"
done

"$python" - "$work" "$fs" <<'PY'
import statistics, sys
work, fs = sys.argv[1], int(sys.argv[2])
def rows(name):
    return [[float(x) for x in l.split()] for l in open(f"{work}/{name}") if l.strip()]
def med(name, col):
    return statistics.median(r[col] for r in rows(name))
one, ps, mwm, pt = (med(n, 0) for n in ("one", "ps", "mwm", "torch"))
print(f"{'':50} {'samples/s':>10} {'test AUC':>9}")
for label, name in (("dtrain one_device, 2 threads", "one"),
                    ("dtrain parameter_server async, 1 ps + 2 workers", "ps"),
                    ("dtrain parameter_server hybrid, 1 ps + 2 workers", "hyb"),
                    ("dtrain multi_worker_mirrored, 2 workers", "mwm"),
                    ("PyTorch rpc parameter server, 1 ps + 2 workers", "torch")):
    print(f"{label:50} {med(name, 0):10,.0f} {med(name, 1):9.4f}")
print(f"dtrain ps / PyTorch ps: {ps / pt:.2f}x (goal >= 3)")
print(f"PyTorch's processes kept {med('torch', 3):.2f} cores busy over the whole run (loading, rpc "
      f"setup and evaluation included); their environment (bench/peer_env.sh): "
      f"{open(f'{work}/peer_blas').read().strip()}")
print(f"dtrain ps / dtrain one_device 2 threads: {100 * ps / one:.0f}% (goal >= 70%)")
print(f"AUC dtrain ps - PyTorch ps: {med('ps', 1) - med('torch', 1):+.4f} (goal >= -0.002)")
print(f"AUC async - synchronous multi_worker_mirrored: {med('ps', 1) - med('mwm', 1):+.4f} "
      f"(goal within 0.002)")
print(f"AUC hybrid - synchronous multi_worker_mirrored: {med('hyb', 1) - med('mwm', 1):+.4f} "
      f"(goal within 0.001)")
# Rows the ps served and updated while training (the final read-back of both tables excluded),
# per second of training, on the one core it shares with the others.
served = [r[0] - 2 * fs for r in rows("ps_rows")]
updated = [r[1] for r in rows("ps_rows")]
secs = [r[2] for r in rows("ps")]
w = rows("ps_workers")
print(f"workers: a step's pull (rows and dense variables from the ps) p50 "
      f"{statistics.median(r[0] for r in w):.2f} ms, p99 {statistics.median(r[1] for r in w):.2f} "
      f"ms; per sample {statistics.median(r[2] for r in w):,.0f} bytes to the ps, "
      f"{statistics.median(r[3] for r in w):,.0f} from it")
print(f"ps: {statistics.median(s / t for s, t in zip(served, secs)) / 1e6:.2f} M rows served/s, "
      f"{statistics.median(u / t for u, t in zip(updated, secs)) / 1e6:.2f} M rows updated/s "
      f"(rows of both tables, 1 ps task)")
PY
