"""The fill-up experiment of the FGD protocol: arrival order and the allocation curve.

One run = (trace, policy, seed). Pods arrive one at a time in a seeded order (the name-sorted
trace shuffled, then clones drawn with replacement until the GPU request would pass
``inflation`` x capacity), are placed or dropped, never move and never leave. After each pod,
arrived% and allocated% of the cluster's milli-GPU are recorded; the curve is the mean
allocated% per integer arrived% bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.model import Pod

FloatArray = npt.NDArray[np.float64]

#: The protocol reports buckets 0..130 of arrived%.
MAX_ARRIVED_PCT = 130


@dataclass(frozen=True, slots=True)
class FillOrder:
    """The pods of one fill-up run, in arrival order, and the node tie-break permutation."""

    pods: tuple[Pod, ...]
    originals: int
    node_rank: npt.NDArray[np.int64]


def fill_order(
    trace: Sequence[Pod],
    node_count: int,
    capacity_milli: int,
    seed: int,
    inflation: float = 1.3,
) -> FillOrder:
    """Arrival order and node tie-break order of one run (protocol steps 3 and 4)."""
    rng = np.random.default_rng(seed)
    ordered = sorted(trace, key=lambda p: p.name)
    shuffled = [ordered[i] for i in rng.permutation(len(ordered))]
    target = inflation * capacity_milli
    total = sum(p.gpu.total_milli for p in ordered)
    clones: list[Pod] = []
    if ordered:
        while True:
            source = ordered[int(rng.integers(len(ordered)))]
            if total + source.gpu.total_milli > target:
                break
            total += source.gpu.total_milli
            clones.append(_clone(source, len(clones)))
    rank = np.empty(node_count, np.int64)
    rank[rng.permutation(node_count)] = np.arange(node_count)
    return FillOrder(tuple(shuffled + clones), len(shuffled), rank)


def _clone(pod: Pod, number: int) -> Pod:
    return Pod(
        f"{pod.name}-clone-{number}",
        pod.namespace,
        pod.cpu_milli,
        pod.memory_mib,
        pod.gpu,
        pod.gpu_models,
        pod.node_selector,
        pod.required_affinity,
        pod.tolerations,
        pod.priority,
        pod.labels,
        pod.annotations,
    )


def allocation_curve(
    arrived_milli: npt.NDArray[np.int64],
    allocated_milli: npt.NDArray[np.int64],
    capacity_milli: int,
    max_pct: int = MAX_ARRIVED_PCT,
) -> FloatArray:
    """Mean allocated% per integer arrived% bucket 0..max_pct (protocol step 6)."""
    return bucket_means(
        arrived_milli, 100.0 * allocated_milli / capacity_milli, capacity_milli, max_pct
    )


def bucket_means(
    arrived_milli: npt.NDArray[np.int64],
    values: FloatArray,
    capacity_milli: int,
    max_pct: int = MAX_ARRIVED_PCT,
) -> FloatArray:
    """Mean of ``values`` per integer arrived% bucket 0..max_pct.

    arrived% = round(100 * arrived / capacity). An empty bucket takes the mean of its non-empty
    neighbours (+-1), else the nearest non-empty bucket below it (or above it at the start).
    """
    arrived_pct = np.rint(100.0 * arrived_milli / capacity_milli).astype(np.int64)
    inside = arrived_pct <= max_pct
    sums = np.bincount(arrived_pct[inside], values[inside], minlength=max_pct + 1)
    counts = np.bincount(arrived_pct[inside], minlength=max_pct + 1)
    curve = np.full(max_pct + 1, np.nan)
    filled = counts > 0
    curve[filled] = sums[filled] / counts[filled]
    result = curve.copy()
    for bucket in np.flatnonzero(~filled):
        neighbours = [curve[b] for b in (bucket - 1, bucket + 1) if 0 <= b <= max_pct and filled[b]]
        if neighbours:
            result[bucket] = float(np.mean(neighbours))
    known = np.flatnonzero(~np.isnan(result))
    if known.size == 0:
        return np.zeros(max_pct + 1)
    for bucket in np.flatnonzero(np.isnan(result)):
        earlier = known[known < bucket]
        result[bucket] = result[earlier[-1]] if earlier.size else result[known[0]]
    return result
