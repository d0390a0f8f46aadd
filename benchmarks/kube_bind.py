"""Binding throughput and latency against a real API server: gpufleet and kube-scheduler.

    python benchmarks/kube_bind.py --kubeconfig KUBECONFIG \
        [--kube-scheduler PATH/TO/kube-scheduler --kube-scheduler-kubeconfig K] \
        [--nodes 1000 --pods 10000 --runs 3 --mode backlog --kube-api-qps 500 5000]

Each run makes fresh fake GPU nodes (Node objects with ``--gpus-per-node`` ``nvidia.com/gpu``
and GPU Feature Discovery labels; no kubelets) and a fresh namespace, creates the pods (1 GPU,
1 CPU, 2 GiB each) from 16 threads, and runs the scheduler under test as its own process:
started once all pods are pending (``--mode backlog``, the default) or before they are created
(``--mode stream``). A watch records when each pod is bound. Reported per run: pods bound per
second (bound pods over the time from the first bind to the last) and the p50/p99 time from a
pod's creation (in backlog mode, from the scheduler's start) to its binding, the time to the
first bind, and the 1-minute load average before the run (the machine may be shared); the table
gives the median of the runs. Both schedulers get the same client-side rate limit, once per
value of ``--kube-api-qps`` (bursts of twice that; by default 500 and 5,000 requests/s: at
500 both are capped by the limit). kube-scheduler is measured the same way when its binary is
given (it schedules the pods that name its default profile, ``default-scheduler``); the two
schedulers' runs alternate. Results: benchmarks/results/kube_bind.md and .json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from gpufleet.testing import kube_objects as ko
from gpufleet.testing.fake_nodes import register_fake_node

RESULTS = Path(__file__).resolve().parent / "results"


def _client(kubeconfig: str) -> Any:
    client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    client.configuration.connection_pool_maxsize = 32
    return client


def _make_nodes(core: Any, run_id: str, count: int, gpus: int) -> None:
    def one(i: int) -> None:
        node = ko.gpu_node(f"bench-{run_id}-{i:05d}", gpus=gpus, labels={"bench": run_id})
        register_fake_node(core, node)

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
                # Raw JSON lines, not the client's model objects: deserialising 10,000 pods
                # would take the CPU the schedulers under test share with this process.
                response = self.core.list_namespaced_pod(
                    self.namespace,
                    watch=True,
                    resource_version=version,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                )
                try:
                    for line in _lines(response):
                        event = json.loads(line)
                        raw = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            version = "0" if raw.get("code") == 410 else version
                            break
                        version = raw["metadata"]["resourceVersion"]
                        if (raw.get("spec") or {}).get("nodeName"):
                            self.bound_at.setdefault(raw["metadata"]["name"], time.monotonic())
                        if self.stop.is_set():
                            return
                finally:
                    response.release_conn()
            except ApiException as error:
                if error.status == 410:
                    version = "0"
            except Exception as error:  # a dropped stream: watch again from where it was
                print(f"watch: {error!r}", file=sys.stderr)
                time.sleep(0.2)


def _lines(response: Any) -> Iterator[bytes]:
    """Whole lines of a streamed watch response (a chunk may end mid-line)."""
    rest = b""
    for chunk in response.stream(amt=None, decode_content=False):
        *lines, rest = (rest + chunk).split(b"\n")
        yield from (line for line in lines if line.strip())
    if rest.strip():
        yield rest


def _own_queue(core: Any, namespace: str) -> None:
    """A Queue (no quota) whose namespace is the run's, where gpufleet's CRDs are served: once
    any Queue exists, a pod must name one or be in a namespace a Queue lists (kube-scheduler
    ignores Queues, so its runs are unchanged)."""
    custom = kubernetes.client.CustomObjectsApi(core.api_client)
    try:
        custom.create_cluster_custom_object(
            "gpufleet.dev", "v1alpha1", "queues", ko.queue(namespace, namespaces=[namespace])
        )
    except ApiException as error:
        if error.status != 404:  # 404: no Queue CRD, so no Queue anywhere
            raise


def _binding_key(directory: Path) -> Path:
    """A fresh key for the scheduler to sign device bindings with (``openssl rand -hex 32``)."""
    key = directory / f"kube_bind_binding_key_{os.getpid()}"
    if not key.exists():
        key.write_text(os.urandom(32).hex() + "\n")
        key.chmod(0o600)
    return key


def _start_scheduler(
    which: str, args: argparse.Namespace, name: str, log: Path, qps: float, burst: int
) -> Any:
    handle = log.open("wb")
    if which == "gpufleet":
        command = [
            str(Path(sys.executable).parent / "gpufleet"), "scheduler",
            "--kubeconfig", args.kubeconfig, "--scheduler-name", name, "--policy", args.policy,
            "--no-leader-elect", "--metrics-port", "0", "--log-level", "WARNING",
            "--kube-api-qps", str(qps), "--kube-api-burst", str(burst),
            # Signed device bindings, as a real installation runs (the signing is measured).
            "--binding-key-file", str(_binding_key(log.parent)),
        ]  # fmt: skip
    else:
        command = [
            args.kube_scheduler, "--kubeconfig", args.kube_scheduler_kubeconfig,
            "--leader-elect=false", "--secure-port", "0",
            # the same client-side limit as gpufleet's (kube-scheduler's default is 50/100)
            "--kube-api-qps", str(qps), "--kube-api-burst", str(burst),
        ]  # fmt: skip
    return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)


def one_run(which: str, args: argparse.Namespace, qps: float, burst: int) -> dict[str, float]:
    core = kubernetes.client.CoreV1Api(_client(args.kubeconfig))
    run_id = uuid.uuid4().hex[:6]
    try:
        return _measure(which, args, core, run_id, qps, burst)
    finally:
        clean_up(core, run_id)


def _measure(
    which: str, args: argparse.Namespace, core: Any, run_id: str, qps: float, burst: int
) -> dict[str, float]:
    load_before = os.getloadavg()[0]
    namespace = f"bench-{run_id}"
    core.create_namespace({"metadata": {"name": namespace}})
    _own_queue(core, namespace)
    _make_nodes(core, run_id, args.nodes, args.gpus_per_node)
    scheduler_name = f"gpufleet-{run_id}" if which == "gpufleet" else "default-scheduler"
    log = Path(tempfile.gettempdir()) / f"kube_bind_{which}_{run_id}.log"
    watch = BindWatch(core, namespace)
    created_at: dict[str, float] = {}
    process = None
    if args.mode == "stream":
        process = _start_scheduler(which, args, scheduler_name, log, qps, burst)
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
        process = _start_scheduler(which, args, scheduler_name, log, qps, burst)
        started = time.monotonic()
        created_at = dict.fromkeys(created_at, started)
    deadline = time.monotonic() + args.timeout
    try:
        while len(watch.bound_at) < args.pods and time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"{which} exited early; see {log}")
            time.sleep(0.2)
    finally:
        watch.stop.set()
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (children.ru_utime - children_before.ru_utime) + (
        children.ru_stime - children_before.ru_stime
    )
    bound = dict(watch.bound_at)
    latencies = sorted(bound[name] - created_at[name] for name in bound if name in created_at)
    first, last = min(bound.values()), max(bound.values())
    result = {
        "bound": len(bound),
        "pods_per_s": len(bound) / max(last - first, 1e-9),
        "p50_s": latencies[len(latencies) // 2],
        "p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "first_bind_s": first - started,
        # CPU the scheduler process used, start to stop: unlike the rates, not a matter of
        # what else the machine runs.
        "cpu_ms_per_pod": 1000 * cpu_s / max(len(bound), 1),
        "create_per_s": args.pods / created_in,
        "load_1m_before": load_before,
        "load_1m_after": os.getloadavg()[0],
    }
    print(f"{which}: {json.dumps({k: round(v, 3) for k, v in result.items()})}", flush=True)
    return result


def clean_up(core: Any, run_id: str, attempts: int = 10) -> None:
    """Delete a run's nodes and pods. Left behind, they would weigh on every later run (both
    schedulers list every pod and node), and deleting 10,000 pods at once can outlast the API
    server's request timeout: try again until none is left. The namespace stays (Terminating
    for ever without a controller manager), empty."""
    namespace = f"bench-{run_id}"
    custom = kubernetes.client.CustomObjectsApi(core.api_client)
    with contextlib.suppress(ApiException):
        custom.delete_cluster_custom_object("gpufleet.dev", "v1alpha1", "queues", namespace)
    for _ in range(attempts):
        try:
            core.delete_collection_node(label_selector=f"bench={run_id}")
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        except ApiException as error:
            print(f"clean-up of {run_id}: {error.status} {error.reason}; again", file=sys.stderr)
        left = json.loads(core.list_namespaced_pod(namespace, limit=1, _preload_content=False).data)
        nodes = core.list_node(label_selector=f"bench={run_id}", limit=1, _preload_content=False)
        if not left["items"] and not json.loads(nodes.data)["items"]:
            return
    print(f"clean-up of {run_id}: gave up; remove bench-{run_id} by hand", file=sys.stderr)


SUMMARY_KEYS = (
    "pods_per_s",
    "p50_s",
    "p99_s",
    "first_bind_s",
    "cpu_ms_per_pod",
    "create_per_s",
    "bound",
    "load_1m_before",
)


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
        "--kube-api-qps",
        type=float,
        nargs="+",
        default=[500.0, 5000.0],
        help="client-side limits given to both schedulers, one set of runs each (each "
        "scheduler has a second limit of the same size for Events); bursts are twice the qps",
    )
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="seconds for the scheduler to sync"
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    args.kube_scheduler_kubeconfig = args.kube_scheduler_kubeconfig or args.kubeconfig
    schedulers = ["gpufleet"] + (["kube-scheduler"] if args.kube_scheduler else [])
    limits = [(qps, int(2 * qps)) for qps in args.kube_api_qps]
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        f"{qps:g}": {s: [] for s in schedulers} for qps, _ in limits
    }
    total = len(limits) * args.runs * len(schedulers)
    done = 0
    for qps, burst in limits:
        for _ in range(args.runs):
            for which in schedulers:  # alternated, so that both see the same machine
                done += 1
                print(f"[{done}/{total}] {which} at {qps:g} qps", flush=True)
                runs[f"{qps:g}"][which].append(one_run(which, args, qps, burst))
    summary = {
        limit: {
            which: {key: statistics.median(r[key] for r in results) for key in SUMMARY_KEYS}
            for which, results in by_scheduler.items()
        }
        for limit, by_scheduler in runs.items()
    }
    version = kubernetes.client.VersionApi(_client(args.kubeconfig)).get_code().git_version
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kube_bind.json").write_text(
        json.dumps({"args": vars(args), "runs": runs, "median": summary}, indent=2) + "\n"
    )
    (RESULTS / "kube_bind.md").write_text(_report(args, version, runs, summary))
    print((RESULTS / "kube_bind.md").read_text())


def _report(
    args: argparse.Namespace,
    version: str,
    runs: dict[str, dict[str, list[dict[str, float]]]],
    summary: dict[str, dict[str, dict[str, float]]],
) -> str:
    compare = " --kube-scheduler BIN" if args.kube_scheduler else ""
    limits = " ".join(runs)
    lines = [
        "# Binding against a real API server",
        "",
        f"`python benchmarks/kube_bind.py --kubeconfig K{compare} --nodes {args.nodes} "
        f"--pods {args.pods} --runs {args.runs} --mode {args.mode} --kube-api-qps {limits}`",
        "",
        f"kube-apiserver {version} with etcd on the same machine ({platform.machine()}, "
        f"{_cores()} cores), fake GPU nodes ({args.gpus_per_node} GPUs each, no kubelets), pods "
        "of 1 GPU. "
        + (
            "All pods are pending before the scheduler starts; latency and the first bind "
            "count from the start of its process."
            if args.mode == "backlog"
            else "Pods are created from 16 threads while the scheduler runs."
        )
        + " Median of the runs; the two schedulers' runs alternate. Both run with the same "
        "client-side rate limit (`--kube-api-qps`, bursts of twice that), plus a second limit "
        "of the same size for Events (kube-scheduler's separate event client; gpufleet's "
        "reporter), and both write one `Scheduled` Event per bound pod. The machine may be "
        "shared: the 1-minute load average before each run is in the last column; the "
        "scheduler's CPU time per pod bound (its process, start to stop, user and system) does "
        "not depend on it.",
    ]
    for limit, by_scheduler in summary.items():
        lines += [
            "",
            f"## Client limit {limit} requests/s",
            "",
            "| scheduler | pods bound/s | p50 start→bind | p99 start→bind | first bind "
            "| scheduler CPU/pod | load |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for which, row in by_scheduler.items():
            lines.append(
                f"| {which} | {row['pods_per_s']:.0f} | {row['p50_s']:.2f} s "
                f"| {row['p99_s']:.2f} s | {row['first_bind_s']:.2f} s "
                f"| {row['cpu_ms_per_pod']:.2f} ms | {row['load_1m_before']:.1f} |"
            )
        lines += ["", "Each run:", "", "| scheduler | run | pods bound/s | p99 | first bind "
                  "| CPU/pod | load |", "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for which, results in runs[limit].items():
            for i, r in enumerate(results, 1):
                lines.append(
                    f"| {which} | {i} | {r['pods_per_s']:.0f} | {r['p99_s']:.2f} s "
                    f"| {r['first_bind_s']:.2f} s | {r['cpu_ms_per_pod']:.2f} ms "
                    f"| {r['load_1m_before']:.1f} |"
                )
    lines += [
        "",
        "Targets (issue 11): the first bind within 1 s of the start with 10,000 pods pending on "
        "1,000 nodes; at least 1,100 pods/s at 5,000 requests/s; never slower than "
        "kube-scheduler.",
        "",
    ]
    return "\n".join(lines)


def _cores() -> int:
    return os.cpu_count() or 0


if __name__ == "__main__":
    main()
