"""What a pod shape takes on a node of each pool, asked of the scheduling core once per shape.

Owns :class:`PoolCatalog`: a :class:`~gpufleet.scheduling.node_table.NodeTable` holding one
empty template node per pool and zone (made by :meth:`NodePool.node`, so with every label and
taint a real node of the pool gets), against which each distinct pod shape (its
:attr:`~gpufleet.model.Pod.signature`) is compiled once by the core's own
:func:`~gpufleet.scheduling.demand.compile_demand`: the GPU model, node selector and
affinity, taints, the GPU resource the node advertises, extended resources, what the pod holds
per device there (a share asked in GPU memory, a whole GPU on a time-sliced node). What comes
out (:class:`ShapeOnPool`) is a handful of integers per (shape, pool) and the zones where the
shape may go, which :mod:`.packing` packs by numpy. A pool's empty node, in the same columns, is
:meth:`PoolCatalog.empty_node`.

Pods with inter-pod rules (affinity, anti-affinity, spread) depend on what else runs where,
which a node that does not exist yet cannot answer: such a pod is given a node of its own
(``alone``), which over-provisions rather than under-provisions.

What it does not do: pack (:mod:`.packing`) or decide (:mod:`.nodepools`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from gpufleet.elastic.node_columns import EmptyNode, NodeColumns, ShapeOnPool, capacity
from gpufleet.model import MILLI_PER_GPU, Node, Pod
from gpufleet.model.nodepools import NodePool
from gpufleet.scheduling.demand import Demand, compile_demand
from gpufleet.scheduling.node_table import IntArray, NodeTable


class PoolCatalog:
    """See the module docstring."""

    def __init__(self, pools: Sequence[NodePool]) -> None:
        self.pools = tuple(pools)
        templates: list[Node] = []
        #: Per pool: its template rows, one per zone (a pool without zones: one row).
        self.rows: list[IntArray] = []
        for index, pool in enumerate(self.pools):
            zones: Sequence[str | None] = pool.zones or (None,)
            first = len(templates)
            for zone in zones:
                templates.append(pool.node(f"pool-{index}-{zone or 'none'}", zone))
            self.rows.append(np.arange(first, len(templates), dtype=np.int64))
        self.table = NodeTable(templates)
        self._shapes: dict[tuple[object, ...], int] = {}
        self._on_pool: list[list[ShapeOnPool | None]] = []
        self.pods: list[Pod] = []

    def shape(self, pod: Pod) -> int:
        """The id of ``pod``'s shape (compiled against every pool the first time it is seen)."""
        signature = pod.signature
        known = self._shapes.get(signature)
        if known is not None:
            return known
        shape = len(self.pods)
        self._shapes[signature] = shape
        self.pods.append(pod)
        demand = compile_demand(self.table, pod)
        self._on_pool.append([self._on_pool_of(pod, demand, p) for p in range(len(self.pools))])
        return shape

    def on_pool(self, shape: int, pool: int) -> ShapeOnPool | None:
        """What a pod of ``shape`` takes on a node of ``pool`` (None: it never fits there)."""
        return self._on_pool[shape][pool]

    def empty_node(self, pool: int) -> EmptyNode:
        table = self.table
        row = int(self.rows[pool][0])
        return EmptyNode(
            int(table.cpu_cap[row]),
            int(table.mem_cap[row]),
            int(table.units_cap[row]),
            table.gpu_free[row].copy(),
            table.mig_cap[row].copy(),
            table.ext_cap[row].copy(),
        )

    def _on_pool_of(self, pod: Pod, demand: Demand, pool: int) -> ShapeOnPool | None:
        rows = self.rows[pool]
        zones = demand.static_mask[rows].copy()
        if not zones.any():
            return None
        row = int(rows[0])
        milli = demand.gpu_milli if demand.milli_by_row is None else int(demand.milli_by_row[row])
        if demand.gpu_count and not 0 < milli <= MILLI_PER_GPU:
            return None
        if demand.mig_count and demand.mig_profile < 0:
            return None
        if any(column < 0 for column, _ in demand.extended):
            return None
        shape = ShapeOnPool(
            cpu=demand.cpu_milli,
            memory=demand.memory_mib,
            devices=demand.gpu_count,
            milli=milli,
            units=demand.units,
            mig_profile=demand.mig_profile if demand.mig_count else -1,
            mig_count=demand.mig_count,
            extended=demand.extended,
            zones=zones,
            alone=pod.rules is not None,
        )
        empty = NodeColumns.of_empty(self.empty_node(pool), 1, zone=int(np.argmax(zones)))
        fit = int(capacity(empty, shape)[0])
        if fit == 0:
            return None
        return replace(shape, per_empty_node=1 if shape.alone else fit)


__all__ = ["PoolCatalog"]
