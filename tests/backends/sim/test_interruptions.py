"""Spot interruptions and node failures in the simulated cluster: the notice and what a pod keeps
of its work (an interval checkpoint, or one at the notice), the node cordoned then gone and
back, gangs restarted whole, random strikes drawn per seed, and the invariants (work lost never
exceeds the time since the last checkpoint times GPUs; a gang never runs in part; a seed gives
one run). Times are worked out by hand (seconds)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.backends.sim.run import run_workloads
from gpufleet.control.loop import Turn
from gpufleet.control.loop import run as run_loop
from gpufleet.model import Node
from gpufleet.model.actions import Bind
from gpufleet.model.capacity import CAPACITY_TYPE_LABEL
from gpufleet.model.events import ClusterEvent, NodeNotice, PodDeleted, PodEnd
from gpufleet.model.node_faults import NodeFault, NodeFaultKind, NodeSelection
from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import make_node, make_workload
from gpufleet.testing.fakes import make_core

HOUR = 3600.0
SPOT = {CAPACITY_TYPE_LABEL: "spot"}


def spot_node(name: str, gpus: int = 4) -> Node:
    return make_node(name, gpus=gpus, labels=SPOT, model="H100")


def reclaim(
    *times: float,
    nodes: Sequence[str] = (),
    notice: float = 120.0,
    back: float | None = 300.0,
    name: str = "reclaim",
) -> NodeFault:
    selection = NodeSelection(names=tuple(nodes)) if nodes else NodeSelection(capacity_type="spot")
    return NodeFault(NodeFaultKind.SPOT_INTERRUPTION, name, selection, times, None, notice, back)


def failure(*times: float, nodes: Sequence[str], back: float | None = None) -> NodeFault:
    selection = NodeSelection(names=tuple(nodes))
    return NodeFault(NodeFaultKind.NODE_FAILURE, "down", selection, times, None, 0.0, back)


def job(
    name: str,
    gpus: int = 4,
    pods: int = 1,
    checkpoint: float | None = None,
    on_notice: bool = False,
) -> Workload:
    workload = make_workload(name, pods=pods, gpus=gpus, checkpoint=checkpoint)
    return dataclasses.replace(workload, checkpoint_on_notice=on_notice)


class Watch:
    """Observes a run: binds (time, pod, node), pods lost (time, pod, message), notices, and
    after every turn whether some gang holds part of its pods."""

    def __init__(self, sim: SimulatedCluster, gangs: Sequence[Workload]) -> None:
        self.sim = sim
        self.gangs = [g for g in gangs if g.gang_size > 1]
        self.binds: list[tuple[float, str, str]] = []
        self.lost: list[tuple[float, str, str]] = []
        self.notices: list[NodeNotice] = []
        self.partial: list[tuple[float, str]] = []

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        now = self.sim.clock.now()
        for event in events:
            if isinstance(event, PodDeleted) and event.end is PodEnd.LOST:
                self.lost.append((now, event.key.split("/")[1], event.message))
            elif isinstance(event, NodeNotice):
                self.notices.append(event)

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        for action in turn.actions:
            if isinstance(action, Bind) and action.pod.key in self.sim.running:
                self.binds.append((turn.now, action.pod.name, action.placement.node))
        running = self.sim.running
        for gang in self.gangs:
            held = sum(p.key in running for p in gang.pods[: gang.gang_size])
            if 0 < held < gang.gang_size:
                self.partial.append((turn.now, gang.key))


def play(
    nodes: Sequence[Node],
    workloads: Sequence[TimedWorkload],
    faults: Sequence[NodeFault],
    seed: int = 0,
) -> tuple[SimulatedCluster, Watch]:
    sim = SimulatedCluster(
        nodes,
        (),
        Mode.REPLAY,
        TargetWorkload((), ()),
        workloads=workloads,
        node_faults=faults,
        seed=seed,
    )
    watch = Watch(sim, [t.workload for t in workloads])
    turns = [0]

    def too_long() -> bool:  # the world must end; a bug that loops fails here, not hangs
        turns[0] += 1
        return turns[0] > 200_000

    run_loop(sim, make_core(nodes), stop=too_long, observers=[watch])
    assert turns[0] <= 200_000, "the world did not end"
    return sim, watch


# --------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize(
    ("checkpoint", "on_notice", "notice", "lost_s", "end"),
    [
        # Notice at 1000, gone at 1120, a new node at 1420; the pod (1 h of work) resumes.
        pytest.param(None, False, 120.0, 1120, 1420 + 3600, id="no-checkpoint-loses-it-all"),
        pytest.param(600.0, False, 120.0, 520, 1420 + 3000, id="since-the-last-interval"),
        pytest.param(None, True, 120.0, 120, 1420 + 2600, id="on-notice-keeps-up-to-the-notice"),
        pytest.param(300.0, True, 120.0, 120, 1420 + 2600, id="the-later-of-the-two"),
        # No notice: gone at 1000, back at 1300.
        pytest.param(600.0, True, 0.0, 400, 1300 + 3000, id="no-notice-no-checkpoint-on-it"),
    ],
)
def test_a_pod_keeps_its_work_up_to_its_last_checkpoint(
    checkpoint: float | None, on_notice: bool, notice: float, lost_s: float, end: float
) -> None:
    workload = job("train", checkpoint=checkpoint, on_notice=on_notice)
    run = run_workloads(
        [spot_node("s0")],
        [TimedWorkload(workload, 0, HOUR)],
        "bestfit",
        0,
        node_faults=[reclaim(1000.0, notice=notice)],
    )
    report = run.interruptions
    assert report is not None
    assert run.replay.simulated_seconds == end
    assert report.gpu_hours_lost == pytest.approx(4 * lost_s / HOUR, abs=1e-6)
    assert (report.spot_interruptions, report.pods_lost, report.restarts) == (1, 1, 1)
    assert report.pods_checkpointed == (1 if on_notice and notice else 0)
    assert [e.event for e in report.events] == (["notice"] if notice else []) + ["gone", "back"]


def test_the_noticed_node_takes_no_new_pod_and_its_pods_run_until_it_goes() -> None:
    # One spot node of 8 GPUs; `late` (2 GPUs) arrives during the notice: it would fit on the
    # node, but the node is cordoned at the notice, so it waits for the replacement.
    _, watch = play(
        [spot_node("s0", gpus=8)],
        [
            TimedWorkload(job("early", gpus=4), 0, HOUR),
            TimedWorkload(job("late", gpus=2), 1050, 600),
        ],
        [reclaim(1000.0)],
    )
    assert watch.binds == [(0.0, "early", "s0"), (1420.0, "late", "s0"), (1420.0, "early", "s0")]
    assert [(n.node, n.leaves_at, n.told) for n in watch.notices] == [
        ("s0", 1120.0, ("default/early",))
    ]
    assert watch.lost == [(1120.0, "early", "lost with node s0 (spot interruption)")]


@pytest.mark.parametrize(
    ("fault", "bound_again_at"),
    [
        pytest.param(reclaim(1000.0, back=None), None, id="spot-not-replaced"),
        pytest.param(failure(1000.0, nodes=["s0"]), None, id="failure-without-recovery"),
        pytest.param(failure(1000.0, nodes=["s0"], back=600.0), 1600.0, id="failure-recovers"),
    ],
)
def test_a_node_comes_back_only_when_the_fault_says(
    fault: NodeFault, bound_again_at: float | None
) -> None:
    sim, watch = play([spot_node("s0")], [TimedWorkload(job("w"), 0, HOUR)], [fault])
    binds = [at for at, _, _ in watch.binds]
    if bound_again_at is None:
        assert binds == [0.0]
        assert "default/w" in sim.pending  # it waits at the end: the world ended all the same
        assert [n.name for n in sim.current_nodes()] == []
    else:
        assert binds == [0.0, bound_again_at]
        assert not sim.pending


# --------------------------------------------------------------------------------- gangs
def test_a_gang_loses_its_members_on_healthy_nodes_too_and_restarts_whole() -> None:
    # One worker on the spot node s0, one on the on-demand d0. s0 is reclaimed (notice at
    # 1000, gone at 1120, replaced at 1420): both workers stop at 1120, keep the 600 s
    # checkpoint, and start again together at 1420.
    gang = job("ddp", pods=2, gpus=4, checkpoint=600.0)
    nodes = [spot_node("s0"), make_node("d0", gpus=4, model="H100")]
    sim, watch = play(nodes, [TimedWorkload(gang, 0, HOUR)], [reclaim(1000.0)])
    lost = {pod: message for _, pod, message in watch.lost}
    assert sorted(lost) == ["ddp-0", "ddp-1"]
    taken = [m for m in lost.values() if m.startswith("taken down with its gang")]
    assert len(taken) == 1
    assert sorted(at for at, _, _ in watch.binds) == [0.0, 0.0, 1420.0, 1420.0]
    assert watch.partial == []
    report = sim.interruption_report(sim.clock.now(), None)
    assert (report.pods_lost, report.pods_taken_down, report.restarts) == (1, 1, 1)
    assert report.gpu_hours_lost == pytest.approx(2 * 4 * 520 / HOUR, abs=1e-6)
    assert sim.clock.now() == 1420 + 3000


def test_a_gang_that_checkpoints_on_notice_saves_on_every_node() -> None:
    # Only the worker on s0 is told; the whole gang saves (a distributed job checkpoints as
    # one), so the worker on d0 loses the same 120 s, not its run since the start.
    gang = job("ddp", pods=2, gpus=4, on_notice=True)
    nodes = [spot_node("s0"), make_node("d0", gpus=4, model="H100")]
    sim, watch = play(nodes, [TimedWorkload(gang, 0, HOUR)], [reclaim(1000.0)])
    (notice,) = watch.notices
    assert len(notice.told) == 1
    assert sorted(notice.checkpointed) == ["default/ddp-0", "default/ddp-1"]
    report = sim.interruption_report(sim.clock.now(), None)
    assert report.gpu_hours_lost == pytest.approx(2 * 4 * 120 / HOUR, abs=1e-6)


# --------------------------------------------------------------------------- random strikes
def rated(rate: float, back: float = 600.0) -> NodeFault:
    return NodeFault(
        NodeFaultKind.SPOT_INTERRUPTION, "market", NodeSelection(capacity_type="spot"),
        (), rate, 120.0, back,
    )  # fmt: skip


def long_work(nodes: int, hours: float) -> list[TimedWorkload]:
    return [TimedWorkload(job(f"w{i}", checkpoint=1800.0), 0, hours * HOUR) for i in range(nodes)]


def test_random_strikes_are_the_same_for_a_seed_and_differ_between_seeds() -> None:
    nodes = [spot_node(f"s{i}") for i in range(4)]

    def events(seed: int) -> list[tuple[float, str, str]]:
        sim, _ = play(nodes, long_work(4, 6), [rated(0.5)], seed)
        report = sim.interruption_report(sim.clock.now(), None)
        return [(e.at, e.node, e.event) for e in report.events]

    first = events(7)
    assert first, "0.5 a node-hour over 24 node-hours strikes"
    assert events(7) == first
    assert events(8) != first


def test_random_strikes_come_at_the_rate_asked() -> None:
    # 8 spot nodes up about 40 h each at 0.25 a node-hour: about 80 strikes (a Poisson count:
    # its standard deviation is about 9; the bounds are more than 3 of them).
    nodes = [spot_node(f"s{i}") for i in range(8)]
    sim, _ = play(nodes, long_work(8, 40), [rated(0.25, back=60.0)], seed=3)
    report = sim.interruption_report(sim.clock.now(), None)
    assert sim.node_plan is not None
    up_hours = sum(life.up_seconds(sim.clock.now()) for life in sim.node_plan.lives.values())
    expected = 0.25 * up_hours / HOUR
    assert abs(report.spot_interruptions - expected) < 3.5 * expected**0.5


# ----------------------------------------------------------------------------- invariants
@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Node], list[TimedWorkload], list[NodeFault], int]:
    count = draw(st.integers(2, 4))
    nodes = [spot_node(f"s{i}") for i in range(count)]
    workloads = []
    for i in range(draw(st.integers(1, 5))):
        pods = draw(st.integers(1, 2))
        workload = job(
            f"w{i}",
            gpus=draw(st.integers(1, 4)),
            pods=pods,
            checkpoint=draw(st.sampled_from([None, 300.0, 900.0])),
            on_notice=draw(st.booleans()),
        )
        arrival = float(draw(st.integers(0, 3600)))
        workloads.append(TimedWorkload(workload, arrival, float(draw(st.integers(600, 7200)))))
    faults: list[NodeFault] = []
    for i in range(draw(st.integers(1, 3))):
        names = draw(st.lists(st.sampled_from([n.name for n in nodes]), min_size=1, unique=True))
        times = tuple(draw(st.lists(st.integers(0, 9000), min_size=1, max_size=3)))
        notice = float(draw(st.sampled_from([0, 30, 120])))
        back = draw(st.sampled_from([None, 60.0, 900.0]))
        kind = draw(st.sampled_from(list(NodeFaultKind)))
        spot = kind is NodeFaultKind.SPOT_INTERRUPTION
        at = tuple(float(t) for t in sorted(set(times)))
        selection = NodeSelection(names=tuple(names))
        faults.append(NodeFault(kind, f"f{i}", selection, at, None, notice if spot else 0.0, back))
    if draw(st.booleans()):
        faults.append(rated(draw(st.sampled_from([0.2, 1.0])), back=300.0))
    return nodes, workloads, faults, draw(st.integers(0, 3))


class LossBound(Watch):
    """Also bounds the work each lost pod can have lost: its run since its bind, at most its
    checkpoint interval, times its GPUs."""

    def __init__(self, sim: SimulatedCluster, workloads: Sequence[TimedWorkload]) -> None:
        super().__init__(sim, [t.workload for t in workloads])
        self.interval = {p.key: t.workload.checkpoint_interval for t in workloads
                         for p in t.workload.pods}  # fmt: skip
        self.gpus = {p.key: p.gpu.total_milli / 1000 for t in workloads for p in t.workload.pods}
        self.bound_at: dict[str, float] = {}
        self.bound = 0.0

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        super().events_in(events)
        now = self.sim.clock.now()
        for event in events:
            if isinstance(event, PodDeleted) and event.end is PodEnd.LOST:
                ran = now - self.bound_at[event.key]
                interval = self.interval[event.key]
                self.bound += (ran if interval is None else min(ran, interval)) * self.gpus[
                    event.key
                ]

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        super().turn_done(core, turn)
        for action in turn.actions:
            if isinstance(action, Bind):
                self.bound_at[action.pod.key] = turn.now


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_of_lost_work_gangs_and_seeds(
    scenario: tuple[list[Node], list[TimedWorkload], list[NodeFault], int],
) -> None:
    nodes, workloads, faults, seed = scenario
    reports = []
    for _ in range(2):
        sim = SimulatedCluster(
            nodes, (), Mode.REPLAY, TargetWorkload((), ()),
            workloads=workloads, node_faults=faults, seed=seed,
        )  # fmt: skip
        watch = LossBound(sim, workloads)
        run_loop(sim, make_core(nodes), observers=[watch])
        report = sim.interruption_report(sim.clock.now(), None)
        # Work lost never exceeds the time since the last checkpoint times GPUs.
        # (The report rounds GPU-hours to a millionth: 3.6 ms.)
        assert 0.0 <= report.gpu_hours_lost * HOUR <= watch.bound + 0.0036
        # A gang never runs in part, not even for a turn.
        assert watch.partial == []
        assert not sim.recorder.violations
        reports.append(dataclasses.asdict(report))
    assert reports[0] == reports[1]  # one seed, one run
