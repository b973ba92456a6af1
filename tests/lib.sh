# Helpers shared by the shell test suites (sourced). The suite sets passed=0, failed=0, tmp (a
# scratch directory) and, for expect_error, dtrain (the binary under test).

ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

# run COMMAND...: runs it, keeping stdout, stderr, the status and the time taken in ms.
run() {
    local t0
    t0=$(date +%s%N)
    "$@" > "$tmp/out" 2> "$tmp/err"
    status=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
}

# json_field FILE KEY: the value of a top-level scalar in a one-line JSON object.
json_field() {
    sed -n "s/.*\"$2\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" "$1" | tr -d '"'
}

# expect_error NAME STATUS NEEDLE ARGS...: dtrain exits with STATUS and prints exactly one
# stderr line that contains NEEDLE.
expect_error() {
    local name=$1 want=$2 needle=$3
    shift 3
    run "$dtrain" "$@"
    local lines
    lines=$(wc -l < "$tmp/err")
    if [ "$status" -ne "$want" ]; then
        fail "$name" "exit $status, expected $want; stderr: $(head -c 300 "$tmp/err")"
    elif [ "$lines" -ne 1 ]; then
        fail "$name" "expected one line on stderr, got $lines: $(head -c 300 "$tmp/err")"
    elif ! grep -qF -- "$needle" "$tmp/err"; then
        fail "$name" "stderr lacks '$needle': $(cat "$tmp/err")"
    else
        ok "$name"
    fi
}
