"""Workload variants: resample a pod list so that one kind of pod is more (or less) common.

A good placement policy must hold up on more than one pod mix. The FGD paper evaluates trace
variants with more GPU-sharing pods, more multi-GPU pods, GPU-model constraints and more CPU-only
pods; these functions derive such variants from any pod list, reproducibly (seeded):

* ``gpushare``: ``percent`` of GPU pods are sharing pods;
* ``multigpu``: ``percent`` of GPU pods ask for more than one GPU;
* ``cpu``: ``percent`` of all pods are CPU-only;
* ``gpuspec``: ``percent`` of GPU pods may only use some GPU models (drawn by the cluster's
  GPU count per model, sometimes two models, as ``V100M16|V100M32`` in the trace).

Pods are drawn with replacement within each class, so each class keeps its own mix of shapes;
the number of pods stays the same, which keeps the total GPU request near the original's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from enum import StrEnum

import numpy as np

from gpufleet.model import PodClass
from gpufleet.model.workload import TimedPod


class VariantKind(StrEnum):
    GPUSHARE = "gpushare"
    MULTIGPU = "multigpu"
    CPU = "cpu"
    GPUSPEC = "gpuspec"


def make_variant(
    pods: Sequence[TimedPod],
    kind: VariantKind,
    percent: float,
    seed: int = 0,
    gpus_per_model: Mapping[str, int] | None = None,
) -> list[TimedPod]:
    """A resampled copy of ``pods`` (see the module docstring). Names are kept unique."""
    if not 0 <= percent <= 100:
        raise ValueError(f"percent must be within 0..100, got {percent}")
    rng = np.random.default_rng(seed)
    if kind is VariantKind.GPUSPEC:
        return _constrain_models(pods, percent / 100, rng, gpus_per_model or {})
    by_class: dict[bool, list[TimedPod]] = {True: [], False: []}
    selected = _selector(kind)
    universe = [p for p in pods if kind is VariantKind.CPU or p.pod.gpu.count > 0]
    others = [p for p in pods if p not in universe] if kind is not VariantKind.CPU else []
    for timed in universe:
        by_class[selected(timed)].append(timed)
    if not by_class[True] or (percent < 100 and not by_class[False]):
        raise ValueError(f"the pod list has no pods to resample for a {kind} variant")
    wanted = round(len(universe) * percent / 100)
    chosen = _draw(by_class[True], wanted, rng) + _draw(
        by_class[False], len(universe) - wanted, rng
    )
    result = others + chosen
    order = rng.permutation(len(result))
    return _renamed([result[i] for i in order], kind, percent)


def _selector(kind: VariantKind) -> Callable[[TimedPod], bool]:
    if kind is VariantKind.GPUSHARE:
        return lambda t: t.pod.pod_class is PodClass.SHARED
    if kind is VariantKind.MULTIGPU:
        return lambda t: t.pod.pod_class is PodClass.MULTI_GPU
    return lambda t: t.pod.pod_class is PodClass.CPU_ONLY


def _draw(pool: list[TimedPod], count: int, rng: np.random.Generator) -> list[TimedPod]:
    if count <= 0:
        return []
    return [pool[i] for i in rng.integers(len(pool), size=count)]


def _renamed(pods: list[TimedPod], kind: VariantKind, percent: float) -> list[TimedPod]:
    tag = f"{kind}{percent:g}"
    return [replace(t, pod=replace(t.pod, name=f"{tag}-pod-{i:05d}")) for i, t in enumerate(pods)]


def _constrain_models(
    pods: Sequence[TimedPod],
    share: float,
    rng: np.random.Generator,
    gpus_per_model: Mapping[str, int],
) -> list[TimedPod]:
    if not gpus_per_model:
        raise ValueError("a gpuspec variant needs the cluster's GPU count per model")
    models = sorted(gpus_per_model)
    weights = np.array([gpus_per_model[m] for m in models], np.float64)
    weights /= weights.sum()
    result: list[TimedPod] = []
    for timed in pods:
        pod = timed.pod
        if pod.gpu.count and rng.random() < share:
            first = models[int(rng.choice(len(models), p=weights))]
            allowed = {first}
            if len(models) > 1 and rng.random() < 0.3:
                allowed.add(models[int(rng.choice(len(models), p=weights))])
            pod = replace(pod, gpu_models=frozenset(allowed))
        result.append(replace(timed, pod=pod))
    return _renamed(result, VariantKind.GPUSPEC, share * 100)
