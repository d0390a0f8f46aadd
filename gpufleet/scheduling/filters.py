"""Filter plugins: boolean masks over all nodes, and the reasons nodes fail.

Reason strings follow kube-scheduler's wording where one exists, so that messages read like
"0/1213 nodes are available: 800 Insufficient nvidia.com/gpu, 413 GPU model not allowed".
A GPU pod is told "Insufficient nvidia.com/gpu" for a node without GPUs (as kube-scheduler
would: the node has none), "GPU model not allowed" for a node with GPUs of another model; when
no node has a model the pod may use, :func:`missing_gpu_models` names it for the message.
The chain runs in kube-scheduler's order (the inter-pod rules last), and a node counts under
the first filter it fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gpufleet.model import GFD_LABELS, MILLI_PER_GPU, Pod
from gpufleet.model.node import UNSCHEDULABLE_REASON
from gpufleet.scheduling import interpod, spread
from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.framework import FilterPlugin
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable

#: Rows to evaluate: None for all rows ``0..table.size``.
Rows = IntArray | None


def _sel(table: NodeTable, rows: Rows) -> slice | IntArray:
    return slice(0, table.size) if rows is None else rows


class NodeUnschedulable:
    name = "NodeUnschedulable"
    static = True

    def applies(self, demand: Demand) -> bool:
        return True

    def mask(self, table: NodeTable, demand: Demand, rows: Rows = None) -> BoolArray:
        return table.schedulable[_sel(table, rows)]

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        """Each unschedulable node under its own reason (cordoned, being removed by an
        autoscaler, not ready...: :attr:`NodeTable.unschedulable_reasons`)."""
        failing = ~self.mask(table, demand)
        plain = failing.copy()
        found: dict[str, BoolArray] = {}
        for row, why in table.unschedulable_reasons.items():
            if row >= failing.size or not failing[row] or why == UNSCHEDULABLE_REASON:
                continue
            mask = found.get(why)
            if mask is None:
                mask = found[why] = np.zeros(failing.size, np.bool_)
            mask[row] = True
            plain[row] = False
        return {UNSCHEDULABLE_REASON: plain, **found}


class GpuModel:
    name = "GpuModel"
    static = True

    def applies(self, demand: Demand) -> bool:
        return demand.model_mask is not None

    def mask(self, table: NodeTable, demand: Demand, rows: Rows = None) -> BoolArray:
        assert demand.model_mask is not None
        return demand.model_mask if rows is None else demand.model_mask[rows]

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        failing = ~self.mask(table, demand)
        no_gpus = failing & (table.model_id[: table.size] < 0)
        return {"GPU model not allowed": failing & ~no_gpus, "Insufficient nvidia.com/gpu": no_gpus}


def missing_gpu_models(table: NodeTable, pod: Pod) -> list[str]:
    """The GPU models the pod may use when no node in the cluster has any of them (by
    ``gpufleet.dev/gpu-models``, or a nodeSelector or required node affinity on
    ``nvidia.com/gpu.product``); empty when some node has one."""
    n = table.size
    alive = table.alive[:n]
    if pod.gpu_models is not None:
        present = {table.model_names[i] for i in np.unique(table.model_id[:n][alive]) if i >= 0}
        if not pod.gpu_models & present:
            return sorted(pod.gpu_models)
    column = table.label_ids.get(GFD_LABELS.PRODUCT)
    ids = set(np.unique(column[:n][alive]).tolist()) if column is not None else set()
    values = table.label_values.get(GFD_LABELS.PRODUCT, {})
    products = {name for name, vid in values.items() if vid in ids}
    wanted = [v for k, v in pod.node_selector if k == GFD_LABELS.PRODUCT and v not in products]
    if wanted:
        return wanted
    missing: set[str] = set()
    for term in pod.required_affinity:
        on_product = [
            r for r in term.match_expressions if r.key == GFD_LABELS.PRODUCT and r.operator == "In"
        ]
        if not any(not set(r.values) & products for r in on_product):
            return []  # some term may match an existing product
        for r in on_product:
            if not set(r.values) & products:
                missing.update(r.values)
    return sorted(missing)


class NodeAffinity:
    name = "NodeAffinity"
    static = True

    def applies(self, demand: Demand) -> bool:
        return demand.affinity_mask is not None

    def mask(self, table: NodeTable, demand: Demand, rows: Rows = None) -> BoolArray:
        assert demand.affinity_mask is not None
        return demand.affinity_mask if rows is None else demand.affinity_mask[rows]

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        return {"node(s) didn't match Pod's node affinity/selector": ~self.mask(table, demand)}


class TaintToleration:
    name = "TaintToleration"
    static = True

    def applies(self, demand: Demand) -> bool:
        return demand.taint_mask is not None

    def mask(self, table: NodeTable, demand: Demand, rows: Rows = None) -> BoolArray:
        assert demand.taint_mask is not None
        return demand.taint_mask if rows is None else demand.taint_mask[rows]

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        return {"node(s) had untolerated taint": ~self.mask(table, demand)}


class NodeResourcesFit:
    """Free CPU, memory and extended resources (the part of kube-scheduler's NodeResourcesFit
    we model; GPUs are :class:`GpuFit`'s)."""

    name = "NodeResourcesFit"
    static = False

    def applies(self, demand: Demand) -> bool:
        return demand.cpu_milli > 0 or demand.memory_mib > 0 or bool(demand.extended)

    def mask(self, table: NodeTable, demand: Demand, rows: Rows = None) -> BoolArray:
        sel = _sel(table, rows)
        fits: BoolArray = table.cpu_free[sel] >= demand.cpu_milli
        if demand.memory_mib:
            fits &= table.mem_free[sel] >= demand.memory_mib
        for rid, amount in demand.extended:
            if rid < 0:
                fits[:] = False
            else:
                fits &= table.ext_free[sel, rid] >= amount
        return fits

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        n = table.size
        reasons = {
            "Insufficient cpu": table.cpu_free[:n] < demand.cpu_milli,
            "Insufficient memory": table.mem_free[:n] < demand.memory_mib,
        }
        for (rid, amount), (name, _) in zip(demand.extended, demand.extended_request, strict=True):
            short = np.ones(n, np.bool_) if rid < 0 else table.ext_free[:n, rid] < amount
            reasons[f"Insufficient {name}"] = short
        return reasons


class GpuResource:
    """The GPU resource a pod takes units of: a node must advertise it (``nvidia.com/gpu`` or,
    renamed by time-slicing, ``nvidia.com/gpu.shared``) and, where the device plugin refuses
    more than one replica per pod (``failRequestsGreaterThanOne``), allow the count."""

    name = "GpuResource"
    static = True

    def applies(self, demand: Demand) -> bool:
        return demand.resource_mask is not None

    def mask(self, table: NodeTable, demand: Demand, rows: Rows = None) -> BoolArray:
        assert demand.resource_mask is not None
        return demand.resource_mask if rows is None else demand.resource_mask[rows]

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        n = table.size
        failing = ~self.mask(table, demand)
        one_unit = failing & table.one_unit[:n] & (table.gpu_count[:n] > 0)
        return {
            f"Insufficient {demand.resource}": failing & ~one_unit,
            "node(s) give one GPU replica per pod": one_unit,
        }


class GpuFit:
    """Free GPUs: whole devices, devices with enough left (a share, or replicas on a
    time-sliced node), or MIG slices; and free units of the node's GPU resource."""

    name = "GpuFit"
    static = False

    def applies(self, demand: Demand) -> bool:
        return demand.wants_gpu

    def mask(self, table: NodeTable, demand: Demand, rows: Rows = None) -> BoolArray:
        sel = _sel(table, rows)
        if demand.mig_count:
            if demand.mig_profile < 0:
                return np.zeros(table.cpu_free[sel].shape, np.bool_)
            fits: BoolArray = table.mig_free[sel, demand.mig_profile] >= demand.mig_count
            return fits
        fits = self._devices_fit(table, demand, sel)
        if demand.units and table.replicated:
            fits &= table.units_free[sel] >= demand.units
        return fits

    @staticmethod
    def _devices_fit(table: NodeTable, demand: Demand, sel: slice | IntArray) -> BoolArray:
        need = demand.milli_by_row
        fits: BoolArray
        if need is None and demand.shared:
            fits = table.max_free[sel] >= demand.gpu_milli
        elif need is None:
            fits = table.full_free[sel] >= demand.gpu_count
        elif demand.shared or demand.gpu_count == 1:
            fits = table.max_free[sel] >= need[sel]
        else:
            # Several whole GPUs where some rows hand out replicas: that many devices with room.
            room = table.gpu_free[sel] >= need[sel][:, None]
            fits = np.count_nonzero(room, axis=1) >= demand.gpu_count
        return fits

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        failing = ~self.mask(table, demand)
        if not table.any_unhealthy:
            return self._capacity_reasons(table, demand, failing)
        sick = _only_unhealthy_fit(table, demand, failing)
        reasons = self._capacity_reasons(table, demand, failing & ~sick)
        return {**reasons, UNHEALTHY_GPUS: sick} if sick.any() else reasons

    def _capacity_reasons(
        self, table: NodeTable, demand: Demand, failing: BoolArray
    ) -> Mapping[str, BoolArray]:
        n = table.size
        if demand.mig_count:
            profile = (
                table.mig_profiles[demand.mig_profile] if demand.mig_profile >= 0 else "unknown"
            )
            return {f"Insufficient nvidia.com/mig-{profile}": failing}
        units = np.zeros(n, np.bool_)
        if demand.units and table.replicated:
            units = failing & (table.units_free[:n] < demand.units)
            failing = failing & ~units
        per_device = demand.milli_by_row if demand.milli_by_row is not None else demand.gpu_milli
        total = table.gpu_free[:n].sum(axis=1)
        if demand.shared:
            # A node with enough milli-GPU in total but no single device with enough left is
            # fragmented, which is worth telling apart from a node that is simply full.
            fragmented = failing & (total >= per_device) & (table.gpu_count[:n] > 0)
            return {
                f"Insufficient {demand.resource}": (failing & ~fragmented) | units,
                "GPU share fragmented (no single device has enough left)": fragmented,
            }
        fragmented = failing & (total >= demand.gpu_count * per_device)
        return {
            f"Insufficient {demand.resource}": (failing & ~fragmented) | units,
            "GPUs fragmented (enough milli-GPU left, too few whole devices)": fragmented,
        }


#: Why a node fails a GPU pod that its unhealthy devices keep off it: it would fit if they
#: were healthy, and its healthy devices could not hold it even with nothing running there.
UNHEALTHY_GPUS = "node(s) had unhealthy GPUs"


def _only_unhealthy_fit(table: NodeTable, demand: Demand, failing: BoolArray) -> BoolArray:
    """Failing rows that the row's unhealthy devices are why (see :data:`UNHEALTHY_GPUS`; a
    loop over the rows with unhealthy devices only). A row whose healthy devices are merely
    busy is not: the pod waits for them as on any full node (Insufficient)."""
    sick = np.zeros(failing.size, np.bool_)
    for row in table.unhealthy_rows():
        if row < failing.size and failing[row]:
            sick[row] = _fits_if_healthy(table, demand, row) and not _fits_healthy_empty(
                table, demand, row
            )
    return sick


def _fits_healthy_empty(table: NodeTable, demand: Demand, row: int) -> bool:
    """Would the pod's GPUs fit the row's healthy devices with nothing running there?"""
    capacity, slices, units = table.healthy_capacity(row)
    if demand.mig_count:
        pid = demand.mig_profile
        return pid >= 0 and int(slices[pid]) >= demand.mig_count
    if demand.units and table.replicated and units < demand.units:
        return False
    need = demand.gpu_milli if demand.milli_by_row is None else int(demand.milli_by_row[row])
    if demand.milli_by_row is None and not demand.shared:
        need = MILLI_PER_GPU
    if demand.shared:
        return bool(capacity.max() >= need)
    return int(np.count_nonzero(capacity >= need)) >= demand.gpu_count


def _fits_if_healthy(table: NodeTable, demand: Demand, row: int) -> bool:
    gpus, slices, units = table.withheld(row)
    if demand.mig_count:
        pid = demand.mig_profile
        return pid >= 0 and int(table.mig_free[row, pid] + slices[pid]) >= demand.mig_count
    if demand.units and table.replicated and table.units_free[row] + units < demand.units:
        return False
    free = table.gpu_free[row] + gpus
    need = demand.gpu_milli if demand.milli_by_row is None else int(demand.milli_by_row[row])
    if demand.milli_by_row is None and not demand.shared:
        need = MILLI_PER_GPU
    if demand.shared:
        return bool(free.max() >= need)
    return int(np.count_nonzero(free >= need)) >= demand.gpu_count


class PodTopologySpread:
    """``topologySpreadConstraints`` with ``whenUnsatisfiable: DoNotSchedule`` (:mod:`.spread`)."""

    name = "PodTopologySpread"
    static = False

    def applies(self, demand: Demand) -> bool:
        return demand.spread is not None and bool(demand.spread.filters)

    def mask(self, table: NodeTable, demand: Demand, rows: Rows = None) -> BoolArray:
        assert demand.spread is not None
        missing, skewed = spread.failures(table, demand.spread)
        passes: BoolArray = ~(missing | skewed)
        return passes if rows is None else passes[rows]

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        assert demand.spread is not None
        missing, skewed = spread.failures(table, demand.spread)
        return {spread.MISSING_LABEL_REASON: missing, spread.SKEW_REASON: skewed}


class InterPodAffinity:
    """The pod's own required pod affinity and anti-affinity (:mod:`.interpod`). The symmetric
    rule (running pods' anti-affinity) reads the pod's labels, not only its signature, so the
    engine applies it per pod (:func:`.interpod.existing_anti_affinity_failures`)."""

    name = "InterPodAffinity"
    static = False

    def applies(self, demand: Demand) -> bool:
        return demand.interpod is not None and demand.interpod.filters

    def mask(self, table: NodeTable, demand: Demand, rows: Rows = None) -> BoolArray:
        assert demand.interpod is not None
        affinity, anti = interpod.failures(table, demand.interpod)
        passes: BoolArray = ~(affinity | anti)
        return passes if rows is None else passes[rows]

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        assert demand.interpod is not None
        affinity, anti = interpod.failures(table, demand.interpod)
        return {interpod.AFFINITY_REASON: affinity, interpod.ANTI_AFFINITY_REASON: anti}


def pod_rules_mask(table: NodeTable, demand: Demand) -> BoolArray:
    """Rows where the pod's own inter-pod filters pass, over all rows (the engine keeps it
    while the table's state is the same)."""
    mask = np.ones(table.size, np.bool_)
    for plugin in (_SPREAD, _INTERPOD):
        if plugin.applies(demand):
            mask &= plugin.mask(table, demand)
    return mask


_SPREAD = PodTopologySpread()
_INTERPOD = InterPodAffinity()


def default_filters() -> Sequence[FilterPlugin]:
    """The filter chain every policy shares, in the order reasons are attributed."""
    return (
        NodeUnschedulable(),
        NodeAffinity(),
        TaintToleration(),
        GpuModel(),
        NodeResourcesFit(),
        GpuResource(),
        GpuFit(),
        PodTopologySpread(),
        InterPodAffinity(),
    )
