#!/usr/bin/env bash
# make install into a temporary prefix, then a C program built against it through pkg-config,
# linked with the shared library and with the static one, run, and checked: the same figures
# from both, libdtrain.so found through its SONAME, the static program free of it, and the MPI
# plugin installed beside the library. usage: tests/install.sh BUILD_DIR COUNTS_FILE
set -u
# BUILD as make was given it (tests/run.sh runs from the repository's root): an absolute path
# would name the same objects as other targets, and their dependency files would follow it.
build_arg=$1
build=$(cd "$1" && pwd)
counts=$2
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/dtrain-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

. "$(dirname "$0")/lib.sh"

prefix=$tmp/prefix
# Under make asan (SAN=1 in the environment) the libraries are instrumented: so are the programs.
san=${SAN:-0}
sanflags=
[ "$san" = 1 ] && sanflags="-fsanitize=address,undefined"
if ! make -s -C "$root" BUILD="$build_arg" SAN="$san" PREFIX="$prefix" install > "$tmp/install.log" 2>&1; then
    fail make_install "$(tail -5 "$tmp/install.log")"
    echo "$passed $failed" > "$counts"
    exit 1
fi
lib=$prefix/lib
if [ -f "$lib/libdtrain.so.0.1.0" ] && [ "$(readlink "$lib/libdtrain.so.0")" = libdtrain.so.0.1.0 ] &&
    [ "$(readlink "$lib/libdtrain.so")" = libdtrain.so.0 ] &&
    readelf -d "$lib/libdtrain.so.0.1.0" | grep -q 'SONAME.*libdtrain.so.0' &&
    [ -f "$lib/libdtrain.a" ] && [ -f "$lib/libdtrain_mpi.so" ] && [ -x "$prefix/bin/dtrain" ] &&
    [ -f "$prefix/include/dtrain/strategy.h" ]; then
    ok install_lays_out_the_library_with_its_soname_and_the_mpi_plugin
else
    fail install_lays_out_the_library_with_its_soname_and_the_mpi_plugin "$(ls -l "$lib")"
fi

# Every installed header compiles alone against the installed ones: none needs a private header
# (they stay in the source tree) or another public one it does not include itself.
bad_headers=
for h in "$prefix"/include/dtrain/*.h; do
    printf '#include "dtrain/%s"\n' "$(basename "$h")" > "$tmp/one.c"
    cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$prefix/include" "$tmp/one.c" \
        >> "$tmp/headers.log" 2>&1 || bad_headers="$bad_headers $(basename "$h")"
done
n_headers=$(find "$prefix/include/dtrain" -name '*.h' | wc -l)
if [ -z "$bad_headers" ] && [ "$n_headers" -gt 0 ]; then
    ok installed_headers_compile_alone "$n_headers headers"
else
    fail installed_headers_compile_alone "$bad_headers: $(head -c 400 "$tmp/headers.log")"
fi

# A program of the public API: a model from a built-in spec, initialised from a seed, one
# evaluation over a small batch; prints the parameter count and a checksum of their bytes (the
# program's own: the library's CRC32C is internal).
cat > "$tmp/prog.c" << 'PROG'
#include <stdio.h>
#include <string.h>

#include "dtrain/dataset.h"
#include "dtrain/fit.h"
#include "dtrain/model.h"
#include "dtrain/model_spec.h"
#include "dtrain/process.h"
#include "dtrain/train.h"

/* FNV-1a over n_bytes. */
static unsigned fnv1a(const void *data, size_t n_bytes)
{
    const unsigned char *p = data;
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n_bytes; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

/* What `dtrain train --max-steps 20 --optimizer adam --lr 0.001 --seed 7 --threads 1
 * --test-data none --progress none` does, from one call. */
static int train_like_the_command(void)
{
    dt_gemm_setup(); /* as the command does at start */
    dt_train_config c;
    dt_train_config_default(&c);
    c.test_data = "none";
    c.threads = 1;
    dt_optim_config_default(&c.optim, DT_OPT_ADAM);
    c.optim.lr = 0.001f;
    c.fit.max_steps = 20;
    c.fit.epochs = 1000000;
    c.fit.seed = 7;
    c.out = NULL;
    dt_train_report r;
    if (dt_train(&c, &r)) {
        fprintf(stderr, "%s\n", dt_last_error());
        return 1;
    }
    printf("trained %lld steps checksum %08x\n", (long long)r.fit.steps, r.param_checksum);
    return 0;
}

int main(void)
{
    dt_model_spec spec;
    dt_model *m;
    if (dt_model_spec_builtin("mlp", &spec)) {
        fprintf(stderr, "%s\n", dt_last_error());
        return 1;
    }
    spec.input_shape[0] = 4, spec.input_shape[1] = 4, spec.input_shape[2] = 1;
    if (dt_model_create(&spec, 8, NULL, NULL, &m)) {
        fprintf(stderr, "%s\n", dt_last_error());
        return 1;
    }
    dt_model_init_params(m, 7);
    const dt_arena *p = dt_model_params(m);
    printf("params %zu fnv %08x\n", p->n_elems, fnv1a(p->data, p->n_elems * sizeof(float)));
    dt_model_destroy(m);
    return train_like_the_command();
}
PROG
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
if ! cflags=$(pkg-config --cflags dtrain) || ! libs=$(pkg-config --libs dtrain) ||
    ! static_libs=$(pkg-config --static --libs dtrain); then
    fail pkg_config_knows_dtrain "$(pkg-config --libs dtrain 2>&1)"
fi
# shellcheck disable=SC2086
if cc -std=c11 $sanflags $cflags "$tmp/prog.c" -o "$tmp/prog_shared" $libs > "$tmp/cc.log" 2>&1 &&
    LD_LIBRARY_PATH=$lib "$tmp/prog_shared" > "$tmp/shared.out" 2>&1 &&
    LD_LIBRARY_PATH=$lib ldd "$tmp/prog_shared" | grep -q "libdtrain.so.0 => $lib/libdtrain.so.0" &&
    grep -q '^params [1-9][0-9]* fnv [0-9a-f]\{8\}$' "$tmp/shared.out" &&
    grep -q '^trained 20 steps checksum [0-9a-f]\{8\}$' "$tmp/shared.out"; then
    ok shared_program_builds_through_pkg_config_and_runs
else
    fail shared_program_builds_through_pkg_config_and_runs "$(cat "$tmp/cc.log" "$tmp/shared.out" 2> /dev/null | head -c 600)"
fi
# Static: libdtrain.a itself, and every library it needs from Libs.private.
# shellcheck disable=SC2086
if cc -std=c11 $sanflags $cflags "$tmp/prog.c" -o "$tmp/prog_static" ${static_libs/-ldtrain/-l:libdtrain.a} \
        > "$tmp/cc.log" 2>&1 && "$tmp/prog_static" > "$tmp/static.out" 2>&1 &&
    ! ldd "$tmp/prog_static" | grep -q libdtrain && cmp -s "$tmp/shared.out" "$tmp/static.out"; then
    ok static_program_builds_through_pkg_config_and_prints_the_same
else
    fail static_program_builds_through_pkg_config_and_prints_the_same "$(cat "$tmp/cc.log" "$tmp/static.out" 2> /dev/null | head -c 600)"
fi
# The one library call trains as the command does: the same parameters, bit for bit.
"$prefix/bin/dtrain" train --max-steps 20 --optimizer adam --lr 0.001 --seed 7 --threads 1 \
    --test-data none --progress none --metrics-out "$tmp/cli.json" > "$tmp/cli.out" 2>&1
want=$(json_field "$tmp/cli.json" param_checksum 2> /dev/null)
got=$(sed -n 's/^trained 20 steps checksum \([0-9a-f]*\)$/\1/p' "$tmp/shared.out")
if [ -n "$want" ] && [ "$want" = "$got" ]; then
    ok dt_train_trains_as_dtrain_train_does "checksum $got"
else
    fail dt_train_trains_as_dtrain_train_does "library $got, command $want: $(head -c 300 "$tmp/cli.out")"
fi
# examples/serve_lines.c, built against the installed library through pkg-config, scores what
# dtrain predict scores: a feature-spec model's CSV rows (header first) and deepfm's LibSVM rows,
# on 1 and 2 threads.
dt=$prefix/bin/dtrain
"$dt" data gen-ctr --format census --rows 600 --seed 1 --out "$tmp/census.csv" > /dev/null 2>&1
"$dt" train --data "csv:$tmp/census.csv" --feature-spec "$root/examples/census_wide_deep.json" \
    --max-steps 5 --batch-size 64 --test-data none --progress none --model-dir "$tmp/wd" \
    > "$tmp/wd.out" 2>&1
"$dt" data gen-ctr --rows 700 --seed 2 --format libsvm --out "$tmp/ctr.libsvm" > "$tmp/gen" 2>&1
fs=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$tmp/gen")
"$dt" train --model deepfm --data "libsvm:$tmp/ctr.libsvm" --field-size 39 --feature-size "$fs" \
    --embedding-size 4 --deep-layers 8 --max-steps 5 --test-data none --progress none \
    --model-dir "$tmp/dfm" > "$tmp/dfm.out" 2>&1
"$dt" predict --model-dir "$tmp/wd" --data "csv:$tmp/census.csv" --out "$tmp/wd_want" > /dev/null 2>&1
"$dt" predict --model-dir "$tmp/dfm" --data "libsvm:$tmp/ctr.libsvm" --out "$tmp/dfm_want" > /dev/null 2>&1
# shellcheck disable=SC2086
if cc -std=c11 $sanflags $cflags "$root/examples/serve_lines.c" -o "$tmp/serve_lines" $libs \
        > "$tmp/cc.log" 2>&1 &&
    LD_LIBRARY_PATH=$lib "$tmp/serve_lines" "$tmp/wd" < "$tmp/census.csv" > "$tmp/wd1" 2>> "$tmp/cc.log" &&
    LD_LIBRARY_PATH=$lib "$tmp/serve_lines" "$tmp/wd" 2 < "$tmp/census.csv" > "$tmp/wd2" 2>> "$tmp/cc.log" &&
    LD_LIBRARY_PATH=$lib "$tmp/serve_lines" "$tmp/dfm" 2 < "$tmp/ctr.libsvm" > "$tmp/dfm2" 2>> "$tmp/cc.log" &&
    [ "$(wc -l < "$tmp/wd1")" = 600 ] && cmp -s "$tmp/wd1" "$tmp/wd_want" && cmp -s "$tmp/wd2" "$tmp/wd_want" &&
    [ "$(wc -l < "$tmp/dfm2")" = 700 ] && cmp -s "$tmp/dfm2" "$tmp/dfm_want"; then
    ok serve_lines_example_scores_as_dtrain_predict "600 census rows, 700 deepfm rows"
else
    fail serve_lines_example_scores_as_dtrain_predict "$(head -c 600 "$tmp/cc.log") $(tail -2 "$tmp/wd.out" "$tmp/dfm.out")"
fi
printf 'age,workclass\nx,y\n' | LD_LIBRARY_PATH=$lib "$tmp/serve_lines" "$tmp/wd" > /dev/null 2> "$tmp/e"
if [ $? -eq 1 ] && grep -q "the header: .*feature_spec.json: the spec reads key" "$tmp/e"; then
    ok serve_lines_example_names_a_header_without_the_specs_keys "$(head -c 200 "$tmp/e")"
else
    fail serve_lines_example_names_a_header_without_the_specs_keys "$(head -c 300 "$tmp/e")"
fi
echo "install: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
