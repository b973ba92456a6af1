#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD/fuzz for SECONDS each, from its seed corpus in
# fuzz/corpus/<target> (copied, so the repository's seeds are never rewritten), and reports the
# executions. usage: tests/fuzz.sh BUILD SECONDS [COUNTS_FILE]
# With COUNTS_FILE (from tests/run.sh) each target counts as one test.
set -u
build=$1
seconds=$2
counts=${3:-}
passed=0
failed=0
shopt -s nullglob
targets=("$build"/fuzz/fuzz_*)
if [ ${#targets[@]} -eq 0 ]; then
    echo "FAIL fuzz: no fuzz targets built in $build/fuzz"
    failed=1
fi
for bin in "${targets[@]}"; do
    name=$(basename "$bin")
    work=$(mktemp -d /tmp/dtrain-fuzz-XXXXXX)
    mkdir -p "$work/corpus"
    [ -d "fuzz/corpus/$name" ] && cp -r "fuzz/corpus/$name/." "$work/corpus/"
    "$bin" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/" \
        "$work/corpus" > "$work/log" 2>&1
    status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
    if [ "$status" -eq 0 ]; then
        echo "ok   $name: ${runs:-?} executions in ${seconds}s, no crash"
        passed=$((passed + 1))
        rm -rf "$work"
    else
        echo "FAIL $name: exit $status after ${runs:-?} executions; log and crash input in $work"
        grep -E "ERROR|SUMMARY|runtime error" "$work/log" | head -5
        failed=$((failed + 1))
    fi
done
echo "fuzz: $passed passed, $failed failed"
[ -n "$counts" ] && echo "$passed $failed" > "$counts"
[ "$failed" -eq 0 ]
