#!/usr/bin/env bash
# Two builds' parameter-server training speed, A and B in turns: bench/ps.sh's async run (DeepFM
# F=39, K=32, deep 128,64,32, Adagrad 0.05, batch 1024, one epoch of ROWS generated rows; 1 ps and
# 2 workers under dtrain launch) REPEAT times each, interleaved (and each build first in every
# other round) so that whatever else loads the machine weighs on both alike. Prints every round's
# samples/s and samples per CPU second of the whole job (every task's user and system time, which
# other load on a shared machine disturbs far less than the wall clock), then for each the
# medians, the min-max spread, the ratio of the medians and the median of the per-round ratios.
# What it was made for: the cost of a change on the ps path (the messages' MACs: A the build
# before, B the build with them).
# usage: bench/ps_ab.sh BUILD_A BUILD_B    env: REPEAT (5), ROWS (1000000)
set -euo pipefail
a=$(cd "${1:?usage: bench/ps_ab.sh BUILD_A BUILD_B}" && pwd)
b=$(cd "${2:?usage: bench/ps_ab.sh BUILD_A BUILD_B}" && pwd)
repeat=${REPEAT:-5}
rows=${ROWS:-1000000}
work=$(mktemp -d /tmp/dtrain-ps-ab-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$b/dtrain" data gen-ctr --rows "$rows" --seed 11 --out "$work/train.svm" > "$work/gen"
"$b/dtrain" data gen-ctr --rows $((rows / 5)) --seed 12 --out "$work/test.svm" > /dev/null
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$work/gen")
common=(train --data "libsvm:$work/train.svm" --test-data "libsvm:$work/test.svm"
        --feature-size "$fs" --model deepfm --optimizer adagrad --lr 0.05 --batch-size 1024
        --shuffle-buffer 0 --progress none --seed 1 --strategy parameter_server)
one() { # BUILD: "samples/s samples-per-CPU-second" of one run
    /usr/bin/time -f "%U %S" -o "$work/cpu" "$1/dtrain" launch -n 2 --ps 1 -- "$1/dtrain" \
        "${common[@]}" --metrics-out "$work/m.json" > "$work/out" 2>&1 ||
        { echo "bench/ps_ab.sh: $1 failed: $(tail -3 "$work/out")" >&2; exit 1; }
    python3 - "$work/m.json" "$work/cpu" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
cpu = sum(map(float, open(sys.argv[2]).read().split()[-2:]))
print(f"{m['samples_per_sec']:.0f} {m['samples'] / cpu:.0f}")
PY
}
for rep in $(seq 1 "$repeat"); do
    if [ $((rep % 2)) -eq 1 ]; then x=$(one "$a"); y=$(one "$b"); else y=$(one "$b"); x=$(one "$a"); fi
    echo "$x $y" >> "$work/rounds"
    echo "round $rep: A $x  B $y  (samples/s, samples per CPU second)"
done
python3 - "$work/rounds" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
for k, what in ((0, "samples/s"), (1, "samples per CPU second")):
    a, b = [r[k] for r in rows], [r[2 + k] for r in rows]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{what}: A median {ma:.0f} (min {min(a):.0f}, max {max(a):.0f}), "
          f"B median {mb:.0f} (min {min(b):.0f}, max {max(b):.0f})")
    print(f"  B/A: ratio of medians {mb / ma:.4f}, median of per-round ratios "
          f"{statistics.median([y / x for x, y in zip(a, b)]):.4f}")
PY
