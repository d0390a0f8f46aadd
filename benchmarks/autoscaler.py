"""The node-pool autoscaler's scale-up decision for 10,000 pending pods over 20 pools.

    python benchmarks/autoscaler.py [--pods 10000 --repeats 11 --seed 15 --max-nodes 200]

Pending work: ``--pods`` pods drawn from the bundled Alibaba shape table
(gpufleet/data/alibaba2023_pod_shapes.csv, by its counts: CPU-only pods, GPU shares, 1 to 8
whole GPUs). About a tenth of them are in gangs of 4 to 16 pods of one whole-GPU shape (a third
of the gangs on one NVLink domain, a third in one zone, the rest anywhere); a fifth of the GPU
pods ask for a GPU model (A100 or H100), one pod in 500 for a model no pool has (B200, to be
reported and not scaled for); a third of the workloads tolerate spot (the gangs checkpoint),
one in 20 is not preemptible. GPU pods tolerate the ``nvidia.com/gpu`` taint the GPU pools
carry. Pools (:func:`pools`): 20 of them, H100, A100, L40S, A10G, L4 and T4 nodes of 1 to 8
GPUs, on-demand, spot and reserved, over 2 or 3 zones, and two CPU pools; illustrative prices
per node-hour (on-demand near public list prices, spot 40% of it, reserved 30%); a few pools
have nodes joining already (counted before any node is added).

Pools have at most ``--max-nodes`` nodes (reserved ones 16): at 200 the pending set fills most
pools to their maximum, so the choice goes pool after pool (the harder case); at 2,000 fewer
pools are needed.

Measured: the wall time of a whole decision (the pools' template nodes, every pod shape
compiled by the core, the packing and the choice), as the median, 95th percentile and fastest
of ``--repeats``, with the process's CPU time beside it: the *first decision*
(:func:`~gpufleet.elastic.nodepools.decide_scale_up`, nothing known), and *a turn* of a
:class:`~gpufleet.elastic.nodepools.ScaleUpPlanner` that decided before (a new pending set of
the same distribution each turn; the pod shapes it compiled are kept). Target (issue 15): at
most 200 ms. Results: benchmarks/results/autoscaler.md and .json, with the load of the machine
before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.elastic.nodepools import (
    PoolNodes,
    Provisioning,
    ScaleUpDecision,
    ScaleUpPlanner,
    decide_scale_up,
)
from gpufleet.io.cluster_traces.shapes import bundled_shape_table
from gpufleet.model import Pod, Toleration
from gpufleet.model.capacity import CapacityType
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.workload import TopologyMode, TopologyRequest, Workload
from gpufleet.testing.builders import GPU_TAINT, GPU_TOLERATION, make_node_pool

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_MS = 200.0
SPOT = Toleration("gpufleet.dev/capacity-type", "Equal", "spot")
#: (model, GPUs per node, vCPUs, GiB, on-demand $ per node-hour): illustrative shapes.
GPU_SHAPES = {
    "h100x8": ("NVIDIA-H100-80GB-HBM3", 8, 192, 2048, 98.32),
    "a100x8": ("NVIDIA-A100-SXM4-40GB", 8, 96, 1152, 32.77),
    "a100x4": ("NVIDIA-A100-SXM4-40GB", 4, 48, 576, 16.39),
    "l40sx4": ("NVIDIA-L40S", 4, 48, 384, 7.50),
    "a10gx1": ("NVIDIA-A10G", 1, 16, 64, 1.21),
    "a10gx4": ("NVIDIA-A10G", 4, 48, 192, 5.67),
    "l4x1": ("NVIDIA-L4", 1, 16, 64, 0.85),
    "l4x8": ("NVIDIA-L4", 8, 192, 768, 6.80),
    "t4x1": ("Tesla-T4", 1, 8, 32, 0.53),
    "t4x4": ("Tesla-T4", 4, 48, 192, 3.91),
}
POOLS = (
    ("h100x8", CapacityType.ON_DEMAND), ("h100x8", CapacityType.SPOT),
    ("h100x8", CapacityType.RESERVED), ("a100x8", CapacityType.ON_DEMAND),
    ("a100x8", CapacityType.SPOT), ("a100x8", CapacityType.RESERVED),
    ("a100x4", CapacityType.ON_DEMAND), ("l40sx4", CapacityType.ON_DEMAND),
    ("l40sx4", CapacityType.SPOT), ("a10gx1", CapacityType.ON_DEMAND),
    ("a10gx1", CapacityType.SPOT), ("a10gx4", CapacityType.ON_DEMAND),
    ("l4x1", CapacityType.ON_DEMAND), ("l4x1", CapacityType.SPOT),
    ("l4x8", CapacityType.ON_DEMAND), ("t4x1", CapacityType.ON_DEMAND),
    ("t4x1", CapacityType.SPOT), ("t4x4", CapacityType.ON_DEMAND),
)  # fmt: skip
MAX_NODES = [200]
PRICE_FACTOR = {CapacityType.ON_DEMAND: 1.0, CapacityType.SPOT: 0.4, CapacityType.RESERVED: 0.3}


def pools() -> list[PoolNodes]:
    """The 20 pools (18 GPU pools, 2 CPU pools), some with nodes joining."""
    made: list[PoolNodes] = []
    for index, (shape, capacity) in enumerate(POOLS):
        model, gpus, vcpus, gib, price = GPU_SHAPES[shape]
        zones = ("zone-a", "zone-b", "zone-c")[: 2 + index % 2]
        pool = make_node_pool(
            f"{shape}-{capacity.value}",
            capacity=capacity,
            price=price * PRICE_FACTOR[capacity],
            max_nodes=16 if capacity is CapacityType.RESERVED else MAX_NODES[0],
            zones=zones,
            delay=240.0,
            gpus=gpus,
            model=model,
            cpu=vcpus * 1000,
            memory=gib * 1024,
            taints=[GPU_TAINT],
        )
        joining = (Provisioning(2, 0.0, zones[0]),) if index % 5 == 0 else ()
        made.append(PoolNodes(pool, {zones[0]: 1}, joining))
    for name, vcpus, gib, price in (("cpu-16", 16, 64, 0.77), ("cpu-96", 96, 768, 4.61)):
        pool = make_node_pool(
            name, price=price, max_nodes=500, zones=("zone-a", "zone-b"), delay=120.0,
            gpus=0, cpu=vcpus * 1000, memory=gib * 1024,
        )  # fmt: skip
        made.append(PoolNodes(pool, {"zone-a": 2}))
    return made


def pending(pods: int, rng: np.random.Generator) -> list[Workload]:
    """``pods`` pending pods in workloads (see the module docstring), in queue order."""
    table = bundled_shape_table()
    shapes = table.shapes
    weights = np.array([s.count for s in shapes], np.float64)
    weights /= weights.sum()
    whole = [i for i, s in enumerate(shapes) if s.num_gpu and s.gpu_milli == 1000]
    whole_weights = weights[whole] / weights[whole].sum()
    topologies = (
        TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.NVLINK_DOMAIN),
        TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.ZONE),
        None,
    )
    workloads: list[Workload] = []
    made = 0
    while made < pods:
        name = f"w{len(workloads)}"
        spot = rng.random() < 1 / 3
        if rng.random() < 0.1 / 8:  # a gang (its ~10 pods: about a tenth of all pods)
            row = shapes[whole[rng.choice(len(whole), p=whole_weights)]]
            topology = topologies[int(rng.integers(3))]
            size = int(rng.integers(4, 17))
            if topology is topologies[0]:
                size = max(1, min(size, 8 // row.num_gpu))
            size = min(size, pods - made)
            base = _pod(row.pod(f"{name}-0"), rng, gang=True, spot=spot)
            members = tuple(base.renamed(f"{name}-{i}") for i in range(size))
            workload = Workload(name, "default", members, "default", topology=topology,
                                checkpoint_interval=1800.0)  # fmt: skip
        else:
            row = shapes[int(rng.choice(len(shapes), p=weights))]
            pod = _pod(row.pod(name), rng, gang=False, spot=spot)
            workload = Workload(name, "default", (pod,), "default",
                                preemptible=rng.random() >= 0.05)  # fmt: skip
        workloads.append(workload)
        made += len(workload.pods)
    return workloads


def _pod(pod: Pod, rng: np.random.Generator, gang: bool, spot: bool) -> Pod:
    if not pod.gpu.count:
        return pod
    tolerations = (GPU_TOLERATION, SPOT) if spot else (GPU_TOLERATION,)
    models = None
    draw = rng.random()
    if draw < 0.002 and not gang:
        models = frozenset({"B200"})
    elif draw < 0.2:
        models = frozenset({"A100", "H100"})
    return Pod(pod.name, pod.namespace, pod.cpu_milli, pod.memory_mib, pod.gpu, models,
               tolerations=tolerations)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument(
        "--max-nodes",
        type=int,
        nargs="+",
        default=[200, 2000],
        help="each non-reserved pool's maximum, one run per value",
    )
    args = parser.parse_args()
    draws = [
        pending(args.pods, np.random.default_rng(args.seed + i)) for i in range(args.repeats + 1)
    ]
    runs = [run(args, draws, most) for most in args.max_nodes]
    result = {"runs": runs, "target_ms": TARGET_MS}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "autoscaler.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "autoscaler.md").write_text(report(args, runs))
    print(report(args, runs))
    # The target holds for the first decision too: it is what a restarted autoscaler does.
    met = all(r[part]["median_ms"] <= TARGET_MS for r in runs for part in ("cold", "turn"))
    return 0 if met else 1


def run(args: argparse.Namespace, draws: list[list[Workload]], most: int) -> dict[str, Any]:
    """The first decision and the turns over pools of at most ``most`` nodes."""
    MAX_NODES[0] = most
    state = pools()
    load_before = os.getloadavg()[0]
    decision = decide_scale_up(draws[0], state, now=60.0)  # imports and first calls
    cold = [_timed(lambda: decide_scale_up(draws[0], state, now=60.0)) for _ in range(args.repeats)]
    planner = ScaleUpPlanner([p.pool for p in state])
    planner.decide(draws[0], state, now=60.0)
    turns = [_timed(partial(planner.decide, work, state, 60.0)) for work in draws[1:]]
    load_after = os.getloadavg()[0]
    return summary(args, draws[0], state, decision, cold, turns, load_before, load_after, most)


def _timed(decide: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU milliseconds of one decision."""
    wall, cpu = time.perf_counter(), time.process_time()
    decide()
    return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3


def _stats(times: list[tuple[float, float]]) -> dict[str, float]:
    wall = [w for w, _ in times]
    return {
        "median_ms": statistics.median(wall),
        "p95_ms": float(np.percentile(wall, 95)),
        "min_ms": min(wall),
        "cpu_median_ms": statistics.median(c for _, c in times),
    }


def summary(
    args: argparse.Namespace,
    work: list[Workload],
    state: list[PoolNodes],
    decision: ScaleUpDecision,
    cold: list[tuple[float, float]],
    turns: list[tuple[float, float]],
    load_before: float,
    load_after: float,
    most: int,
) -> dict[str, Any]:
    added: Counter[str] = Counter()
    for action in decision.actions:
        added[action.pool] += action.count
    pods_of = {w.key: len(w.pods) for w in work}
    shapes = {pod.signature for w in work for pod in w.pods}
    price = {p.pool.name: p.pool.hourly_price for p in state}
    return {
        "pods": sum(pods_of.values()),
        "workloads": len(work),
        "gangs": sum(1 for w in work if len(w.pods) > 1),
        "pod_shapes": len(shapes),
        "pools": len(state),
        "max_nodes": most,
        "cold": _stats(cold),
        "turn": _stats(turns),
        "nodes_added": dict(sorted(added.items())),
        "hourly_cost_added": sum(price[name] * count for name, count in added.items()),
        "pods_expected": sum(pods_of[k] for k in decision.expected),
        "pods_waiting": sum(pods_of[k] for k in decision.waiting),
        "pods_never": sum(pods_of[k] for k in decision.never),
        "load_before": load_before,
        "load_after": load_after,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
    }


def report(args: argparse.Namespace, runs: list[dict[str, Any]]) -> str:
    first = runs[0]

    def line(what: str, t: dict[str, float]) -> str:
        return (
            f"| {what} | **{t['median_ms']:.1f} ms** | {t['p95_ms']:.1f} ms | "
            f"{t['min_ms']:.1f} ms | {t['cpu_median_ms']:.1f} ms | ≤ {TARGET_MS:.0f} ms |"
        )

    table = "\n".join(
        f"{line('first decision, pools of ' + format(r['max_nodes'], ','), r['cold'])}\n"
        f"{line('a turn, pools of ' + format(r['max_nodes'], ','), r['turn'])}"
        for r in runs
    )
    plans = "\n\n".join(_plan(r) for r in runs)
    loads = ", ".join(f"{r['load_before']:.2f} / {r['load_after']:.2f}" for r in runs)
    return f"""# Node-pool autoscaler: one scale-up decision

`python benchmarks/autoscaler.py --pods {args.pods} --repeats {args.repeats} --seed {args.seed}
--max-nodes {" ".join(str(m) for m in args.max_nodes)}` (Python {first["python"]}, numpy
{first["numpy"]}, {first["machine"]}, {first["cpus"]} CPUs shared with other work: load before /
after each run {loads}). {first["pods"]:,} pending pods in {first["workloads"]:,} workloads
({first["gangs"]} gangs), {first["pod_shapes"]} distinct pod shapes, drawn from the bundled
Alibaba shape table; {first["pools"]} pools (see the script), the non-reserved ones of at most
200 nodes (most of them fill up: the choice goes pool after pool) or 2,000. *First decision*:
`decide_scale_up` with nothing known yet (every pod shape compiled against the pools' nodes),
the same pending set {args.repeats} times. *A turn*: one `ScaleUpPlanner` deciding turn after
turn, a new pending set of the same size drawn for each of {args.repeats} turns (what it learnt
of pod shapes is kept between turns, as a world that calls it every turn keeps it). Wall
times; the CPU time of the process beside them (the machine's other work slows the wall time).

| | median | p95 | fastest | CPU (median) | target |
|---|---|---|---|---|---|
{table}

{plans}
"""


def _plan(r: dict[str, Any]) -> str:
    rows = "\n".join(f"| {name} | {count} |" for name, count in r["nodes_added"].items())
    return f"""The first decision, pools of at most {r["max_nodes"]:,} nodes:
{r["pods_expected"]:,} pods expected on new or joining nodes, {r["pods_waiting"]:,} waiting for
a pool with room, {r["pods_never"]:,} that no pool could ever hold (they ask for B200); nodes added
(${r["hourly_cost_added"]:,.2f}/h in all):

| pool | nodes |
|---|---|
{rows}"""


if __name__ == "__main__":
    sys.exit(main())
