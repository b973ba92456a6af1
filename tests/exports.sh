#!/usr/bin/env bash
# The export test (tests/exports.py): libdtrain.so exports exactly the names that the public
# headers declare DT_API; then copies of the headers with one planted difference each, which it
# must name; and the MPI plugin's own three exports. usage: tests/exports.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
root=$(cd "$(dirname "$0")/.." && pwd)
lib=$build/libdtrain.so
tmp=$(mktemp -d /tmp/dtrain-exports-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

. "$(dirname "$0")/lib.sh"

run python3 "$root/tests/exports.py" "$root/include/dtrain" "$lib"
if [ "$status" -eq 0 ] && grep -q " 0 violations$" "$tmp/out"; then
    ok exports_are_the_public_headers_dt_api_names "$(tail -1 "$tmp/out")"
else
    fail exports_are_the_public_headers_dt_api_names "$(head -c 1500 "$tmp/out") $(head -c 300 "$tmp/err")"
fi

# plant NAME SED_SCRIPT HEADER NEEDLE: headers with HEADER edited by SED_SCRIPT fail, naming NEEDLE.
plant() {
    local name=$1 script=$2 header=$3 needle=$4 copy="$tmp/$1"
    mkdir -p "$copy"
    cp -r "$root/include/dtrain" "$copy/"
    sed -i "$script" "$copy/dtrain/$header"
    if cmp -s "$copy/dtrain/$header" "$root/include/dtrain/$header"; then
        fail "$name" "the plant changed nothing in $header"
        return
    fi
    run python3 "$root/tests/exports.py" "$copy/dtrain" "$lib"
    if [ "$status" -ne 0 ] && grep -qF -- "$needle" "$tmp/out"; then
        ok "$name" "$(grep -F -- "$needle" "$tmp/out" | head -1 | cut -c1-160)"
    else
        fail "$name" "exit $status: $(head -c 400 "$tmp/out")"
    fi
}
# An exported function that no header declares public (as an internal one leaking would be).
plant exports_undeclared_export_fails 's/^DT_API const char \*dt_last_error(void);/const char *dt_last_error(void);/' \
    status.h "exports dt_last_error (T), which no public header declares DT_API"
# A public declaration whose function the library does not export.
plant exports_declared_but_hidden_fails 's/^#endif$/DT_API void dt_exports_planted(int n_elems);\n#endif/' \
    log.h "declares dt_exports_planted DT_API, but"
# A public variable counts as a function does.
plant exports_undeclared_variable_fails 's/^extern DT_API const char dt_gen_census_header/extern const char dt_gen_census_header/' \
    gen_ctr.h "exports dt_gen_census_header"

# The MPI plugin (where mpicc built it) exports its entry points and nothing of the library
# sources it carries: their DT_API is defined empty there.
plugin=$build/libdtrain_mpi.so
if [ -f "$plugin" ]; then
    got=$(nm -D --defined-only "$plugin" | awk '{print $3}' | sort | tr '\n' ' ')
    want="dt_mpi_plugin_abi dt_mpi_plugin_create dt_mpi_plugin_last_error "
    if [ "$got" = "$want" ]; then
        ok exports_mpi_plugin_exports_its_entry_points_alone "$got"
    else
        fail exports_mpi_plugin_exports_its_entry_points_alone "exports: $got"
    fi
fi

echo "exports: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
