# What the emulated-network benchmarks share (sourced): N tasks, each in its own network
# namespace, each joined to one Linux bridge by a veth pair whose two ends are both shaped to
# RATE with tbf (the namespace end shapes what the task sends, the bridge end what it receives),
# so every task has a full-duplex link of RATE to a non-blocking switch; and `streams`, the TCP
# rate python3 streams really get over those links. The caller sets N and NETNS_NAME (for
# messages) and defines die() before sourcing it, with the dtrain binary or BUILD dir in $1.
# Everything made is named dtb-<pid>-... and removed on every exit path.
# ---- preconditions -------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] ||
    die "must run as root (network namespaces, veth, tc): sudo bash $0 ${1:-build}"
for tool in ip tc python3; do
    command -v "$tool" > /dev/null 2>&1 ||
        die "'$tool' not found (ip and tc: Debian package iproute2)"
done
arg=${1:-build}
if [ -d "$arg" ]; then dtrain="$arg/dtrain"; else dtrain=$arg; fi
[ -x "$dtrain" ] ||
    die "no dtrain binary at '$dtrain' (give the BUILD dir or the binary; run make first)"
dtrain=$(cd "$(dirname "$dtrain")" && pwd)/$(basename "$dtrain")
python=$(command -v python3)

RATE=1gbit                 # nominal link rate, both directions of every rank's link
RATE_GBIT=1
BURST=${TBF_BURST:-256kb}
LIMIT=${TBF_LIMIT:-512kb}
DELAY=${DELAY:-}
PORT=29500                 # every rank has its own namespace, so the port never collides

p="dtb-$$-"                # <= 12 characters: interface names stay within 15
br="${p}br"
ns=() ; for ((i = 0; i < N; i++)); do ns[i]="${p}ns$i"; done
subnet=10.$((200 + ($$ % 50))).$((($$ / 50) % 256))   # inside the namespaces only
ip_of() { echo "$subnet.$(($1 + 1))"; }

# ---- teardown: only what this run created, recorded as it is created -----------------------
tmp=$(mktemp -d "/tmp/${p}XXXXXX") || die "mktemp failed"
made_ns=()
made_br=""
made_veth=()
pids=()
cleaned=0
cleanup() {
    [ "$cleaned" = 1 ] && return
    cleaned=1
    trap '' INT TERM
    local pid n
    for pid in "${pids[@]}"; do kill -9 "$pid" 2> /dev/null; done
    for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null; done
    # deleting a namespace deletes its veth end, and with it the peer on the bridge
    for n in "${made_ns[@]}"; do ip netns del "$n" 2> /dev/null; done
    for n in "${made_veth[@]}"; do   # a veth not yet moved into its namespace
        ip link show "$n" > /dev/null 2>&1 && ip link del "$n" 2> /dev/null
    done
    [ -n "$made_br" ] && ip link del "$made_br" 2> /dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "$NETNS_NAME: interrupted" >&2; exit 130' INT
trap 'echo "$NETNS_NAME: terminated" >&2; exit 143' TERM

# shape DEV [NETNS]: DEV's egress limited to RATE by tbf (with netem below it if DELAY is set).
shape() {
    local dev=$1 pre=()
    [ $# -ge 2 ] && pre=(ip netns exec "$2")
    "${pre[@]}" tc qdisc add dev "$dev" root handle 1: tbf rate "$RATE" burst "$BURST" \
        limit "$LIMIT" || return 1
    if [ -n "$DELAY" ]; then
        "${pre[@]}" tc qdisc add dev "$dev" parent 1:1 handle 10: netem delay "$DELAY" \
            limit 1000 || return 1
    fi
}

# ---- the emulated network -------------------------------------------------------------------
echo "setting up: bridge $br, namespaces ${ns[0]}..${ns[$((N - 1))]}, subnet $subnet.0/24," \
    "tbf rate $RATE burst $BURST limit $LIMIT${DELAY:+, netem delay $DELAY per shaped egress}" >&2
ip link add "$br" type bridge stp_state 0 forward_delay 0 nf_call_iptables 0 \
    nf_call_ip6tables 0 nf_call_arptables 0 2> /dev/null ||
    ip link add "$br" type bridge || die "cannot create bridge $br"
made_br=$br
ip link set "$br" addrgenmode none 2> /dev/null
ip link set "$br" up || die "cannot bring up $br"
for ((i = 0; i < N; i++)); do
    ip netns add "${ns[$i]}" || die "cannot create namespace ${ns[$i]}"
    made_ns+=("${ns[$i]}")
    ip link add "${p}h$i" type veth peer name "${p}n$i" || die "cannot create veth ${p}h$i"
    made_veth+=("${p}h$i")
    ip link set "${p}n$i" netns "${ns[$i]}" || die "cannot move ${p}n$i into ${ns[$i]}"
    ip link set "${p}h$i" addrgenmode none 2> /dev/null
    ip link set "${p}h$i" master "$br" || die "cannot attach ${p}h$i to $br"
    ip link set "${p}h$i" up || die "cannot bring up ${p}h$i"
    ip netns exec "${ns[$i]}" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2> /dev/null
    ip -n "${ns[$i]}" link set "${p}n$i" name eth0 || die "cannot rename ${p}n$i"
    ip -n "${ns[$i]}" addr add "$(ip_of "$i")/24" dev eth0 || die "cannot address ${ns[$i]}"
    ip -n "${ns[$i]}" link set lo up
    ip -n "${ns[$i]}" link set eth0 up || die "cannot bring up eth0 in ${ns[$i]}"
    shape "${p}h$i" || die "tc on ${p}h$i failed${DELAY:+ (DELAY needs netem in the kernel)}"
    shape eth0 "${ns[$i]}" || die "tc in ${ns[$i]} failed"   # above: what rank i receives;
                                                             # here: what rank i sends
done

# ---- raw TCP rate: python3 streams ----------------------------------------------------------
cat > "$tmp/stream.py" << 'PY'
# recv PORT: accept one stream, print its rate in Gbit/s (after the first 0.25 s).
# send HOST PORT SECONDS: stream zeros for SECONDS.
import socket, sys, time
if sys.argv[1] == "recv":
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", int(sys.argv[2])))
    ls.listen(1)
    ls.settimeout(20)
    c, _ = ls.accept()
    c.settimeout(20)
    buf = memoryview(bytearray(1 << 20))
    n, t0, base = 0, None, None
    while True:
        k = c.recv_into(buf)
        now = time.monotonic()
        if not k:
            break
        if t0 is None:
            t0 = now
        n += k
        if base is None and now - t0 >= 0.25:
            base = (now, n)
        last = now
    if base is None or last <= base[0]:
        print("nan")
    else:
        print("%.4f" % ((n - base[1]) * 8 / (last - base[0]) / 1e9))
else:
    host, port, secs = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    end = time.monotonic() + 10
    while True:
        try:
            s = socket.create_connection((host, port), timeout=2)
            break
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)
    data = bytes(1 << 20)
    stop = time.monotonic() + secs
    while time.monotonic() < stop:
        s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()
PY

# streams SECONDS SRC:DST ...: one stream per pair, all at once; each receiver's Gbit/s goes to
# the array rates (in the order of the pairs). Runs in this shell, not in $(...), so that every
# pid is in pids for the cleanup.
streams() {
    local secs=$1 pair src dst k=0 rp=() sp=()
    shift
    rates=()
    for pair in "$@"; do
        src=${pair%:*} dst=${pair#*:}
        ip netns exec "${ns[$dst]}" "$python" "$tmp/stream.py" recv $((PORT + 100 + src)) \
            > "$tmp/stream$k.out" 2> "$tmp/stream$k.err" &
        rp+=($!); pids+=($!)
        k=$((k + 1))
    done
    sleep 0.3
    for pair in "$@"; do
        src=${pair%:*} dst=${pair#*:}
        ip netns exec "${ns[$src]}" "$python" "$tmp/stream.py" send "$(ip_of "$dst")" \
            $((PORT + 100 + src)) "$secs" > /dev/null 2>> "$tmp/send.err" &
        sp+=($!); pids+=($!)
    done
    for k in "${!sp[@]}"; do wait "${sp[$k]}" 2> /dev/null; done
    for k in "${!rp[@]}"; do
        wait "${rp[$k]}" 2> /dev/null
        rates+=("$(cat "$tmp/stream$k.out" 2> /dev/null)")
    done
}


# wait_tasks SECONDS ERR_PREFIX: waits up to SECONDS in all for the processes in run_pids (named
# by run_names), killing those still running then; failed lists "NAME did not finish in time;" or
# "NAME exit S: <the start of ERR_PREFIX<i>.err>;" for each that did not end well.
wait_tasks() {
    local deadline=$((SECONDS + $1)) prefix=$2 i st
    failed=""
    for i in "${!run_pids[@]}"; do
        while kill -0 "${run_pids[$i]}" 2> /dev/null && [ $SECONDS -lt $deadline ]; do
            sleep 0.2
        done
        if kill -0 "${run_pids[$i]}" 2> /dev/null; then
            failed="$failed ${run_names[$i]} did not finish in time;"
            kill -9 "${run_pids[$i]}" 2> /dev/null
        fi
        wait "${run_pids[$i]}"
        st=$?
        [ "$st" -eq 0 ] || failed="$failed ${run_names[$i]} exit $st: $(head -c 300 "$prefix$i.err");"
    done
}
