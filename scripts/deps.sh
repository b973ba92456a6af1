#!/usr/bin/env bash
# Installs the Debian packages that the given groups of deps/packages.txt need and that are
# missing: with apt-get when run as root, otherwise it prints the exact command and fails.
# usage: scripts/deps.sh GROUP...
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
list="$here/deps/packages.txt"
[ $# -gt 0 ] || { echo "usage: $0 GROUP..." >&2; exit 2; }

wanted=()
while read -r pkg groups; do
    case "$pkg" in ''|'#'*) continue ;; esac
    # A word "!CMD" after the groups: the package is not needed where the command CMD exists
    # already (npm, which some Node.js packages carry and Debian's npm package would conflict
    # with).
    for g in $groups; do
        case "$g" in '!'*) command -v "${g#!}" > /dev/null 2>&1 && continue 2 ;; esac
    done
    for g in $groups; do
        for want in "$@"; do
            if [ "$g" = "$want" ]; then wanted+=("$pkg"); continue 3; fi
        done
    done
done < "$list"

missing=()
for pkg in "${wanted[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "dtrain needs these Debian packages: ${missing[*]}" >&2
    echo "run: sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
fi
echo "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The package lists of a fresh machine are empty: fetch them once, then install.
if ! apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
