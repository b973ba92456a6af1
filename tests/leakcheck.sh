#!/usr/bin/env bash
# A short training run under valgrind's memcheck: no leak and no memory error allowed.
# usage: tests/leakcheck.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
command -v valgrind > /dev/null || { echo "valgrind is missing: scripts/deps.sh test" >&2; exit 1; }
log=$(mktemp /tmp/dtrain-valgrind-XXXXXX)
trap 'rm -f "$log"' EXIT
status=0
valgrind --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
    --error-exitcode=99 --log-file="$log" \
    "$build/dtrain" train --model mnist_cnn --max-steps 20 --batch-size 32 --threads 2 --optimizer adam \
    --progress none --test-data none || status=$?
grep -E "ERROR SUMMARY|definitely lost|indirectly lost|possibly lost|All heap blocks" "$log" || true
if [ "$status" -ne 0 ]; then
    echo "leakcheck: FAILED (exit $status); valgrind's log:" >&2
    cat "$log" >&2
    exit 1
fi
echo "leakcheck: no leaks, no errors"
