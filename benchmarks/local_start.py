"""From submit to process start on an idle local machine (issue 16's target: <= 100 ms).

    python benchmarks/local_start.py [--jobs 30] [--real-gpus] [--uid UID] [--results DIR]

A :class:`~gpufleet.backends.local.machine.LocalMachine` over eight fake GPUs (the fake NVML;
``--real-gpus``: this machine's, through NVML) and a scheduling core, joined by the control
loop as ``serve --local`` joins them. One job at a time (1 GPU; its command
``/bin/date +%s.%N``, which prints the wall time as soon as it is executed): the time from
``submit`` to the time it printed, and the part of it until the core's turn was done and the
run's shim spawned (the rest is the shim's Python start and the exec). Each job ends before
the next is submitted (an idle machine). Median and 90th percentile over the jobs; the
machine, its GPUs and its load are recorded. Results: benchmarks/results/local_start.md and
.json (``--real-gpus``: local_start_gpu.md and .json; ``--results``: another directory).

With ``--uid`` (as root), each job runs as that uid with its processes hidden from other users'
(the shim's mount namespace and ``/proc``, as ``serve --local --run-as`` does): the cost of
hiding. Results: local_start_hidden.md and .json.
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
from pathlib import Path
from typing import Any

import yaml

from gpufleet.backends.local.machine import LocalMachine
from gpufleet.backends.local.node import machine_node
from gpufleet.control.loop import ControlLoop, sync
from gpufleet.devices.discovery import discover
from gpufleet.devices.fake import FakeNvml
from gpufleet.devices.fake_spec import parse_fake_spec
from gpufleet.devices.nvml import load_nvml
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.processes import ProcessSpec
from gpufleet.testing.builders import make_queue, make_workload
from gpufleet.testing.fakes import make_core

RESULTS = Path(__file__).resolve().parent / "results"
EIGHT_GPUS = {
    "node": "bench",
    "devices": [{"product": "NVIDIA H100 80GB HBM3", "count": 8}],
}


def machine_gpus(real: bool) -> NodeInventory:
    """This machine's GPUs through NVML (``real``), else eight fake H100s."""
    if real:
        nvml = load_nvml()
        try:
            return discover(nvml)
        finally:
            nvml.nvmlShutdown()
    nvml = FakeNvml(parse_fake_spec(yaml.safe_load(yaml.safe_dump(EIGHT_GPUS))), clock=lambda: 0)
    nvml.nvmlInit()
    return discover(nvml)


def measure(jobs: int, inventory: NodeInventory, uid: int | None = None) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="gpufleet-bench-"))
    state.chmod(0o755)  # a job's uid reaches its working directory
    node = machine_node(inventory, "bench", 16_000, 65_536)
    machine = LocalMachine(inventory, state, node=node, allow_root=True)
    core = make_core([node], [make_queue("default")])
    loop = ControlLoop(machine, lambda: core)
    sync(core, machine.list_state())
    root = machine.tenant_root("default", uid, uid)
    totals: list[float] = []
    to_bind: list[float] = []
    try:
        for i in range(jobs):
            workload = make_workload(f"job-{i}", gpus=1)
            spec = ProcessSpec(
                ("date", "+%s.%N"),
                "/bin/date",
                {"PATH": "/usr/bin:/bin"},
                str(root),
                uid=uid,
                gid=uid,
            )
            submitted = time.time()
            machine.submit(workload, {workload.pods[0].key: spec})
            bound_at: float | None = None
            run: str | None = None
            while True:
                timer = loop.turn()
                if run is None:
                    run = machine.run_of(workload.pods[0].key)
                    bound_at = time.time() if run is not None else None
                if run is not None and not machine.supervisor.running:
                    break  # its end was taken in
                machine.wait(min(timer, machine.clock.now() + 0.05))
            assert run is not None
            assert bound_at is not None
            printed = float(machine.supervisor.log_path(run).read_text().split()[0])
            totals.append(printed - submitted)
            to_bind.append(bound_at - submitted)
    finally:
        machine.close()
        shutil.rmtree(state, ignore_errors=True)
    return {
        "jobs": jobs,
        "submit_to_start_ms": summary(totals),
        "submit_to_bind_ms": summary(to_bind),
    }


def summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(s * 1000 for s in seconds)
    return {
        "median": round(statistics.median(ordered), 1),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "max": round(ordered[-1], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument(
        "--real-gpus", action="store_true", help="this machine's GPUs (NVML), not fake ones"
    )
    parser.add_argument(
        "--uid", type=int, default=None, help="as root: run each job as this uid, hidden"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="where results go")
    args = parser.parse_args()
    if args.uid is not None and os.geteuid() != 0:
        parser.error("--uid needs root (only root runs processes as another user)")
    inventory = machine_gpus(args.real_gpus)
    products = sorted({d.product for d in inventory.devices})
    gpus = f"{len(inventory.devices)} {'/'.join(products)}" + (
        f" (driver {inventory.driver_version})" if args.real_gpus else " (fake NVML)"
    )
    load = os.getloadavg()[0]
    results = {
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "gpus": gpus,
        "load_1min_before": round(load, 2),
        "uid": args.uid,
        **measure(args.jobs, inventory, args.uid),
    }
    name = "local_start_gpu" if args.real_gpus else "local_start"
    if args.uid is not None:
        name = "local_start_hidden"
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    start, bind = results["submit_to_start_ms"], results["submit_to_bind_ms"]
    command = f"python benchmarks/local_start.py --jobs {args.jobs}"
    command += " --real-gpus" if args.real_gpus else ""
    as_whom = ""
    if args.uid is not None:
        command += f" --uid {args.uid}"
        as_whom = (
            f", run as uid {args.uid} with other users' processes hidden (a mount namespace "
            "and a /proc of its own per run)"
        )
    lines = [
        "# Local machine: submit to process start" + (" (hidden runs)" if as_whom else ""),
        "",
        f"`{command}` on {results['machine']} "
        f"(1-minute load {results['load_1min_before']} before the run); one 1-GPU job at a "
        f"time on {gpus}, its command `/bin/date +%s.%N`{as_whom}.",
        "",
        "| from submit to | median (ms) | p90 (ms) | max (ms) |",
        "|---|---|---|---|",
        f"| the core's turn done, the shim spawned | {bind['median']} | {bind['p90']} "
        f"| {bind['max']} |",
        f"| the process printing | {start['median']} | {start['p90']} | {start['max']} |",
        "",
        "Target (issue 16): <= 100 ms from submit to process start on an idle machine.",
        "",
    ]
    (args.results / f"{name}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
