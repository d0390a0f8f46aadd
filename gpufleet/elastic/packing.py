"""Packing pending work onto the nodes a pool would add: how many nodes, in which zones.

Owns :class:`Item` (pending work of one kind: ``count`` identical units, each a lone pod or a
whole gang, with the gang's topology request), :class:`PoolPacker` (one pool's planned nodes:
those being provisioned already and those it would add, within its maximum) and its packing of
items, first-fit decreasing by shape: each item fills the planned nodes that still have room
(:func:`~.node_columns.capacity` over all of them at once), then opens as many new nodes as
the rest needs. Pending pods come in few shapes, so an item is a shape with a count, not a pod
at a time.

Gangs are packed whole: a unit's pods all fit or none is kept (a trial of the columns, rolled
back; when not all units fit, a binary search finds how many do). A gang's topology request is
kept on the new nodes: a level each node is a domain of (``kubernetes.io/hostname``, the NVLink
domain) puts the gang on one node; the zone puts it in one zone; a label the pool's nodes all
share is one domain already; a level the pool's nodes do not carry cannot be met (required) or
is let go (preferred).

What it does not do: choose between pools (:mod:`.nodepools`), or see the cluster's existing
nodes (pending work is what the scheduler could not place on them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from gpufleet.elastic.node_columns import NodeColumns, ShapeOnPool, capacity, commit
from gpufleet.elastic.pool_shapes import PoolCatalog
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.workload import TopologyMode, TopologyRequest, Workload
from gpufleet.scheduling.node_table import BoolArray, IntArray

#: Topology levels where every node is a domain of its own.
PER_NODE_LEVELS = (GFD_LABELS.HOSTNAME, GFD_LABELS.NVLINK_DOMAIN)


class Kept(Enum):
    """How a unit's topology request is kept on a pool's new nodes."""

    ANYWHERE = "anywhere"
    ONE_NODE = "one node"
    ONE_ZONE = "one zone"


@dataclass(slots=True)
class Item:
    """``count`` identical units of pending work (see the module docstring): each is the pods
    of ``shapes`` (catalog shape id, pods of it), placed all or none. ``workloads`` are the
    units' workloads, in the order they are served."""

    shapes: tuple[tuple[int, int], ...]
    topology: TopologyRequest | None
    critical: bool
    workloads: list[Workload] = field(default_factory=list)
    #: For the order of packing (largest first): per unit.
    gpu_milli: int = 0
    cpu_milli: int = 0

    @property
    def count(self) -> int:
        return len(self.workloads)

    @property
    def pods_per_unit(self) -> int:
        return sum(n for _, n in self.shapes)


def kept(item: Item, labels: Sequence[str]) -> Kept | None:
    """How ``item``'s topology is kept on nodes carrying the label keys ``labels`` (None: it
    cannot be)."""
    request = item.topology
    if request is None or item.pods_per_unit == 1:
        return Kept.ANYWHERE
    if request.level not in labels:
        return None if request.mode is TopologyMode.REQUIRED else Kept.ANYWHERE
    if request.level in PER_NODE_LEVELS:
        return Kept.ONE_NODE
    if request.level == GFD_LABELS.ZONE:
        return Kept.ONE_ZONE
    return Kept.ANYWHERE  # a label all the pool's nodes share: one domain


@dataclass(slots=True)
class _Saved:
    columns: NodeColumns
    headroom: int
    in_zone: list[int]


class PoolPacker:
    """One pool's planned nodes: ``upcoming`` nodes per zone index already asked for (they
    take pending work first, and are never counted as added), and up to ``headroom`` nodes it
    may add. ``in_zone``: the pool's nodes per zone now (joined and upcoming), for spreading."""

    def __init__(
        self,
        catalog: PoolCatalog,
        pool: int,
        headroom: int,
        in_zone: Sequence[int],
        upcoming: Sequence[int] = (),
    ) -> None:
        self.catalog = catalog
        self.pool = pool
        self.node_pool = catalog.pools[pool]
        self.zone_names = self.node_pool.zones
        self.columns = NodeColumns(catalog.empty_node(pool))
        self.columns.add([z for z, n in enumerate(upcoming) for _ in range(n)])
        #: Rows from here on are nodes this packer adds.
        self.first_new = self.columns.size
        self.headroom = max(0, headroom)
        self.in_zone = list(in_zone) or [0]
        self._labels = tuple(catalog.table.nodes[int(catalog.rows[pool][0])].labels)
        self._gangs_per_node: dict[tuple[tuple[int, int], ...], int] = {}

    # ----------------------------------------------------------------------------- trials
    def save(self) -> _Saved:
        return _Saved(self.columns.copy(), self.headroom, list(self.in_zone))

    def restore(self, saved: _Saved) -> None:
        self.columns.restore(saved.columns)
        self.headroom = saved.headroom
        self.in_zone = list(saved.in_zone)

    def copy(self) -> PoolPacker:
        twin = object.__new__(PoolPacker)
        twin.catalog, twin.pool, twin.node_pool = self.catalog, self.pool, self.node_pool
        twin.zone_names, twin.first_new = self.zone_names, self.first_new
        twin._labels = self._labels
        twin.columns = self.columns.copy()
        twin.headroom, twin.in_zone = self.headroom, list(self.in_zone)
        twin._gangs_per_node = self._gangs_per_node
        return twin

    # ----------------------------------------------------------------------------- results
    def added(self) -> dict[str | None, int]:
        """Nodes this packer adds, per zone (None: the pool has no zones)."""
        zones = self.columns.zone[self.first_new : self.columns.size]
        counts = np.bincount(zones, minlength=max(len(self.zone_names), 1))
        if not self.zone_names:
            return {None: int(counts[0])} if counts[0] else {}
        return {self.zone_names[z]: int(c) for z, c in enumerate(counts) if c}

    def added_count(self) -> int:
        return self.columns.size - self.first_new

    def waste(self) -> tuple[int, int]:
        """Milli-GPU and milli-CPU left free on the nodes this packer adds."""
        start, end = self.first_new, self.columns.size
        return int(self.columns.devices[start:end].sum()), int(self.columns.cpu[start:end].sum())

    # ----------------------------------------------------------------------------- packing
    def shapes_of(self, item: Item) -> list[tuple[ShapeOnPool, int]] | None:
        """What the item's pods take on this pool, largest first (None: one never fits)."""
        shapes = []
        for shape, count in item.shapes:
            on_pool = self.catalog.on_pool(shape, self.pool)
            if on_pool is None:
                return None
            shapes.append((on_pool, count))
        shapes.sort(key=lambda s: (-s[0].devices * s[0].milli, -s[0].cpu, -s[0].memory))
        return shapes

    def place(self, item: Item, count: int | None = None) -> int:
        """Place up to ``count`` units of ``item`` (default: all); how many were placed."""
        wanted = item.count if count is None else count
        shapes = self.shapes_of(item)
        way = kept(item, self._labels)
        if shapes is None or way is None or wanted <= 0:
            return 0
        if way is Kept.ONE_NODE:
            return self._place_on_one_node(shapes, wanted)
        if way is Kept.ONE_ZONE:
            return self._place_in_one_zone(shapes, wanted)
        if len(shapes) == 1 and shapes[0][1] == 1:  # lone pods: no unit to keep whole
            return self.place_pods(shapes[0][0], wanted)
        return self._place_whole(shapes, wanted)

    def place_pods(self, shape: ShapeOnPool, count: int, zone: int | None = None) -> int:
        """Place up to ``count`` pods of ``shape`` (in ``zone`` only, if given): on the
        planned nodes with room first, then on new ones; how many were placed."""
        columns = self.columns
        placed = 0
        if columns.size and not shape.alone:
            rows = np.arange(columns.size, dtype=np.int64)
            if zone is not None:
                rows = rows[columns.zone[: columns.size] == zone]
            fit = capacity(columns, shape, rows)
            taken = _first_fit(fit, count)
            commit(columns, shape, rows, taken)
            placed = int(taken.sum())
        rest = count - placed
        if rest and self.headroom and shape.per_empty_node:
            allowed = shape.zones.copy()
            if zone is not None:
                allowed &= np.arange(allowed.size) == zone
            if allowed.any():
                new = min(-(-rest // shape.per_empty_node), self.headroom)
                rows = self._open(new, allowed)
                taken = _first_fit(np.full(new, shape.per_empty_node, np.int64), rest)
                commit(columns, shape, rows, taken)
                placed += int(taken.sum())
        return placed

    def _units(self, shapes: Sequence[tuple[ShapeOnPool, int]], units: int) -> bool:
        return all(
            self.place_pods(shape, units * count) == units * count for shape, count in shapes
        )

    def _place_whole(self, shapes: Sequence[tuple[ShapeOnPool, int]], wanted: int) -> int:
        saved = self.save()
        if self._units(shapes, wanted):
            return wanted
        low, high = 0, wanted - 1  # the most units that fit lies in [low, high]
        while low < high:
            middle = (low + high + 1) // 2
            self.restore(saved)
            if self._units(shapes, middle):
                low = middle
            else:
                high = middle - 1
        self.restore(saved)
        if low:
            self._units(shapes, low)
        return low

    def _place_in_one_zone(self, shapes: Sequence[tuple[ShapeOnPool, int]], wanted: int) -> int:
        allowed = np.logical_and.reduce([shape.zones for shape, _ in shapes])
        placed = 0
        while placed < wanted:
            for zone in sorted(np.flatnonzero(allowed), key=lambda z: self.in_zone[z]):
                saved = self.save()
                if all(
                    self.place_pods(shape, count, int(zone)) == count for shape, count in shapes
                ):
                    break
                self.restore(saved)
            else:
                return placed
            placed += 1
        return placed

    def _place_on_one_node(self, shapes: Sequence[tuple[ShapeOnPool, int]], wanted: int) -> int:
        allowed = np.logical_and.reduce([shape.zones for shape, _ in shapes])
        per_node = self._gangs_on_empty_node(shapes, allowed)
        placed = 0
        while placed < wanted and per_node:
            fits, after = _one_unit_everywhere(self.columns, shapes)
            rows = np.flatnonzero(fits)[: wanted - placed]
            if rows.size:
                self.columns.paste_rows(after, rows)
                placed += rows.size
                continue
            new = min(-(-(wanted - placed) // per_node), self.headroom)
            if not new:
                break
            self._open(new, allowed)
        return placed

    def _gangs_on_empty_node(
        self, shapes: Sequence[tuple[ShapeOnPool, int]], allowed: BoolArray
    ) -> int:
        if not allowed.any():
            return 0
        key = tuple((id(shape), count) for shape, count in shapes)
        known = self._gangs_per_node.get(key)
        if known is not None:
            return known
        node = NodeColumns.of_empty(self.columns.empty, 1, int(np.argmax(allowed)))
        count = 0
        while True:
            fits, after = _one_unit_everywhere(node, shapes)
            if not fits[0]:
                break
            node.paste_rows(after, np.zeros(1, np.int64))
            count += 1
        self._gangs_per_node[key] = count
        return count

    def _open(self, count: int, allowed: BoolArray) -> IntArray:
        """Add ``count`` nodes in the allowed zones, spread as the pool spreads them."""
        self.headroom -= count
        if not self.zone_names:
            return self.columns.add([0] * count)
        names = self.zone_names
        have = {names[z]: self.in_zone[z] for z in range(len(names))}
        only = [names[z] for z in np.flatnonzero(allowed)]
        chosen = self.node_pool.zones_for(count, have, only)
        zones = [names.index(zone) for zone in chosen if zone is not None]
        for zone in zones:
            self.in_zone[zone] += 1
        return self.columns.add(zones)


def _first_fit(fit: IntArray, count: int) -> IntArray:
    """``count`` pods over rows that take ``fit`` each, first rows first."""
    before = np.cumsum(fit) - fit
    taken: IntArray = np.clip(count - before, 0, fit)
    return taken


def _one_unit_everywhere(
    columns: NodeColumns, shapes: Sequence[tuple[ShapeOnPool, int]]
) -> tuple[BoolArray, NodeColumns]:
    """Which rows take one whole unit (all of ``shapes``' pods), and the rows after taking it
    (valid for those rows)."""
    trial = columns.copy()
    rows = np.arange(trial.size, dtype=np.int64)
    fits = np.ones(trial.size, np.bool_)
    for shape, count in shapes:
        fits &= capacity(trial, shape, rows) >= count
        commit(trial, shape, rows, np.where(fits, count, 0))
    return fits, trial


__all__ = ["PER_NODE_LEVELS", "Item", "Kept", "PoolPacker", "kept"]
