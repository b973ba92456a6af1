#!/bin/sh
# The entry of an Indexed Job's pod (indexed-job.yaml): its index (JOB_COMPLETION_INDEX) as a
# task of the cluster, 0 the chief, 1..DTRAIN_WORKERS the workers, then DTRAIN_PS ps tasks, each
# named as the headless service names the pod (JOB-INDEX.SERVICE.NAMESPACE.svc:PORT); then dtrain
# train with the arguments given, or dtrain server with DTRAIN_SERVER_ARGS for a ps task.
# DTRAIN (default: dtrain) is the program run.
set -eu
index=${JOB_COMPLETION_INDEX:?the pod of an Indexed Job has JOB_COMPLETION_INDEX}
job=${DTRAIN_JOB:?DTRAIN_JOB: the Job name}
service=${DTRAIN_SERVICE:-$job}
namespace=${DTRAIN_NAMESPACE:-default}
workers=${DTRAIN_WORKERS:?DTRAIN_WORKERS: how many workers}
ps=${DTRAIN_PS:-0}
port=${DTRAIN_PORT:-2222}
host() { echo "\"$job-$1.$service.$namespace.svc:$port\""; }
list() { # FIRST COUNT: the hosts of pods FIRST .. FIRST + COUNT - 1, as a JSON list
    out="" i=0
    while [ "$i" -lt "$2" ]; do
        out="$out${out:+, }$(host $(($1 + i)))"
        i=$((i + 1))
    done
    echo "[$out]"
}
if [ "$index" -eq 0 ]; then type=chief task=0
elif [ "$index" -le "$workers" ]; then type=worker task=$((index - 1))
elif [ "$index" -le $((workers + ps)) ]; then type=ps task=$((index - 1 - workers))
else echo "tf_config_entry.sh: index $index past the $((1 + workers + ps)) tasks" >&2; exit 2
fi
cluster="\"chief\": $(list 0 1), \"worker\": $(list 1 "$workers")"
[ "$ps" -gt 0 ] && cluster="$cluster, \"ps\": $(list $((1 + workers)) "$ps")"
TF_CONFIG="{\"cluster\": {$cluster}, \"task\": {\"type\": \"$type\", \"index\": $task}, \"environment\": \"cloud\"}"
export TF_CONFIG
if [ "$type" = ps ]; then
    # shellcheck disable=SC2086
    exec "${DTRAIN:-dtrain}" server ${DTRAIN_SERVER_ARGS:-}
fi
exec "${DTRAIN:-dtrain}" train "$@"
