"""Place a workload's gang, inside one topology domain when it asks to be.

A workload may ask to stay within one domain of a topology level (a node label: NVLink
domain, rack, zone), ``required`` (else it waits) or ``preferred`` (else anywhere). Domains are
tried from the tightest that could hold the gang (the least free GPU capacity that still covers
its request) upwards, so that big domains stay whole for big gangs; the first that fits wins.

What it does not do: quotas, order or preemption (the core does).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.model import Pod
from gpufleet.model.tenancy import TopologyMode, Workload
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
            single = engine.place(pods[0], explain=explain, restrict=restrict)
            return single if isinstance(single, Unschedulable) else [single]
        return engine.place_gang(pods, explain=explain, restrict=restrict)
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
            result = engine.place_gang(
                pods, explain=explain, restrict=allowed & (ids == domains[d])
            )
            if not isinstance(result, Unschedulable):
                return result
    if request.mode is TopologyMode.PREFERRED:
        return engine.place_gang(pods, explain=explain, restrict=restrict)
    return Unschedulable(
        pods[0],
        int(table.alive[:n].sum()),
        {f"no single {request.level} domain fits the gang": n},
        f"{workload.key} needs all {len(pods)} pods in one {request.level} domain "
        f"({tried} domain(s) with enough free GPUs tried).",
    )
