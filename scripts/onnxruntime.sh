#!/usr/bin/env bash
# Brings ONNX Runtime for Node (npm's onnxruntime-node, whose package carries the CPU runtime,
# libonnxruntime.so.1) into a cache directory, for the tests that score exported models with it;
# a cache that already loads is reused. Prints the directory whose node_modules holds it.
# Install scripts are not run (--ignore-scripts): the package's own binaries are all it needs.
# DTRAIN_ORT_VERSION pins a version (default: the registry's latest).
# usage: scripts/onnxruntime.sh CACHE_DIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 CACHE_DIR" >&2; exit 2; }
mkdir -p "$1"
cache=$(cd "$1" && pwd)
pkg="onnxruntime-node${DTRAIN_ORT_VERSION:+@$DTRAIN_ORT_VERSION}"
how="to install it: (cd $cache && npm install --ignore-scripts onnxruntime-node), with node and
npm from Debian's nodejs and npm packages (NodeSource's nodejs includes npm) and the npm registry
(or a mirror) reachable; then run the tests again"

loads() {
    node -e "require('$cache/node_modules/onnxruntime-node')" > /dev/null 2>&1
}

if ! command -v node > /dev/null 2>&1; then
    echo "onnxruntime: node is not installed: $how" >&2
    exit 1
fi
if [ -d "$cache/node_modules/onnxruntime-node" ] && loads; then
    echo "$cache"
    exit 0
fi
if ! command -v npm > /dev/null 2>&1; then
    echo "onnxruntime: npm is not installed: $how" >&2
    exit 1
fi
# A package.json of its own, so npm installs here rather than in a project above.
[ -f "$cache/package.json" ] || echo '{"name": "dtrain-onnxruntime-cache", "private": true}' \
    > "$cache/package.json"
if ! (cd "$cache" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error "$pkg") \
    > "$cache/npm.log" 2>&1; then
    echo "onnxruntime: npm install $pkg failed in $cache: $(tail -3 "$cache/npm.log" | tr '\n' ' ')" >&2
    echo "onnxruntime: $how" >&2
    exit 1
fi
if ! loads; then
    echo "onnxruntime: $pkg was installed in $cache but does not load:" \
        "$(node -e "require('$cache/node_modules/onnxruntime-node')" 2>&1 | tail -2 | tr '\n' ' ')" >&2
    exit 1
fi
echo "$cache"
