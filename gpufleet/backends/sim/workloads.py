"""Workloads for simulation: shape tables, synthetic pods, and load scaling for replay.

A *shape table* is the distribution of pod shapes of a trace (CPU, memory, GPUs, allowed models,
with counts) plus quantiles of run time per pod class. gpufleet ships one derived from the
Alibaba 2023 trace (``gpufleet traces shapes``), so that a synthetic workload drawn from it can
stand in for the trace on machines without it.

Replay of the raw Alibaba trace barely loads the cluster (its pods run for minutes over 149
days), so :func:`scale_to_load` compresses arrival times until the offered GPU load reaches a
chosen fraction of capacity; run times are kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from gpufleet.model import PodClass
from gpufleet.model.shapes import ShapeRow, ShapeTable
from gpufleet.model.workload import TimedPod

QUANTILES = tuple(range(0, 101, 5))


def shape_table(workload: Sequence[TimedPod]) -> ShapeTable:
    """Derive the shape table of a workload (see the module docstring)."""
    counts: Counter[ShapeRow] = Counter()
    runtimes: dict[str, list[float]] = {}
    for timed in workload:
        pod = timed.pod
        spec = "|".join(sorted(pod.gpu_models)) if pod.gpu_models else ""
        key = ShapeRow(
            pod.cpu_milli,
            pod.memory_mib,
            pod.gpu.count,
            pod.gpu.milli if pod.gpu.count else 0,
            spec,
            0,
        )
        counts[key] += 1
        if timed.runtime is not None:
            runtimes.setdefault(str(pod.pod_class), []).append(timed.runtime)
    shapes = tuple(
        replace(shape, count=count)
        for shape, count in sorted(
            counts.items(),
            key=lambda kv: (-kv[1], kv[0].num_gpu, kv[0].gpu_milli, kv[0].cpu_milli),
        )
    )
    quantiles = {
        cls: tuple(round(float(v), 1) for v in np.percentile(values, QUANTILES))
        for cls, values in sorted(runtimes.items())
    }
    return ShapeTable(shapes, quantiles)


def synthetic_workload(
    table: ShapeTable,
    count: int,
    seed: int,
    arrival_rate: float | None = None,
) -> list[TimedPod]:
    """``count`` pods drawn from ``table``; with ``arrival_rate`` (pods/s), Poisson arrivals
    and run times drawn from the table's quantiles, else no times (for fill-up runs)."""
    if not table.shapes:
        raise ValueError("the shape table is empty")
    rng = np.random.default_rng(seed)
    weights = np.array([s.count for s in table.shapes], np.float64)
    picks = rng.choice(len(table.shapes), size=count, p=weights / weights.sum())
    pods = [table.shapes[i].pod(f"synthetic-pod-{n:06d}") for n, i in enumerate(picks)]
    if arrival_rate is None:
        return [TimedPod(p) for p in pods]
    arrivals = np.cumsum(rng.exponential(1.0 / arrival_rate, size=count))
    result = []
    for pod, created in zip(pods, arrivals, strict=True):
        runtime = sample_runtime(table, pod.pod_class, rng)
        result.append(TimedPod(pod, float(created), float(created) + runtime, float(created)))
    return result


def sample_runtime(table: ShapeTable, pod_class: PodClass, rng: np.random.Generator) -> float:
    """A run time from the class's quantiles (log-linear between them)."""
    quantiles = table.runtime_quantiles.get(str(pod_class))
    if not quantiles:
        quantiles = next(iter(table.runtime_quantiles.values()), (600.0, 600.0))
    u = rng.random() * 100.0
    logs = np.log(np.maximum(np.asarray(quantiles, np.float64), 1.0))
    points = np.linspace(0, 100, len(quantiles))
    return float(np.exp(np.interp(u, points, logs)))


def cap_runtimes(workload: Sequence[TimedPod], max_runtime: float) -> list[TimedPod]:
    """Cut run times longer than ``max_runtime`` (the trace's still-running pods are censored
    at its end, some at 149 days, and would otherwise dominate a replay)."""
    capped = []
    for timed in workload:
        runtime = timed.runtime
        if runtime is None or runtime <= max_runtime or timed.created is None:
            capped.append(timed)
            continue
        start = timed.scheduled if timed.scheduled is not None else timed.created
        capped.append(replace(timed, deleted=start + max_runtime))
    return capped


def offered_load(workload: Sequence[TimedPod], capacity_milli: int) -> float:
    """Arrival rate x mean GPU work per pod, as a fraction of capacity (the utilisation the
    cluster would need if nothing ever waited)."""
    created = [t.created for t in workload if t.created is not None]
    if len(created) < 2 or capacity_milli <= 0:
        return 0.0
    span = max(created) - min(created)
    work = sum((t.runtime or 0.0) * t.pod.gpu.total_milli for t in workload)
    return work / (span * capacity_milli) if span > 0 else float("inf")


def retime_for_load(
    workload: Sequence[TimedPod], capacity_milli: int, load: float, seed: int = 0
) -> list[TimedPod]:
    """Re-time arrivals as a Poisson process, in the workload's order of creation, at the rate
    that makes :func:`offered_load` equal ``load``. Run times are kept."""
    if load <= 0:
        raise ValueError(f"load must be positive, got {load}")
    ordered = sorted(workload, key=lambda t: (t.created or 0.0, t.pod.key))
    work = sum((t.runtime or 0.0) * t.pod.gpu.total_milli for t in ordered)
    if work <= 0:
        raise ValueError("the workload has no GPU work with known run times to scale")
    rate = load * capacity_milli * len(ordered) / work
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=len(ordered))
    gaps[0] = 0.0
    result = []
    for timed, created in zip(ordered, np.cumsum(gaps), strict=True):
        runtime = timed.runtime
        deleted = None if runtime is None else float(created) + runtime
        result.append(TimedPod(timed.pod, float(created), deleted, None))
    return result


def resample(workload: Sequence[TimedPod], count: int, seed: int = 0) -> list[TimedPod]:
    """``count`` pods drawn with replacement from ``workload``, keeping each one's shape, times
    and run time (names get a ``-rN`` suffix). Replays need enough arrivals to reach a steady
    state; re-time them with :func:`retime_for_load`."""
    if count <= 0:
        raise ValueError(f"count must be positive, got {count}")
    if not workload:
        raise ValueError("the workload is empty")
    rng = np.random.default_rng(seed)
    picks = rng.integers(len(workload), size=count)
    return [
        replace(workload[i], pod=replace(workload[i].pod, name=f"{workload[i].pod.name}-r{n}"))
        for n, i in enumerate(picks)
    ]
