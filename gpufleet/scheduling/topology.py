"""Place a workload's gang, inside one topology domain when it asks to be.

A workload may ask to stay within one domain of a topology level (a node label: NVLink
domain, rack, zone), ``required`` (else it waits) or ``preferred`` (else anywhere). Domains are
tried from the tightest that could hold the gang (the least free GPU capacity that still covers
its request) upwards, so that big domains stay whole for big gangs; the first that fits wins.

A gang's GPU pods also land on one GPU model, as Kueue gives a pod set one flavor (a
data-parallel job runs at the pace of its slowest GPU), unless the workload allows mixed models:
where the policy's placement mixes models, the gang is placed again on each model in turn (the
models it first chose, most pods first, then the others), the first that holds it winning.

What it does not do: quotas, order or preemption (the core does).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.model import Pod
from gpufleet.model.workload import TopologyMode, Workload
from gpufleet.scheduling.capacity import is_critical
from gpufleet.scheduling.engine import Bound, PlacementEngine, Unschedulable
from gpufleet.scheduling.node_table import BoolArray


def least_gpu_milli(engine: PlacementEngine, pods: Sequence[Pod]) -> int:
    """The least milli-GPU ``pods`` hold wherever they go (a domain with less free cannot
    hold them): per pod, its devices times the least it takes per device on a row it may use."""
    need = 0
    for pod in pods:
        demand = engine.demand(pod)
        per_device = demand.gpu_milli
        if demand.milli_by_row is not None:
            usable = demand.milli_by_row[demand.static_mask]
            per_device = int(usable.min()) if usable.size else demand.gpu_milli
        need += demand.gpu_count * per_device
    return need


def place_workload(
    engine: PlacementEngine,
    workload: Workload,
    restrict: BoolArray | None = None,
    explain: bool = False,
) -> list[Bound] | Unschedulable:
    """Place the gang of ``workload`` (its first ``gang_size`` pods), all or nothing, on a
    trial the caller commits or rolls back (``engine.table.begin_trial()`` before)."""
    pods = workload.pods[: workload.gang_size]
    request = workload.topology
    if request is None:
        if len(pods) == 1:
            single = engine.place(pods[0], explain, restrict, *_stakes(workload))
            return single if isinstance(single, Unschedulable) else [single]
        return place_gang(engine, workload, restrict, explain)
    table = engine.table
    n = table.size
    column = table.label_ids.get(request.level)
    tried = 0
    if column is not None:
        ids = column[:n]
        allowed = (
            table.schedulable[:n] if restrict is None else table.schedulable[:n] & restrict[:n]
        )
        need = least_gpu_milli(engine, pods)
        free = table.gpu_free[:n].sum(axis=1)
        labelled = (ids >= 0) & allowed
        domains, inverse = np.unique(ids[labelled], return_inverse=True)
        capacity = np.bincount(inverse, weights=free[labelled], minlength=domains.size)
        for d in np.argsort(capacity, kind="stable"):
            if capacity[d] < need:
                continue
            tried += 1
            result = place_gang(engine, workload, allowed & (ids == domains[d]), explain)
            if not isinstance(result, Unschedulable):
                return result
    if request.mode is TopologyMode.PREFERRED:
        return place_gang(engine, workload, restrict, explain)
    return Unschedulable(
        pods[0],
        int(table.alive[:n].sum()),
        {f"no single {request.level} domain fits the gang": n},
        f"{workload.key} needs all {len(pods)} pods in one {request.level} domain "
        f"({tried} domain(s) with enough free GPUs tried).",
    )


def one_model(workload: Workload) -> bool:
    """Must the gang's GPU pods share one GPU model (two or more of them, mixing not allowed)?"""
    if workload.mixed_gpu_models:
        return False
    gang = workload.pods[: workload.gang_size]
    return sum(1 for p in gang if p.gpu.count or p.gpu.mig_count) > 1


def place_gang(
    engine: PlacementEngine,
    workload: Workload,
    restrict: BoolArray | None = None,
    explain: bool = False,
) -> list[Bound] | Unschedulable:
    """``engine.place_gang`` of the workload's gang, its GPU pods on one GPU model (see the
    module docstring)."""
    pods = workload.pods[: workload.gang_size]
    stakes = _stakes(workload)
    if not one_model(workload):
        return engine.place_gang(pods, explain, restrict, *stakes)
    table = engine.table
    mark = table.begin_trial()
    result = engine.place_gang(pods, explain, restrict, *stakes)
    if isinstance(result, Unschedulable):
        table.rollback(mark)
        return result
    chosen = [int(table.model_id[b.allocation.row]) for b in result if _uses_gpu(b)]
    if len(set(chosen)) <= 1:
        table.commit(mark)
        return result
    table.rollback(mark)
    n = table.size
    model_id = table.model_id[:n]
    no_gpu = table.gpu_count[:n] == 0
    first = sorted(set(chosen), key=lambda m: (-chosen.count(m), chosen.index(m)))
    others = [m for m in range(len(table.model_names)) if m not in first]
    # Only models with free GPUs enough for the whole gang between their nodes are tried.
    need = sum(p.gpu.total_milli for p in pods)
    usable = table.alive[:n] if restrict is None else table.alive[:n] & restrict[:n]
    free = np.bincount(
        model_id[usable & (model_id >= 0)],
        weights=table.gpu_free[:n][usable & (model_id >= 0)].sum(axis=1),
        minlength=len(table.model_names),
    )
    for model in (*first, *others):
        if free[model] < need:
            continue
        rows = (model_id == model) | no_gpu
        allowed = rows if restrict is None else rows & restrict[:n]
        placed = engine.place_gang(pods, False, allowed, *stakes)
        if not isinstance(placed, Unschedulable):
            return placed
    return Unschedulable(
        pods[0],
        int(table.alive[:n].sum()),
        {"no single GPU model has room for the whole gang": n},
        f"{workload.key} needs its {len(pods)} pods on one GPU model (annotate it "
        f'gpufleet.dev/mixed-gpu-models: "true" to allow mixing).',
    )


def _stakes(workload: Workload) -> tuple[bool, bool]:
    """Is ``workload`` critical, is it checkpointed (what placement prefers for it:
    :mod:`.capacity`)?"""
    return is_critical(workload), workload.checkpoint_interval is not None


def _uses_gpu(bound: Bound) -> bool:
    allocation = bound.allocation
    return bool(allocation.gpu_indices or allocation.mig_slices)
