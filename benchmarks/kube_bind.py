"""Binding throughput and latency against a real API server: gpufleet and kube-scheduler.

    python benchmarks/kube_bind.py --kubeconfig KUBECONFIG \
        [--kube-scheduler PATH/TO/kube-scheduler --kube-scheduler-kubeconfig K] \
        [--nodes 1000 --pods 10000 --runs 3 --mode backlog]

Each run makes fresh fake GPU nodes (Node objects with ``--gpus-per-node`` ``nvidia.com/gpu``
and GPU Feature Discovery labels; no kubelets) and a fresh namespace, creates the pods (1 GPU,
1 CPU, 2 GiB each) from 16 threads, and runs the scheduler under test as its own process:
started once all pods are pending (``--mode backlog``, the default) or before they are created
(``--mode stream``). A watch records when each pod is bound. Reported per run: pods bound per
second (bound pods over the time from the first bind to the last) and the p50/p99 time from a
pod's creation (in backlog mode, from the scheduler's start) to its binding; the table gives the
median of the runs. kube-scheduler is measured the same way when its binary is given (it
schedules the pods that name its default profile, ``default-scheduler``). Results:
benchmarks/results/kube_bind.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from gpufleet.testing import kube_objects as ko

RESULTS = Path(__file__).resolve().parent / "results"


def _client(kubeconfig: str) -> Any:
    client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    client.configuration.connection_pool_maxsize = 32
    return client


def _make_nodes(core: Any, run_id: str, count: int, gpus: int) -> None:
    def one(i: int) -> None:
        node = ko.gpu_node(f"bench-{run_id}-{i:05d}", gpus=gpus, labels={"bench": run_id})
        status = node.pop("status")
        core.create_node(node)
        core.patch_node_status(node["metadata"]["name"], {"status": status})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))


class BindWatch:
    """When each pod of the namespace was first seen bound."""

    def __init__(self, core: Any, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        self.bound_at: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        version = "0"
        while not self.stop.is_set():
            try:
                stream = kubernetes.watch.Watch().stream(
                    self.core.list_namespaced_pod,
                    self.namespace,
                    resource_version=version,
                    timeout_seconds=30,
                )
                for event in stream:
                    raw = event["raw_object"]
                    version = raw["metadata"]["resourceVersion"]
                    if raw["spec"].get("nodeName"):
                        self.bound_at.setdefault(raw["metadata"]["name"], time.monotonic())
                    if self.stop.is_set():
                        return
            except ApiException as error:
                if error.status == 410:
                    version = "0"
            except Exception as error:  # a dropped stream: watch again from where it was
                print(f"watch: {error!r}", file=sys.stderr)
                time.sleep(0.2)


def _start_scheduler(which: str, args: argparse.Namespace, name: str, log: Path) -> Any:
    handle = log.open("wb")
    if which == "gpufleet":
        command = [
            str(Path(sys.executable).parent / "gpufleet"), "scheduler",
            "--kubeconfig", args.kubeconfig, "--scheduler-name", name, "--policy", args.policy,
            "--no-leader-elect", "--metrics-port", "0", "--log-level", "WARNING",
        ]  # fmt: skip
    else:
        command = [
            args.kube_scheduler, "--kubeconfig", args.kube_scheduler_kubeconfig,
            "--leader-elect=false", "--secure-port", "0",
            # the same client-side limit as gpufleet's (kube-scheduler's default is 50/100)
            "--kube-api-qps", "500", "--kube-api-burst", "1000",
        ]  # fmt: skip
    return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)


def one_run(which: str, args: argparse.Namespace) -> dict[str, float]:
    client = _client(args.kubeconfig)
    core = kubernetes.client.CoreV1Api(client)
    run_id = uuid.uuid4().hex[:6]
    namespace = f"bench-{run_id}"
    core.create_namespace({"metadata": {"name": namespace}})
    _make_nodes(core, run_id, args.nodes, args.gpus_per_node)
    scheduler_name = f"gpufleet-{run_id}" if which == "gpufleet" else "default-scheduler"
    log = Path(tempfile.gettempdir()) / f"kube_bind_{which}_{run_id}.log"
    watch = BindWatch(core, namespace)
    created_at: dict[str, float] = {}
    process = None
    if args.mode == "stream":
        process = _start_scheduler(which, args, scheduler_name, log)
        time.sleep(args.warmup)

    def create(i: int) -> None:
        pod = ko.gpu_pod(f"p{i:05d}", namespace, gpus=1, cpu="1", memory="2Gi")
        pod["spec"]["schedulerName"] = scheduler_name
        pod["spec"]["nodeSelector"] = {"bench": run_id}
        core.create_namespaced_pod(namespace, pod, _preload_content=False)
        created_at[pod["metadata"]["name"]] = time.monotonic()

    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, range(args.pods)))
    created_in = time.monotonic() - started
    if process is None:  # backlog: every pod waits before the scheduler starts
        process = _start_scheduler(which, args, scheduler_name, log)
        started = time.monotonic()
        created_at = dict.fromkeys(created_at, started)
    deadline = time.monotonic() + args.timeout
    while len(watch.bound_at) < args.pods and time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{which} exited early; see {log}")
        time.sleep(0.2)
    watch.stop.set()
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)
    bound = dict(watch.bound_at)
    latencies = sorted(bound[name] - created_at[name] for name in bound if name in created_at)
    first, last = min(bound.values()), max(bound.values())
    result = {
        "bound": len(bound),
        "pods_per_s": len(bound) / max(last - first, 1e-9),
        "p50_s": latencies[len(latencies) // 2],
        "p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "create_per_s": args.pods / created_in,
    }
    try:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        core.delete_collection_node(label_selector=f"bench={run_id}")
    except ApiException as error:
        print(f"clean-up failed: {error.reason}", file=sys.stderr)
    print(f"{which}: {json.dumps({k: round(v, 3) for k, v in result.items()})}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--kube-scheduler", help="a kube-scheduler binary to compare with")
    parser.add_argument("--kube-scheduler-kubeconfig", help="its kubeconfig (default: ours)")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--policy", default="default")
    parser.add_argument(
        "--mode",
        choices=("backlog", "stream"),
        default="backlog",
        help="backlog: all pods pending before the scheduler starts (latency from its start); "
        "stream: pods created while it runs (latency from each creation)",
    )
    parser.add_argument("--gpus-per-node", type=int, default=16)
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="seconds for the scheduler to sync"
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    args.kube_scheduler_kubeconfig = args.kube_scheduler_kubeconfig or args.kubeconfig
    schedulers = ["gpufleet"] + (["kube-scheduler"] if args.kube_scheduler else [])
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in schedulers}
    for _ in range(args.runs):
        for which in schedulers:
            runs[which].append(one_run(which, args))
    summary = {
        which: {
            key: statistics.median(r[key] for r in results)
            for key in ("pods_per_s", "p50_s", "p99_s", "create_per_s", "bound")
        }
        for which, results in runs.items()
    }
    version = kubernetes.client.VersionApi(_client(args.kubeconfig)).get_code().git_version
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kube_bind.json").write_text(
        json.dumps({"args": vars(args), "runs": runs, "median": summary}, indent=2) + "\n"
    )
    compare = " --kube-scheduler BIN" if args.kube_scheduler else ""
    lines = [
        "# Binding against a real API server",
        "",
        f"`python benchmarks/kube_bind.py --kubeconfig K{compare} --nodes {args.nodes} "
        f"--pods {args.pods} --runs {args.runs} --mode {args.mode}`",
        "",
        f"kube-apiserver {version} with etcd on the same machine ({platform.machine()}, "
        f"{_cores()} cores), fake GPU nodes ({args.gpus_per_node} GPUs each, no kubelets), pods "
        "of 1 GPU. "
        + (
            "All pods are pending before the scheduler starts; latency counts from its start."
            if args.mode == "backlog"
            else "Pods are created from 16 threads while the scheduler runs."
        )
        + " Median of the runs.",
        "",
        "| scheduler | pods bound/s | p50 creation→bind | p99 creation→bind | pods created/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for which, row in summary.items():
        lines.append(
            f"| {which} | {row['pods_per_s']:.0f} | {row['p50_s']:.2f} s | {row['p99_s']:.2f} s "
            f"| {row['create_per_s']:.0f} |"
        )
    lines += ["", "Target: at least 300 pods/s, and never slower than kube-scheduler.", ""]
    (RESULTS / "kube_bind.md").write_text("\n".join(lines))
    print("\n".join(lines))


def _cores() -> int:
    return os.cpu_count() or 0


if __name__ == "__main__":
    main()
