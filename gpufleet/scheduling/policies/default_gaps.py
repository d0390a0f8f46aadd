"""What a GPU's leftover is worth: the expected final waste of a device with ``x`` milli left.

The default policy places a GPU share on the device where it least raises the waste the
cluster is expected to end with, ``waste[left - share] - waste[left]``. ``waste[x]`` is the
milli-GPU that a device left with ``x`` milli will, on average, still have idle when the
cluster is full: a 190-milli gap next to an 810-milli pod is almost never filled (pods of
190 milli or less are rare and have hundreds of such gaps to choose from), a 530-milli gap
after a 470-milli pod nearly always is (another 470 or 460 comes along). A fully free device
is worth 0 (whole-GPU pods use it), a full one 0.

There is no closed form for it (a gap's fate depends on which pods come and where the
policy puts them), so it is measured: :func:`gap_waste` fills a cluster of the same number
of GPUs with pods drawn from the target workload, one device at a time, and records, for
every leftover a device passed through, the leftover it ended with. That is the value of the
state under the simulated placement rule. The first rule is best fit (the tightest device);
each further round places by the values of the rounds before it (policy iteration, with the
rounds averaged so that it settles instead of flip-flopping between two rules). Leftovers the
simulation never produced count as wasted in full, which is the cautious guess.

Only GPU requests matter here: CPU, nodes and multi-GPU gangs are the default policy's other
terms. The result depends only on the target workload and the GPU count; it is computed once
per (workload, GPU count) and cached.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from gpufleet.model import MILLI_PER_GPU
from gpufleet.scheduling.target import TargetWorkload

FloatArray = npt.NDArray[np.float64]

#: Policy-iteration rounds (the first is best fit) and simulated fills per round.
ROUNDS = 4
FILLS_PER_ROUND = 5
#: Simulated clusters are capped at this many GPUs: the value is per device, so a few thousand
#: devices measure it as well as the real cluster would, at a bounded cost.
MAX_SIMULATED_GPUS = 8192
#: Leftovers are simulated on a grid of the sizes' common divisor, but no finer than this
#: (sizes are rounded up to it), which bounds the simulation's cost for odd sizes.
MIN_STEP_MILLI = 10
_SEED = 20230710


def gap_waste(target: TargetWorkload, gpu_total: int) -> FloatArray:
    """``waste[x]`` for x in 0..1000 milli (see the module docstring)."""
    shapes = tuple(
        (shape.gpu_milli, shape.gpu_count, p)
        for shape, p in zip(target.shapes, target.probabilities, strict=True)
        if shape.gpu_count > 0 and shape.gpu_milli > 0 and p > 0
    )
    return _gap_waste_cached(shapes, min(max(gpu_total, 1), MAX_SIMULATED_GPUS)).copy()


@lru_cache(maxsize=16)
def _gap_waste_cached(shapes: tuple[tuple[int, int, float], ...], gpus: int) -> FloatArray:
    if not shapes:
        return np.arange(MILLI_PER_GPU + 1, dtype=np.float64) * 0.0
    milli = np.array([s[0] for s in shapes], np.int64)
    count = np.array([s[1] for s in shapes], np.int64)
    prob = np.array([s[2] for s in shapes], np.float64)
    prob /= prob.sum()
    step = math.gcd(MILLI_PER_GPU, *(int(m) for m in milli))
    if step < MIN_STEP_MILLI:
        step = MIN_STEP_MILLI
    levels = MILLI_PER_GPU // step
    size = -(-milli // step)  # in steps, rounded up; whole-GPU pods have size == levels
    mean_request = float((prob * milli * count).sum())
    pods_per_fill = int(gpus * MILLI_PER_GPU / mean_request) + 1
    rng = np.random.default_rng(_SEED)

    value: FloatArray | None = None
    if not (size < levels).any():
        # Whole GPUs only: no fill ever leaves a device part-used, so every leftover is one
        # the simulation never produces (worth its size, the cautious guess) in every round.
        value = np.arange(levels + 1, dtype=np.float64)
        value[0] = value[levels] = 0.0
    for round_index in range(ROUNDS if value is None else 0):
        orders = _preference_orders(size, levels, value)
        total = np.zeros(levels + 1)
        seen = np.zeros(levels + 1)
        for _ in range(FILLS_PER_ROUND):
            draws = rng.choice(len(prob), size=pods_per_fill, p=prob)
            _simulate_fill(draws, size, count, levels, gpus, orders, total, seen)
        measured = np.where(seen > 0, total / np.maximum(seen, 1), np.arange(levels + 1))
        measured[0] = measured[levels] = 0.0
        value = measured if value is None else (value * round_index + measured) / (round_index + 1)
    assert value is not None
    # Back to milli: a leftover between two steps is worth its step's value plus the remainder.
    x = np.arange(MILLI_PER_GPU + 1)
    waste = value[x // step] * step + (x % step)
    waste[MILLI_PER_GPU] = 0.0
    result: FloatArray = waste.astype(np.float64)
    return result


def _preference_orders(
    size: npt.NDArray[np.int64], levels: int, value: FloatArray | None
) -> dict[int, list[int]]:
    """For each share size, the device levels (leftover, in steps) in order of preference."""
    orders: dict[int, list[int]] = {}
    for s in {int(v) for v in size if v < levels}:
        gaps = np.arange(s, levels + 1)
        if value is None:  # best fit: the tightest device, a fresh one last
            orders[s] = [int(g) for g in gaps]
            continue
        cost = value[gaps - s] - value[gaps]
        orders[s] = [int(g) for g in gaps[np.lexsort((gaps, cost))]]
    return orders


def _simulate_fill(
    draws: npt.NDArray[np.int64],
    size: npt.NDArray[np.int64],
    count: npt.NDArray[np.int64],
    levels: int,
    gpus: int,
    orders: dict[int, list[int]],
    total: FloatArray,
    seen: FloatArray,
) -> None:
    """Place ``draws`` on ``gpus`` devices; add each visited leftover's final leftover."""
    at_level: list[list[int]] = [[] for _ in range(levels + 1)]
    at_level[levels] = list(range(gpus))
    visited: list[list[int]] = [[] for _ in range(gpus)]
    for shape in draws:
        s = int(size[shape])
        if s >= levels:  # whole GPUs take fresh devices, or fail
            k = int(count[shape])
            fresh = at_level[levels]
            if len(fresh) >= k:
                del fresh[len(fresh) - k :]
            continue
        for level in orders[s]:
            if at_level[level]:
                device = at_level[level].pop()
                left = level - s
                at_level[left].append(device)
                if left:
                    visited[device].append(left)
                break
    for level in range(levels):
        for device in at_level[level]:
            for x in visited[device]:
                total[x] += level
                seen[x] += 1
