"""When the simulated cluster's nodes go and come back: a scenario's spot interruptions and node
failures, played on the world's event queue.

Owns :class:`NodeFaultPlan`: which nodes each :class:`~gpufleet.model.node_faults.NodeFault`
strikes (chosen once, from the cluster's nodes, by name, labels or how they are bought), the
events that strike them (a notice, the node going, a node of its name coming back) and the state
of each node (up; told it will go; gone), so that an event that no longer applies (a node
struck again while it is going or gone) changes nothing. A fault at listed times strikes each
chosen node that is up at each time. A fault at a rate draws, for each chosen node, the time of
its next strike when the node joins (at the start, and each time it comes back): an exponential
wait of mean 1/rate, from a generator seeded by (run seed, fault, node, draw), so that a run is
the same for a seed whatever else happens in it, and two seeds differ. A node that comes back
while no work is left to come draws nothing until work comes again (:meth:`NodeFaultPlan.
resume`, from that moment: the waits are memoryless, so the odds are the same), so a world
with nothing left to run ends.

It keeps each node's time up (for what spot capacity cost: :mod:`gpufleet.backends.sim.spot`)
and a row per notice, node gone and node back, for the run's report. It moves no pod and tells
the scheduler nothing (the cluster does both: :mod:`gpufleet.backends.sim.pod_losses`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from gpufleet.backends.sim.event_queue import NODE_DOWN, NODE_UP, NOTICE, EventQueue
from gpufleet.backends.sim.results import NodeFaultEvent
from gpufleet.economics.runs import capacity_type
from gpufleet.model import Node
from gpufleet.model.node_faults import NodeFault
from gpufleet.model.nodepools import NODE_POOL_LABEL
from gpufleet.model.times import format_duration

#: The token of a strike at a listed time (a drawn strike carries its draw's number).
LISTED = -1
SECONDS_PER_HOUR = 3600.0


class NodeState(StrEnum):
    UP = "up"
    NOTICED = "noticed"  # told it will go
    DOWN = "down"


@dataclass(slots=True)
class NodeLife:
    """One node's state, and the spans it was up (start, end; end None while up)."""

    node: Node
    state: NodeState = NodeState.UP
    #: Bumped each time the node goes or comes back: an event for an older life is stale.
    generation: int = 0
    #: The fault that gave notice or took it down, while it is going or gone.
    fault: NodeFault | None = None
    spans: list[tuple[float, float | None]] = field(default_factory=lambda: [(0.0, None)])

    def up_seconds(self, end: float) -> float:
        """Seconds it was up from 0 to ``end``."""
        return sum(
            max(0.0, min(end, stop if stop is not None else end) - max(0.0, start))
            for start, stop in self.spans
        )


class NodeFaultPlan:
    """See the module docstring. ``work_left`` says whether work is still to come (strikes are
    drawn only then)."""

    def __init__(
        self,
        faults: Sequence[NodeFault],
        nodes: Sequence[Node],
        seed: int,
        events: EventQueue,
        work_left: Callable[[], bool],
        start: float = 0.0,
    ) -> None:
        self.faults = tuple(faults)
        self.seed = seed
        self._events = events
        self._work_left = work_left
        self.lives = {node.name: NodeLife(node) for node in nodes}
        self.rows: list[NodeFaultEvent] = []
        #: Per (fault, node): the number of the last strike drawn (a newer draw makes the
        #: older one stale).
        self._draws: dict[tuple[int, str], int] = {}
        #: The nodes each fault chooses, and each node's rate-based faults.
        self.chosen: list[tuple[str, ...]] = []
        self._rated: dict[str, list[int]] = {}
        #: Nodes that came back while no work was left: they draw when work comes.
        self._paused: set[str] = set()
        for index, fault in enumerate(self.faults):
            self.chosen.append(self._choose(fault, nodes))
            for name in self.chosen[index]:
                if fault.rate_per_node_hour is not None:
                    self._rated.setdefault(name, []).append(index)
                    self._draw(index, name, start)
                for at in fault.times:
                    events.push(at, NOTICE, (fault, name, LISTED))

    @staticmethod
    def _choose(fault: NodeFault, nodes: Sequence[Node]) -> tuple[str, ...]:
        names = {node.name for node in nodes}
        missing = [name for name in fault.selection.names if name not in names]
        if missing:
            where = fault.where or fault.label
            raise ValueError(f"{where}: spec.nodes: no node {missing[0]!r} in the cluster")
        return tuple(n.name for n in nodes if fault.selection.matches(n, capacity_type))

    def _draw(self, index: int, name: str, now: float) -> None:
        """Push the next strike of rate-based fault ``index`` on node ``name``, from ``now``."""
        fault = self.faults[index]
        rate = fault.rate_per_node_hour
        assert rate is not None
        number = self._draws[(index, name)] = self._draws.get((index, name), 0) + 1
        key = zlib.crc32(f"{fault.kind}/{fault.name}".encode())
        rng = np.random.default_rng([self.seed, key, zlib.crc32(name.encode()), number])
        wait = float(rng.exponential(SECONDS_PER_HOUR / rate))
        self._events.push(now + wait, NOTICE, (fault, name, number))

    # ----------------------------------------------------------------------------- pools
    def join(self, node: Node, now: float) -> None:
        """A node new to the cluster joins (a node pool's): the faults whose selection takes
        it (by labels or how it is bought; a fault naming nodes names those it began with)
        strike it from now, at their rates and at their listed times still to come."""
        self.lives[node.name] = NodeLife(node, spans=[(now, None)])
        for index, fault in enumerate(self.faults):
            if fault.selection.names or not fault.selection.matches(node, capacity_type):
                continue
            self.chosen[index] = (*self.chosen[index], node.name)
            if fault.rate_per_node_hour is not None:
                self._rated.setdefault(node.name, []).append(index)
                if self._work_left():
                    self._draw(index, node.name, now)
                else:
                    self._paused.add(node.name)
            for at in fault.times:
                if at >= now:
                    self._events.push(at, NOTICE, (fault, node.name, LISTED))

    def retire(self, name: str, now: float) -> None:
        """The node leaves for good (its pool removed it): no strike applies to it any more."""
        life = self.lives.get(name)
        if life is None or life.state is NodeState.DOWN:
            return
        life.state, life.fault = NodeState.DOWN, None
        life.generation += 1
        start, _ = life.spans[-1]
        life.spans[-1] = (start, now)
        self._rated.pop(name, None)
        self._paused.discard(name)

    # ----------------------------------------------------------------------------- events
    def notice(self, fault: NodeFault, name: str, token: int, now: float) -> float | None:
        """``fault`` strikes node ``name``: when it goes (None: the strike does not apply, the
        node being already going or gone, or the draw stale)."""
        life = self.lives[name]
        if token != LISTED:
            index = next(i for i, f in enumerate(self.faults) if f is fault)
            if self._draws.get((index, name)) != token:
                return None
        if life.state is not NodeState.UP:
            return None
        life.state, life.fault = NodeState.NOTICED, fault
        leaves_at = now + fault.notice
        self._events.push(leaves_at, NODE_DOWN, (fault, name, life.generation))
        return leaves_at

    def record_notice(self, fault: NodeFault, name: str, now: float, told: int) -> None:
        """The row of a notice, with the pods told to checkpoint."""
        message = (
            f"goes in {format_duration(fault.notice)} ({fault.cause}); pods told to checkpoint"
        )
        self.rows.append(NodeFaultEvent(now, name, fault.label, "notice", told, message=message))

    def down(self, fault: NodeFault, name: str, generation: int, now: float) -> bool:
        """The node goes now (False: the event is stale). A node of its name comes back
        ``fault.back_after`` later, if ever."""
        life = self.lives[name]
        if life.state is not NodeState.NOTICED or life.generation != generation:
            return False
        life.state = NodeState.DOWN
        life.generation += 1
        start, _ = life.spans[-1]
        life.spans[-1] = (start, now)
        back_after = self.back_after(fault, name)
        if back_after is not None:
            self._events.push(now + back_after, NODE_UP, (fault, name, life.generation))
        return True

    def back_after(self, fault: NodeFault, name: str) -> float | None:
        """How long after it goes a node of this name joins again (None: never). A node pool's
        node is not brought back by the fault: its pool's autoscaler replaces it, if the
        work needs it, as Karpenter and Cluster Autoscaler replace an interrupted node."""
        life = self.lives.get(name)
        if life is not None and NODE_POOL_LABEL in life.node.labels:
            return None
        return fault.back_after

    def up(self, fault: NodeFault, name: str, generation: int, now: float) -> Node | None:
        """A node of this name joins again (None: the event is stale); its rate-based faults
        draw their next strikes while work is left."""
        life = self.lives[name]
        if life.state is not NodeState.DOWN or life.generation != generation:
            return None
        life.state, life.fault = NodeState.UP, None
        life.generation += 1
        life.spans.append((now, None))
        verb = "replaced" if fault.is_spot else "recovered"
        self.rows.append(NodeFaultEvent(now, name, fault.label, "back", message=f"{verb}"))
        if name in self._rated:
            self._paused.add(name)
            self.resume(now)
        return life.node

    def resume(self, now: float) -> None:
        """Nodes back while no work was left draw their next strikes, once work is left."""
        if not self._paused or not self._work_left():
            return
        for name in sorted(self._paused):
            for index in self._rated[name]:
                self._draw(index, name, now)
        self._paused.clear()

    def record_gone(
        self, fault: NodeFault, name: str, now: float, pods: int, gpu_hours: float
    ) -> None:
        """The row of a node gone, with the pods it took and the work they lost."""
        back = self.back_after(fault, name)
        when = "not replaced" if fault.is_spot else "does not recover"
        life = self.lives.get(name)
        if life is not None and NODE_POOL_LABEL in life.node.labels:
            when = "its pool adds a node if the work needs one"
        elif back is not None:
            when = f"{'replaced' if fault.is_spot else 'back'} in {format_duration(back)}"
        self.rows.append(
            NodeFaultEvent(now, name, fault.label, "gone", pods, round(gpu_hours, 6),
                         f"{fault.cause}; {when}")
        )  # fmt: skip

    # ----------------------------------------------------------------------------- queries
    def is_going(self, name: str) -> bool:
        life = self.lives.get(name)
        return life is not None and life.state is not NodeState.UP
