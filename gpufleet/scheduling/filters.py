"""Filter plugins: boolean masks over all nodes, and the reasons nodes fail.

Reason strings follow kube-scheduler's wording where one exists, so that messages read like
"0/1213 nodes are available: 800 Insufficient nvidia.com/gpu, 413 GPU model not allowed".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

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
        return {"node(s) were unschedulable": ~self.mask(table, demand)}


class GpuModel:
    name = "GpuModel"
    static = True

    def applies(self, demand: Demand) -> bool:
        return demand.model_mask is not None

    def mask(self, table: NodeTable, demand: Demand, rows: Rows = None) -> BoolArray:
        assert demand.model_mask is not None
        return demand.model_mask if rows is None else demand.model_mask[rows]

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        return {"GPU model not allowed": ~self.mask(table, demand)}


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
    """Free CPU and memory (the part of kube-scheduler's NodeResourcesFit we model)."""

    name = "NodeResourcesFit"
    static = False

    def applies(self, demand: Demand) -> bool:
        return demand.cpu_milli > 0 or demand.memory_mib > 0

    def mask(self, table: NodeTable, demand: Demand, rows: Rows = None) -> BoolArray:
        sel = _sel(table, rows)
        fits: BoolArray = table.cpu_free[sel] >= demand.cpu_milli
        if demand.memory_mib:
            fits &= table.mem_free[sel] >= demand.memory_mib
        return fits

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        n = table.size
        return {
            "Insufficient cpu": table.cpu_free[:n] < demand.cpu_milli,
            "Insufficient memory": table.mem_free[:n] < demand.memory_mib,
        }


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
        n = table.size
        failing = ~self.mask(table, demand)
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
    )
