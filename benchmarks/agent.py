"""The node agent's costs: one /metrics scrape, one Allocate, its memory and its idle CPU; and,
against a real API server, the time from an XID to the scheduler withholding the device.

    python benchmarks/agent.py [--runs 3 --gpus 8 --pods 64 --scrapes 500 --cpu-window 90]
    python benchmarks/agent.py --xid --kubeconfig KUBECONFIG [--xid-repeats 5]

Each run starts ``gpufleet agent`` as its own process, as a DaemonSet runs it: its GPUs come
from a fake NVML (``--gpus`` idle H100s), it talks to the fake API server (tests/fakes) and
to a gRPC fake kubelet in this process (gpufleet.testing.fake_kubelet: real unix sockets, the
device plugin and PodResources APIs). ``--pods`` share pods are bound to the node, spread evenly
over the GPUs, and the fake kubelet admits each through the agent's GetPreferredAllocation and
Allocate; then the PodResources API lists them all, so every scrape attributes ``--pods`` pods.
Measured per run: the Allocate round trip (p50/p99 over the pods), ``--scrapes`` back-to-back
scrapes of /metrics over one keep-alive connection (p50/p99 of the round trip), the agent's
resident memory after all that (VmRSS, and its peak VmHWM), and its CPU time over
``--cpu-window`` seconds of scraping every ``--scrape-interval`` (15 s, Prometheus' common
interval) as a percentage of one core. The table gives the median of the runs; the 1-minute
load average before each run is recorded (the machine may be shared).

``--xid`` measures, on a real API server, from an XID injected into the fake NVML of an
in-process agent (tests/e2e/agent_node.py plays the node) to ``gpufleet scheduler`` (its own
process) reporting the device withheld (``gpufleet_gpu_unhealthy`` on its /metrics, read every
20 ms); then the device recovers and the next repeat starts. It reports each latency and the
median. No competitor runs here: the NVIDIA device plugin and dcgm-exporter need a real GPU and
driver (these machines have none). Results: benchmarks/results/agent.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from gpufleet.agent.kube.node_pods import pod_view
from gpufleet.agent.kube_bridge import bound_pod
from gpufleet.io.kube.annotations import GPU_INDEX_ANNOTATION, GPU_SHARE_ANNOTATION
from gpufleet.io.kube.binding_signature import signed_binding
from gpufleet.io.kube.resources import GPU_MILLI_ANNOTATION
from gpufleet.model.gpu import MILLI_PER_GPU, SHARE_RESOURCE
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.agent_builders import TEST_BINDING_KEY, write_binding_key
from gpufleet.testing.fake_kubelet import FakeKubelet, short_tmp_root

RESULTS = Path(__file__).resolve().parent / "results"
NODE = "bench-gpu-node"
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def fake_gpus(path: Path, gpus: int) -> Path:
    spec = {
        "node": NODE,
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "nvswitch": True,
        "devices": [
            {
                "product": "NVIDIA H100 80GB HBM3",
                "count": gpus,
                "utilization": {"gpu_util": 71, "fb_used_mib": 30000, "power_w": 420},
            }
        ],
    }
    path.write_text(yaml.safe_dump(spec))
    return path


def share_pod(i: int, gpus: int, pods: int) -> dict[str, Any]:
    per_gpu = -(-pods // gpus)
    milli = MILLI_PER_GPU // per_gpu
    annotations = {
        GPU_INDEX_ANNOTATION: str(i % gpus),
        GPU_SHARE_ANNOTATION: str(milli),
        GPU_MILLI_ANNOTATION: str(milli),
    }
    return ko.gpu_pod(
        f"share-{i:03d}",
        "bench",
        gpus=0,
        node=NODE,
        annotations=annotations,
        extra_limits={SHARE_RESOURCE: "1"},
    )


def signed_as_bound(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with its binding signed for its UID, as gpufleet's scheduler binds it."""
    metadata = pod["metadata"]
    metadata["annotations"] = signed_binding(
        TEST_BINDING_KEY, metadata["uid"], NODE, metadata["annotations"]
    )
    return pod


def proc_times(pid: int) -> float:
    """User plus system CPU seconds of ``pid`` and its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def proc_memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def one_run(args: argparse.Namespace, run: int) -> dict[str, float]:
    from tests.fakes.kube_api import FakeApiServer

    load = os.getloadavg()[0]
    root = short_tmp_root("gpufleet-bench-")
    work = Path(tempfile.mkdtemp(prefix="gpufleet-agent-bench-"))
    port = free_port()
    with FakeApiServer() as server:
        server.create(ko.gpu_node(NODE, gpus=0))
        kubeconfig = server.write_kubeconfig(work / "kubeconfig")
        kubelet = FakeKubelet(root).start()
        log = (work / "agent.log").open("wb")
        gpufleet = str(Path(sys.executable).parent / "gpufleet")
        command = [
            gpufleet, "agent",
            "--node-name", NODE,
            "--fake-gpus", str(fake_gpus(work / "gpus.yaml", args.gpus)),
            "--kubeconfig", str(kubeconfig),
            "--device-plugin-dir", str(kubelet.plugin_dir),
            "--pod-resources-socket", str(kubelet.pod_resources_socket),
            "--metrics-address", f"127.0.0.1:{port}",
            "--binding-key-file", str(write_binding_key(work / "binding.key")),
            "--log-level", "WARNING",
        ]  # fmt: skip
        agent = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            kubelet.wait_for(
                lambda: len(kubelet.devices(SHARE_RESOURCE)) == args.gpus * 10,
                timeout_s=60,
                what="the agent to register and list its share slots",
            )
            for i in range(args.pods):
                created = signed_as_bound(server.create(share_pod(i, args.gpus, args.pods)))
                server.update(created)
                pod = bound_pod(pod_view(created, i + 1))
                deadline = time.monotonic() + 10
                while True:  # until the agent's watch has the pod
                    result = kubelet.admit(pod)
                    if result.error is None:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"admitting {pod.key}: {result.error.message}")
                    time.sleep(0.02)
            allocate_ms = [s * 1000 for s in kubelet.allocate_seconds[-args.pods :]]
            url = f"http://127.0.0.1:{port}/metrics"
            scrape_ms: list[float] = []
            with httpx.Client(timeout=10) as client:
                text = client.get(url).text
                attributed = {
                    line.split('pod="')[1].split('"')[0]
                    for line in text.splitlines()
                    if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and 'pod="' in line
                }
                if len(attributed) != args.pods:
                    raise RuntimeError(f"{len(attributed)} pods attributed, not {args.pods}")
                for _ in range(args.scrapes):
                    started = time.perf_counter()
                    client.get(url).raise_for_status()
                    scrape_ms.append((time.perf_counter() - started) * 1000)
                cpu_before, wall_before = proc_times(agent.pid), time.monotonic()
                next_scrape = wall_before
                while time.monotonic() - wall_before < args.cpu_window:
                    if time.monotonic() >= next_scrape:
                        client.get(url).raise_for_status()
                        next_scrape += args.scrape_interval
                    time.sleep(0.2)
                cpu = proc_times(agent.pid) - cpu_before
                wall = time.monotonic() - wall_before
            rss, peak = proc_memory(agent.pid)
        finally:
            agent.terminate()
            agent.wait(timeout=30)
            kubelet.stop()
            log.close()
            shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    row = {
        "allocate_p50_ms": statistics.median(allocate_ms),
        "allocate_p99_ms": percentile(allocate_ms, 99),
        "scrape_p50_ms": statistics.median(scrape_ms),
        "scrape_p99_ms": percentile(scrape_ms, 99),
        "rss_mib": rss,
        "peak_rss_mib": peak,
        "cpu_percent": 100 * cpu / wall,
        "load_before": load,
    }
    print(f"run {run}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    return row


def xid_latencies(args: argparse.Namespace) -> list[float]:
    """Seconds from each injected XID to the scheduler's gauge naming the device."""
    from tests.e2e.agent_node import AgentNode
    from tests.e2e.kube_cluster import Cluster, stop, wait_for

    cluster = Cluster(args.kubeconfig)
    cluster.install_crds()
    cluster.create_namespace()
    node = AgentNode(cluster, f"xid-{cluster.run_id}", gpus=8).start()
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="gpufleet-xid-bench-"))
    command = [
        str(Path(sys.executable).parent / "gpufleet"), "scheduler",
        "--kubeconfig", args.kubeconfig,
        "--scheduler-name", cluster.scheduler_name,
        "--metrics-port", str(port),
        "--lease-namespace", cluster.namespace,
        "--identity", f"xid-bench-{os.getpid()}",
    ]  # fmt: skip
    scheduler = subprocess.Popen(
        command, stdout=(work / "scheduler.log").open("wb"), stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}/metrics"
    latencies: list[float] = []

    def withheld(gpu: int) -> bool:
        try:
            text = httpx.get(url, timeout=2).text
        except httpx.TransportError:
            return False
        wanted = f'node="{node.name}"'
        return any(
            line.startswith("gpufleet_gpu_unhealthy{") and wanted in line and f'gpu="{gpu}"' in line
            for line in text.splitlines()
        )

    try:

        def serving() -> bool:
            try:
                return httpx.get(url, timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(serving, 60, "scheduler metrics")
        time.sleep(2)  # the scheduler leads and has read the node
        for repeat in range(args.xid_repeats):
            gpu = repeat % 8
            started = time.perf_counter()
            node.nvml.inject_xid(gpu, 79)
            while not withheld(gpu):
                if time.perf_counter() - started > 30:
                    raise RuntimeError(f"GPU {gpu} not withheld within 30 s")
                time.sleep(0.02)
            latencies.append(time.perf_counter() - started)
            print(f"XID on GPU {gpu}: withheld after {latencies[-1]:.3f} s", flush=True)
            node.nvml.recover(gpu)
            wait_for(lambda g=gpu: not withheld(g), 30, f"GPU {gpu} back")  # type: ignore[misc]
    finally:
        stop(scheduler)
        node.stop()
        cluster.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--scrapes", type=int, default=500)
    parser.add_argument("--cpu-window", type=float, default=90.0, help="seconds")
    parser.add_argument("--scrape-interval", type=float, default=15.0, help="seconds")
    parser.add_argument("--xid", action="store_true", help="only the XID-to-scheduler latency")
    parser.add_argument("--kubeconfig", help="a real API server, for --xid")
    parser.add_argument("--xid-repeats", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    RESULTS.mkdir(exist_ok=True)
    machine = f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    path = RESULTS / "agent.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if args.xid:
        if not args.kubeconfig:
            parser.error("--xid needs --kubeconfig (a real API server)")
        latencies = xid_latencies(args)
        results["xid"] = {
            "machine": machine,
            "latencies_s": latencies,
            "median_s": statistics.median(latencies),
            "max_s": max(latencies),
        }
    else:
        runs = [one_run(args, i + 1) for i in range(args.runs)]
        results["agent"] = {
            "machine": machine,
            "settings": {
                k: getattr(args, k)
                for k in ("gpus", "pods", "scrapes", "cpu_window", "scrape_interval")
            },
            "runs": runs,
            "median": {k: statistics.median(r[k] for r in runs) for k in runs[0]},
        }
    path.write_text(json.dumps(results, indent=2) + "\n")
    write_markdown(results)


def write_markdown(results: dict[str, Any]) -> None:
    lines = [
        "# Node agent benchmark",
        "",
        "Made by `python benchmarks/agent.py` (see its docstring).",
        "",
    ]
    agent = results.get("agent")
    if agent:
        median = agent["median"]
        settings = agent["settings"]
        lines += [
            f"{agent['machine']}; {settings['gpus']} GPUs (fake NVML), {settings['pods']} pods "
            f"attributed; median of {len(agent['runs'])} runs.",
            "",
            "| measure | result | target |",
            "|---|---|---|",
            f"| /metrics scrape p99 | {median['scrape_p99_ms']:.1f} ms "
            f"(p50 {median['scrape_p50_ms']:.1f}) | ≤ 20 ms |",
            f"| Allocate p99 | {median['allocate_p99_ms']:.2f} ms "
            f"(p50 {median['allocate_p50_ms']:.2f}) | ≤ 5 ms |",
            f"| resident memory | {median['rss_mib']:.0f} MiB "
            f"(peak {median['peak_rss_mib']:.0f}) | ≤ 80 MB |",
            f"| CPU, scraped every {settings['scrape_interval']:.0f} s | "
            f"{median['cpu_percent']:.2f} % of a core | ≤ 1 % |",
            "",
        ]
    xid = results.get("xid")
    if xid:
        shown = ", ".join(f"{s:.2f}" for s in xid["latencies_s"])
        lines += [
            f"XID to the scheduler withholding the device, real API server ({xid['machine']}): "
            f"median {xid['median_s']:.2f} s, max {xid['max_s']:.2f} s (target ≤ 2 s); "
            f"each: {shown} s.",
            "",
        ]
    (RESULTS / "agent.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
