#!/usr/bin/env bash
# Runs `make test` as a new user would on a bare machine: a minimal Debian 12 root made by
# debootstrap --variant=minbase, where only `make` is installed beforehand; a clean clone of this
# repository goes in, and make installs everything else itself (scripts/deps.sh). It proves that
# every command the build and the tests use is installed by the project.
#
# usage: scripts/bare_root_test.sh [--root DIR] [--keep] [--rev REV] [--mirror URL]
#   --root DIR    where the root goes (default: a new /tmp/dtrain-bareroot-XXXXXX)
#   --keep        keep the root afterwards (a later run with --root DIR reuses it and skips
#                 debootstrap: then only the clone and make test are new)
#   --rev REV     the commit to test (default: HEAD of the repository this script is in)
#   --mirror URL  Debian mirror (default: the first deb.debian.org-style URI of this machine's
#                 apt sources)
# Needs root, debootstrap (installed when missing) and the Debian archive. Prints the tail of the
# output; exits with make's status. Always unmounts what it mounted and, without --keep,
# removes the root; it leaves no process behind (make test ends its own).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root= keep=0 rev=HEAD mirror=
while [ $# -gt 0 ]; do
    case "$1" in
        --root) root=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        --rev) rev=$2; shift 2 ;;
        --mirror) mirror=$2; shift 2 ;;
        -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bare_root_test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "bare_root_test.sh: needs root (debootstrap, chroot, mount)" >&2; exit 1; }
[ -n "$mirror" ] || mirror=$(bash "$(dirname "$0")/debian_mirror.sh")
if ! command -v debootstrap > /dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap ||
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
              --no-install-recommends debootstrap; }
fi
[ -n "$root" ] || root=$(mktemp -d /tmp/dtrain-bareroot-XXXXXX)
mkdir -p "$root"
mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -l "${mounted[$i]}" 2> /dev/null || true
    done
    if [ "$keep" -eq 0 ]; then
        rm -rf --one-file-system "$root"
    fi
}
trap cleanup EXIT
bind() { # bind SRC DST [TYPE]: mounts and remembers it
    mkdir -p "$2"
    if [ -n "${3:-}" ]; then mount -t "$3" "$1" "$2"; else mount --bind "$1" "$2"; fi
    mounted+=("$2")
}

t0=$(date +%s)
if [ ! -x "$root/usr/bin/apt-get" ]; then
    echo "== debootstrap --variant=minbase bookworm $root $mirror"
    debootstrap --variant=minbase bookworm "$root" "$mirror" > "$root.debootstrap.log" 2>&1 ||
        { tail -20 "$root.debootstrap.log"; exit 1; }
    rm -f "$root.debootstrap.log"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf" 2> /dev/null || true
# A machine names its loopback address (Debian's installer writes /etc/hosts, and the tests
# resolve "localhost" as a pod resolves its name); debootstrap's root has no /etc/hosts.
[ -s "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$root/etc/hosts"
# The local certificate authorities this machine trusts (a network's TLS egress proxy, say): a
# machine on the same network needs them too to reach the npm registry, and the ca-certificates
# package that make installs takes them in from there.
if ls /usr/local/share/ca-certificates/*.crt > /dev/null 2>&1; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
# The root a mount point of its own, and /run a tmpfs: ip netns (tests/platforms.sh) makes the
# new namespaces' mounts private from "/" and keeps their handles under /run/netns, all of which
# goes when these are unmounted.
bind "$root" "$root"
bind tmpfs "$root/run" tmpfs
bind proc "$root/proc" proc
bind sysfs "$root/sys" sysfs
bind /dev "$root/dev"
bind devpts "$root/dev/pts" devpts
bind tmpfs "$root/dev/shm" tmpfs
bind tmpfs "$root/tmp" tmpfs
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

echo "== apt-get install make (only make, as the README says)"
if ! in_root sh -c 'command -v make' > /dev/null; then
    in_root apt-get update -q > /dev/null
    in_root apt-get install -y -q --no-install-recommends make > /dev/null
fi
echo "== a clean clone of $rev"
rm -rf "$root/root/dtrain"
git clone -q "$repo" "$root/root/dtrain"
git -C "$root/root/dtrain" checkout -q "$(git -C "$repo" rev-parse "$rev")"
echo "== make test"
status=0
in_root sh -c 'cd /root/dtrain && make test' > "$root/root/make-test.log" 2>&1 || status=$?
tail -15 "$root/root/make-test.log"
grep -E '^FAIL' "$root/root/make-test.log" | head -20 || true
echo "== make test exited $status after $(($(date +%s) - t0)) s (log: $root/root/make-test.log$([ "$keep" -eq 1 ] || echo ', removed'))"
exit "$status"
