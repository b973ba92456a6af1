#!/usr/bin/env bash
# What make cross needs: Debian's aarch64 cross compiler, the arm64 builds of the libraries
# dtrain links (a second dpkg architecture) and qemu-user to run the result. Installs what is missing when run as root; otherwise
# prints the commands and fails.
set -euo pipefail
host=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user file)
arm=(libopenblas-dev:arm64 zlib1g-dev:arm64 libcjson-dev:arm64 libssl-dev:arm64 libzmq3-dev:arm64
     libprotobuf-c-dev:arm64)
missing=()
for p in "${host[@]}" "${arm[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] ||
        missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "make cross needs: ${missing[*]}" >&2
    echo "run: sudo dpkg --add-architecture arm64 && sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
fi
echo "installing for make cross: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
fi
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
