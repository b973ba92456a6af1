#!/bin/sh
# A SageMaker training container's entry (SageMaker runs the image with "train"): with the ps
# distribution on (hyperparameter sagemaker_parameter_server_enabled) and more than one host,
# this host's ps task (dtrain server) runs beside its master or worker (dtrain train), as
# SageMaker's TensorFlow toolkit runs them; both find their tasks through dtrain's sagemaker
# resolver, and dtrain train takes the hyperparameters as its flags. The ps writes its shards of
# each checkpoint to DTRAIN_MODEL_DIR, else /opt/ml/checkpoints when SageMaker syncs it, else
# SM_MODEL_DIR. The status is dtrain train's. ROOT is /opt/ml, or DTRAIN_SAGEMAKER_ROOT; DTRAIN
# (default: dtrain) the program run.
set -u
root=${DTRAIN_SAGEMAKER_ROOT:-/opt/ml}
[ "${1:-}" = train ] && shift
model_dir=${DTRAIN_MODEL_DIR:-}
if [ -z "$model_dir" ]; then
    if [ -d "$root/checkpoints" ]; then model_dir=$root/checkpoints; else model_dir=${SM_MODEL_DIR:-$root/model}; fi
fi
hosts=$(grep -o '"hosts": *\[[^]]*\]' "$root/input/config/resourceconfig.json" 2> /dev/null | grep -o '"[^"]*"' | sed 1d | wc -l)
ps_pid=""
if [ "$hosts" -gt 1 ] &&
    grep -Eq '"sagemaker_parameter_server_enabled": *(true|"true")' "$root/input/config/hyperparameters.json" 2> /dev/null; then
    "${DTRAIN:-dtrain}" server --model-dir "$model_dir" &
    ps_pid=$!
fi
"${DTRAIN:-dtrain}" train "$@"
status=$?
if [ -n "$ps_pid" ]; then
    # The chief stops every ps task when the job ends; a failed job's ps would wait for it.
    [ "$status" -ne 0 ] && kill "$ps_pid" 2> /dev/null
    wait "$ps_pid"
fi
exit "$status"
