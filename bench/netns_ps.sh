#!/usr/bin/env bash
# Parameter-server training over emulated 1 Gbit/s links: the chief, 2 workers and 1 ps task,
# each in its own network namespace on a bridge, every link shaped to 1 Gbit/s both ways
# (bench/netns_lib.sh), DeepFM as bench/ps.sh trains it (Adagrad 0.05, batch 1024) on ROWS
# generated rows; then the same job on loopback for comparison.
#
#   usage: sudo bash bench/netns_ps.sh [BUILD_DIR | path/to/dtrain]     (default: build)
#   env: ROWS (200000), TBF_BURST, TBF_LIMIT, DELAY (netem, where the kernel has it)
#
# It prints samples/s on the emulated network and on loopback, each worker's pull round p50/p99
# and bytes per sample to and from the ps, and what limits the emulated run: the ps's link
# carries every worker's pushes in and pulls out, so samples/s cannot pass the link rate over
# the bytes per sample that cross it in its busier direction.
set -u

die() { echo "netns_ps: $*" >&2; exit 1; }

N=4                         # namespace 0 the chief, 1 and 2 the workers, 3 the ps
NETNS_NAME=netns_ps
ROWS=${ROWS:-200000}
. "$(dirname "$0")/netns_lib.sh"

echo "measuring the link: one TCP stream worker 1 -> ps, 2 s ..." >&2
streams 2 1:3
link=${rates[0]}
case $link in '' | nan | *[!0-9.]*)
    die "the python stream failed:" \
        "$(cat "$tmp"/stream*.err "$tmp/send.err" 2> /dev/null | tail -3)" ;;
esac

echo "generating $ROWS rows ..." >&2
"$dtrain" data gen-ctr --rows "$ROWS" --seed 11 --out "$tmp/train.svm" > "$tmp/gen" ||
    die "gen-ctr failed"
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/gen")
common=(train --data "libsvm:$tmp/train.svm" --test-data none --feature-size "$fs"
        --model deepfm --optimizer adagrad --lr 0.05 --batch-size 1024 --shuffle-buffer 0
        --progress none --seed 1 --connect-timeout 60 --metrics-out "$tmp/chief.json")
secret=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
addr() { echo "\"$(ip_of "$1"):$PORT\""; }
cluster="{\"chief\":[$(addr 0)],\"worker\":[$(addr 1),$(addr 2)],\"ps\":[$(addr 3)]}"
jobs=("chief 0" "worker 0" "worker 1" "ps 0")

echo "training on the emulated network ..." >&2
run_pids=() run_names=()
for ((i = 0; i < N; i++)); do
    read -r job index <<< "${jobs[$i]}"
    TF_CONFIG="{\"cluster\":$cluster,\"task\":{\"type\":\"$job\",\"index\":$index}}" \
        DTRAIN_CLUSTER_SECRET=$secret ip netns exec "${ns[$i]}" "$dtrain" "${common[@]}" \
        > "$tmp/t$i.out" 2> "$tmp/t$i.err" &
    run_pids+=($!); run_names+=("${jobs[$i]}"); pids+=($!)
done
wait_tasks 600 "$tmp/t"
[ -z "$failed" ] || die "the emulated run failed:$failed"
net=$("$python" -c "import json; print(json.load(open('$tmp/chief.json'))['samples_per_sec'])")
cat "$tmp/t1.err" "$tmp/t2.err" | grep "bytes per sample" > "$tmp/workers"

echo "the same job on loopback ..." >&2
"$dtrain" launch -n 2 --ps 1 -- "$dtrain" "${common[@]}" > "$tmp/lo.out" 2>&1 ||
    die "the loopback run failed: $(tail -3 "$tmp/lo.out")"
lo=$("$python" -c "import json; print(json.load(open('$tmp/chief.json'))['samples_per_sec'])")

echo
echo "emulated links: tbf rate $RATE burst $BURST limit $LIMIT${DELAY:+, netem delay $DELAY}"
echo "python3 TCP stream, worker 1 -> ps alone: $link Gbit/s"
sed 's/^dtrain: /  /' "$tmp/workers"
"$python" - "$net" "$lo" "$link" "$tmp/workers" <<'PY'
import re, sys
net, lo, link = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
w = [re.search(r"(\d+) bytes per sample to the ps tasks, (\d+) from them", l).groups()
     for l in open(sys.argv[4])]
to_ps = sum(float(a) for a, _ in w) / len(w)
from_ps = sum(float(b) for _, b in w) / len(w)
# Every worker's pushes come in on the ps's link and every pull goes out on it.
busier = max(to_ps, from_ps)
bound = link * 1e9 / 8 / busier
print(f"samples/s: {net:,.0f} over the emulated links, {lo:,.0f} on loopback "
      f"({100 * net / lo:.0f}%)")
print(f"bytes per sample across the ps's link: {to_ps:,.0f} in, {from_ps:,.0f} out; at the "
      f"measured {link:.3f} Gbit/s the link allows {bound:,.0f} samples/s: "
      f"{'the ps link limits' if net > 0.8 * bound else 'the link is not the limit'} "
      f"({100 * net / bound:.0f}% of that bound)")
PY
