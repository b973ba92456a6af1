"""The deployment files in deploy/, checked as their platforms would run them.

For each: the file parsed (YAML, Python, shell), the TF_CONFIG or environment the platform would
give each task computed as the platform computes it, and dtrain's own parser run on it
(`dtrain cluster check`), with every dtrain command line the file holds parsed by dtrain itself
(`dtrain COMMAND ARGS... --help` stops at the first flag it does not take). Prints one line per
check, "ok NAME detail" or "FAIL NAME detail".
usage: deploy_files.py DTRAIN DEPLOY_DIR TMP_DIR
"""
import ast
import json
import os
import re
import shlex
import subprocess
import sys

import yaml

dtrain, deploy, tmp = sys.argv[1:4]
failures = 0


def report(name, ok, detail):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}".rstrip(), flush=True)


def run(args, env=None, **kw):
    e = dict(os.environ)
    for k in ("TF_CONFIG", "DTRAIN_CLUSTER_RESOLVER", "DTRAIN_JOBS", "DTRAIN_PORT_BASE"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run(args, env=e, capture_output=True, text=True, timeout=60, **kw)


def takes_flags(args):
    """dtrain parses ARGS (its flags all known, values well formed): --help after them."""
    p = run([dtrain] + [str(a) for a in args] + ["--help"])
    return p.returncode == 0, (p.stderr.strip().splitlines() or [""])[-1]


def cluster_check(tf_config):
    p = run([dtrain, "cluster", "check", "--tf-config", json.dumps(tf_config)])
    return p.returncode == 0, (p.stdout.splitlines() or [p.stderr.strip()])[0]


# --- TFJob: the training operator's TF_CONFIG for every replica ---
tfjob = yaml.safe_load(open(f"{deploy}/kubernetes/tfjob.yaml"))
name, ns = tfjob["metadata"]["name"], tfjob["metadata"]["namespace"]
specs = tfjob["spec"]["tfReplicaSpecs"]
cluster = {}
for rtype, spec in specs.items():
    t = rtype.lower()
    if t != "evaluator":  # the operator lists the evaluator apart, as TF does
        cluster[t] = [f"{name}-{t}-{i}.{ns}.svc:2222" for i in range(spec["replicas"])]
checked = []
for rtype, spec in specs.items():
    t = rtype.lower()
    container = spec["template"]["spec"]["containers"][0]
    ok, why = takes_flags(container["args"])
    report(f"deploy_tfjob_{t}_args", ok, why if not ok else " ".join(container["args"][:1]))
    for i in range(spec["replicas"]):
        conf = {"cluster": cluster, "task": {"type": t, "index": i}, "environment": "cloud"}
        ok, line = cluster_check(conf)
        checked.append(ok)
        if not ok or i == 0:
            report(f"deploy_tfjob_{t}_{i}_tf_config", ok, line)
    if t != "evaluator" and spec.get("restartPolicy") != "ExitCode":
        report(f"deploy_tfjob_{t}_restart_policy", False, "not ExitCode")

# --- TFJob with enableDynamicWorker: the operator's sparseCluster for every replica (a worker
#     gets every ps and itself, a ps itself, the evaluator nothing) ---
dyn = yaml.safe_load(open(f"{deploy}/kubernetes/tfjob-dynamic.yaml"))
name, ns = dyn["metadata"]["name"], dyn["metadata"]["namespace"]
specs = dyn["spec"]["tfReplicaSpecs"]
report("deploy_tfjob_dynamic_enabled", dyn["spec"].get("enableDynamicWorker") is True and
       "Chief" not in specs and "Master" not in specs, "enableDynamicWorker, no chief")
hosts = {t.lower(): [f"{name}-{t.lower()}-{i}.{ns}.svc:2222" for i in range(s["replicas"])]
         for t, s in specs.items()}
for rtype, spec in specs.items():
    t = rtype.lower()
    container = spec["template"]["spec"]["containers"][0]
    ok, why = takes_flags(container["args"])
    report(f"deploy_tfjob_dynamic_{t}_args", ok, why if not ok else " ".join(container["args"][:1]))
    for i in range(spec["replicas"]):
        sparse = {"worker": {}, "ps": []}
        if t == "ps":
            sparse["ps"] = [hosts["ps"][i]]
        elif t == "worker":
            sparse = {"worker": {str(i): hosts["worker"][i]}, "ps": hosts["ps"]}
        ok, line = cluster_check({"sparseCluster": sparse, "task": {"type": t, "index": i}})
        want = {"worker": "worker 0, leading" if i == 0 else "a worker training between-graph",
                "ps": "a ps task, knowing itself alone", "evaluator": "the evaluator"}[t]
        ok = ok and want in line
        if not ok or i == 0 or t == "worker":
            report(f"deploy_tfjob_dynamic_{t}_{i}_tf_config", ok, line)
    if t == "worker" and "--num-workers" in container["args"]:
        n = int(container["args"][container["args"].index("--num-workers") + 1])
        report("deploy_tfjob_dynamic_num_workers", n == spec["replicas"],
               f"--num-workers {n}, {spec['replicas']} replicas")

# --- Indexed Job: the entry script's TF_CONFIG for every index ---
docs = list(yaml.safe_load_all(open(f"{deploy}/kubernetes/indexed-job.yaml")))
service = next(d for d in docs if d["kind"] == "Service")
job = next(d for d in docs if d["kind"] == "Job")
report("deploy_indexed_job_service", service["spec"].get("clusterIP") == "None" and
       service["spec"].get("publishNotReadyAddresses") is True,
       "headless, names published before readiness")
pod = job["spec"]["template"]["spec"]
container = pod["containers"][0]
env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
env["DTRAIN_NAMESPACE"] = job["metadata"]["namespace"]
checker = f"{tmp}/as_cluster_check.sh"
with open(checker, "w") as f:  # what the entry runs, made to print the cluster it was given
    f.write(f"#!/bin/sh\nexec {shlex.quote(dtrain)} cluster check\n")
os.chmod(checker, 0o755)
ok, why = takes_flags(["train"] + container["args"])
report("deploy_indexed_job_args", ok, why if not ok else "dtrain train takes them")
ok, why = takes_flags(["server"] + shlex.split(env["DTRAIN_SERVER_ARGS"]))
report("deploy_indexed_job_server_args", ok, why if not ok else "dtrain server takes them")
tasks = []
for i in range(job["spec"]["completions"]):
    p = run(["sh", f"{deploy}/kubernetes/tf_config_entry.sh"] + container["args"],
            env=dict(env, JOB_COMPLETION_INDEX=str(i), DTRAIN=checker))
    line = (p.stdout.splitlines() or [p.stderr.strip()])[0]
    tasks.append(line)
    want = f"{job['metadata']['name']}-{i}.{pod['subdomain']}.{env['DTRAIN_NAMESPACE']}.svc:2222"
    report(f"deploy_indexed_job_pod_{i}", p.returncode == 0 and want in line, line)

# --- MPIJob: the launcher's dtrain command ---
mpijob = yaml.safe_load(open(f"{deploy}/kubernetes/mpijob.yaml"))
launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
args = launcher["args"]
ok, why = takes_flags(args[1:])
np_ = int(launcher["command"][launcher["command"].index("-np") + 1])
workers = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
report("deploy_mpijob", ok and "--comm" in args and args[args.index("--comm") + 1] == "mpi" and
       np_ == workers * mpijob["spec"]["slotsPerWorker"],
       why if not ok else f"mpirun -np {np_} over {workers} workers, --comm mpi")

# --- Slurm: the srun step the batch script asks for, as the slurm resolver reads it ---
script = open(f"{deploy}/slurm/train.sbatch").read()
sb = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)", script, re.M))
step = script[re.search(r"^srun ", script, re.M).start() + 5:]
srun = " ".join(l.rstrip("\\").strip() for l in step.splitlines()
                if l.strip() and not l.strip().startswith("#"))
words = shlex.split(srun.replace("$HOME", "/home/user").replace('"', ""))
words = words[words.index("dtrain") + 1:]
nodes, per = int(sb["nodes"]), int(sb["ntasks-per-node"])
ok, why = takes_flags(words)
report("deploy_slurm_args", ok, why if not ok else f"{nodes} nodes x {per} tasks")
for r in range(nodes * per):
    slurm = {"SLURM_PROCID": str(r), "SLURM_NTASKS": str(nodes * per),
             "SLURM_STEP_NUM_TASKS": str(nodes * per), "SLURM_STEP_NODELIST": f"cn[01-{nodes:02d}]",
             "SLURM_STEP_TASKS_PER_NODE": f"{per}(x{nodes})"}
    flags = []
    for f in ("--cluster-resolver", "--jobs", "--port-base"):
        flags += [f, words[words.index(f) + 1]]
    p = run([dtrain, "cluster", "check"] + flags, env=slurm)
    line = (p.stdout.splitlines() or [p.stderr.strip()])[0]
    report(f"deploy_slurm_rank_{r}", p.returncode == 0 and f"cn{r // per + 1:02d}:" in line, line)

# --- SageMaker: the estimator's hyperparameters as the container reads them ---
tree = ast.parse(open(f"{deploy}/sagemaker/estimator.py").read())
consts = {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
          for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, (ast.Dict, ast.Constant))}
hp = {k: str(v) for k, v in consts["HYPERPARAMETERS"].items()}  # SageMaker passes strings
hp["sagemaker_parameter_server_enabled"] = "true"
hosts = [f"algo-{i + 1}" for i in range(consts["INSTANCE_COUNT"])]
for i, host in enumerate(hosts):
    root = f"{tmp}/sm-{host}"
    os.makedirs(f"{root}/input/config", exist_ok=True)
    json.dump({"current_host": host, "hosts": hosts}, open(f"{root}/input/config/resourceconfig.json", "w"))
    json.dump(hp, open(f"{root}/input/config/hyperparameters.json", "w"))
    p = run([dtrain, "cluster", "check"], env={"DTRAIN_SAGEMAKER_ROOT": root})
    line = (p.stdout.splitlines() or [p.stderr.strip()])[0]
    want = "chief:0 (algo-1:2222)" if i == 0 else f"worker:{i - 1} (algo-{i + 1}:2222)"
    report(f"deploy_sagemaker_{host}", p.returncode == 0 and want in line and
           len([l for l in p.stdout.splitlines() if l.startswith("ps:")]) == len(hosts), line)
    # dtrain train takes every hyperparameter as a flag (--help after them, as SageMaker runs it)
    p = run([dtrain, "train", "--help"], env={"DTRAIN_SAGEMAKER_ROOT": root})
    report(f"deploy_sagemaker_{host}_hyperparameters", p.returncode == 0,
           (p.stderr.strip().splitlines() or ["dtrain train takes them"])[-1])
sys.exit(1 if failures else 0)
