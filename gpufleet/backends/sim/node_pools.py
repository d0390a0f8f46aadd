"""Node pools in a simulated run: nodes that join when work waits for capacity and leave when
they are no longer needed, each billed for the time it was there.

Owns :class:`PoolScaling`, a :class:`~gpufleet.control.backend.ClusterBackend` around the world
(or around what already wraps it) that also observes the control loop's turns (a
:class:`~gpufleet.control.loop.TurnObserver`: after each turn it keeps the core, to read what
waits). Every ``step_s`` of simulated time (10 s, Cluster Autoscaler's ``--scan-interval``)
while something waits for capacity, it asks the scale-up planner
(:class:`~gpufleet.elastic.nodepools.ScaleUpPlanner`) which pools get how many nodes, for the
workloads the scheduler parked for capacity (those that wait on quota, a budget or a back-off
would not run on a new node, as Kueue's gated pods do not make Cluster Autoscaler scale); the
nodes asked for join after their pool's provisioning delay (:meth:`~gpufleet.model.nodepools.
NodePool.node`: named ``<pool>-<n>``, in the zone the decision chose). A request made in one
of its pool's capacity outages (:attr:`~gpufleet.model.nodepools.NodePool.outages`) fails at
once, as the cloud's insufficient-capacity error: no node comes, the pool is unavailable to the
planner for :data:`~gpufleet.elastic.nodepools.INSUFFICIENT_CAPACITY_TTL` (Karpenter's cache of
unavailable offerings) and the planner decides again at once, so the work goes to the next pool
that fits (a spot pool falls back on on-demand); once that time is up the pool is asked again,
and after the outage its nodes come as before. Every
``scale_down_every_s`` (60 s) while some pool node is used below the threshold, it asks
:func:`~gpufleet.elastic.scale_down.decide_scale_down` which nodes to remove: a node removed is
drained first (nothing new goes there; each workload running there is evicted whole and
placed again by the scheduler, from its last checkpoint, as Cluster Autoscaler's drain evicts
pods for their controllers to recreate) and leaves once empty.

A node is billed from the moment it is asked for (a cloud bills an instance from its launch,
while it boots and joins) until it leaves, is lost (a spot interruption, a node failure: the
world's :mod:`~gpufleet.backends.sim.node_faults`) or the run ends, at its pool's price per
node-hour. The pools' nodes at the start (each pool's minimum, :meth:`PoolSettings.start_nodes`)
are there from the start. The report (:class:`PoolReport`) has each pool's nodes, node-hours and
cost, what was asked and removed and why (the first actions, in words), and the nodes of each
pool over time.

What it does not do: decide (the elastic package's pure decisions do), move pods itself (the
scheduler evicts and places them), or price the nodes that belong to no pool.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.backends.sim.cluster import SimulatedCluster
from gpufleet.backends.sim.results import PoolReport, PoolUsage
from gpufleet.control.backend import Clock, ClusterBackend, ClusterState
from gpufleet.control.loop import Turn
from gpufleet.elastic.nodepools import (
    INSUFFICIENT_CAPACITY_TTL,
    MAX_PROVISION_TIME,
    AddNodes,
    PoolNodes,
    Provisioning,
    ScaleUpPlanner,
)
from gpufleet.elastic.scale_down import RemoveNode, RunningPod, ScaleDownConfig, decide_scale_down
from gpufleet.model import Node
from gpufleet.model.actions import Action
from gpufleet.model.events import ClusterEvent, NodeAdded, NodeGone
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.nodepools import NODE_POOL_LABEL, NodePool
from gpufleet.model.times import simulated_time
from gpufleet.model.workload import Workload
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.pending import Parked

#: Cluster Autoscaler's ``--scan-interval`` default.
STEP_S = 10.0
#: How often nodes are looked at for removal, at most (CA looks every scan; a node must be
#: unneeded for minutes before it goes, so a minute's grain changes little).
SCALE_DOWN_EVERY_S = 60.0
SECONDS_PER_HOUR = 3600.0
#: Actions a report lists in words, at most.
ACTIONS_LISTED = 50


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """The pools of a run and how their autoscaler runs (Cluster Autoscaler's defaults)."""

    pools: tuple[NodePool, ...]
    step_s: float = STEP_S
    scale_down_every_s: float = SCALE_DOWN_EVERY_S
    scale_down: ScaleDownConfig = field(default_factory=ScaleDownConfig)
    max_provision_time: float = MAX_PROVISION_TIME

    def __post_init__(self) -> None:
        names = [pool.name for pool in self.pools]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"node pools must have distinct names; repeated: {repeated}")
        if not (self.step_s > 0 and self.scale_down_every_s > 0):
            raise ValueError("the autoscaler's intervals must be above 0 seconds")

    def start_nodes(self) -> list[Node]:
        """Each pool's minimum of nodes, there from the start, spread over its zones."""
        nodes = []
        for pool in self.pools:
            for index, zone in enumerate(pool.zones_for(pool.min_nodes)):
                nodes.append(pool.node(pool.node_name(index), zone))
        return nodes


@dataclass(slots=True)
class _Billed:
    """A pool node's life: asked for at ``asked``, joined, and gone (removed or lost)."""

    pool: int
    zone: str | None
    asked: float
    joined: float | None = None
    left: float | None = None


@dataclass(slots=True)
class _Batch:
    """Nodes asked of a pool that join at ``ready_at``."""

    pool: int
    count: int
    zone: str | None
    asked: float
    ready_at: float


class PoolScaling:
    """See the module docstring. ``start_nodes``: the pools' nodes the world began with
    (:meth:`PoolSettings.start_nodes`)."""

    def __init__(
        self,
        inner: ClusterBackend,
        sim: SimulatedCluster,
        settings: PoolSettings,
        time_format: Callable[[float], str] = simulated_time,
    ) -> None:
        self.inner = inner
        self.sim = sim
        self.settings = settings
        self.pools = settings.pools
        self.index = {pool.name: i for i, pool in enumerate(self.pools)}
        self.time_format = time_format
        self.planner = ScaleUpPlanner(self.pools, settings.max_provision_time)
        self.core: SchedulerCore | None = None
        start = sim.clock.now()
        self.nodes: dict[str, _Billed] = {}
        self.made = [0] * len(self.pools)
        for node in sim.current_nodes():
            pool = self.index.get(node.labels.get(NODE_POOL_LABEL, ""))
            if pool is not None:
                self.nodes[node.name] = _Billed(pool, _zone(node), start, start)
                self.made[pool] += 1
        self.start_counts = self._counts()
        self.peak = list(self.start_counts)
        self.batches: list[_Batch] = []
        self.draining: dict[str, str] = {}
        self.unneeded_since: dict[str, float] = {}
        self.last_scale_up: float | None = None
        self.next_tick = start
        self.next_down = start
        self._table_seen = -1
        self._down_due = start
        #: Bumped whenever pool nodes join, leave or start draining (cached rows go stale).
        self._version = 0
        self._rows_for = -1
        self._rows: np.ndarray = np.zeros(0, np.int64)
        self.waiting_for_capacity = False
        self.underused = False
        #: The last tick added nothing for what waits, and nothing happened since.
        self.stalled = False
        self.added = [0] * len(self.pools)
        self.removed = [0] * len(self.pools)
        self.lost = [0] * len(self.pools)
        self.refused = [0] * len(self.pools)
        #: Per pool: not asked for nodes before then (its last request found no capacity).
        self.unavailable_until: list[float | None] = [None] * len(self.pools)
        self.scale_ups = 0
        self.actions: list[str] = []
        self.never: dict[str, str] = {}
        self.timeline: list[tuple[float, tuple[int, ...]]] = [(start, self.start_counts)]

    # ------------------------------------------------------------------- TurnObserver
    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        return None

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        """After the scheduler's turn (it has seen every node joined so far): tick, if due."""
        self.core = core
        self.waiting_for_capacity = any(
            p.reason == Parked.CAPACITY for p in core.pending.workloads()
        )
        if turn.now >= self.next_tick:
            self.tick(turn.now)
            self.next_tick = turn.now + self.settings.step_s

    # ------------------------------------------------------------------- ClusterBackend
    @property
    def clock(self) -> Clock:
        return self.inner.clock

    def list_state(self) -> ClusterState:
        return self.inner.list_state()

    def poll_events(self) -> Sequence[ClusterEvent]:
        now = self.clock.now()
        self._join_due(now)
        self._retire_drained()
        events = self.inner.poll_events()
        for event in events:
            if isinstance(event, NodeGone):
                self._gone(event.node, now)
            elif isinstance(event, NodeAdded):
                self._back(event.node, now)
        if events:
            self.stalled = False  # what waits may have changed: the next tick says
        return events

    def apply(self, actions: Sequence[Action]) -> None:
        self.inner.apply(actions)

    def wait(self, deadline: float) -> None:
        if self.done:  # the run ends here: no look at the pools moves its clock past it
            self.inner.wait(deadline)
            return
        wake = min(deadline, min((b.ready_at for b in self.batches), default=math.inf))
        if self.waiting_for_capacity or self.underused or self.draining:
            wake = min(wake, self.next_tick)
        self.inner.wait(wake)

    @property
    def done(self) -> bool:
        """The world is done, no node is on its way or draining, and nothing waits for
        capacity that a node could still be added for."""
        # Work that waits for a pool at its maximum may fit once an unneeded node of it
        # leaves (a gang is packed on new nodes only): the run goes on while a node is on
        # its way out, or may be once the next look at scale-down sees what changed.
        looked = not self.underused or self.sim.world.clock == self._table_seen
        removal = bool(self.unneeded_since) or not looked
        settled = not self.waiting_for_capacity or (self.stalled and not removal)
        return self.inner.done and not self.batches and not self.draining and settled

    # ----------------------------------------------------------------------------- ticks
    def tick(self, now: float) -> None:
        """Scale up for what waits for capacity; now and then, scale down what is unneeded."""
        added = self._scale_up(now) if self.waiting_for_capacity else False
        # A pool out of capacity is asked again once its time is up: the run waits for that.
        self.stalled = not added and not any(
            until is not None and until > now for until in self.unavailable_until
        )
        self.underused = self._underused()
        changed = self.sim.world.clock != self._table_seen
        if self.underused and now >= self.next_down and (changed or now >= self._down_due):
            self.next_down = now + self.settings.scale_down_every_s
            self._scale_down(now)

    def _pool_nodes(self, now: float) -> list[PoolNodes]:
        """Each pool's nodes as the planner takes them. An empty node in service is handed
        over as one being provisioned: the planner packs pending work on those first, so a
        gang part of which fits on idle nodes of a pool asks only for the rest (the planner
        packs a gang on nodes it treats as new; the scheduler places it across both)."""
        busy = {placement.node for _, placement, _ in self.sim.running_pods()}
        ready: list[dict[str | None, int]] = [{} for _ in self.pools]
        idle: list[dict[str | None, int]] = [{} for _ in self.pools]
        for name, billed in self.nodes.items():
            if billed.joined is not None and billed.left is None and name not in self.draining:
                zones = (ready if name in busy else idle)[billed.pool]
                zones[billed.zone] = zones.get(billed.zone, 0) + 1
        asked: list[list[Provisioning]] = [[] for _ in self.pools]
        for i, zones in enumerate(idle):
            asked[i] += [Provisioning(count, now, zone) for zone, count in zones.items()]
        for batch in self.batches:
            asked[batch.pool].append(Provisioning(batch.count, batch.asked, batch.zone))
        return [
            PoolNodes(pool, ready[i], tuple(asked[i]), self.unavailable_until[i])
            for i, pool in enumerate(self.pools)
        ]

    def _scale_up(self, now: float) -> bool:
        core = self.core
        if core is None:
            return False
        pending: list[Workload] = [
            p.workload for p in core.pending.workloads() if p.reason == Parked.CAPACITY
        ]
        if not pending:
            return False
        added = False
        # Each pass that finds a pool out of capacity leaves it out of the next: at most one
        # pass per pool, and one more.
        for _ in range(len(self.pools) + 1):
            decision = self.planner.decide(pending, self._pool_nodes(now), now)
            self.never.update(decision.never)
            refused: set[int] = set()
            for action in decision.actions:
                pool = self.index[action.pool]
                if pool in refused or not self._ask(action, now):
                    refused.add(pool)  # decided again below, without it
                else:
                    added = True
            if not refused:
                break
        return added

    def _ask(self, action: AddNodes, now: float) -> bool:
        """Ask the cloud for the action's nodes: False if it has no capacity for the pool
        (then the pool is unavailable for a while)."""
        pool = self.index[action.pool]
        outage = self.pools[pool].outage_at(now)
        if outage is not None:
            self.refused[pool] += 1
            self.unavailable_until[pool] = now + INSUFFICIENT_CAPACITY_TTL
            self._say(
                now,
                f"{action.pool}: InsufficientCapacity for +{action.count} (no "
                f"{self.pools[pool].capacity.value} capacity until "
                f"{self.time_format(outage.end)}); not asked again for "
                f"{INSUFFICIENT_CAPACITY_TTL:.0f} s",
            )
            return False
        self.batches.append(_Batch(pool, action.count, action.zone, now, action.ready_at))
        self.added[pool] += action.count
        self.scale_ups += 1
        self.last_scale_up = now
        where = f" ({action.zone})" if action.zone else ""
        self._say(now, f"+{action.count} {action.pool}{where}: {action.reason}")
        return True

    def _join_due(self, now: float) -> None:
        due = [b for b in self.batches if b.ready_at <= now]
        if not due:
            return
        self.batches = [b for b in self.batches if b.ready_at > now]
        for batch in due:
            pool = self.pools[batch.pool]
            for _ in range(batch.count):
                name = pool.node_name(self.made[batch.pool])
                while self.sim.knows_node(name):  # a node the run began with took it
                    self.made[batch.pool] += 1
                    name = pool.node_name(self.made[batch.pool])
                self.made[batch.pool] += 1
                self.nodes[name] = _Billed(batch.pool, batch.zone, batch.asked, now)
                self.sim.join(pool.node(name, batch.zone))
        self._changed(now)

    def _underused(self) -> bool:
        """Whether some pool node in service is used below the scale-down threshold (the
        world's own books: the decision looks closer)."""
        table = self.sim.world
        config = self.settings.scale_down
        if self._rows_for != self._version:
            names = [
                name
                for name, billed in self.nodes.items()
                if billed.joined is not None and billed.left is None and name not in self.draining
            ]
            rows = np.array([table.row_of[n] for n in names if n in table.row_of], np.int64)
            self._rows = rows[table.alive[rows]] if rows.size else rows
            self._rows_for = self._version
        rows = self._rows
        if not rows.size:
            return False
        count = table.gpu_count[rows]
        gpu = count > 0
        if gpu.any():
            g_rows = rows[gpu]
            free = table.gpu_free[g_rows].sum(axis=1)  # columns past a node's GPUs hold 0
            used = 1.0 - free / (count[gpu] * 1000)
            if bool((used < config.gpu_utilization_threshold).any()):
                return True
        c_rows = rows[~gpu]
        if c_rows.size:
            cpu = 1.0 - table.cpu_free[c_rows] / np.maximum(table.cpu_cap[c_rows], 1)
            memory = 1.0 - table.mem_free[c_rows] / np.maximum(table.mem_cap[c_rows], 1)
            if bool((np.maximum(cpu, memory) < config.utilization_threshold).any()):
                return True
        return False

    def _scale_down(self, now: float) -> None:
        table_now = self.sim.world.clock
        draining = self.draining
        nodes = [n for n in self.sim.current_nodes() if n.name not in draining]
        running = [
            RunningPod(pod, placement, workload)
            for pod, placement, workload in self.sim.running_pods()
            if placement.node not in draining
        ]
        decision = decide_scale_down(
            nodes,
            running,
            self.pools,
            now,
            self.unneeded_since,
            self.last_scale_up,
            self.settings.scale_down,
            # The scheduler's own placement, as it stands after its turn (tried, rolled back).
            snapshot=None if self.core is None else self.core.engine,
        )
        self.unneeded_since = dict(decision.unneeded_since)
        for action in decision.actions:
            self._remove(action, now)
        # Nothing placed or released since, no node waits out its time: the same answer.
        self._table_seen = table_now
        waits = [since + self.settings.scale_down.unneeded_time for since in
                 self.unneeded_since.values()]  # fmt: skip
        if self.last_scale_up is not None:
            waits.append(self.last_scale_up + self.settings.scale_down.delay_after_add)
        self._down_due = (
            now if decision.actions else min([w for w in waits if w > now], default=now)
        )

    def _remove(self, action: RemoveNode, now: float) -> None:
        pool = self.index[action.pool]
        self.removed[pool] += 1
        self.unneeded_since.pop(action.node, None)
        self.draining[action.node] = action.reason
        self._version += 1
        self.sim.drain(action.node, f"node {action.node} is removed: {action.reason}")
        self._say(now, f"-1 {action.pool} ({action.node}): {action.reason}")

    def _retire_drained(self) -> None:
        now = self.clock.now()
        for name, reason in list(self.draining.items()):
            if self.sim.retire(name, f"removed by the autoscaler: {reason}"):
                del self.draining[name]
                billed = self.nodes[name]
                if billed.left is None:
                    billed.left = now
                    self._changed(now)

    def _gone(self, name: str, now: float) -> None:
        billed = self.nodes.get(name)
        if billed is None or billed.left is not None or name in self.draining:
            return
        billed.left = now
        self.lost[billed.pool] += 1
        self.unneeded_since.pop(name, None)
        self._changed(now)

    def _back(self, node: Node, now: float) -> None:
        """A pool node lost to a fault that comes back (the fault said so): billed again."""
        billed = self.nodes.get(node.name)
        if billed is None or billed.left is None:
            return
        self.nodes[node.name] = _Billed(billed.pool, billed.zone, now, now)
        self._changed(now)

    def _counts(self) -> tuple[int, ...]:
        counts = [0] * len(self.pools)
        for billed in self.nodes.values():
            if billed.joined is not None and billed.left is None:
                counts[billed.pool] += 1
        return tuple(counts)

    def _changed(self, now: float) -> None:
        self._version += 1
        counts = self._counts()
        self.peak = [max(p, c) for p, c in zip(self.peak, counts, strict=True)]
        if self.timeline and self.timeline[-1][0] == now:
            self.timeline[-1] = (now, counts)
        else:
            self.timeline.append((now, counts))

    def _say(self, now: float, what: str) -> None:
        if len(self.actions) < ACTIONS_LISTED:
            self.actions.append(f"{self.time_format(now)}: {what}")

    # ----------------------------------------------------------------------------- report
    def finish(self, end: float) -> PoolReport:
        """What the pools did up to ``end`` (the run's end: nodes still there are billed to
        it, nodes asked for and not joined from their asking)."""
        hours = np.zeros(len(self.pools))
        lives = list(self.nodes.values())
        lives += [_Billed(b.pool, b.zone, b.asked) for b in self.batches for _ in range(b.count)]
        for billed in lives:
            stop = billed.left if billed.left is not None else end
            hours[billed.pool] += max(0.0, stop - billed.asked) / SECONDS_PER_HOUR
        counts = self._counts()
        usage = []
        for i, pool in enumerate(self.pools):
            usage.append(
                PoolUsage(
                    pool=pool.name,
                    capacity_type=pool.capacity.value,
                    gpu_model=pool.gpu_model,
                    gpus_per_node=pool.gpus_per_node,
                    hourly_price=pool.hourly_price,
                    nodes_at_start=self.start_counts[i],
                    nodes_peak=self.peak[i],
                    nodes_at_end=counts[i],
                    added=self.added[i],
                    removed=self.removed[i],
                    lost=self.lost[i],
                    insufficient_capacity=self.refused[i],
                    node_hours=round(float(hours[i]), 6),
                    gpu_hours=round(float(hours[i]) * pool.gpus_per_node, 6),
                    cost=round(float(hours[i]) * pool.hourly_price, 4),
                )
            )
        return PoolReport(
            pools=tuple(usage),
            cost=round(sum(u.cost for u in usage), 4),
            node_hours=round(sum(u.node_hours for u in usage), 6),
            gpu_hours=round(sum(u.gpu_hours for u in usage), 6),
            scale_ups=self.scale_ups,
            nodes_removed=sum(self.removed),
            actions=tuple(self.actions),
            never=tuple(sorted(self.never.items())),
            timeline=tuple(self.timeline),
        )


def _zone(node: Node) -> str | None:
    return node.labels.get(GFD_LABELS.ZONE)
