"""Fair sharing over time on the multi-tenant replay: what a usage half-life changes.

    python benchmarks/fair_share.py [--hours 6] [--node-fraction 0.1] [--seed 0]
                                    [--half-lives 1h,1d] [--skip-trace] [--racks 8]

The scenarios of benchmarks/multitenant.py (``alibaba-multitenant`` from the Alibaba 2023 trace
when it is found, and the synthetic ``large-gangs``), each replayed on the embedded simulated
cluster with the ``default`` policy under the same queues, quotas and priorities: once with
fair sharing over time off (the default profile) and once per half-life with the profile's
``fairSharing: {usageHalfLife: ...}`` on. Per run and queue: the GPU-hours it used as a share
of all used, beside its nominal quota's share of all nominal quota (its entitlement), the
GPU-hours used against those it was entitled to, and its queueing delay p50 and p95.

Writes benchmarks/results/fair_share.md and .json.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpufleet.backends.sim.results import TenancyRun
from gpufleet.backends.sim.run import run_workloads
from gpufleet.backends.sim.scenarios import (
    TenantScenario,
    from_trace,
    large_gangs,
    sample_nodes,
)
from gpufleet.cli.inputs import parse_duration
from gpufleet.io.cluster_traces.alibaba import read_nodes, read_pods
from gpufleet.io.cluster_traces.datasets import NODES_FILE, PODS_FILE, find_alibaba_trace
from gpufleet.model import Node
from gpufleet.model.times import format_duration
from gpufleet.report.summary import write_json
from gpufleet.scheduling.profile import FairSharing, Profile

RESULTS = Path(__file__).resolve().parent / "results"
POLICY = "default"


@dataclass(frozen=True, slots=True)
class Run:
    """One replay: its label (``off`` or the half-life), the profile's half-life in seconds
    (None: off), what it gave, and how long it took."""

    label: str
    half_life: float | None
    result: TenancyRun
    seconds: float


def replay(
    nodes: list[Node], scenario: TenantScenario, seed: int, half_lives: list[tuple[str, float]]
) -> list[Run]:
    runs = []
    settings: list[tuple[str, float | None]] = [("off", None), *half_lives]
    for label, half_life in settings:
        profile = Profile(fair_sharing=FairSharing(half_life)) if half_life else Profile()
        print(f"  {label}: {len(scenario.workloads):,} workloads ...", flush=True)
        started = time.perf_counter()
        result = run_workloads(
            nodes, scenario.workloads, POLICY, seed, scenario.queues, profile=profile
        )
        seconds = time.perf_counter() - started
        print(f"    {seconds:.0f} s", flush=True)
        runs.append(Run(label, half_life, result, seconds))
    return runs


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue of one run (GPU-hours; delays in seconds; shares as fractions)."""

    run: str
    queue: str
    nominal_gpus: float
    workloads: int
    gpu_hours_used: float
    gpu_hours_entitled: float
    used_share: float
    entitled_share: float
    delay_p50: float
    delay_p95: float
    preemptions: int


def queue_rows(run: Run) -> list[QueueRow]:
    """Per queue with workloads: used and entitled GPU-hours, their shares, and delays."""
    stats = {n: q for n, q in run.result.tenancy.queues.items() if q.workloads}
    used_total = sum(q.gpu_hours_used for q in stats.values()) or 1.0
    nominal_total = sum(q.nominal_gpus for q in stats.values()) or 1.0
    return [
        QueueRow(
            run.label,
            name,
            q.nominal_gpus,
            q.workloads,
            q.gpu_hours_used,
            q.gpu_hours_entitled,
            q.gpu_hours_used / used_total,
            q.nominal_gpus / nominal_total,
            q.queueing_delay.p50,
            q.queueing_delay.p95,
            q.preemptions,
        )
        for name, q in sorted(stats.items())
    ]


def markdown(
    outcomes: list[tuple[TenantScenario, list[Node], list[Run]]],
    args: argparse.Namespace,
    load: str,
) -> list[str]:
    lines = [
        "# Fair sharing over time on the multi-tenant replay",
        "",
        f"Command: `python benchmarks/fair_share.py --hours {args.hours:g} --node-fraction "
        f"{args.node_fraction:g} --racks {args.racks} --seed {args.seed} --half-lives "
        f"{args.half_lives}`  ",
        f"Machine: {platform.machine()}, Python {platform.python_version()}; policy `{POLICY}`; "
        "one seed per scenario (each run is deterministic for it).  ",
        f"Load when it ran (`uptime`): {load}",
        "",
        "Each scenario is benchmarks/multitenant.py's, under its team queues, quotas, priority "
        "classes and preemption: once with the default profile (fair sharing over time off) "
        "and once per half-life with `fairSharing: {usageHalfLife: ...}` in the profile. "
        "*Used share*: the queue's GPU-hours as a share of all GPU-hours used; *entitled "
        "share*: its nominal GPU quota as a share of all queues' (its entitlement). Fair "
        "sharing over time orders queues by their decayed usage over their share only among "
        "heads at the same borrowing level: a queue's nominal quota stays its own.",
        "",
    ]
    for scenario, nodes, runs in outcomes:
        gpus = sum(n.gpu_count for n in nodes)
        lines += [
            f"## {scenario.name}",
            "",
            f"{scenario.description}. Cluster: {len(nodes):,} nodes, {gpus:,} GPUs; "
            f"{len(scenario.workloads):,} workloads. Simulated in "
            + ", ".join(f"{r.seconds:.0f} s ({r.label})" for r in runs)
            + ".",
            "",
            "| run | queue | nominal GPUs | workloads | used share | entitled share | "
            "GPU-h used / entitled | delay p50 | delay p95 | preemptions |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for run in runs:
            for row in queue_rows(run):
                lines.append(
                    f"| {row.run} | {row.queue} | {row.nominal_gpus:,.0f} | {row.workloads:,} | "
                    f"{100 * row.used_share:.1f}% | {100 * row.entitled_share:.1f}% | "
                    f"{row.gpu_hours_used:,.0f} / {row.gpu_hours_entitled:,.0f} | "
                    f"{format_duration(row.delay_p50)} | {format_duration(row.delay_p95)} | "
                    f"{row.preemptions} |"
                )
        lines += ["", "| run | GPU allocation | preemptions | waiting at the end |"]
        lines.append("|---|---:|---:|---:|")
        for run in runs:
            tenancy = run.result.tenancy
            lines.append(
                f"| {run.label} | {run.result.allocation_busy_pct:.1f}% | "
                f"{tenancy.preemptions:,} | {len(run.result.waiting_at_end)} |"
            )
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=6.0, help="Hours of arrivals.")
    parser.add_argument("--node-fraction", type=float, default=0.1, help="Trace nodes kept.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--racks", type=int, default=8, help="large-gangs: racks of 8 nodes.")
    parser.add_argument("--half-lives", default="1h,1d", help="Comma-separated half-lives.")
    parser.add_argument("--skip-trace", action="store_true", help="Only the synthetic one.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    half_lives = [(h.strip(), parse_duration(h.strip())) for h in args.half_lives.split(",")]
    outcomes: list[tuple[TenantScenario, list[Node], list[Run]]] = []
    trace = None if args.skip_trace else find_alibaba_trace()
    if trace is not None:
        print("alibaba-multitenant", flush=True)
        all_nodes = [n for n in read_nodes(trace / "csv" / NODES_FILE) if n.gpu_count]
        nodes = sample_nodes(all_nodes, args.node_fraction, args.seed)
        scenario = from_trace(read_pods(trace / "csv" / PODS_FILE), nodes, args.seed, args.hours)
        outcomes.append((scenario, nodes, replay(nodes, scenario, args.seed, half_lives)))
    elif not args.skip_trace:
        print("the Alibaba trace was not found: alibaba-multitenant skipped", flush=True)
    print("large-gangs", flush=True)
    nodes, scenario = large_gangs(args.seed, racks=args.racks, hours=args.hours)
    outcomes.append((scenario, nodes, replay(nodes, scenario, args.seed, half_lives)))
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fair_share.md").write_text("\n".join(markdown(outcomes, args, load)))
    write_json(
        args.out / "fair_share.json",
        {
            "settings": vars(args) | {"out": str(args.out), "policy": POLICY},
            "uptime": load,
            "scenarios": [
                {
                    "scenario": scenario.name,
                    "description": scenario.description,
                    "runs": [
                        {
                            "label": run.label,
                            "usage_half_life": run.half_life,
                            "seconds": run.seconds,
                            "allocation_busy_pct": run.result.allocation_busy_pct,
                            "preemptions": run.result.tenancy.preemptions,
                            "queues": queue_rows(run),
                        }
                        for run in runs
                    ],
                }
                for scenario, _, runs in outcomes
            ],
        },
    )
    print(f"wrote {args.out / 'fair_share.md'}")


if __name__ == "__main__":
    main()
