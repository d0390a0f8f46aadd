"""The node-pool autoscaler's scale-up: which pools get how many new nodes, and why.

:func:`decide_scale_up` takes the pending workloads the scheduler could not place (gangs with
their pods and topology requests, in the order they are served), the pools with their nodes
(joined, and asked for but not joined yet) and ``now``, and returns :class:`AddNodes` actions
with reasons in words, plus what it expects of each pending workload. It is pure: a world calls
it each turn, after the scheduler's turn, and carries the actions out (the simulator makes
:meth:`~gpufleet.model.nodepools.NodePool.node` s join after the pool's provisioning delay).

What it follows. Cluster Autoscaler: pending pods are first simulated on the nodes already
being provisioned ("upcoming" nodes), so that a turn never asks twice for the same pods; a node
asked for that has not joined within ``max_provision_time`` (its ``--max-node-provision-time``,
15 minutes) is taken as failed and its pool is backed off (not chosen while the world still
reports it); pools are raised to their minimum (``--enforce-node-group-min-size``). Karpenter:
a pool whose last request failed for want of capacity (the cloud's insufficient-capacity error,
ICE) is unavailable until the world says (:attr:`PoolNodes.unavailable_until`: Karpenter keeps
such an offering out of its choices for :data:`INSUFFICIENT_CAPACITY_TTL`, 3 minutes), so the
next pool that fits is chosen (a spot pool out of capacity falls back on on-demand) and the
reason says which pool was passed over. Between
pools (:mod:`.pool_choice`): the cheapest pool that fits the whole pending set (price per hour
of the nodes it adds), as Karpenter launches the cheapest instance type that fits, unless a mix
of pools holds it all for less or no pool holds it all: then pools are taken by the lowest price
per pod placed (CA's ``price`` expander's ratio), each packing what it can of what is left, so
that one turn asks for everything that can be placed (Karpenter's provisioner also covers the
whole pending set at once, over several node claims; a provisioning delay of minutes per pool,
one pool a turn, would otherwise multiply). Ties go to the pool that leaves the least GPU, then
CPU, unused (CA's ``least-waste``).

Where it differs. Gangs are whole: a gang's pods all go to one pool's new nodes or it is left for
later, never split across pools (nor placed in part), and its topology request is kept on the
new nodes (:mod:`.packing`). Capacity types: spot pools carry the spot taint, so only pods that
tolerate it can be placed there (the taint filter of the core decides); beyond that, critical
work (:func:`~gpufleet.scheduling.capacity.capacity_need`: not preemptible, or
inference-critical) is never given new spot nodes. Work that no pool could ever hold (a pod
asking for a GPU model no pool has, a gang larger than any pool's maximum, a topology no pool's
nodes carry) adds no node: it is reported in :attr:`ScaleUpDecision.never`. Pod overheads of
DaemonSets and the nodes' reserved resources are not modelled: a pool's node offers its
template's allocatable.

What it does not do: remove nodes (:mod:`.scale_down`), or look at the existing nodes' free
room (what is pending is what the scheduler could not place on them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.elastic.packing import Item, PackerCache, PoolPacker, UnitBook
from gpufleet.elastic.pool_bounds import item_keys
from gpufleet.elastic.pool_choice import choose
from gpufleet.elastic.pool_shapes import PoolCatalog
from gpufleet.model.capacity import CapacityType
from gpufleet.model.nodepools import NodePool
from gpufleet.model.pod import Pod
from gpufleet.model.workload import TopologyRequest, Workload
from gpufleet.scheduling.capacity import is_critical
from gpufleet.scheduling.engine import describe_request
from gpufleet.scheduling.node_table import IntArray

#: Cluster Autoscaler's ``--max-node-provision-time`` default.
MAX_PROVISION_TIME = 15 * 60.0
#: How long a pool is not asked again after a request for its nodes failed for want of
#: capacity (Karpenter's unavailable-offerings cache TTL).
INSUFFICIENT_CAPACITY_TTL = 3 * 60.0


@dataclass(frozen=True, slots=True)
class Provisioning:
    """``count`` nodes asked of a pool at ``since`` (the world's clock) that have not joined
    yet, in ``zone`` (None: the pool has no zones)."""

    count: int
    since: float
    zone: str | None = None


@dataclass(frozen=True, slots=True)
class PoolNodes:
    """A pool and its nodes now: joined ones per zone (the key None for a pool without
    zones), and those asked for that have not joined; ``unavailable_until``: the pool is not
    asked for nodes before then (a request failed for want of capacity; None: it may be)."""

    pool: NodePool
    ready: Mapping[str | None, int] = field(default_factory=dict)
    provisioning: tuple[Provisioning, ...] = ()
    unavailable_until: float | None = None


@dataclass(frozen=True, slots=True)
class AddNodes:
    """Ask ``pool`` for ``count`` nodes in ``zone``; they should join at ``ready_at``."""

    pool: str
    count: int
    zone: str | None
    ready_at: float
    reason: str


@dataclass(frozen=True, slots=True)
class ScaleUpDecision:
    """What to add, and for each pending workload (by key) what to expect: ``expected``
    names the pool whose nodes (being provisioned, or added now) should hold it; ``waiting``
    says why no node is added for it now; ``never`` why no pool could ever hold it."""

    actions: tuple[AddNodes, ...] = ()
    expected: Mapping[str, str] = field(default_factory=dict)
    waiting: Mapping[str, str] = field(default_factory=dict)
    never: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Pool:
    """A pool as this decision sees it."""

    index: int
    nodes: PoolNodes
    in_zone: list[int]
    upcoming: list[int]
    overdue: int
    headroom: int = 0
    #: Seconds until the pool may be asked again after a capacity error (0: it may now).
    unavailable_for: float = 0.0

    @property
    def pool(self) -> NodePool:
        return self.nodes.pool

    @property
    def size(self) -> int:
        """Nodes joined and asked for (not overdue)."""
        return sum(self.in_zone)


class ScaleUpPlanner:
    """Scale-up decisions for one set of pools, turn after turn (:meth:`decide`). What it
    works out of pod shapes (compiled against the pools' nodes) and of the units pending work
    makes on each pool is kept from one turn to the next, as pending pods come in the same
    few shapes turn after turn; decisions depend on the arguments of :meth:`decide` only."""

    #: Pod shapes kept at most before the caches start over (a long-running world sees
    #: new shapes now and then; this bounds what they take).
    MAX_SHAPES = 50_000

    def __init__(
        self, pools: Sequence[NodePool], max_provision_time: float = MAX_PROVISION_TIME
    ) -> None:
        self.pools = tuple(pools)
        self.max_provision_time = max_provision_time
        self._start()

    def _start(self) -> None:
        self.catalog = PoolCatalog(self.pools)
        book = UnitBook()
        self.caches = [PackerCache(book=book) for _ in self.pools]

    def decide(
        self, pending: Sequence[Workload], pools: Sequence[PoolNodes], now: float
    ) -> ScaleUpDecision:
        """See the module docstring; ``pools``: this planner's pools, in its order, with
        their nodes now."""
        if tuple(p.pool for p in pools) != self.pools:
            raise ValueError("a planner decides for the pools it was made for, in their order")
        if len(self.catalog.pods) > self.MAX_SHAPES:
            self._start()
        return _decide(self.catalog, self.caches, pending, pools, now, self.max_provision_time)


def decide_scale_up(
    pending: Sequence[Workload],
    pools: Sequence[PoolNodes],
    now: float,
    max_provision_time: float = MAX_PROVISION_TIME,
) -> ScaleUpDecision:
    """One decision (see the module docstring): :meth:`ScaleUpPlanner.decide` of a new
    planner. A world that decides every turn keeps a planner instead."""
    planner = ScaleUpPlanner([p.pool for p in pools], max_provision_time)
    return planner.decide(pending, pools, now)


def _decide(
    catalog: PoolCatalog,
    caches: Sequence[PackerCache],
    pending: Sequence[Workload],
    pools: Sequence[PoolNodes],
    now: float,
    max_provision_time: float,
) -> ScaleUpDecision:
    states = [_state(i, nodes, now, max_provision_time) for i, nodes in enumerate(pools)]
    actions = _to_minimum(states, now)
    items, first_pods = _items(catalog, pending)
    expected: dict[str, str] = {}
    packers = [
        PoolPacker(catalog, s.index, s.headroom, s.in_zone, s.upcoming, caches[s.index])
        for s in states
    ]
    served = [0] * len(items)
    keys = item_keys(items)
    # Upcoming nodes first, cheapest pool first: what they hold needs no new node.
    for state in sorted(states, key=lambda s: (s.pool.hourly_price, s.index)):
        if not any(state.upcoming):
            continue
        packer = packers[state.index].copy()
        packer.headroom = 0
        _on_upcoming(packer, items, keys, served, expected)
        packer.headroom = state.headroom
        packers[state.index] = packer
    never = _never(catalog, packers, items, served, states, keys, first_pods)
    # Work no pool could ever hold is not offered to the pools (it counts as served here).
    offered_from = [
        item.count if item.workloads[-1].key in never else count
        for item, count in zip(items, served, strict=True)
    ]
    growing = [packers[s.index] for s in _askable(states) if s.headroom > 0]
    unavailable = [s for s in states if s.unavailable_for]
    for step in choose(growing, items, offered_from, _eligible):
        pool = step.pool
        for i, placed in step.placed.items():
            _serve(items[i], served, i, placed, pool.name, expected)
        reason = step.reason + _passed_over(catalog, items, step.placed, unavailable)
        actions.extend(
            AddNodes(pool.name, count, zone, now + pool.provisioning_delay, reason)
            for zone, count in step.packer.added().items()
        )
    waiting = _waiting(catalog, items, served, never, states)
    return ScaleUpDecision(tuple(actions), expected, waiting, never)


# --------------------------------------------------------------------------------- pools
def _state(index: int, nodes: PoolNodes, now: float, max_provision_time: float) -> _Pool:
    pool = nodes.pool
    zones: Sequence[str | None] = pool.zones or (None,)
    position = {zone: z for z, zone in enumerate(zones)}
    in_zone = [int(nodes.ready.get(zone, 0)) for zone in zones]
    upcoming = [0] * len(zones)
    overdue = 0
    for asked in nodes.provisioning:
        if now > asked.since + pool.provisioning_delay + max_provision_time:
            overdue += asked.count
            continue
        z = position.get(asked.zone, 0)
        upcoming[z] += asked.count
        in_zone[z] += asked.count
    state = _Pool(index, nodes, in_zone, upcoming, overdue)
    if nodes.unavailable_until is not None and nodes.unavailable_until > now:
        state.unavailable_for = nodes.unavailable_until - now
    state.headroom = max(0, pool.max_nodes - state.size)
    return state


def _askable(states: Sequence[_Pool]) -> list[_Pool]:
    """The pools that may be asked for nodes now: not backed off, not out of capacity."""
    return [s for s in states if not s.overdue and not s.unavailable_for]


def _fits(catalog: PoolCatalog, item: Item, state: _Pool) -> bool:
    """Whether the item's work may go to the pool's nodes (eligible, every pod fits one)."""
    return _eligible(item, state.pool) and all(
        catalog.on_pool(shape, state.index) is not None for shape, _ in item.shapes
    )


def _unavailable(state: _Pool) -> str:
    return (
        f"{state.pool.name} is out of capacity (its last request failed: insufficient "
        f"capacity; asked again in {state.unavailable_for:.0f} s)"
    )


def _passed_over(
    catalog: PoolCatalog,
    items: Sequence[Item],
    placed: Mapping[int, int],
    unavailable: Sequence[_Pool],
) -> str:
    """What a reason adds for the pools out of capacity that could have taken the work."""
    skipped = [s for s in unavailable if any(_fits(catalog, items[i], s) for i in placed)]
    return "".join(f"; not {_unavailable(s)}" for s in skipped)


def _on_upcoming(
    packer: PoolPacker,
    items: Sequence[Item],
    keys: tuple[IntArray, IntArray],
    served: list[int],
    expected: dict[str, str],
) -> None:
    """The items, in order, on ``packer``'s upcoming nodes (it adds none). An item of which
    no pod fits on any of them (:meth:`~.packing.PoolPacker.might_take`, looked at again
    after each that placed some: the nodes only fill up) is not tried: it would place none."""
    pool = packer.node_pool
    numbers = packer.unit_ids(items, *keys)
    distinct = packer.cache.book.distinct
    fits = np.flatnonzero(numbers >= 0)
    maybe = np.zeros(len(items), np.bool_)
    maybe[fits] = packer.might_take(numbers[fits])
    i = 0
    while True:
        following = np.flatnonzero(maybe[i:])
        if not following.size:
            return
        i += int(following[0])
        item = items[i]
        if _eligible(item, pool) and served[i] < item.count:
            placed = packer.place_unit(distinct[numbers[i]], item.count - served[i])
            if placed:
                _serve(item, served, i, placed, pool.name, expected)
                maybe[fits] &= packer.might_take(numbers[fits])
        i += 1


def _to_minimum(states: Sequence[_Pool], now: float) -> list[AddNodes]:
    """Pools below their minimum (and not backed off or out of capacity) are raised to it;
    the nodes asked for count as upcoming from then on."""
    actions: list[AddNodes] = []
    for state in states:
        pool = state.pool
        missing = pool.min_nodes - state.size
        if missing <= 0 or state.overdue or state.unavailable_for:
            continue
        names = pool.zones or (None,)
        have = {name: state.in_zone[z] for z, name in enumerate(names) if name is not None}
        chosen = pool.zones_for(missing, have)
        reason = f"below its minimum of {pool.min_nodes} node(s): {state.size} joined or joining"
        for z, zone in enumerate(names):
            count = sum(1 for c in chosen if c == zone)
            if count:
                state.upcoming[z] += count
                state.in_zone[z] += count
                actions.append(AddNodes(pool.name, count, zone, now + pool.provisioning_delay,
                                        reason))  # fmt: skip
        state.headroom = max(0, pool.max_nodes - state.size)
    return actions


def _eligible(item: Item, pool: NodePool) -> bool:
    """Critical work is not given spot nodes."""
    return not (item.critical and pool.capacity is CapacityType.SPOT)


# --------------------------------------------------------------------------------- items
def _items(catalog: PoolCatalog, pending: Sequence[Workload]) -> tuple[list[Item], dict[int, Pod]]:
    """The pending gangs grouped into items of identical units, largest first; and the first
    pending pod of each shape (a planner's catalog knows the shape from an earlier turn's pod,
    which reports must not name)."""
    by_key: dict[tuple[object, ...], Item] = {}
    first: dict[int, Pod] = {}
    # Lone pods (most of the pending set) are grouped by (signature, critical) first: one
    # look-up each (a signature is one shape).
    lone: dict[tuple[tuple[object, ...], bool], Item] = {}
    for workload in pending:
        pods = workload.pods
        size = workload.min_member or len(pods)
        critical = is_critical(workload)
        if size == 1:
            item = lone.get((pods[0].signature, critical))
            if item is None:  # also the first lone pod of the shape
                shape_id = catalog.shape(pods[0])
                first.setdefault(shape_id, pods[0])
                item = lone[(pods[0].signature, critical)] = _item(
                    catalog, by_key, ((shape_id, 1),), None, critical, pods[:1]
                )
            item.workloads.append(workload)
            continue
        counts: dict[int, int] = {}
        for pod in pods[:size]:
            shape = catalog.shape(pod)
            counts[shape] = counts.get(shape, 0) + 1
            first.setdefault(shape, pod)
        shapes = tuple(sorted(counts.items()))
        _item(catalog, by_key, shapes, workload.topology, critical, pods[:size]).workloads.append(
            workload
        )
    items = sorted(by_key.values(), key=lambda item: (-item.gpu_milli, -item.cpu_milli))
    return items, first


def _item(
    catalog: PoolCatalog,
    by_key: dict[tuple[object, ...], Item],
    shapes: tuple[tuple[int, int], ...],
    topology: TopologyRequest | None,
    critical: bool,
    pods: Sequence[Pod],
) -> Item:
    """The item of units of ``shapes`` (of ``pods``) and ``topology``, made the first time."""
    key = (shapes, topology, critical)
    item = by_key.get(key)
    if item is None:
        item = by_key[key] = Item(
            shapes,
            topology,
            critical,
            gpu_milli=sum(p.gpu.total_milli + 1000 * p.gpu.mig_count for p in pods),
            cpu_milli=sum(p.cpu_milli for p in pods),
            kind=catalog.kind(shapes, topology),
        )
    return item


def _serve(
    item: Item, served: list[int], i: int, placed: int, pool: str, expected: dict[str, str]
) -> None:
    expected.update(
        dict.fromkeys([w.key for w in item.workloads[served[i] : served[i] + placed]], pool)
    )
    served[i] += placed


# --------------------------------------------------------------------------------- reports
def _never(
    catalog: PoolCatalog,
    packers: Sequence[PoolPacker],
    items: Sequence[Item],
    served: Sequence[int],
    states: Sequence[_Pool],
    keys: tuple[IntArray, IntArray],
    first_pods: Mapping[int, Pod],
) -> dict[str, str]:
    """Why each item no pool could ever hold cannot be held. Pools are asked in turn for the
    items none has held yet, each only for those whose units fit its nodes (read for all
    items at once: :meth:`~.packing.PoolPacker.unit_ids`)."""
    left = np.array([i for i, item in enumerate(items) if served[i] < item.count], np.int64)
    held = np.zeros(len(items), np.bool_)
    for state in states:
        if not left.size:
            break
        packer = packers[state.index]
        numbers = packer.unit_ids(items, *keys)
        distinct = packer.cache.book.distinct
        for i in left[numbers[left] >= 0].tolist():
            if _eligible(items[i], state.pool) and packer.holds_one(
                distinct[numbers[i]], state.pool.max_nodes
            ):
                held[i] = True
        left = left[~held[left]]
    never: dict[str, str] = {}
    for i in left.tolist():
        why = _why_never(catalog, packers, items[i], states, first_pods)
        if why is not None:
            for workload in items[i].workloads[served[i] :]:
                never[workload.key] = why
    return never


def _why_never(
    catalog: PoolCatalog,
    packers: Sequence[PoolPacker],
    item: Item,
    states: Sequence[_Pool],
    first_pods: Mapping[int, Pod],
) -> str | None:
    for state in states:
        unit = packers[state.index].unit(item)
        if (
            unit is not None
            and _eligible(item, state.pool)
            and packers[state.index].holds_one(unit, state.pool.max_nodes)
        ):
            return None
    fitting = [
        s
        for s in states
        if all(catalog.on_pool(shape, s.index) is not None for shape, _ in item.shapes)
    ]
    if not fitting:
        for shape, _ in item.shapes:
            if all(catalog.on_pool(shape, s.index) is None for s in states):
                pod = first_pods[shape]
                return f"no pool's node fits pod {pod.key} ({describe_request(pod)})"
        return "no single pool's nodes fit all of its pods"
    eligible = [s for s in fitting if _eligible(item, s.pool)]
    if not eligible:
        return "it must not be interrupted and only spot pools fit it"
    if item.topology is not None and all(packers[s.index].unit(item) is None for s in eligible):
        return f"no pool's nodes carry its topology level {item.topology.level}"
    return f"its gang of {item.pods_per_unit} pods does not fit within any pool's maximum"


def _waiting(
    catalog: PoolCatalog,
    items: Sequence[Item],
    served: Sequence[int],
    never: Mapping[str, str],
    states: Sequence[_Pool],
) -> dict[str, str]:
    waiting: dict[str, str] = {}
    for i, item in enumerate(items):
        left = [w for w in item.workloads[served[i] :] if w.key not in never]
        if not left:
            continue
        fits = [s for s in states if _fits(catalog, item, s)]
        parts = []
        for state in fits:
            pool = state.pool
            if state.unavailable_for and not state.overdue:
                parts.append(_unavailable(state))
            elif state.overdue:
                parts.append(
                    f"{pool.name} is backed off ({state.overdue} node(s) asked for did not join "
                    "in time)"
                )
            else:
                parts.append(
                    f"{pool.name} has no room left within its maximum of {pool.max_nodes} node(s)"
                )
        why = "; ".join(parts) or "no pool has room for it"
        for workload in left:
            waiting[workload.key] = why
    return waiting


__all__ = [
    "INSUFFICIENT_CAPACITY_TTL",
    "MAX_PROVISION_TIME",
    "AddNodes",
    "PoolNodes",
    "Provisioning",
    "ScaleUpDecision",
    "ScaleUpPlanner",
    "decide_scale_up",
]
