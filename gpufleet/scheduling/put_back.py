"""Putting a pod that already runs back on the node table: the one way it is done.

Owns :func:`put_back`: what a pod bound at a placement holds, taken on the table as an existing
holder (the core taking in a pod bound by someone else or found at a resync, a node's pods taken
again on its new shape, the autoscaler's snapshot of the cluster). A bound pod is a fact, not a
request: it may sit on a device that is unhealthy now; devices and MIG slices its node no longer
lists (the device plugin withdrew them) stay counted apart, in the allocation, and its units
count against what the node advertises, so that nothing new goes there until usage fits again
(as kube-scheduler counts a node's requested resources); extended resources are taken as far as
the node has them free. The table's own put-back of an allocation it gave
(:meth:`~gpufleet.scheduling.node_table.NodeTable.reallocate`) is the same idea from an
:class:`~gpufleet.scheduling.table_records.Allocation`, not from a placement.

It does not place anything new (the engine's ``reserve``), nor bind on the simulated world's
table (its ground truth: a bind there fails on a device taken or missing).
"""

from __future__ import annotations

from gpufleet.model import Placement, Pod
from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.table_records import Allocation, Claim


def bound_claim(
    table: NodeTable, pod: Pod, placement: Placement, demand: Demand, beyond: bool = False
) -> Claim:
    """What ``pod`` (compiled as ``demand``), running at ``placement``, holds on the table.
    ``beyond``: it ran there before the node shrank, so it is counted even beyond what is
    free (its extended resources whole, its MIG slices even where taken)."""
    row = table.row_of[placement.node]
    position_of = table.position_of(row)
    free_slices = (
        set(table.free_mig_slices(row, demand.mig_profile))
        if beyond and placement.mig_slices and demand.mig_profile >= 0
        else None
    )
    slots = tuple(
        (position_of[g], slot)
        for g, slot in placement.mig_slices
        if g in position_of and (free_slices is None or (position_of[g], slot) in free_slices)
    )
    return Claim(
        row,
        pod.cpu_milli,
        pod.memory_mib,
        tuple(position_of[i] for i in placement.gpu_indices if i in position_of),
        placement.milli_per_device,
        demand.mig_profile if slots else -1,
        slots,
        demand.tag,
        tuple(
            (rid, amount if beyond else min(amount, int(table.ext_free[row, rid])))
            for rid, amount in demand.extended
            if rid >= 0
        ),
        table.pod_index.identity(pod),
        demand.units if placement.gpu_indices else 0,
        existing=True,  # it may run on a device that is unhealthy now
        missing=tuple(i for i in placement.gpu_indices if i not in position_of),
        beyond=beyond,
    )


def put_back(
    table: NodeTable, pod: Pod, placement: Placement, demand: Demand, beyond: bool = False
) -> Allocation:
    """Take on ``table`` what ``pod`` running at ``placement`` holds (:func:`bound_claim`)."""
    return table.allocate(bound_claim(table, pod, placement, demand, beyond))
