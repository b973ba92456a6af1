#!/usr/bin/env bash
# The include test (tests/layers.py) on the tree, and on copies of it with one planted violation
# each, which it must name by file and line. usage: tests/layers.sh BUILD_DIR COUNTS_FILE
set -u
counts=$2
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/dtrain-layers-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

. "$(dirname "$0")/lib.sh"

run python3 "$root/tests/layers.py" "$root"
if [ "$status" -eq 0 ] && grep -q " 0 violations$" "$tmp/out"; then
    ok layers_every_include_keeps_the_layer_table "$(tail -1 "$tmp/out")"
else
    fail layers_every_include_keeps_the_layer_table "$(head -c 600 "$tmp/out") $(head -c 300 "$tmp/err")"
fi

# plant NAME FILE LINE_TEXT NEEDLE: a copy of the tree with LINE_TEXT added to FILE's includes
# fails, naming FILE.
plant() {
    local name=$1 file=$2 text=$3 needle=$4 copy="$tmp/$1"
    mkdir -p "$copy"
    cp -r "$root/src" "$root/cli" "$root/include" "$root/docs" "$copy/"
    sed -i "0,/^#include/s||$text\n#include|" "$copy/$file"
    run python3 "$root/tests/layers.py" "$copy"
    if [ "$status" -ne 0 ] && grep -q "^$file:[0-9]*: .*$needle" "$tmp/out"; then
        ok "$name" "$(grep "^$file" "$tmp/out" | head -1)"
    else
        fail "$name" "exit $status: $(head -c 400 "$tmp/out")"
    fi
}
plant layers_upward_public_include_fails src/data/csv.c '#include "dtrain/strategy.h"' \
    "a layer above it"
plant layers_upward_private_include_fails src/core/log.c '#include "../data/shuffle.h"' \
    "a layer above it"
plant layers_private_header_of_another_layer_fails src/train/loop.c '#include "../net/conn.h"' \
    "not its interface"
plant layers_cli_private_header_not_its_interface_fails cli/main.c '#include "../src/net/conn.h"' \
    "not its interface to cli/"
plant layers_public_header_including_above_fails include/dtrain/rows.h \
    '#include "dtrain/model.h"' "a layer above it"

# An edge listed as still to remove that was removed must leave the list.
mkdir -p "$tmp/stale"
cp -r "$root/src" "$root/cli" "$root/include" "$root/docs" "$tmp/stale/"
sed -i 's|None is listed now\.$|None is listed now.\n\nEdges still to remove:\n\n    src/data/csv.c core/json.h|' "$tmp/stale/docs/ARCHITECTURE.md"
run python3 "$root/tests/layers.py" "$tmp/stale"
if [ "$status" -ne 0 ] && grep -q "src/data/csv.c -> core/json.h is listed as still to remove but no longer exists" "$tmp/out"; then
    ok layers_list_of_edges_to_remove_only_shrinks
else
    fail layers_list_of_edges_to_remove_only_shrinks "exit $status: $(head -c 400 "$tmp/out")"
fi

echo "layers: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
