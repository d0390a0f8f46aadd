"""The target workload: which pod shapes are expected, and how often.

Fragmentation is measured against it (the FGD paper's "typical pods"): group pods by
(CPU, milli-GPU per device, GPU count, allowed GPU models), sort groups by count, keep the most
common ones until they cover a share of the pods (95% by default), renormalise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.model import Pod

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, order=True)
class PodShape:
    """A pod as fragmentation sees it."""

    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    gpu_models: tuple[str, ...] = ()

    @classmethod
    def of(cls, pod: Pod) -> PodShape:
        models = tuple(sorted(pod.gpu_models)) if pod.gpu_models is not None else ()
        milli = pod.gpu.milli if pod.gpu.count else 0
        return cls(pod.cpu_milli, milli, pod.gpu.count, models)


@dataclass(frozen=True, slots=True)
class TargetWorkload:
    """Pod shapes with probabilities summing to 1."""

    shapes: tuple[PodShape, ...]
    probabilities: tuple[float, ...]
    coverage: float = 1.0

    def __post_init__(self) -> None:
        if len(self.shapes) != len(self.probabilities):
            raise ValueError("one probability per shape")
        if self.shapes and abs(sum(self.probabilities) - 1.0) > 1e-6:
            raise ValueError(f"probabilities sum to {sum(self.probabilities)}, not 1")

    def __len__(self) -> int:
        return len(self.shapes)


def typical_shapes(
    pods: Iterable[Pod], coverage: float = 0.95, weights: Sequence[float] | None = None
) -> TargetWorkload:
    """The most common shapes covering ``coverage`` of the pods (FGD protocol, step 2).

    Ties in count are ordered like the artifact (larger CPU, milli-GPU, count first), so the
    cut is deterministic. ``weights`` weighs pods (default: each pod counts once).
    """
    counts: dict[PodShape, float] = {}
    pod_list = list(pods)
    for i, pod in enumerate(pod_list):
        shape = PodShape.of(pod)
        counts[shape] = counts.get(shape, 0.0) + (weights[i] if weights is not None else 1.0)
    if not counts:
        return TargetWorkload((), (), 0.0)
    total = sum(counts.values())
    ordered = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
    chosen: list[tuple[PodShape, float]] = []
    covered = 0.0
    for shape, count in ordered:
        if covered >= coverage * total:
            break
        chosen.append((shape, count))
        covered += count
    return TargetWorkload(
        tuple(s for s, _ in chosen),
        tuple(c / covered for _, c in chosen),
        covered / total,
    )
