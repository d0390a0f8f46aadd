"""What reading Kubernetes objects exactly costs: this tree against the commit before it.

    python benchmarks/strict_reader.py [--before REF] [--rounds 5] [--workloads 2000]
        [--kubeconfig K --nodes 1000 --pods 10000 --kube-api-qps 5000]

Issue 28 made every reader strict (unknown fields refused with their path, names checked, a
pod's ``nodeName`` and Kueue's queue label read). This measures its price, side by side: the
commit ``--before`` (by default the one before the strict reader was merged) is extracted with
``git archive`` into a temporary directory, and each measurement runs once in a process of each
tree (``PYTHONPATH`` naming it), the two alternating, ``--rounds`` times; the table gives the
medians and the change.

- **fill**: one FGD fill-up run of the Alibaba trace with the default policy
  (``gpufleet.backends.sim.run.run_fill``, as ``benchmarks/speed.py`` times it), seconds;
  skipped where the trace is not on this machine.
- **read**: ``read_scenario`` of a directory of ``--workloads`` Kubernetes workloads (Pods,
  Jobs, Deployments, PyTorchJobs with the fields users write: resources, node selectors,
  tolerations, affinity, probes, volumes), CPU seconds of the median of 5 reads in the
  process: the strict reader's own cost, with the YAML parsing it sits on.
- **bind** (with ``--kubeconfig``): ``benchmarks/kube_bind.py``'s backlog run of
  ``gpufleet scheduler`` against a real API server, CPU milliseconds of the scheduler's
  process per pod bound (start to stop, user and system), and pods bound per second.

Results: benchmarks/results/strict_reader.md and .json. The 1-minute load average before each
run is recorded: CPU time depends on it less than wall time, but not at all only on a quiet
machine.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from statistics import median
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
#: The commit before the strict reader (``Merge wp-strict``) was merged.
DEFAULT_BEFORE = "1379dba^1"

#: Runs in each tree's own process: one fill-up run, its seconds as JSON.
FILL = """
import json, sys
from gpufleet.backends.sim.run import run_fill
from gpufleet.io.cluster_traces.alibaba import read_nodes, read_pods
from gpufleet.io.cluster_traces.datasets import NODES_FILE, PODS_FILE, find_alibaba_trace
trace_dir = find_alibaba_trace()
nodes = [n for n in read_nodes(trace_dir / "csv" / NODES_FILE) if n.gpu_count]
trace = [t.pod for t in read_pods(trace_dir / "csv" / PODS_FILE)]
print(json.dumps(run_fill(nodes, trace, "default", int(sys.argv[1])).seconds))
"""

#: Runs in each tree's own process: the median CPU seconds of 5 reads of a scenario directory.
READ = """
import json, statistics, sys, time
from gpufleet.io.readers import read_scenario
times = []
for _ in range(5):
    started = time.process_time()
    scenario = read_scenario(sys.argv[1])
    times.append(time.process_time() - started)
print(json.dumps({"cpu_s": statistics.median(times), "workloads": len(scenario.workloads)}))
"""


def extract(ref: str, into: Path) -> str:
    """The tree of commit ``ref`` under ``into``; returns the commit's full hash."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", ref], check=True, capture_output=True, text=True
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return commit


def container(name: str, gpus: int, index: int) -> dict[str, Any]:
    return {
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "train.py", f"--shard={index}"],
        "env": [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "SHARD", "value": str(index)}],
        "ports": [{"name": "metrics", "containerPort": 9400}],
        "resources": {
            "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": gpus},
            "limits": {"memory": "32Gi", "nvidia.com/gpu": gpus},
        },
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 9400}, "periodSeconds": 10},
    }


def pod_spec(gpus: int, index: int) -> dict[str, Any]:
    return {
        "priorityClassName": "low",
        "restartPolicy": "OnFailure",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.product",
                                    "operator": "In",
                                    "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"],
                                }
                            ]
                        }
                    ]
                }
            }
        },
        "containers": [container("main", gpus, index)],
        "volumes": [{"name": "data", "emptyDir": {}}],
    }


def workload(index: int) -> dict[str, Any]:
    """The ``index``-th workload: a Pod, Job, Deployment or PyTorchJob in turn."""
    meta = {"name": f"w{index:05d}", "namespace": "research", "labels": {"team": "research"}}
    kind = index % 4
    if kind == 0:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec(1, index)}
    template = {"metadata": {"labels": {"app": meta["name"]}}, "spec": pod_spec(2, index)}
    if kind == 1:
        spec = {"parallelism": 2, "completions": 2, "template": template}
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
    if kind == 2:
        spec = {
            "replicas": 2,
            "selector": {"matchLabels": {"app": meta["name"]}},
            "template": template,
        }
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}
    master = {"replicas": 1, "restartPolicy": "OnFailure", "template": template}
    worker = {"replicas": 3, "restartPolicy": "OnFailure", "template": template}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": meta,
        "spec": {"pytorchReplicaSpecs": {"Master": master, "Worker": worker}},
    }


def write_scenario(directory: Path, count: int) -> None:
    queue = {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "research"},
        "spec": {"namespaces": ["research"], "quota": {"nvidia.com/gpu": 100_000}},
    }
    priority = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "low"},
        "value": 0,
    }
    (directory / "queues.yaml").write_text(yaml.safe_dump_all([queue, priority]))
    per_file = 250
    for start in range(0, count, per_file):
        docs = [workload(i) for i in range(start, min(count, start + per_file))]
        (directory / f"workloads-{start:05d}.yaml").write_text(yaml.safe_dump_all(docs))


def in_tree(tree: Path, code: str, *args: str) -> Any:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def bind_run(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    """One backlog run of ``gpufleet scheduler`` from ``tree`` (kube_bind's own measure)."""
    sys.path.insert(0, str(ROOT))
    import kubernetes

    from benchmarks import kube_bind  # only with --kubeconfig

    core = kubernetes.client.CoreV1Api(kube_bind._client(args.kubeconfig))
    run_id = uuid.uuid4().hex[:6]
    bind_args = argparse.Namespace(
        kubeconfig=args.kubeconfig,
        nodes=args.nodes,
        pods=args.pods,
        gpus_per_node=16,
        policy="default",
        mode="backlog",
        warmup=0.0,
        timeout=600.0,
    )
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree)  # the scheduler's process imports this tree
    try:
        qps = args.kube_api_qps
        return kube_bind._measure("gpufleet", bind_args, core, run_id, qps, int(2 * qps))
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous
        kube_bind.clean_up(core, run_id)


def change(before: float, after: float) -> str:
    return f"{100 * (after - before) / before:+.1f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=DEFAULT_BEFORE, help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workloads", type=int, default=2000)
    parser.add_argument("--no-fill", action="store_true", help="skip the fill-up runs")
    parser.add_argument("--kubeconfig", help="a real API server, for the bind runs")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--kube-api-qps", type=float, default=5000.0)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from gpufleet.io.cluster_traces.datasets import TRACE_DIR_ENV, find_alibaba_trace  # this tree's

    with tempfile.TemporaryDirectory(prefix="strict-reader-") as scratch:
        before_tree = Path(scratch) / "before"
        before_tree.mkdir()
        before_commit = extract(args.before, before_tree)
        after_commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        trees = {"before": before_tree, "after": ROOT}
        scenario = Path(scratch) / "scenario"
        scenario.mkdir()
        write_scenario(scenario, args.workloads)
        trace = find_alibaba_trace()
        fill = not args.no_fill and trace is not None
        if trace is not None:  # the extracted tree has no ../shared beside it: say where
            os.environ[TRACE_DIR_ENV] = str(trace)
        runs: dict[str, dict[str, list[Any]]] = {
            side: {"fill_s": [], "read_cpu_s": [], "bind": [], "load": []} for side in trees
        }
        for round_ in range(args.rounds):
            # Alternate which side goes first, so that neither always meets a warmer machine.
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            for side in order:
                tree = trees[side]
                runs[side]["load"].append(os.getloadavg()[0])
                if fill:
                    runs[side]["fill_s"].append(in_tree(tree, FILL, str(42 + round_)))
                read = in_tree(tree, READ, str(scenario))
                runs[side]["read_cpu_s"].append(read["cpu_s"])
                if args.kubeconfig:
                    runs[side]["bind"].append(bind_run(tree, args))
                print(f"round {round_ + 1}/{args.rounds} {side}: {read}", flush=True)
                time.sleep(0.5)

    report = summarise(args, runs, before_commit, after_commit, bool(dirty), fill)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "strict_reader.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "strict_reader.md").write_text(markdown(report))
    print(markdown(report))
    return 0


def summarise(
    args: argparse.Namespace,
    runs: dict[str, dict[str, list[Any]]],
    before: str,
    after: str,
    dirty: bool,
    fill: bool,
) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}

    def row(name: str, unit: str, values: dict[str, list[float]]) -> None:
        medians = {side: median(v) for side, v in values.items()}
        rows[name] = {
            "unit": unit,
            "before": values["before"],
            "after": values["after"],
            "median_before": medians["before"],
            "median_after": medians["after"],
            "change": change(medians["before"], medians["after"]),
        }

    if fill:
        row("fill-up run, default policy", "s", {s: r["fill_s"] for s, r in runs.items()})
    row(
        f"read_scenario of {args.workloads} workloads",
        "CPU s",
        {s: r["read_cpu_s"] for s, r in runs.items()},
    )
    if args.kubeconfig:
        row(
            f"gpufleet scheduler, {args.pods} pods on {args.nodes} nodes: CPU per pod",
            "ms",
            {s: [b["cpu_ms_per_pod"] for b in r["bind"]] for s, r in runs.items()},
        )
        row(
            "gpufleet scheduler: pods bound per second",
            "pods/s",
            {s: [b["pods_per_s"] for b in r["bind"]] for s, r in runs.items()},
        )
    return {
        "command": "python benchmarks/strict_reader.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "before": before,
        "after": after + (" (with uncommitted changes)" if dirty else ""),
        "rounds": args.rounds,
        "load_1m": {side: r["load"] for side, r in runs.items()},
        "rows": rows,
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# The strict Kubernetes reader's cost",
        "",
        f"`{report['command']}` on {report['machine']}: the commit before the strict reader "
        f"(`{report['before'][:10]}`) against `{report['after'][:10]}`"
        f"{report['after'][40:]}, each measurement in a process of each tree, the two "
        f"alternating, {report['rounds']} rounds; medians.",
        "",
        "| measurement | unit | before | after | change | runs before | runs after |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for name, row in report["rows"].items():
        lines.append(
            f"| {name} | {row['unit']} | {row['median_before']:.4g} | {row['median_after']:.4g}"
            f" | {row['change']} | {', '.join(f'{v:.4g}' for v in row['before'])}"
            f" | {', '.join(f'{v:.4g}' for v in row['after'])} |"
        )
    loads = report["load_1m"]
    lines += [
        "",
        "1-minute load average before each run: before "
        + ", ".join(f"{v:.1f}" for v in loads["before"])
        + "; after "
        + ", ".join(f"{v:.1f}" for v in loads["after"])
        + " (2 cores: above 2 the machine was shared, and wall times carry that noise).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
