#!/usr/bin/env bash
# Runs every test suite against the build in $1 and prints the total as the last line:
# "N passed, N failed". A suite that dies before reporting counts as one failure.
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
work=$(mktemp -d /tmp/dtrain-run-XXXXXX)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
run_suite() { # name, counts file, command...
    local name=$1 counts=$2 t0=$SECONDS
    shift 2
    echo "== $name"
    "$@"
    # Each suite's wall time, so the ones that make the whole run long are plain to see.
    echo "-- $name: $((SECONDS - t0)) s"
    if [ -s "$counts" ]; then
        read -r p f < "$counts"
        passed=$((passed + p))
        failed=$((failed + f))
    else
        echo "FAIL $name: the suite ended without reporting"
        failed=$((failed + 1))
    fi
}
# The unit suite compares the feature fingerprints with libfarmhash through this build's judge.
export DTRAIN_FARMHASH_JUDGE="$build/tests/farmhash_judge"
# The unit binary's own exit status counts too: a sanitizer's report at exit (a leak) leaves
# every test passed but the status non-zero.
unit_suite() {
    "$build/tests/unit" --counts "$work/unit"
    local status=$?
    if [ "$status" -ne 0 ] && [ -s "$work/unit" ]; then
        read -r p f < "$work/unit"
        [ "$f" -eq 0 ] && echo "FAIL unit: exited with status $status after every test passed" &&
            echo "$p 1" > "$work/unit"
    fi
}
run_suite unit "$work/unit" unit_suite
run_suite cli "$work/cli" bash tests/cli.sh "$build" "$work/cli"
run_suite layers "$work/layers" bash tests/layers.sh "$build" "$work/layers"
# What libdtrain.so exports against the public headers' DT_API declarations.
run_suite exports "$work/exports" bash tests/exports.sh "$build" "$work/exports"
# CTR models: generated data, AUC, bad CTR input.
run_suite ctr "$work/ctr" bash tests/ctr.sh "$build" "$work/ctr"
run_suite dynamic "$work/dynamic" bash tests/dynamic.sh "$build" "$work/dynamic"
# Feature specs: dtrain data transform, ids against FarmHash, written specs, errors.
run_suite features "$work/features" bash tests/features.sh "$build" "$work/features"
# Feature-spec models on every strategy, a killed ps worker, checkpoints, evaluation, bad rows.
run_suite spec_train "$work/spec_train" bash tests/spec_train.sh "$build" "$work/spec_train"
# A feature spec's dynamic columns: = fixed ones bit for bit, exact resume, keys, refusals.
run_suite spec_dynamic "$work/spec_dynamic" bash tests/spec_dynamic.sh "$build" "$work/spec_dynamic"
# Census-style data (gen-ctr --format census) and the census wide & deep spec trained on it.
run_suite census "$work/census" bash tests/census.sh "$build" "$work/census"
run_suite predict "$work/predict" bash tests/predict.sh "$build" "$work/predict"
# ONNX export: every kind of model exported, checked by python3-onnx and scored by ONNX Runtime
# as dtrain scores it; external data, a ps checkpoint, bad exports.
run_suite onnx "$work/onnx" bash tests/onnx.sh "$build" "$work/onnx"
# The mpi communicator under mpirun (and coll_check over the local backend).
run_suite mpi "$work/mpi" bash tests/mpi.sh "$build" "$work/mpi"
run_suite launch "$work/launch" bash tests/launch.sh "$build" "$work/launch"
run_suite net "$work/net" bash tests/net.sh "$build" "$work/net"
# Parameter-server tasks (dtrain server) against a chief: shards, strangers, timeouts, kills.
run_suite ps "$work/ps" bash tests/ps.sh "$build" "$work/ps"
# Dynamic tables on the parameter server: one_device's bit for bit, checkpoints restored onto
# any ps count and one_device key by key, a resumed job, a killed ps back from its snapshot.
run_suite ps_dynamic "$work/ps_dynamic" bash tests/ps_dynamic.sh "$build" "$work/ps_dynamic"
# TFJob's sparseCluster trained between-graph: one_device's bits with one worker, the
# coordinated job's AUC with two, a worker killed and back, strangers and named errors.
run_suite ps_sparse "$work/ps_sparse" bash tests/ps_sparse.sh "$build" "$work/ps_sparse"
# The platforms' TF_CONFIGs: tasks named by host names, the chief called master.
run_suite deploy "$work/deploy" bash tests/deploy.sh "$build" "$work/deploy"
# A TFJob simulated in network namespaces: names that resolve late, a ps back at a new address.
run_suite platforms "$work/platforms" bash tests/platforms.sh "$build" "$work/platforms"
# Checkpoints, backups and resume, summaries, the sidecar evaluator, restarts after a kill.
run_suite ckpt "$work/ckpt" bash tests/ckpt.sh "$build" "$work/ckpt"
# make install into a temporary prefix, and programs built against it through pkg-config.
run_suite install "$work/install" bash tests/install.sh "$build" "$work/install"
# A short pass of every fuzz target: make fuzz runs them for longer.
run_suite fuzz "$work/fuzz" bash tests/fuzz.sh "$build" "${DTRAIN_FUZZ_SMOKE_SECONDS:-5}" "$work/fuzz"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
