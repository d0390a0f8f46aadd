"""gpufleet's default policy against FGD on the default trace and on pod-mix variants.

    python benchmarks/default_policy.py [--seeds 42-51] [--workers 2]

The variants are generated from the default trace with gpufleet's own resampler
(gpufleet.backends.sim.variants, fixed seed): more GPU-sharing pods, more multi-GPU pods, more
CPU-only pods, and GPU-model constraints. Each (pod list, policy) runs the FGD protocol's fill-up
over the seeds. Reported: median (min-max) unallocated GPU % at 100% arrived, and the share of
pods of each class that found no node before 100% arrived (no class may be starved).

Writes benchmarks/results/default_policy.md and .json.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from statistics import median

from gpufleet.backends.sim.batch import Scenario, Task, run_many
from gpufleet.backends.sim.cluster import Mode
from gpufleet.backends.sim.results import FillRun
from gpufleet.backends.sim.variants import VariantKind, make_variant
from gpufleet.io.cluster_traces.alibaba import read_nodes, read_pods
from gpufleet.io.cluster_traces.datasets import NODES_FILE, PODS_FILE, find_alibaba_trace
from gpufleet.model.workload import TimedPod
from gpufleet.report.summary import write_json

RESULTS = Path(__file__).resolve().parent / "results"
VARIANTS: tuple[tuple[VariantKind, float], ...] = (
    (VariantKind.GPUSHARE, 40),
    (VariantKind.GPUSHARE, 60),
    (VariantKind.GPUSHARE, 80),
    (VariantKind.MULTIGPU, 20),
    (VariantKind.MULTIGPU, 40),
    (VariantKind.CPU, 25),
    (VariantKind.CPU, 27),
    (VariantKind.CPU, 30),
    (VariantKind.CPU, 35),
    (VariantKind.CPU, 50),
    (VariantKind.GPUSPEC, 20),
    (VariantKind.GPUSPEC, 33),
)
CLASSES = ("cpu-only", "gpu-share", "one-gpu", "multi-gpu")
VARIANT_SEED = 1


def parse_seeds(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def failure_rates(runs: list[FillRun]) -> dict[str, float]:
    rates = {}
    for cls in CLASSES:
        arrived = sum(r.classes[cls].arrived_by_100 for r in runs if cls in r.classes)
        failed = sum(r.classes[cls].failed_by_100 for r in runs if cls in r.classes)
        if arrived:
            rates[cls] = round(100.0 * failed / arrived, 2)
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--policies", default="fgd,default")
    args = parser.parse_args()
    trace_dir = find_alibaba_trace()
    if trace_dir is None:
        print("Alibaba 2023 trace not found: set GPUFLEET_ALIBABA_TRACE_DIR", file=sys.stderr)
        return 2
    nodes = tuple(n for n in read_nodes(trace_dir / "csv" / NODES_FILE) if n.gpu_count)
    default = read_pods(trace_dir / "csv" / PODS_FILE)
    per_model: Counter[str] = Counter()
    for node in nodes:
        if node.gpu_model:
            per_model[node.gpu_model] += node.gpu_count
    pod_lists: dict[str, list[TimedPod]] = {"default": default}
    for kind, percent in VARIANTS:
        pod_lists[f"{kind}{percent:g}"] = make_variant(
            default, kind, percent, VARIANT_SEED, per_model
        )
    seeds = parse_seeds(args.seeds)
    policies = args.policies.split(",")
    rows = []
    started = time.perf_counter()
    for name, pods in pod_lists.items():
        scenario = Scenario(nodes, tuple(pods), Mode.FILL)
        tasks = [Task(p, s) for p in policies for s in seeds]
        results = [r for r in run_many(scenario, tasks, args.workers) if isinstance(r, FillRun)]
        row: dict[str, object] = {"pods": name, "count": len(pods)}
        for policy in policies:
            runs = [r for r in results if r.policy == policy]
            values = [r.unallocated_at_100 for r in runs]
            row[policy] = {
                "median": round(median(values), 3),
                "min": round(min(values), 3),
                "max": round(max(values), 3),
                "failure_rate_by_class_pct": failure_rates(runs),
                "median_seconds": round(median(r.seconds for r in runs), 2),
            }
        rows.append(row)
        print(name, {p: row[p]["median"] for p in policies}, flush=True)  # type: ignore[index]
    wall = time.perf_counter() - started
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(
        RESULTS / "default_policy.json",
        {
            "command": f"python benchmarks/default_policy.py --seeds {args.seeds}",
            "seeds": seeds,
            "variant_seed": VARIANT_SEED,
            "wall_seconds": round(wall),
            "rows": rows,
        },
    )
    (RESULTS / "default_policy.md").write_text(render(rows, policies, args.seeds, wall))
    print((RESULTS / "default_policy.md").read_text())
    return 0


def render(rows: list[dict[str, object]], policies: list[str], seeds: str, wall: float) -> str:
    base, ours = policies[0], policies[-1]
    lines = [
        f"# `{ours}` against `{base}` on the default trace and pod-mix variants",
        "",
        f"`python benchmarks/default_policy.py --seeds {seeds}`; FGD fill-up protocol on the "
        "1,213 GPU nodes; variants generated from the default trace by "
        "`gpufleet.backends.sim.variants` (seed "
        f"{VARIANT_SEED}): `gpushareN` = N% of GPU pods share a GPU, `multigpuN` = N% of GPU "
        "pods ask for several GPUs, `cpuN` = N% of pods are CPU-only, `gpuspecN` = N% of GPU "
        f"pods may use only some GPU models. Wall time {wall:.0f} s.",
        "",
        "## Unallocated GPU % at 100% arrived (median, min-max over seeds; lower is better)",
        "",
        f"| pod list | {base} | {ours} | difference |",
        "|---|---|---|---|",
    ]
    for row in rows:
        a, b = row[base], row[ours]
        assert isinstance(a, dict)
        assert isinstance(b, dict)
        lines.append(
            f"| {row['pods']} | {a['median']:.2f} ({a['min']:.2f}-{a['max']:.2f}) | "
            f"**{b['median']:.2f}** ({b['min']:.2f}-{b['max']:.2f}) | "
            f"{b['median'] - a['median']:+.2f} |"
        )
    lines += [
        "",
        "## Pods that found no node before 100% arrived, % of each class",
        "",
        "| pod list | policy | " + " | ".join(CLASSES) + " |",
        "|---|---|" + "---|" * len(CLASSES),
    ]
    for row in rows:
        for policy in (base, ours):
            stats = row[policy]
            assert isinstance(stats, dict)
            rates = stats["failure_rate_by_class_pct"]
            lines.append(
                f"| {row['pods']} | {policy} | "
                + " | ".join(f"{rates[c]:.2f}" if c in rates else "-" for c in CLASSES)
                + " |"
            )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
