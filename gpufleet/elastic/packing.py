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
import numpy.typing as npt

from gpufleet.elastic.node_columns import (
    NodeColumns,
    ShapeOnPool,
    candidates,
    capacity,
    commit,
    few_fits,
    take_few,
)
from gpufleet.elastic.pool_shapes import PoolCatalog
from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.workload import TopologyMode, TopologyRequest, Workload
from gpufleet.scheduling.node_table import BoolArray, IntArray

#: Up to this many nodes with room, pods are fitted on them in plain integers.
_FEW_ROWS = 8
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
    #: Names (shapes, topology) as an integer the catalog gives out (-1: none asked), so that
    #: what a pool makes of it is kept by a cheap key.
    kind: int = -1
    #: For the order of packing (largest first): per unit.
    gpu_milli: int = 0
    cpu_milli: int = 0
    pods_per_unit: int = field(init=False)

    #: The shape id of a lone pod (no topology, one pod of one shape); -1 for a gang.
    lone_shape: int = field(init=False)

    def __post_init__(self) -> None:
        self.pods_per_unit = sum(n for _, n in self.shapes)
        lone = self.topology is None and len(self.shapes) == 1 and self.shapes[0][1] == 1
        self.lone_shape = self.shapes[0][0] if lone else -1

    @property
    def count(self) -> int:
        return len(self.workloads)


def kept(item: Item, labels: Sequence[str]) -> Kept | None:
    """How ``item``'s topology is kept on nodes carrying the label keys ``labels`` (None: it
    cannot be)."""
    request = item.topology
    if request is None or (len(item.shapes) == 1 and item.shapes[0][1] == 1):
        return Kept.ANYWHERE
    if request.level not in labels:
        return None if request.mode is TopologyMode.REQUIRED else Kept.ANYWHERE
    if request.level in PER_NODE_LEVELS:
        return Kept.ONE_NODE
    if request.level == GFD_LABELS.ZONE:
        return Kept.ONE_ZONE
    return Kept.ANYWHERE  # a label all the pool's nodes share: one domain


@dataclass(frozen=True, slots=True)
class Unit:
    """What one unit of an item takes on a pool: its pods' shapes there, largest first, and
    how its topology is kept. Items whose units are equal here pack as one (``key``)."""

    shapes: tuple[tuple[ShapeOnPool, int], ...]
    way: Kept
    key: tuple[object, ...]

    @property
    def lone_pod(self) -> bool:
        return len(self.shapes) == 1 and self.shapes[0][1] == 1


@dataclass(slots=True)
class UnitBook:
    """The distinct units pending work makes on a planner's pools, numbered (one per key: a
    unit's key names the catalog's shape objects, which pools with alike nodes share), with
    what :mod:`.pool_bounds` reads of each; shared by the pools' caches, kept from turn to
    turn with the catalog it was made for."""

    distinct: list[Unit] = field(default_factory=list)
    index: dict[tuple[object, ...], int] = field(default_factory=dict)
    #: The unit of a lone pod, by what its shape takes on a pool (the object's id).
    lone_units: dict[int, Unit] = field(default_factory=dict)
    #: Per shape object of the catalog (:attr:`PoolCatalog.interned`), the number of a lone
    #: pod's unit of it (-2: not made yet).
    lone_numbers: IntArray = field(default_factory=lambda: np.full(0, -2, np.int64))
    #: Per distinct unit, the numbers :mod:`.pool_bounds` reads of it.
    number_table: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 5)))
    #: Per distinct unit, what its pods need of one planned node at least for any of them
    #: to fit there (:meth:`needs`).
    need_table: IntArray = field(default_factory=lambda: np.zeros((0, 5), np.int64))

    def number(self, unit: Unit) -> int:
        """``unit``'s number (given the first time it is seen)."""
        known = self.index.get(unit.key)
        if known is None:
            known = self.index[unit.key] = len(self.distinct)
            self.distinct.append(unit)
        return known

    def lone(self, shape: ShapeOnPool) -> Unit:
        """The unit of a lone pod that takes ``shape`` on a pool."""
        unit = self.lone_units.get(id(shape))
        if unit is None:
            unit = Unit(((shape, 1),), Kept.ANYWHERE, (Kept.ANYWHERE, (id(shape), 1)))
            self.lone_units[id(shape)] = unit
        return unit

    def needs(self) -> IntArray:
        """Per distinct unit: the most CPU, memory, fully free devices and milli-GPU on one
        device that one of its pods asks (whole devices and shares apart), and whether one
        of them must be alone: a unit is placed on the planned nodes only if
        :meth:`~.node_columns.NodeColumns.might_fit` holds for each of its shapes, that is
        if the nodes' most free of each is at least this (and none must be alone)."""
        known = self.need_table.shape[0]
        if known < len(self.distinct):
            new = [_needs(unit.shapes) for unit in self.distinct[known:]]
            self.need_table = np.concatenate([self.need_table, np.array(new, np.int64)])
        return self.need_table

    def lone_numbers_of(self, interned: IntArray, catalog: PoolCatalog) -> IntArray:
        """For lone pods taking ``interned`` (indices into the catalog's shape objects; -1:
        none), their unit's number (-1: none)."""
        if max(1, len(catalog.interned)) > self.lone_numbers.size:
            grown = np.full(2 * len(catalog.interned) + 1, -2, np.int64)
            grown[: self.lone_numbers.size] = self.lone_numbers
            self.lone_numbers = grown
        found: IntArray = np.where(interned >= 0, self.lone_numbers[np.maximum(interned, 0)], -1)
        missing = np.flatnonzero(found == -2)
        if missing.size:
            for shape in np.unique(interned[missing]).tolist():
                self.lone_numbers[shape] = self.number(self.lone(catalog.interned[shape]))
            found[missing] = self.lone_numbers[interned[missing]]
        return found


def _needs(shapes: Sequence[tuple[ShapeOnPool, int]]) -> tuple[int, int, int, int, int]:
    if len(shapes) == 1:
        s = shapes[0][0]
        whole_gpu = s.devices and s.milli >= MILLI_PER_GPU
        share_gpu = s.devices and s.milli < MILLI_PER_GPU
        return (s.cpu, s.memory, s.devices if whole_gpu else 0, s.milli if share_gpu else 0,
                int(s.alone))  # fmt: skip
    whole = [s.devices for s, _ in shapes if s.devices and s.milli >= MILLI_PER_GPU]
    share = [s.milli for s, _ in shapes if s.devices and s.milli < MILLI_PER_GPU]
    return (
        max(s.cpu for s, _ in shapes),
        max(s.memory for s, _ in shapes),
        max(whole, default=0),
        max(share, default=0),
        int(any(s.alone for s, _ in shapes)),
    )


@dataclass(slots=True)
class PackerCache:
    """What one pool's packers learn that holds as long as the pool and the catalog do (kept
    by a planner from turn to turn): each item's unit there, units per empty node, and an
    empty node after some pods of a shape; the units' numbers are in ``book`` (shared by the
    pools of one catalog)."""

    units: dict[object, Unit | None] = field(default_factory=dict)
    gangs_per_node: dict[tuple[object, ...], int] = field(default_factory=dict)
    afters: dict[tuple[int, int], IntArray] = field(default_factory=dict)
    book: UnitBook = field(default_factory=UnitBook)
    #: Per kind of item (:attr:`Item.kind`) that is not a lone pod: its unit's number in
    #: ``book`` (-1: it never fits here; -2: not asked yet).
    kind_unit: IntArray = field(default_factory=lambda: np.full(64, -2, np.int64))


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
        cache: PackerCache | None = None,
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
        self._every_zone = list(range(len(self.in_zone)))
        self._labels = tuple(catalog.table.nodes[int(catalog.rows[pool][0])].labels)
        cache = cache if cache is not None else PackerCache()
        self.cache = cache
        self._gangs_per_node = cache.gangs_per_node
        self._units = cache.units
        self._afters = cache.afters

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
        twin._labels, twin._every_zone = self._labels, self._every_zone
        twin.columns = self.columns.copy()
        twin.headroom, twin.in_zone = self.headroom, list(self.in_zone)
        twin.cache = self.cache
        twin._gangs_per_node = self._gangs_per_node
        twin._units = self._units
        twin._afters = self._afters
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
    def unit(self, item: Item) -> Unit | None:
        """What a unit of ``item`` takes on this pool (None: it never fits here)."""
        key: object = item.kind if item.kind >= 0 else (item.shapes, item.topology)
        known = self._units.get(key, False)
        if known is not False:
            return known  # type: ignore[return-value]
        if item.topology is None and len(item.shapes) == 1 and item.shapes[0][1] == 1:
            # A lone pod: its unit is its shape's on this pool, shared by every pod that takes
            # the same here.
            on_pool = self.catalog.on_pool(item.shapes[0][0], self.pool)
            lone = None if on_pool is None else self.cache.book.lone(on_pool)
            self._units[key] = lone
            return lone
        unit = None
        way = kept(item, self._labels)
        shapes = []
        for shape, count in item.shapes:
            on_pool = self.catalog.on_pool(shape, self.pool)
            if on_pool is None:
                way = None
                break
            shapes.append((on_pool, count))
        if way is not None:
            if len(shapes) > 1:
                shapes.sort(key=lambda s: (-s[0].devices * s[0].milli, -s[0].cpu, -s[0].memory))
            unit = Unit(tuple(shapes), way, (way, *((id(s), n) for s, n in shapes)))
        self._units[key] = unit
        return unit

    def unit_ids(self, items: Sequence[Item], kinds: IntArray, lone_shapes: IntArray) -> IntArray:
        """Per item (``kinds``: their :attr:`Item.kind`; ``lone_shapes``: their
        :attr:`Item.lone_shape`), its unit's number in the book (-1: it never fits here): for
        lone pods read from the catalog's shape objects, for the rest by kind (items of a new
        kind are asked of :meth:`unit` once)."""
        cache, book = self.cache, self.cache.book
        ids = np.full(len(items), -1, np.int64)
        lone = np.flatnonzero(lone_shapes >= 0)
        if lone.size:
            interned = self.catalog.interned_ids(lone_shapes[lone], self.pool)
            ids[lone] = book.lone_numbers_of(interned, self.catalog)
        others = np.flatnonzero(lone_shapes < 0)
        if not others.size:
            return ids
        own = kinds[others]
        if int(own.max()) >= cache.kind_unit.size:
            grown = np.full(max(2 * cache.kind_unit.size, int(own.max()) + 1), -2, np.int64)
            grown[: cache.kind_unit.size] = cache.kind_unit
            cache.kind_unit = grown
        found = cache.kind_unit[np.maximum(own, 0)]
        for j in np.flatnonzero((found == -2) | (own < 0)).tolist():
            unit = self.unit(items[int(others[j])])
            found[j] = -1 if unit is None else book.number(unit)
            if own[j] >= 0:
                cache.kind_unit[own[j]] = found[j]
        ids[others] = found
        return ids

    def might_take(self, numbers: IntArray) -> BoolArray:
        """For units (by their number in the book), could one of them be placed on the
        planned nodes, without new ones? False is sure (a shape of it fits on none of them:
        :meth:`~.node_columns.NodeColumns.might_fit`); True is a maybe."""
        most = self.columns.most()
        if most is None:
            return np.zeros(numbers.size, np.bool_)
        cpu, memory, best, whole = most
        needs = self.cache.book.needs()[numbers]
        maybe: BoolArray = (
            (needs[:, 0] <= cpu)
            & (needs[:, 1] <= memory)
            & (needs[:, 2] <= whole)
            & (needs[:, 3] <= best)
            & (needs[:, 4] == 0)
        )
        return maybe

    def holds_one(self, unit: Unit, max_nodes: int) -> bool:
        """Could ``max_nodes`` empty nodes of this pool hold one unit like ``unit``?"""
        if max_nodes <= 0:
            return False
        if len(unit.shapes) == 1:
            shape, pods = unit.shapes[0]
            if unit.way is Kept.ONE_NODE:
                return shape.per_empty_node >= pods
            return -(-pods // shape.per_empty_node) <= max_nodes
        fresh = PoolPacker(self.catalog, self.pool, max_nodes, [0] * len(self.in_zone))
        return fresh.place_unit(unit, 1) == 1

    def place(self, item: Item, count: int | None = None) -> int:
        """Place up to ``count`` units of ``item`` (default: all); how many were placed."""
        unit = self.unit(item)
        if unit is None:
            return 0
        return self.place_unit(unit, item.count if count is None else count)

    def place_unit(self, unit: Unit, wanted: int) -> int:
        """Place up to ``wanted`` units like ``unit``; how many were placed."""
        if wanted <= 0:
            return 0
        if len(unit.shapes) == 1:  # a lone pod, or a gang of pods of one shape
            shape, pods = unit.shapes[0]
            if unit.way is Kept.ONE_ZONE:
                placed = 0
                for zone in sorted(np.flatnonzero(shape.zones).tolist(), key=self._in_zone):
                    placed += self.place_pods(shape, (wanted - placed) * pods, zone, pods)
                return placed // pods
            one_node = unit.way is Kept.ONE_NODE
            return self.place_pods(shape, wanted * pods, None, pods, one_node) // pods
        if unit.way is Kept.ONE_NODE:
            return self._place_on_one_node(unit, wanted)
        if unit.way is Kept.ONE_ZONE:
            return self._place_in_one_zone(unit.shapes, wanted)
        return self._place_whole(unit.shapes, wanted)

    def _in_zone(self, zone: int) -> int:
        return self.in_zone[zone]

    def place_pods(
        self,
        shape: ShapeOnPool,
        count: int,
        zone: int | None = None,
        whole: int = 1,
        one_node: bool = False,
    ) -> int:
        """Place up to ``count`` pods of ``shape`` (in ``zone`` only, if given), in multiples
        of ``whole`` (each node taking multiples of it, with ``one_node``): on the planned
        nodes with room first, then on new ones; how many were placed."""
        columns = self.columns
        step = whole if one_node else 1
        rows: IntArray | None = None
        fit: IntArray | None = None
        few: list[tuple[int, list[int], int]] | None = None
        room = 0
        # The most free of each column is asked only when known: working it out costs what
        # finding the candidate rows does, and those say the same (none: no room).
        if (
            columns.size
            and not shape.alone
            and (not columns.most_known or columns.might_fit(shape))
        ):
            rows = candidates(columns, shape)
            if zone is not None:
                rows = rows[columns.zone[rows] == zone]
            if rows.size <= _FEW_ROWS:
                few = [(r, v, f - f % step) for r, v, f in few_fits(columns, shape, rows)]
                room = sum(f for _, _, f in few)
            else:
                fit = capacity(columns, shape, rows)
                if step > 1:
                    fit -= fit % step
                room = int(fit.sum())
        per_node = shape.per_empty_node
        per_node -= per_node % step
        new_room = 0
        if per_node and self.headroom:
            if zone is None:
                allowed = shape.everywhere or bool(shape.zones.any())
            else:
                allowed = bool(shape.zones[zone])
            new_room = per_node * self.headroom if allowed else 0
        count = min(count, room + new_room)
        count -= count % whole
        if count <= 0:
            return 0
        placed = 0
        if room and few is not None:
            placed = take_few(columns, shape, few, count)
        elif room:
            assert rows is not None
            assert fit is not None
            placed = self._take_first_fit(shape, fit, rows, count)
        rest = count - placed
        if rest:
            new = -(-rest // per_node)
            if zone is not None:
                zones = [zone]
            elif shape.everywhere:
                zones = self._every_zone
            else:
                zones = np.flatnonzero(shape.zones).tolist()
            start = self._open(new, zones)
            # New nodes are alike: all but the last take per_node pods, the last the rest.
            if new > 1:
                columns.set_rows(slice(start, start + new - 1), self._after(shape, per_node))
            last = rest - (new - 1) * per_node
            columns.set_rows(slice(start + new - 1, start + new), self._after(shape, last))
            placed += rest
        return placed

    def _after(self, shape: ShapeOnPool, pods: int) -> IntArray:
        """An empty node of this pool after taking ``pods`` pods of ``shape``, as a row
        (kept)."""
        key = (id(shape), pods)
        known = self._afters.get(key)
        if known is None:
            known = self._afters[key] = self.columns.row_after(shape, pods)
        return known

    def _take_first_fit(self, shape: ShapeOnPool, fit: IntArray, rows: IntArray, count: int) -> int:
        """Take ``count`` pods (at most) on the rows that take ``fit`` each, first rows first."""
        total = fit.cumsum()
        if not total.size or total[-1] == 0:
            return 0
        last = int(np.searchsorted(total, count))  # the first row that completes the count
        touched = np.flatnonzero(fit[: last + 1])
        taken = fit[touched]
        if last < total.size:
            taken[-1] -= int(total[last]) - count
        commit(self.columns, shape, rows[touched], taken)
        return min(count, int(total[-1]))

    def _all_units(self, shapes: Sequence[tuple[ShapeOnPool, int]], units: int) -> bool:
        return all(
            self.place_pods(shape, units * count) == units * count for shape, count in shapes
        )

    def _place_whole(self, shapes: Sequence[tuple[ShapeOnPool, int]], wanted: int) -> int:
        saved = self.save()
        if self._all_units(shapes, wanted):
            return wanted
        low, high = 0, wanted - 1  # the most units that fit lies in [low, high]
        while low < high:
            middle = (low + high + 1) // 2
            self.restore(saved)
            if self._all_units(shapes, middle):
                low = middle
            else:
                high = middle - 1
        self.restore(saved)
        if low:
            self._all_units(shapes, low)
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

    def _place_on_one_node(self, unit: Unit, wanted: int) -> int:
        shapes = unit.shapes
        allowed = np.logical_and.reduce([shape.zones for shape, _ in shapes])
        per_node = self._gangs_on_empty_node(unit, allowed)
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
            self._open(new, np.flatnonzero(allowed).tolist())
        return placed

    def _gangs_on_empty_node(self, unit: Unit, allowed: BoolArray) -> int:
        shapes = unit.shapes
        if not allowed.any():
            return 0
        key = unit.key
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

    def _open(self, count: int, zones: list[int]) -> int:
        """Add ``count`` nodes in ``zones`` (indices, in order), spread as the pool spreads
        them (to the zone with the fewest, ties to the first listed: the counts
        :meth:`~gpufleet.model.nodepools.NodePool.zones_for` ends with, in one step); the
        first new row."""
        self.headroom -= count
        if len(self.zone_names) <= 1:
            return self.columns.add_runs([0], [count])
        if len(zones) == 1:
            self.in_zone[zones[0]] += count
            return self.columns.add_runs(zones, [count])
        grown = _water_fill([self.in_zone[z] for z in zones], count)
        for z, add in zip(zones, grown, strict=True):
            self.in_zone[z] += add
        return self.columns.add_runs(zones, grown)


def _water_fill(have: Sequence[int], count: int) -> list[int]:
    """How many of ``count`` new nodes each zone gets, the emptiest first (ties: the first
    listed), as :meth:`~gpufleet.model.nodepools.NodePool.zones_for` spreads them one at a
    time."""
    grown = [0] * len(have)
    order = sorted(range(len(have)), key=lambda z: (have[z], z))
    level, group, left = have[order[0]], 1, count
    while left > 0:
        if group < len(order) and have[order[group]] == level:
            group += 1
            continue
        lowest = sorted(order[:group])
        if group < len(order) and left >= (have[order[group]] - level) * group:
            rise = have[order[group]] - level
            for z in lowest:
                grown[z] += rise
            left -= rise * group
            level += rise
            continue
        each, extra = divmod(left, group)
        for position, z in enumerate(lowest):
            grown[z] += each + (1 if position < extra else 0)
        left = 0
    return grown


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


__all__ = [
    "PER_NODE_LEVELS",
    "Item",
    "Kept",
    "PackerCache",
    "PoolPacker",
    "Unit",
    "UnitBook",
    "kept",
]
