"""The control loop that joins a scheduling core and a cluster backend: one, for every world.

A turn (:meth:`ControlLoop.turn`): take the core of this turn; poll the backend's events, show
them to the observers and hand them to the core; run cycles until the core is idle, carrying
out each cycle's actions as the cycle ends (with thousands pending, binding starts after the
first cycle, not the last; nothing the backend answers meanwhile reaches the core before the
next poll, so the decisions are ``run_until_idle``'s); show the turn to the observers. Between
turns (:meth:`ControlLoop.run`) the backend waits until its next event or the core's next
timer: virtual time in the simulator (its wait jumps to the next event), a watch stream on
Kubernetes, a scaled wall clock in the embedded control plane.

What differs per world plugs in; the loop is not copied:

* ``core``: the core of each turn (the simulator's one core; the embedded plane's current one,
  rebuilt when its queues change; on Kubernetes, built when the replica starts leading and
  again when Queues change, inside the start's burst of long-lived objects);
* ``guard``: what each turn runs inside (the control plane's lock and store transaction);
* observers (:class:`TurnObserver`): what sees the events and the turns (metrics, the control
  plane's book and store, Kubernetes Queue status);
* ``refused``: what to do with an event the core refuses or fails on (on Kubernetes, a pod
  another scheduler bound beyond what a node has left, or any object whose contents the core
  cannot take: logged, counted and skipped, so that no single object crashes the loop, nor
  every replica that leads after it; elsewhere it is a bug and raises);
* admission checks with turn hooks: the loop tells them of each turn, before and after its
  cycles, with the world's :class:`~gpufleet.scheduling.framework.CheckWorld`
  (``check_world``: what they keep across turns and cores, a budget's GPU-hours used), waits
  no later than their timers, and the world takes their notices (``check_world.drain()``)
  for its events;
* ``standby`` and ``survive`` (:meth:`ControlLoop.run`): a world that must not act now (a
  replica that does not lead) waits instead of turning; a long-lived server logs a turn that
  fails and goes on.

It decides nothing (the core does) and carries nothing out (the backend does).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol

from gpufleet.control.backend import ClusterBackend, ClusterState
from gpufleet.model.actions import Action
from gpufleet.model.events import ClusterEvent, NodeAdded, PodAdded, PodBound
from gpufleet.model.workload import Workload
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.framework import CheckWorld

log = logging.getLogger(__name__)


def seen_at(core: SchedulerCore, now: Callable[[], float]) -> None:
    """The events handed to ``core`` next happened at ``now()``: where fair sharing over time
    is on, the usage they start or stop counts from then (the core's own ``now`` is its last
    cycle's, or 0 before its first). The clock is read only then."""
    history = core.state.usage_history
    if history is not None:
        history.events_at(now())


def sync(
    core: SchedulerCore,
    state: ClusterState,
    now: float | None = None,
    ran_as: Callable[[str], Workload | None] | None = None,
) -> None:
    """Bring the core in line with a full listing (nodes it lacks, running and pending pods),
    taken at ``now`` (the world's clock; None: the core's); ``ran_as``: the workload a running
    pod (by key) ran as, where the caller knows it."""
    if now is not None:
        seen_at(core, lambda: now)
    for node in state.nodes:
        if node.name not in core.table.row_of:
            core.handle(NodeAdded(node))
    for pod, placement in state.running:
        core.handle(PodBound(pod, placement, workload=ran_as(pod.key) if ran_as else None))
    for pod in state.pending:
        core.handle(PodAdded(pod))


@dataclass(frozen=True, slots=True)
class Turn:
    """What one turn did: the backend's time it ran at, the events it took in, the actions it
    sent out, and the wall seconds from the poll to the last action out."""

    now: float
    events: Sequence[ClusterEvent]
    actions: Sequence[Action]
    seconds: float


class TurnObserver(Protocol):
    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        """The turn's events, as polled, before the core takes them."""
        ...

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        """The turn ended (the core idle, its actions out)."""
        ...


def _unguarded() -> AbstractContextManager[object]:
    return nullcontext()


class ControlLoop:
    """See the module docstring."""

    def __init__(
        self,
        backend: ClusterBackend,
        core: Callable[[], SchedulerCore],
        observers: Sequence[TurnObserver] = (),
        guard: Callable[[], AbstractContextManager[object]] = _unguarded,
        refused: Callable[[ClusterEvent, Exception], None] | None = None,
        stopwatch: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.backend = backend
        self.core = core
        self.observers = list(observers)
        self.guard = guard
        self.refused = refused
        self.stopwatch = stopwatch
        #: The core of the last turn (None before the first).
        self.last_core: SchedulerCore | None = None
        #: What the cores' admission checks keep for this world, and their notices.
        self.check_world = CheckWorld()

    def handle(self, core: SchedulerCore, events: Sequence[ClusterEvent]) -> None:
        """Hand ``events`` to ``core``; one it refuses or fails on (whatever it raises) goes to
        ``refused`` (if given), and the rest are still handed over."""
        seen_at(core, self.backend.clock.now)
        if self.refused is None:
            core.handle_all(events)
            return
        for event in events:
            try:
                core.handle(event)
            except Exception as error:  # one object's contents must not end the loop
                self.refused(event, error)

    def turn(self) -> float:
        """One turn (see the module docstring); returns the core's next timer."""
        if self.guard is _unguarded:  # a simulation turns thousands of times a second
            return self._turn()
        with self.guard():
            return self._turn()

    def _turn(self) -> float:
        backend = self.backend
        core = self.core()
        started = self.stopwatch()
        events = backend.poll_events()
        for observer in self.observers:
            observer.events_in(events)
        self.handle(core, events)
        now = backend.clock.now()
        world = self.check_world
        for check in core.turn_hooked:
            check.before_cycles(world, now)
        actions = core.run_until_idle(now, on_cycle=backend.apply)
        for check in core.turn_hooked:
            check.after_cycles(world, now)
        done = Turn(now, events, actions, self.stopwatch() - started)
        for observer in self.observers:
            observer.turn_done(core, done)
        self.last_core = core
        return min(core.next_timer(), core.check_timer(now))

    def run(
        self,
        stop: Callable[[], bool] | None = None,
        on_turn: Callable[[], None] | None = None,
        standby: Callable[[], bool] | None = None,
        survive: bool = False,
    ) -> int:
        """Turn and wait until ``stop`` says so, or the backend is done and the core has
        nothing timed left to do (a backoff, a gang's ready deadline); returns the number of
        turns. ``on_turn``: called after each turn's wait. ``standby``: asked before each
        turn; True means this world does not act now and has waited instead. ``survive``: a
        turn that raises is logged and the loop goes on a second later."""
        backend = self.backend
        turns = 0
        while not (stop is not None and stop()):
            if standby is not None and standby():
                continue
            try:
                timer = self.turn()
            except Exception:
                if not survive:
                    raise
                log.exception("a turn of the control loop failed")
                timer = backend.clock.now() + 1.0
            backend.wait(timer)
            turns += 1
            if on_turn is not None:
                on_turn()
            if backend.done and self.idle():
                break
        return turns

    def idle(self) -> bool:
        """Whether the last turn's core has nothing timed left to do."""
        core = self.last_core
        return core is None or core.next_timer(aging=False) == math.inf


def run(
    backend: ClusterBackend,
    core: SchedulerCore,
    on_iteration: Callable[[], None] | None = None,
    stop: Callable[[], bool] | None = None,
    observers: Sequence[TurnObserver] = (),
) -> int:
    """The loop over one core (a simulation): told the backend's listing first, then turned
    until the backend is done and the core has nothing timed left, or ``stop`` says so;
    returns the number of turns."""
    sync(core, backend.list_state(), backend.clock.now())
    return ControlLoop(backend, lambda: core, observers).run(stop, on_iteration)
