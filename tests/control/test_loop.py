"""The one control loop (control/loop.py): what a turn does in which order, and what each world's
hooks change (the guard, the observers, refused events, standing by, surviving a failed turn,
the end of a simulation)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import cast, get_args

import pytest

from gpufleet.control.backend import ClusterState, ManualClock
from gpufleet.control.loop import ControlLoop, Turn, run
from gpufleet.model import events as ev
from gpufleet.model.actions import Action, Bind, MarkUnschedulable
from gpufleet.model.events import ClusterEvent, WorkloadAdded
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.testing.builders import make_node, make_pod, make_workload
from gpufleet.testing.fakes import make_core


class ScriptedCluster:
    """A backend whose polls return the events given, one batch per poll; it logs what the loop
    asks of it into ``log``."""

    def __init__(self, log: list[str], *batches: Sequence[ClusterEvent]) -> None:
        self.log = log
        self.batches = list(batches)
        self.clock = ManualClock()
        self.applied: list[list[Action]] = []
        self.waited: list[float] = []

    def list_state(self) -> ClusterState:
        return ClusterState()

    def poll_events(self) -> Sequence[ClusterEvent]:
        self.log.append("poll")
        return self.batches.pop(0) if self.batches else []

    def apply(self, actions: Sequence[Action]) -> None:
        self.log.append(f"apply {len(actions)}")
        self.applied.append(list(actions))

    def wait(self, deadline: float) -> None:
        self.log.append("wait")
        self.waited.append(deadline)

    @property
    def done(self) -> bool:
        return not self.batches


class Watcher:
    """An observer logging what it sees."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.turns: list[Turn] = []

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        self.log.append(f"events {len(events)}")

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        self.log.append(f"done {len(turn.actions)}")
        self.turns.append(turn)


def arrivals(*gpus: int, prefix: str = "w") -> list[ClusterEvent]:
    return [WorkloadAdded(make_workload(f"{prefix}{i}", gpus=n)) for i, n in enumerate(gpus)]


def test_a_turn_shows_the_events_then_applies_each_cycle_as_it_ends_then_shows_the_turn() -> None:
    log: list[str] = []
    core = make_core([make_node("n", gpus=2)])
    backend = ScriptedCluster(log, arrivals(1, 1, 4))
    watcher = Watcher(log)

    @contextmanager
    def guard() -> Iterator[None]:
        log.append("enter")
        yield
        log.append("exit")

    timer = ControlLoop(backend, lambda: core, [watcher], guard=guard).turn()
    # One admission per queue and cycle: each cycle's actions leave as the cycle ends (the
    # third cycle tells w2, which can never fit, why it waits).
    cycles = ["apply 1", "apply 1", "apply 1"]
    assert log == ["enter", "poll", "events 3", *cycles, "done 3", "exit"]
    kinds = [type(a) for a in watcher.turns[0].actions]
    assert kinds == [Bind, Bind, MarkUnschedulable]
    assert timer == core.next_timer()


@pytest.mark.parametrize("tolerated", [True, False], ids=["logged-and-counted", "raised"])
def test_an_event_the_core_refuses(tolerated: bool) -> None:
    core = make_core([make_node("n", gpus=2)])
    unknown = WorkloadAdded(make_workload("lost", queue="nowhere"))
    backend = ScriptedCluster([], [unknown, *arrivals(1)])
    refused: list[ClusterEvent] = []
    loop = ControlLoop(
        backend,
        lambda: core,
        refused=(lambda event, error: refused.append(event)) if tolerated else None,
    )
    if not tolerated:
        with pytest.raises(ValueError, match="unknown queue"):
            loop.turn()
        return
    loop.turn()
    assert refused == [unknown]
    assert [type(a) for a in backend.applied[0]] == [Bind], "the rest is still handled"


def test_a_world_standing_by_waits_instead_of_turning() -> None:
    log: list[str] = []
    core = make_core([make_node("n", gpus=2)])
    backend = ScriptedCluster(log, arrivals(1))
    leading = iter([False, False, True])
    turns = ControlLoop(backend, lambda: core).run(standby=lambda: not next(leading))
    assert turns == 1
    assert log == ["poll", "apply 1", "wait"]


@pytest.mark.parametrize("survive", [True, False], ids=["logged-and-on", "raised"])
def test_a_turn_that_fails(survive: bool) -> None:
    core = make_core([make_node("n", gpus=2)])
    backend = ScriptedCluster([], arrivals(1))
    failures = [RuntimeError("a bug in one turn")]

    def core_of_turn() -> SchedulerCore:
        if failures:
            raise failures.pop()
        return core

    loop = ControlLoop(backend, core_of_turn)
    if not survive:
        with pytest.raises(RuntimeError, match="a bug"):
            loop.run()
        return
    assert loop.run(survive=True) == 2
    assert backend.waited[0] == backend.clock.now() + 1.0, "a second later"
    assert len(core.running) == 1


def test_a_simulation_ends_when_its_world_is_done_and_the_core_has_nothing_timed() -> None:
    core = make_core([make_node("n", gpus=2)])
    backend = ScriptedCluster([], arrivals(1), arrivals(1, prefix="later"))
    seen: list[int] = []
    assert run(backend, core, on_iteration=lambda: seen.append(len(core.running))) == 2
    assert seen == [1, 2]
    assert core.next_timer(aging=False) == math.inf


def _malformed(cls: type, **fields: object) -> ClusterEvent:
    """An event of ``cls`` carrying contents no backend should send (wrong types, unknown
    names): what a bad object read into an event may look like."""
    return cast(ClusterEvent, cls(**fields))


#: One malformed event per kind of event the loop hands the core.
MALFORMED: list[ClusterEvent] = [
    _malformed(ev.NodeAdded, node=None),
    _malformed(ev.NodeRemoved, name="ghost"),
    _malformed(ev.NodeNotice, node=None, leaves_at="soon", reason=None),
    _malformed(ev.NodeGone, node=None, reason=None),
    _malformed(ev.DeviceHealthChanged, node="n", unhealthy=(99,)),
    _malformed(ev.NodeSchedulingChanged, node=["n"], unschedulable="yes"),
    _malformed(ev.PodAdded, pod=None),
    _malformed(ev.WorkloadAdded, workload=None),
    _malformed(ev.PodBound, pod=make_pod("stray", gpus=1), placement=None),
    _malformed(ev.PodReady, key=["x"]),
    _malformed(ev.PodDeleted, key=["x"]),
    _malformed(ev.BindFailed, key=["x"], reason=None),
    _malformed(ev.PodRestarted, key=None, message=None),
    _malformed(ev.JobEnded, job=None, pod_key=None, outcome=None, reason=None, message=None),
    _malformed(ev.WorkloadDemoted, key=["x"]),
    _malformed(ev.WorkloadDisrupted, key=["x"], reason=None),
    _malformed(ev.WorkloadReleased, workload=None),
]


def test_the_malformed_table_covers_every_kind_of_event() -> None:
    assert {type(e) for e in MALFORMED} == set(get_args(ClusterEvent))


@pytest.mark.parametrize("event", MALFORMED, ids=lambda e: type(e).__name__)
def test_no_single_malformed_event_crashes_the_loop(event: ClusterEvent) -> None:
    """What the core cannot take is refused (logged and counted by the world), the rest of
    the turn and the next turns go on."""
    core = make_core([make_node("n", gpus=2)])
    backend = ScriptedCluster([], [event, *arrivals(1)], arrivals(1, prefix="next"))
    refused: list[tuple[ClusterEvent, Exception]] = []
    loop = ControlLoop(
        backend, lambda: core, refused=lambda event, error: refused.append((event, error))
    )
    loop.turn()
    loop.turn()
    assert [type(a) for batch in backend.applied for a in batch] == [Bind, Bind]
    assert all(e is event for e, _ in refused)
