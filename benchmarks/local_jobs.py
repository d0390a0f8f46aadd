"""1,000 short jobs through one queue of ``serve --local`` (issue 16: none lost or run twice).

    python benchmarks/local_jobs.py [--jobs 1000] [--idle-jobs 50] [--cgroups]

The plane of ``gpufleet serve --local`` (:class:`~gpufleet.service.local_plane.
LocalControlPlane`: its loop in its thread, its SQLite store, the API's submit path without
HTTP) over eight fake GPUs (the fake NVML). Two phases:

* burst: ``--jobs`` Pods of 1 GPU each, all in the queue ``jobs`` (8 GPUs), submitted one after
  another as fast as the plane accepts them; each runs ``/bin/date +%s.%N`` (it prints the wall
  time as it is executed, then exits 0). Then: every workload's stored state must be
  Succeeded, and each job must have exactly one run (its runs counted from the run records of
  the state directory, ``runs/<namespace>_<name>_<attempt>``, each with an exit record of exit
  code 0). Reported: total time from the first submit to the last end, throughput, and the
  submit-to-start time (queueing included: 8 run at once).
* idle: ``--idle-jobs`` jobs one at a time (each ends before the next is submitted): submit
  to start on an idle machine, the issue's target (<= 100 ms).

``--cgroups``: each run in a cgroup of its own with its limits, as ``serve --local`` runs them
where it may write the machine's cgroups (root; the hierarchy ``serve`` would use, under a
parent of the benchmark's own), so that what the cgroups cost shows beside the plain run.

The machine, its CPUs and its load before each phase are recorded. Results:
benchmarks/results/local_jobs.md and .json (``--cgroups``: local_jobs_cgroups.md and .json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from gpufleet.backends.local.cgroups import Hierarchy, detect
from gpufleet.backends.local.machine import LocalMachine
from gpufleet.backends.local.node import machine_node
from gpufleet.backends.local.run_state import EXIT_FILE, read_exit
from gpufleet.devices.discovery import discover
from gpufleet.devices.fake import FakeNvml
from gpufleet.devices.fake_spec import parse_fake_spec
from gpufleet.scheduling.admission import AdmissionConfig
from gpufleet.service.auth import Principal
from gpufleet.service.local_plane import LocalControlPlane
from gpufleet.service.local_users import TenantUsers
from gpufleet.service.plane_book import QUEUE, ServeOptions
from gpufleet.service.store import Store

RESULTS = Path(__file__).resolve().parent / "results"
EIGHT_GPUS = {"node": "bench", "devices": [{"product": "NVIDIA H100 80GB HBM3", "count": 8}]}
QUEUE_DOC = {
    "apiVersion": "gpufleet.dev/v1alpha1",
    "kind": "Queue",
    "metadata": {"name": "jobs"},
    "spec": {"quota": {"nvidia.com/gpu": 8}, "namespaces": ["bench"]},
}
ADMIN = Principal("bench", "admin")


def job_body(name: str) -> bytes:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "labels": {"gpufleet.dev/queue": "jobs"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "command": ["/bin/date", "+%s.%N"],
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                }
            ]
        },
    }
    return yaml.safe_dump(pod).encode()


def open_plane(root: Path, cgroups: Hierarchy | None = None) -> LocalControlPlane:
    nvml = FakeNvml(parse_fake_spec(EIGHT_GPUS), clock=lambda: 0)
    nvml.nvmlInit()
    inventory = discover(nvml)
    store = Store(root / "plane.db")
    store.put_object(QUEUE, "jobs", QUEUE_DOC)
    node = machine_node(inventory, "bench", 16_000, 65_536)
    machine = LocalMachine(inventory, root / "state", node=node, allow_root=True, cgroups=cgroups)
    options = ServeOptions(admission=AdmissionConfig(min_runtime=0.0))
    return LocalControlPlane(store, machine, options, TenantUsers(allow_root=True))


def wait_all_ended(plane: LocalControlPlane, keys: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with plane.lock:
            left = sum(plane.records[k].active for k in keys)
        if not left:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{left} jobs still not ended after {timeout_s} s")
        time.sleep(0.02)


def started_at(plane: LocalControlPlane, name: str) -> float:
    run = f"bench_{name}_1"
    return float(plane.machine.supervisor.log_path(run).read_text().split()[0])


def run_phase(
    plane: LocalControlPlane, prefix: str, jobs: int, one_at_a_time: bool
) -> dict[str, Any]:
    load = os.getloadavg()[0]
    submitted: dict[str, float] = {}
    keys = []
    first = time.time()
    for i in range(jobs):
        name = f"{prefix}-{i}"
        submitted[name] = time.time()
        (record,) = plane.submit(ADMIN, job_body(name), "application/yaml")
        keys.append(record.key)
        if one_at_a_time:
            wait_all_ended(plane, [record.key], 30)
    wait_all_ended(plane, keys, 600)
    done = time.time()
    with plane.lock:
        states = Counter(plane.records[k].state.value for k in keys)
        stored = Counter(w.state for w in plane.store.workloads() if w.key in set(keys))
    runs: Counter[str] = Counter()
    exits: Counter[str] = Counter()
    for run_dir in plane.machine.supervisor.runs_dir.iterdir():
        _namespace, name, _attempt = run_dir.name.rsplit("_", 2)
        if name.startswith(f"{prefix}-"):
            runs[name] += 1
            ended = read_exit(run_dir / EXIT_FILE)
            exits["missing" if ended is None else ended.describe()] += 1
    total = done - first
    latencies = [started_at(plane, n) - submitted[n] for n in submitted]
    return {
        "jobs": jobs,
        "load_1min_before": round(load, 2),
        "states": dict(states),
        "stored_states": dict(stored),
        "jobs_with_one_run": sum(1 for n in submitted if runs[n] == 1),
        "jobs_with_no_run": sum(1 for n in submitted if runs[n] == 0),
        "jobs_with_several_runs": sum(1 for n in submitted if runs[n] > 1),
        "exits": dict(exits),
        "total_s": round(total, 2),
        "jobs_per_s": round(jobs / total, 1),
        "submit_to_start_ms": summary(latencies),
    }


def summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(s * 1000 for s in seconds)
    return {
        "median": round(statistics.median(ordered), 1),
        "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
        "max": round(ordered[-1], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--idle-jobs", type=int, default=50)
    parser.add_argument("--cgroups", action="store_true", help="each run in a cgroup")
    args = parser.parse_args()
    cgroups = None
    if args.cgroups:
        found = detect(parent=f"gpufleet-bench-{os.getpid()}")
        if isinstance(found, str):
            raise SystemExit(f"--cgroups: no cgroup hierarchy can be written here: {found}")
        cgroups = found
    root = Path(tempfile.mkdtemp(prefix="gpufleet-jobs-"))
    plane = open_plane(root, cgroups)
    plane.start()
    try:
        idle = run_phase(plane, "idle", args.idle_jobs, one_at_a_time=True)
        burst = run_phase(plane, "burst", args.jobs, one_at_a_time=False)
    finally:
        plane.stop()
        plane.store.close()
        plane.machine.close()
        shutil.rmtree(root, ignore_errors=True)
    results = {
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "cgroups": cgroups.describe() if cgroups is not None else None,
        "burst": burst,
        "idle": idle,
    }
    RESULTS.mkdir(exist_ok=True)
    stem = "local_jobs_cgroups" if cgroups is not None else "local_jobs"
    (RESULTS / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    ok = burst["jobs_with_one_run"] == args.jobs and burst["stored_states"] == {
        "Succeeded": args.jobs
    }
    b, i = burst["submit_to_start_ms"], idle["submit_to_start_ms"]
    lines = [
        "# serve --local: 1,000 short jobs through one queue"
        + (", each run in a cgroup" if cgroups is not None else ""),
        "",
        f"`python benchmarks/local_jobs.py --jobs {args.jobs} --idle-jobs {args.idle_jobs}"
        + (" --cgroups" if cgroups is not None else "")
        + f"` on {results['machine']}"
        + (f", runs in {cgroups.describe()} cgroups with their limits" if cgroups else "")
        + ": the plane of `serve --local` (loop thread, SQLite store, the "
        "API's submit path without HTTP) on eight fake GPUs; each job a 1-GPU Pod running "
        "`/bin/date +%s.%N` in the queue `jobs` (8 GPUs).",
        "",
        f"Burst ({args.jobs} jobs submitted back to back, each submit waiting for the plane's "
        f"lock while a turn runs, so the loop paces the submitter; 1-minute load before: "
        f"{burst['load_1min_before']}):",
        "",
        f"- stored states: {burst['stored_states']}; exits: {burst['exits']}",
        f"- runs per job (from the run records): {burst['jobs_with_one_run']} with exactly one, "
        f"{burst['jobs_with_no_run']} with none, {burst['jobs_with_several_runs']} with several "
        f"({'no lost or doubled run' if ok else 'LOST OR DOUBLED RUNS'})",
        f"- total {burst['total_s']} s from the first submit to the last end recorded: "
        f"{burst['jobs_per_s']} jobs/s",
        f"- submit to start (queueing behind 8 GPUs included): median {b['median']} ms, "
        f"p95 {b['p95']} ms, max {b['max']} ms",
        "",
        f"Idle machine ({args.idle_jobs} jobs one at a time; 1-minute load before: "
        f"{idle['load_1min_before']}): submit to start median {i['median']} ms, p95 {i['p95']} "
        f"ms, max {i['max']} ms (target: <= 100 ms).",
        "",
    ]
    (RESULTS / f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
