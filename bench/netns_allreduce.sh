#!/usr/bin/env bash
# dtrain's all-reduce over emulated 1 Gbit/s links: 4 ranks, each in its own network namespace,
# each joined to one Linux bridge by a veth pair whose two ends are both shaped to 1 Gbit/s with
# tbf (the namespace end shapes what the rank sends, the bridge end what it receives), so every
# rank has a 1 Gbit/s full-duplex link to a non-blocking switch.
#
#   usage: sudo bash bench/netns_allreduce.sh [BUILD_DIR | path/to/dtrain]     (default: build)
#
# Steps: (1) the TCP rate one python3 stream really gets between two namespaces (~2 s), the
# reference for the result; (2) four such streams at once, rank i -> rank i+1, the traffic of a
# ring all-reduce, one per link (~2 s); (3) `dtrain bench allreduce --shm=false --sizes 1M..64M
# --factor 4 --iters 5` on the 4 ranks (over TCP: the namespaces share one /dev/shm), rank 0's
# table; (4) the 64 MiB busbw against the measured link.
# About 25 s in all. Progress goes to stderr, the report to stdout.
#
# The shaping. tbf counts the bytes of each frame as the kernel sees it (1514 for a full one), not
# the preamble, gap and FCS of real Ethernet, so one TCP stream gets 1448/1514 = 95.6% of 1 Gbit/s
# (real 1 GbE: 1448/1538 = 94.1%). The bucket must be larger than the 64 KiB GSO packets TCP hands
# to veth: tbf splits a packet larger than its bucket into 1514-byte frames, each of which then
# crosses the bridge, the other tbf and the receiving stack alone. With burst 64kb or less, the
# 2-core machine spent ~70% of its time in softirq with the four ring links busy and they ran at
# 0.22-0.78 Gbit/s each; with 128kb at 0.95, with 256kb at 0.955 every time. No delay is added
# by default: the 64 MiB figure is bandwidth-bound (1 Gbit/s x 100 us is 12.5 KB in flight,
# against dtrain's 512 KiB ring segments), veth's own round trip is ~20 us, and the project
# machine's kernel has no netem at all; DELAY adds it where netem exists.
#
# Everything it creates is named dtb-<pid>-... and is removed on every exit path; it touches
# nothing else (no address, route or sysctl of the root namespace). Knobs (environment):
#   TBF_BURST   tbf bucket (default 256kb)
#   TBF_LIMIT   tbf queue in bytes (default 512kb, ~4 ms at 1 Gbit/s)
#   DELAY       netem delay under each tbf, e.g. 25us; a packet crosses two shaped egresses
#               (the sender's link up, the receiver's link down), so 25us gives a 100 us round
#               trip on top of veth's (default: none)
#   ITERS       --iters for dtrain (default 5)
set -u

die() { echo "netns_allreduce: $*" >&2; exit 1; }

N=4
NETNS_NAME=netns_allreduce
ITERS=${ITERS:-5}
. "$(dirname "$0")/netns_lib.sh"

echo "measuring the link: one TCP stream rank 1 -> rank 0, 2 s ..." >&2
streams 2 1:0
link=${rates[0]}
case $link in '' | nan | *[!0-9.]*)
    die "the python stream failed:" \
        "$(cat "$tmp"/stream*.err "$tmp/send.err" 2> /dev/null | tail -3)" ;;
esac
echo "measuring the ring: 4 TCP streams at once, rank i -> rank i+1, 2 s ..." >&2
ring_pairs=()
for ((i = 0; i < N; i++)); do ring_pairs+=("$i:$(((i + 1) % N))"); done
streams 2 "${ring_pairs[@]}"
ring=("${rates[@]}")

# ---- dtrain bench allreduce on the 4 ranks --------------------------------------------------
workers=""
for ((i = 0; i < N; i++)); do workers="$workers${workers:+,}\"$(ip_of "$i"):$PORT\""; done
secret=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
echo "running dtrain bench allreduce on $N ranks ..." >&2
run_pids=() run_names=()
for ((i = 0; i < N; i++)); do
    TF_CONFIG="{\"cluster\":{\"worker\":[$workers]},\"task\":{\"type\":\"worker\",\"index\":$i}}" \
        DTRAIN_CLUSTER_SECRET=$secret \
        ip netns exec "${ns[$i]}" "$dtrain" bench allreduce --shm=false --sizes 1M..64M --factor 4 \
        --iters "$ITERS" --connect-timeout 20 --timeout 30 > "$tmp/r$i.out" 2> "$tmp/r$i.err" &
    run_pids+=($!); run_names+=("rank $i"); pids+=($!)
done
wait_tasks 100 "$tmp/r"

echo
delay_note=${DELAY:+, netem delay $DELAY per shaped egress}
echo "emulated links: tbf rate $RATE burst $BURST limit $LIMIT on both ends of each veth$delay_note"
echo "python3 TCP stream, rank 1 -> rank 0 alone:     $link Gbit/s"
echo "python3 TCP streams, rank i -> rank i+1 at once: ${ring[*]} Gbit/s"
echo
cat "$tmp/r0.out"
[ -z "$failed" ] || die "dtrain failed:$failed"

# busbw of the 64 MiB line, in Gbit/s. Taken from its time column, by the table's own definition
# (bytes / time * 2(n-1)/n): the busbw column's 3 decimals of GB/s are steps of ~1% at this rate.
line=$(awk '$1 == 67108864' "$tmp/r0.out")
[ -n "$line" ] || die "no 64 MiB line in rank 0's table"
awk -v link="$link" -v nominal="$RATE_GBIT" -v n="$N" -v line="$line" 'BEGIN {
    split(line, f, " ")
    g = f[1] / (f[3] * 1e-6) * 2 * (n - 1) / n * 8 / 1e9
    printf "\nemulated %g Gbit/s links, %d ranks, 64 MiB: busbw %.3f Gbit/s = %.1f%% of the " \
           "link rate (measured link %.3f Gbit/s)\n", nominal, n, g, 100 * g / link, link
    printf "(%.1f%% of the nominal %g Gbit/s; the table says busbw %s GB/s = %.3f Gbit/s)\n",
           100 * g / nominal, nominal, f[5], f[5] * 8
}'
