"""Reproduce the FGD paper's fill-up experiment: six policies (and gpufleet's default) x seeds
42-51 on the Alibaba 2023 default trace, next to the published medians.

    python benchmarks/fgd_reproduction.py [--seeds 42-51] [--workers 2]

Writes benchmarks/results/fgd_reproduction.md and .json. Needs the trace (see
`gpufleet traces fetch alibaba-2023`); exits with a clear message when it is absent.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from statistics import median

from gpufleet.backends.sim.batch import Scenario, Task, run_many
from gpufleet.backends.sim.cluster import Mode
from gpufleet.backends.sim.results import FillRun
from gpufleet.io.cluster_traces.alibaba import read_nodes, read_pods
from gpufleet.io.cluster_traces.datasets import NODES_FILE, PODS_FILE, find_alibaba_trace
from gpufleet.report.summary import write_json

RESULTS = Path(__file__).resolve().parent / "results"
POINTS = (90, 95, 98, 100, 105, 110, 120, 130)

#: Published unallocated GPU % by arrived % (median of 10 seeds), benchmarks/fgd-protocol.md.
PUBLISHED: dict[str, tuple[float, ...]] = {
    "random": (14.97, 14.32, 13.99, 13.75, 13.45, 13.23, 12.84, 12.62),
    "dotprod": (10.02, 9.47, 9.46, 9.44, 9.39, 9.37, 9.29, 9.20),
    "gpu-clustering": (10.00, 8.47, 8.44, 8.42, 8.38, 8.34, 8.27, 8.21),
    "gpu-packing": (10.00, 8.23, 8.22, 8.19, 8.15, 8.12, 8.05, 7.94),
    "bestfit": (9.99, 7.14, 7.11, 7.09, 7.06, 7.02, 6.96, 6.89),
    "fgd": (10.00, 5.09, 4.79, 4.77, 4.70, 4.68, 4.63, 4.60),
}
PUBLISHED_FRAGMENTATION = {"fgd": 4.73, "bestfit": 7.02}
TOLERANCE = {"random": 1.0}
DEFAULT_TOLERANCE = 0.5
DISPLAY = {
    "random": "Random",
    "dotprod": "DotProd",
    "gpu-clustering": "GpuClustering",
    "gpu-packing": "GpuPacking",
    "bestfit": "BestFit",
    "fgd": "FGD",
    "default": "gpufleet default",
}


def parse_seeds(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--policies", default=",".join([*PUBLISHED, "default"]))
    args = parser.parse_args()
    trace_dir = find_alibaba_trace()
    if trace_dir is None:
        print(
            "Alibaba 2023 trace not found: set GPUFLEET_ALIBABA_TRACE_DIR or run "
            "`gpufleet traces fetch alibaba-2023`",
            file=sys.stderr,
        )
        return 2
    nodes = [n for n in read_nodes(trace_dir / "csv" / NODES_FILE) if n.gpu_count]
    trace = read_pods(trace_dir / "csv" / PODS_FILE)
    seeds = parse_seeds(args.seeds)
    policies = args.policies.split(",")
    scenario = Scenario(tuple(nodes), tuple(trace), Mode.FILL)
    started = time.perf_counter()
    tasks = [Task(p, s) for p in policies for s in seeds]

    def progress(index: int, done: int, total: int) -> None:
        if done == total:
            print(f"  {tasks[index].policy} seed {tasks[index].seed} done", flush=True)

    results = [
        r for r in run_many(scenario, tasks, args.workers, progress) if isinstance(r, FillRun)
    ]
    wall = time.perf_counter() - started
    rows = []
    for policy in policies:
        runs = [r for r in results if r.policy == policy]
        ours = [round(median(r.unallocated_gpu_pct[p] for r in runs), 2) for p in POINTS]
        at_100 = [r.unallocated_at_100 for r in runs]
        published = PUBLISHED.get(policy)
        tolerance = TOLERANCE.get(policy, DEFAULT_TOLERANCE)
        rows.append(
            {
                "policy": policy,
                "ours": dict(zip(map(str, POINTS), ours, strict=True)),
                "published": dict(zip(map(str, POINTS), published, strict=True))
                if published
                else None,
                "median_at_100": round(median(at_100), 3),
                "min_at_100": round(min(at_100), 3),
                "max_at_100": round(max(at_100), 3),
                "published_at_100": published[3] if published else None,
                "difference_at_100": round(median(at_100) - published[3], 3) if published else None,
                "tolerance": tolerance if published else None,
                "faithful": abs(median(at_100) - published[3]) <= tolerance if published else None,
                "median_fragmentation_at_100": round(
                    median(r.fragmentation_pct[100] for r in runs), 3
                ),
                "published_fragmentation_at_100": PUBLISHED_FRAGMENTATION.get(policy),
                "failure_rate_by_class_pct": {
                    cls: round(
                        100.0
                        * sum(r.classes[cls].failed_by_100 for r in runs)
                        / max(1, sum(r.classes[cls].arrived_by_100 for r in runs)),
                        2,
                    )
                    for cls in sorted({c for r in runs for c in r.classes})
                },
                "median_seconds_per_run": round(median(r.seconds for r in runs), 3),
            }
        )
    machine = (
        f"{platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}, {args.workers} workers"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(
        RESULTS / "fgd_reproduction.json",
        {
            "command": "python benchmarks/fgd_reproduction.py --seeds " + args.seeds,
            "trace": str(trace_dir),
            "nodes": len(nodes),
            "pods": len(trace),
            "seeds": seeds,
            "machine": machine,
            "wall_seconds": round(wall, 1),
            "rows": rows,
            "runs": results,
        },
    )
    (RESULTS / "fgd_reproduction.md").write_text(
        render(rows, seeds, len(nodes), len(trace), machine, wall, args.seeds)
    )
    print((RESULTS / "fgd_reproduction.md").read_text())
    return 0 if all(r["faithful"] is not False for r in rows) else 1


def render(
    rows: list[dict[str, object]],
    seeds: list[int],
    nodes: int,
    pods: int,
    machine: str,
    wall: float,
    seed_text: str,
) -> str:
    lines = [
        "# FGD fill-up reproduction (Alibaba 2023 default trace)",
        "",
        f"`python benchmarks/fgd_reproduction.py --seeds {seed_text}`: {nodes} GPU nodes, "
        f"{pods} pods, seeds {seeds[0]}-{seeds[-1]} ({len(seeds)} runs per policy), "
        f"protocol: ../shared/benchmarks/fgd-protocol.md. Machine: {machine}; "
        f"wall time {wall:.0f} s.",
        "",
        "## Median unallocated GPU % at 100% arrived",
        "",
        "| policy | ours (median) | min-max over seeds | published | difference "
        "| within tolerance |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        published = row["published_at_100"]
        lines.append(
            f"| {DISPLAY.get(str(row['policy']), row['policy'])} | **{row['median_at_100']:.2f}** "
            f"| {row['min_at_100']:.2f}-{row['max_at_100']:.2f} | "
            + (
                f"{published:.2f} | {row['difference_at_100']:+.2f} | "
                f"{'yes' if row['faithful'] else 'NO'} (±{row['tolerance']}) |"
                if published is not None
                else "- | - | - |"
            )
        )
    lines += [
        "",
        "## By arrived workload (ours / published)",
        "",
        "| policy | " + " | ".join(f"{p}%" for p in POINTS) + " |",
        "|---|" + "---|" * len(POINTS),
    ]
    for row in rows:
        ours = row["ours"]
        published = row["published"]
        assert isinstance(ours, dict)
        cells = []
        for p in POINTS:
            mine = ours[str(p)]
            cells.append(
                f"{mine:.2f} / {published[str(p)]:.2f}"
                if isinstance(published, dict)
                else f"{mine:.2f}"
            )
        lines.append(
            f"| {DISPLAY.get(str(row['policy']), row['policy'])} | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "## Fragmentation, failures per class, speed",
        "",
        "| policy | fragmented GPU % at 100% (published) "
        "| failed pods before 100% arrived, % per class | s/run |",
        "|---|---|---|---|",
    ]
    for row in rows:
        pub = row["published_fragmentation_at_100"]
        failures = row["failure_rate_by_class_pct"]
        assert isinstance(failures, dict)
        lines.append(
            f"| {DISPLAY.get(str(row['policy']), row['policy'])} "
            f"| {row['median_fragmentation_at_100']:.2f}"
            + (f" ({pub})" if pub else "")
            + " | "
            + ", ".join(f"{k} {v}" for k, v in failures.items())
            + f" | {row['median_seconds_per_run']:.2f} |"
        )
    lines += [
        "",
        "Seconds per run are measured inside each worker while two runs share the "
        "machine's two cores; see speed.md for single-run timings.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
