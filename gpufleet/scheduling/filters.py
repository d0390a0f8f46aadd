"""Filter plugins: boolean masks over all nodes, and the reasons nodes fail.

Reason strings follow kube-scheduler's wording where one exists, so that messages read like
"0/1213 nodes are available: 800 Insufficient nvidia.com/gpu, 413 GPU model not allowed".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gpufleet.model import MILLI_PER_GPU
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


class GpuFit:
    """Free GPUs: whole devices, one device with enough share left, or MIG slices."""

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
        if demand.shared:
            need = demand.milli_by_row[sel] if demand.milli_by_row is not None else demand.gpu_milli
            return table.max_free[sel] >= need
        return table.full_free[sel] >= demand.gpu_count

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        n = table.size
        failing = ~self.mask(table, demand)
        if demand.mig_count:
            profile = (
                table.mig_profiles[demand.mig_profile] if demand.mig_profile >= 0 else "unknown"
            )
            return {f"Insufficient nvidia.com/mig-{profile}": failing}
        if demand.shared:
            # A node with enough milli-GPU in total but no single device with enough left is
            # fragmented, which is worth telling apart from a node that is simply full.
            need = demand.milli_by_row if demand.milli_by_row is not None else demand.gpu_milli
            total = table.gpu_free[:n].sum(axis=1)
            fragmented = failing & (total >= need) & (table.gpu_count[:n] > 0)
            return {
                "Insufficient nvidia.com/gpu": failing & ~fragmented,
                "GPU share fragmented (no single device has enough left)": fragmented,
            }
        total = table.gpu_free[:n].sum(axis=1)
        fragmented = failing & (total >= demand.gpu_count * MILLI_PER_GPU)
        return {
            "Insufficient nvidia.com/gpu": failing & ~fragmented,
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
        GpuFit(),
    )
