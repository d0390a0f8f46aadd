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

import numpy as np

from gpufleet.elastic.node_columns import EmptyNode, ShapeOnPool, fits_on_empty
from gpufleet.model import MILLI_PER_GPU, Node, Pod
from gpufleet.model.nodepools import NodePool
from gpufleet.scheduling.demand import compile_demand
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable


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
        self._starts = np.array([int(rows[0]) for rows in self.rows], np.int64)
        self._shapes: dict[tuple[object, ...], int] = {}
        self._on_pool: list[list[ShapeOnPool | None]] = []
        self._empty: dict[int, EmptyNode] = {}
        #: What each distinct request takes on each node shape (one object per request).
        self._interned: dict[tuple[object, ...], ShapeOnPool | None] = {}
        self._templates: dict[int, tuple[object, ...]] = {}
        self.pods: list[Pod] = []
        self._kinds: dict[tuple[object, ...], int] = {}

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
        on_pool: list[ShapeOnPool | None] = [None] * len(self.pools)
        self._on_pool.append(on_pool)
        if not self.pools or (demand.mig_count and demand.mig_profile < 0):
            return shape
        if any(column < 0 for column, _ in demand.extended):
            return shape
        static = demand.static_mask
        somewhere = np.logical_or.reduceat(static, self._starts).tolist()
        everywhere = np.logical_and.reduceat(static, self._starts).tolist()
        if demand.milli_by_row is None:
            milli = [demand.gpu_milli] * len(self.pools)
        else:
            milli = demand.milli_by_row[self._starts].tolist()
        # What the request takes, less the node shape and zones (added per pool below).
        request = (
            demand.cpu_milli, demand.memory_mib, demand.gpu_count, demand.units,
            demand.mig_profile if demand.mig_count else -1, demand.mig_count, demand.extended,
            pod.rules is not None,
        )  # fmt: skip
        for pool, fits in enumerate(somewhere):
            if not fits or (demand.gpu_count and not 0 < milli[pool] <= MILLI_PER_GPU):
                continue
            zones = None if everywhere[pool] else self._zones_of(static, pool).tobytes()
            key = (self._template_key(pool), milli[pool], zones, request)
            found = self._interned.get(key, False)
            if found is False:
                found = self._interned[key] = self._new_shape(
                    request, milli[pool], self._zones_of(static, pool), pool
                )
            on_pool[pool] = found  # type: ignore[assignment]
        return shape

    def _zones_of(self, static: BoolArray, pool: int) -> BoolArray:
        start = int(self._starts[pool])
        zones: BoolArray = static[start : start + self.rows[pool].size]
        return zones

    def kind(self, shapes: tuple[tuple[int, int], ...], topology: object) -> int:
        """An integer for a unit of pending work of ``shapes`` (shape id, pods) and
        ``topology``, the same every time it is asked."""
        key = (shapes, topology)
        known = self._kinds.get(key)
        if known is None:
            known = self._kinds[key] = len(self._kinds)
        return known

    def on_pool(self, shape: int, pool: int) -> ShapeOnPool | None:
        """What a pod of ``shape`` takes on a node of ``pool`` (None: it never fits there).
        Shapes that take the same on a pool are the same object there (work of both packs
        as one)."""
        return self._on_pool[shape][pool]

    def empty_node(self, pool: int) -> EmptyNode:
        known = self._empty.get(pool)
        if known is not None:
            return known
        table = self.table
        row = int(self.rows[pool][0])
        empty = self._empty[pool] = EmptyNode(
            int(table.cpu_cap[row]),
            int(table.mem_cap[row]),
            int(table.units_cap[row]),
            table.gpu_free[row].copy(),
            table.mig_cap[row].copy(),
            table.ext_cap[row].copy(),
        )
        return empty

    def _new_shape(
        self, request: tuple[object, ...], milli: int, zones: BoolArray, pool: int
    ) -> ShapeOnPool | None:
        cpu, memory, devices, units, mig_profile, mig_count, extended, alone = request
        fields = (cpu, memory, devices, milli, units, mig_profile, mig_count, extended)
        probe = ShapeOnPool(*fields, zones, 0, alone)  # type: ignore[arg-type]
        fit = fits_on_empty(probe, self.empty_node(pool))
        if not fit:
            return None
        per_node = 1 if alone else fit
        return ShapeOnPool(*fields, zones.copy(), per_node, alone, bool(zones.all()))  # type: ignore[arg-type]

    def _template_key(self, pool: int) -> tuple[object, ...]:
        known = self._templates.get(pool)
        if known is None:
            empty = self.empty_node(pool)
            known = self._templates[pool] = (
                empty.cpu, empty.memory, empty.units, empty.devices.tobytes(),
                empty.mig.tobytes(), empty.extended.tobytes(), len(self.rows[pool]),
            )  # fmt: skip
        return known


__all__ = ["PoolCatalog"]
