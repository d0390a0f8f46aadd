"""What a pod shape takes on a node of each pool, asked of the scheduling core once per shape.

Owns :class:`PoolCatalog`: a :class:`~gpufleet.scheduling.node_table.NodeTable` holding one
empty template node per pool and zone (made by :meth:`NodePool.node`, so with every label and
taint a real node of the pool gets), against which each distinct pod shape (its
:attr:`~gpufleet.model.Pod.signature`) is compiled by the core's own
:func:`~gpufleet.scheduling.demand.compile_demand`: the GPU model, node selector and
affinity, taints, the GPU resource the node advertises, extended resources, what the pod holds
per device there (a share asked in GPU memory, a whole GPU on a time-sliced node). None of
that depends on the pod's CPU and memory, so the core compiles one pod per placement (the
signature less those two) and the shapes that differ only in them share it. What comes out
(:class:`ShapeOnPool`) is a handful of integers per (shape, pool) and the zones where the
shape may go, interned (pools with alike nodes share the object, numbered in
:attr:`PoolCatalog.interned`), which :mod:`.packing` packs by numpy. A pool's empty node,
in the same columns, is :meth:`PoolCatalog.empty_node`.

Pods with inter-pod rules (affinity, anti-affinity, spread) depend on what else runs where,
which a node that does not exist yet cannot answer: such a pod is given a node of its own
(``alone``), which over-provisions rather than under-provisions.

What it does not do: pack (:mod:`.packing`) or decide (:mod:`.nodepools`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gpufleet.elastic.node_columns import EmptyNode, ShapeOnPool, fit_on_empty
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
        #: What each distinct request takes on each node shape (one object per request, by
        #: its index in ``interned``; -1: it does not fit).
        self._interned: dict[tuple[object, ...], int] = {}
        self.interned: list[ShapeOnPool] = []
        #: Per shape id and pool: the index in ``interned`` of what it takes there (-1: none).
        self._interned_ids = np.full((0, len(self.pools)), -1, np.int64)
        self._templates: dict[tuple[object, ...], int] = {}
        self._template_ids: dict[int, int] = {}
        self._requests: dict[tuple[object, ...], int] = {}
        self._placements: dict[tuple[object, ...], _Placement | None] = {}
        self.pods: list[Pod] = []
        self._kinds: dict[tuple[object, ...], int] = {}

    @property
    def known_shapes(self) -> Mapping[tuple[object, ...], int]:
        """The ids of the shapes compiled so far, by pod signature (to read, not to change:
        :meth:`shape` adds to it)."""
        return self._shapes

    def shape(self, pod: Pod) -> int:
        """The id of ``pod``'s shape (compiled against every pool the first time it is seen)."""
        signature = pod.signature
        known = self._shapes.get(signature)
        if known is not None:
            return known
        shape = len(self.pods)
        self._shapes[signature] = shape
        self.pods.append(pod)
        on_pool: list[ShapeOnPool | None] = [None] * len(self.pools)
        self._on_pool.append(on_pool)
        if shape >= self._interned_ids.shape[0]:
            grown = np.full((2 * shape + 16, len(self.pools)), -1, np.int64)
            grown[:shape] = self._interned_ids[:shape]
            self._interned_ids = grown
        placement = self._placement(pod)
        if placement is None:
            return shape
        where, rest = placement
        # What the request takes, less the node shape and zones (added per pool below), as a
        # small integer: the key of each pool's interned answer is then cheap to hash.
        request = (pod.cpu_milli, pod.memory_mib, *rest)
        request_id = self._requests.get(request)
        if request_id is None:
            request_id = self._requests[request] = len(self._requests)
        ids = [-1] * len(self.pools)
        for pool, template, milli, zones_key, zones in where:
            key = (template, milli, zones_key, request_id)
            index = self._interned.get(key)
            if index is None:
                found = self._new_shape(request, milli, zones, pool)
                index = self._interned[key] = -1 if found is None else len(self.interned)
                if found is not None:
                    self.interned.append(found)
            if index >= 0:
                on_pool[pool] = self.interned[index]
                ids[pool] = index
        self._interned_ids[shape] = ids
        return shape

    def interned_ids(self, shapes: IntArray, pool: int) -> IntArray:
        """For each of ``shapes`` (ids), what it takes on ``pool`` as an index into
        :attr:`interned` (-1: it never fits there)."""
        found: IntArray = self._interned_ids[shapes, pool]
        return found

    def _placement(self, pod: Pod) -> _Placement | None:
        """Where pods like ``pod`` may go whatever CPU and memory they ask: what the catalog
        reads of the core's compiled demand besides them (the static mask, milli-GPU per
        device, MIG, extended resources) depends on the fields of this key only, so the core
        compiles one pod per key and every shape of it shares the answer."""
        key = (
            pod.gpu, pod.gpu_models, pod.node_selector, pod.required_affinity, pod.tolerations,
            pod.extended, pod.rules is not None,
        )  # fmt: skip
        known = self._placements.get(key, False)
        if known is not False:
            return known  # type: ignore[return-value]
        found = self._placements[key] = self._compile_placement(pod)
        return found

    def _compile_placement(self, pod: Pod) -> _Placement | None:
        demand = compile_demand(self.table, pod)
        if not self.pools or (demand.mig_count and demand.mig_profile < 0):
            return None
        if any(column < 0 for column, _ in demand.extended):
            return None
        static = demand.static_mask
        somewhere = np.logical_or.reduceat(static, self._starts).tolist()
        everywhere = np.logical_and.reduceat(static, self._starts).tolist()
        if demand.milli_by_row is None:
            milli = [demand.gpu_milli] * len(self.pools)
        else:
            milli = demand.milli_by_row[self._starts].tolist()
        where: list[tuple[int, int, int, bytes | None, BoolArray]] = []
        for pool, fits in enumerate(somewhere):
            if not fits or (demand.gpu_count and not 0 < milli[pool] <= MILLI_PER_GPU):
                continue
            zones = self._zones_of(static, pool)
            zones_key = None if everywhere[pool] else zones.tobytes()
            where.append((pool, self._template_id(pool), milli[pool], zones_key, zones))
        rest = (
            demand.gpu_count, demand.units, demand.mig_profile if demand.mig_count else -1,
            demand.mig_count, demand.extended, pod.rules is not None,
        )  # fmt: skip
        return where, rest

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
        fit = fit_on_empty(
            self.empty_node(pool), cpu, memory, units, devices, milli,  # type: ignore[arg-type]
            mig_profile, mig_count, extended,  # type: ignore[arg-type]
        )  # fmt: skip
        if not fit:
            return None
        per_node = 1 if alone else fit
        return ShapeOnPool(*fields, zones.copy(), per_node, alone, bool(zones.all()))  # type: ignore[arg-type]

    def _template_id(self, pool: int) -> int:
        """Pools whose empty nodes are alike (and have as many zones) share an id."""
        known = self._template_ids.get(pool)
        if known is None:
            empty = self.empty_node(pool)
            key = (
                empty.cpu, empty.memory, empty.units, empty.devices.tobytes(),
                empty.mig.tobytes(), empty.extended.tobytes(), len(self.rows[pool]),
            )  # fmt: skip
            known = self._templates.setdefault(key, len(self._templates))
            self._template_ids[pool] = known
        return known


#: Per pool a pod may go to: (pool, its template id, milli-GPU per device there, its zones as
#: a key (None: all), its zones); and the request's fields beyond CPU and memory.
_Placement = tuple[list[tuple[int, int, int, bytes | None, BoolArray]], tuple[object, ...]]


__all__ = ["PoolCatalog"]
