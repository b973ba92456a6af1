#!/usr/bin/env bash
# The mpi communicator end to end: tests/progs/coll_check (every collective at awkward counts,
# checked on every rank) under mpirun with 2 to 5 ranks, once over the tcp transport of Open MPI,
# and the local backend through the same program. A missing mpirun or plugin is a failure, not a
# skip: the build group installs Open MPI. usage: tests/mpi.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
tmp=$(mktemp -d /tmp/dtrain-mpi-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

. "$(dirname "$0")/lib.sh"

check="$build/tests/coll_check"
plugin="$build/libdtrain_mpi.so"
export DTRAIN_MPI_PLUGIN="$plugin"
# Under the sanitizers, Open MPI's own allocations left at exit are not ours to report: leak
# checking stays on for the local runs and is off under mpirun.
mpi_asan=${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=0

# run_check NAME ARGS...: runs coll_check (ARGS are its launcher and flags), expecting exit 0 and
# no FAIL line; on failure shows the first failing lines.
run_check() {
    local name=$1
    shift
    local t0 t1 status
    t0=$(date +%s.%N)
    timeout 120 "$@" > "$tmp/out" 2> "$tmp/err"
    status=$?
    t1=$(date +%s.%N)
    local secs n_ok
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    n_ok=$(grep -c '^ok ' "$tmp/out")
    if [ "$status" -ne 0 ] || grep -q '^FAIL' "$tmp/out" || [ "$n_ok" -eq 0 ]; then
        fail "$name" "exit $status; $(grep -m 5 '^FAIL' "$tmp/out" | tr '\n' ' ') $(head -c 600 "$tmp/err")"
    else
        ok "$name ($n_ok checks, ${secs} s)"
    fi
}

# A plugin built for another dtrain is refused before anything in it is called, named with both
# ABI versions: one without a version, one with another.
cat > "$tmp/fake.c" << 'FAKE'
#include <stdint.h>
int dt_mpi_plugin_create(double timeout, void **out) { (void)timeout; *out = 0; return -1; }
const char *dt_mpi_plugin_last_error(void) { return "the fake plugin was called"; }
#ifdef WITH_ABI
void dt_mpi_plugin_abi(uint32_t *v, uint32_t *c, uint32_t *o) { *v = 999; *c = 1; *o = 2; }
#endif
FAKE
for variant in none other; do
    flags=
    [ "$variant" = other ] && flags=-DWITH_ABI
    # shellcheck disable=SC2086
    if ! cc -shared -fPIC $flags -o "$tmp/fake_$variant.so" "$tmp/fake.c" 2> "$tmp/err"; then
        fail "mpi_plugin_abi_$variant" "cannot build the fake plugin: $(head -c 300 "$tmp/err")"
        continue
    fi
    DTRAIN_MPI_PLUGIN=$tmp/fake_$variant.so "$build/dtrain" bench allreduce --comm mpi \
        > "$tmp/out" 2> "$tmp/err"
    status=$?
    want="has no ABI version"
    [ "$variant" = other ] && want="was built for plugin ABI 999"
    if [ "$status" -eq 1 ] && grep -q "$want" "$tmp/err" && grep -q "fake_$variant.so" "$tmp/err" &&
        ! grep -q "fake plugin was called" "$tmp/err"; then
        ok "mpi_plugin_of_another_abi_is_refused_$variant"
    else
        fail "mpi_plugin_of_another_abi_is_refused_$variant" "exit $status: $(head -c 300 "$tmp/err")"
    fi
done

if [ ! -x "$check" ]; then
    fail coll_check_built "$check is missing (make $check)"
else
    # The same program over the local backend (tested on its own by the unit tests): it keeps
    # coll_check itself honest.
    run_check coll_check_local_3_ranks "$check" --comm local --ranks 3

    if ! command -v mpirun > /dev/null; then
        fail mpirun_installed "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
    elif [ ! -f "$plugin" ]; then
        fail mpi_plugin_built "$plugin is missing (make builds it with mpicc)"
    else
        mpirun=(env "ASAN_OPTIONS=$mpi_asan" mpirun --allow-run-as-root --oversubscribe
            -x DTRAIN_MPI_PLUGIN -x ASAN_OPTIONS)
        for k in 2 3 4 5; do
            run_check "coll_check_mpi_${k}_ranks" "${mpirun[@]}" -np "$k" "$check" --comm mpi
        done
        # Open MPI's tcp transport instead of shared memory.
        run_check coll_check_mpi_3_ranks_btl_tcp "${mpirun[@]}" --mca btl tcp,self -np 3 \
            "$check" --comm mpi
        # Training under mpirun: 2 ranks at global batch 64 end where one process does.
        args=(train --max-steps 40 --threads 1 --optimizer adam --progress none --test-data none)
        "$build/dtrain" "${args[@]}" --metrics-out "$tmp/one.json" > /dev/null 2>&1
        timeout 120 "${mpirun[@]}" -np 2 "$build/dtrain" "${args[@]}" --comm mpi \
            --metrics-out "$tmp/two.json" > "$tmp/out" 2>&1
        status=$?
        verdict=$(python3 -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
rel = abs(a["final_loss"] - b["final_loss"]) / abs(a["final_loss"])
print("ok" if rel <= 1e-5 and b["workers"] == 2 else "differ", "relative %.2g" % rel)
' "$tmp/one.json" "$tmp/two.json" 2>&1)
        if [ "$status" -eq 0 ] && [ "${verdict%% *}" = ok ] &&
            grep -q "^multi_worker_mirrored: 2 workers (mpi)" "$tmp/out"; then
            ok "train_under_mpirun_2_ranks_equals_one ($verdict)"
        else
            fail train_under_mpirun_2_ranks_equals_one "exit $status: $verdict $(tail -3 "$tmp/out")"
        fi
    fi

    # Without the plugin the mpi communicator fails with one clear error naming where it looked.
    nowhere="$tmp/nowhere/libdtrain_mpi.so"
    DTRAIN_MPI_PLUGIN="$nowhere" "$check" --comm mpi > "$tmp/out" 2>&1
    status=$?
    if [ "$status" -ne 0 ] &&
        grep -qF "cannot load the MPI plugin (tried $nowhere: not found)" "$tmp/out"; then
        ok mpi_without_plugin_is_a_clear_error
    else
        fail mpi_without_plugin_is_a_clear_error "exit $status: $(head -c 400 "$tmp/out")"
    fi
fi

echo "$passed $failed" > "$counts"
echo "mpi: $passed passed, $failed failed"
