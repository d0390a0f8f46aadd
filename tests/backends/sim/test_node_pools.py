"""Node pools in a simulated run (gpufleet/backends/sim/node_pools.py): nodes asked for the
work parked for capacity join after their pool's delay, unneeded ones are drained and leave,
each is billed from its asking to its leaving. Times are worked out by hand (seconds): the
autoscaler looks every 10 s after a turn, at scale-down every 60 s; a node goes after 600 s
unneeded."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.backends.sim.costs import CostSettings
from gpufleet.backends.sim.node_pools import PoolScaling, PoolSettings
from gpufleet.backends.sim.results import PoolReport
from gpufleet.backends.sim.run import run_workloads
from gpufleet.control.loop import Turn
from gpufleet.control.loop import run as run_loop
from gpufleet.io.fleet.prices import default_prices
from gpufleet.model import Node, Toleration
from gpufleet.model.actions import Bind
from gpufleet.model.capacity import CAPACITY_TYPE_LABEL, CapacityType
from gpufleet.model.events import ClusterEvent, NodeAdded
from gpufleet.model.node_faults import NodeFault, NodeFaultKind, NodeSelection
from gpufleet.model.nodepools import CapacityOutage, NodePool
from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import make_node, make_node_pool, make_workload
from gpufleet.testing.fakes import make_core

SPOT_OK = Toleration(CAPACITY_TYPE_LABEL, "Equal", "spot")
HOUR = 3600.0


def on_demand(delay: float = 0.0, max_nodes: int = 10, min_nodes: int = 0) -> NodePool:
    return make_node_pool(
        "od", price=30.0, max_nodes=max_nodes, min_nodes=min_nodes, delay=delay, gpus=8
    )


def spot(delay: float = 0.0, outages: Sequence[tuple[float, float]] = ()) -> NodePool:
    pool = make_node_pool("sp", CapacityType.SPOT, price=12.0, delay=delay, gpus=8)
    windows = tuple(CapacityOutage(start, duration) for start, duration in outages)
    return dataclasses.replace(pool, outages=windows)


def job(
    name: str,
    gpus: int = 8,
    pods: int = 1,
    tolerant: bool = False,
    critical: bool = False,
    checkpoint: float | None = None,
) -> Workload:
    tolerations = (SPOT_OK,) if tolerant else ()
    return make_workload(
        name,
        pods=pods,
        gpus=gpus,
        checkpoint=checkpoint,
        preemptible=not critical,
        tolerations=tolerations,
    )


def at(created: float, workload: Workload, runtime: float) -> TimedWorkload:
    return TimedWorkload(workload, created=created, duration=runtime)


class Binds:
    """Every bind the world took: (time, pod name, node)."""

    def __init__(self, sim: SimulatedCluster) -> None:
        self.sim = sim
        self.binds: list[tuple[float, str, str]] = []
        self.added: list[str] = []

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        self.added += [e.node.name for e in events if isinstance(e, NodeAdded)]

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        for action in turn.actions:
            if isinstance(action, Bind) and action.pod.key in self.sim.running:
                self.binds.append((turn.now, action.pod.name, action.placement.node))

    def of(self, pod: str) -> list[tuple[float, str]]:
        return [(t, node) for t, name, node in self.binds if name == pod]


def play(
    workloads: Sequence[TimedWorkload],
    pools: Sequence[NodePool],
    nodes: Sequence[Node] = (),
    faults: Sequence[NodeFault] = (),
) -> tuple[SimulatedCluster, Binds, PoolReport]:
    settings = PoolSettings(tuple(pools))
    start = [*nodes, *settings.start_nodes()]
    sim = SimulatedCluster(
        start, (), Mode.REPLAY, TargetWorkload((), ()), workloads=workloads, node_faults=faults
    )
    scaling = PoolScaling(sim, sim, settings)
    binds = Binds(sim)
    run_loop(scaling, make_core(start, policy="bestfit"), observers=[binds, scaling])
    assert not sim.recorder.violations
    return sim, binds, scaling.finish(sim.clock.now())


def test_a_node_is_asked_for_waiting_work_and_billed_from_the_asking() -> None:
    sim, binds, report = play([at(0.0, job("a"), HOUR)], [on_demand(delay=120.0)])
    assert binds.of("a") == [(120.0, "od-00000")]
    (usage,) = report.pools
    assert (usage.added, usage.nodes_peak, usage.nodes_at_end) == (1, 1, 1)
    # Asked at 0, the job runs 120..3720, the run ends then: the node is billed 3720 s.
    assert sim.clock.now() == 3720.0
    assert usage.node_hours == pytest.approx(3720.0 / HOUR)
    assert usage.cost == pytest.approx(3720.0 / HOUR * 30.0)
    assert report.actions[0].startswith("t=0s: +1 od: for 1 pending pod(s)")


def test_a_gang_gets_all_its_nodes_in_one_decision() -> None:
    _, binds, report = play([at(0.0, job("g", pods=3), HOUR)], [on_demand(delay=60.0)])
    starts = {binds.of(f"g-{i}")[0] for i in range(3)}
    assert {t for t, _ in starts} == {60.0}
    assert len({node for _, node in starts}) == 3
    assert (report.scale_ups, report.pools[0].added) == (1, 3)


def test_spot_takes_tolerant_work_and_on_demand_the_critical() -> None:
    workloads = [
        at(0.0, job("tolerant", tolerant=True), HOUR),
        at(0.0, job("vital", critical=True), HOUR),
    ]
    _, binds, report = play(workloads, [on_demand(), spot()])
    assert binds.of("tolerant")[0][1].startswith("sp-")
    assert binds.of("vital")[0][1].startswith("od-")
    assert [u.added for u in report.pools] == [1, 1]


def test_critical_work_gets_no_spot_node_even_if_it_tolerates_spot() -> None:
    _, binds, _ = play(
        [at(0.0, job("v", tolerant=True, critical=True), HOUR)], [spot(), on_demand()]
    )
    assert binds.of("v")[0][1].startswith("od-")


def test_an_unneeded_node_leaves_after_ten_minutes_and_a_new_one_comes_for_later_work() -> None:
    workloads = [at(0.0, job("first"), 1000.0), at(5000.0, job("later"), 1000.0)]
    _, binds, report = play(workloads, [on_demand()])
    # Empty from 1000 on: unneeded at the first look after it, gone 600 s later (looks are a
    # minute apart at most).
    (gone_at, counts) = report.timeline[1]  # (joined at 0: the first entry says 1)
    assert counts == (0,)
    assert 1600.0 <= gone_at <= 1600.0 + 70.0
    assert binds.of("later") == [(5000.0, "od-00001")]
    assert (report.pools[0].added, report.pools[0].removed) == (2, 1)
    # Billed 0..gone_at and 5000..6000 (the run's end).
    assert report.node_hours == pytest.approx((gone_at + 1000.0) / HOUR)


def test_consolidation_moves_a_pod_off_an_underused_node_and_removes_it() -> None:
    pool = on_demand()
    nodes = [pool.node("od-00000"), pool.node("od-00001")]
    workloads = [
        at(0.0, job("short", gpus=6), 500.0),
        at(10.0, job("small", gpus=2, checkpoint=60.0), 5000.0),  # best fit: beside "short"
        at(20.0, job("long", gpus=6), 5000.0),
    ]
    _, binds, report = play(workloads, [pool], nodes)
    first_node = binds.of("short")[0][1]
    assert binds.of("small")[0][1] == first_node
    long_node = binds.of("long")[0][1]
    assert long_node != first_node
    # "short" ends at 500: its node holds 2 of 8 GPUs, "small" fits beside "long"; after 600 s
    # unneeded the node is drained ("small" evicted whole and placed again) and removed.
    moved = binds.of("small")[1]
    assert moved[1] == long_node
    assert 1100.0 <= moved[0] <= 1100.0 + 70.0
    assert report.pools[0].removed == 1
    assert report.timeline[-1][1] == (1,)
    assert any(f"-1 od ({first_node})" in action for action in report.actions)


def test_a_node_holding_a_gang_or_a_non_preemptible_pod_is_not_drained() -> None:
    pool = on_demand()
    nodes = [pool.node("od-00000"), pool.node("od-00001")]
    workloads = [
        at(0.0, job("short", gpus=6), 500.0),
        at(10.0, job("vital", gpus=2, critical=True), 3000.0),
        at(20.0, job("long", gpus=6), 3000.0),
    ]
    _, binds, report = play(workloads, [pool], nodes)
    assert len(binds.of("vital")) == 1
    assert report.pools[0].removed == 0


def test_work_no_pool_can_hold_adds_nothing_and_the_run_ends() -> None:
    sim, binds, report = play([at(0.0, job("huge", gpus=16), HOUR)], [on_demand()])
    assert binds.binds == []
    assert report.pools[0].added == 0
    assert [key for key, _ in report.never] == ["default/huge"]
    assert "default/huge" in sim.pending


def test_a_pool_at_its_maximum_makes_the_rest_wait() -> None:
    workloads = [at(0.0, job(f"j{i}"), 1000.0) for i in range(3)]
    _, binds, report = play(workloads, [on_demand(max_nodes=2)])
    starts = sorted(binds.of(f"j{i}")[0][0] for i in range(3))
    assert starts[:2] == [0.0, 0.0]
    assert starts[2] == 1000.0  # on a node a first job left
    assert report.pools[0].nodes_peak == 2


def test_pools_start_at_their_minimum_and_do_not_go_below_it() -> None:
    _, binds, report = play(
        [at(0.0, job("a"), 100.0), at(3000.0, job("b"), 100.0)], [on_demand(min_nodes=1)]
    )
    assert binds.of("a") == [(0.0, "od-00000")]
    (usage,) = report.pools
    assert (usage.nodes_at_start, usage.added, usage.removed, usage.nodes_at_end) == (1, 0, 0, 1)
    assert usage.node_hours == pytest.approx(3100.0 / HOUR)


def test_a_spot_node_lost_is_replaced_by_its_pool_and_the_job_goes_on_from_its_checkpoint() -> None:
    strike = NodeFault(
        NodeFaultKind.SPOT_INTERRUPTION,
        "reclaim",
        NodeSelection(capacity_type="spot"),
        (1000.0,),
        None,
        120.0,
        300.0,  # a fault's own replacement: a pool's node is replaced by its pool instead
    )
    workloads = [at(0.0, job("train", tolerant=True, checkpoint=600.0), 3000.0)]
    sim, binds, report = play(workloads, [spot(delay=60.0)], faults=[strike])
    (first, second) = binds.of("train")
    assert first == (60.0, "sp-00000")
    # Notice at 1000, gone at 1120 (checkpoint at 60 + 600 = 660 kept, 460 s lost); a new
    # node asked at the first look after and joins 60 s later.
    assert second[1] == "sp-00001"
    assert 1180.0 <= second[0] <= 1180.0 + 20.0
    assert binds.added.count("sp-00000") == 1  # never brought back by the fault
    (usage,) = report.pools
    assert (usage.added, usage.lost) == (2, 1)
    # The job had 3000 - 600 = 2400 s left from its checkpoint.
    assert sim.clock.now() == pytest.approx(second[0] + 2400.0)
    losses = sim.interruption_report(sim.clock.now(), None)
    assert losses.gpu_hours_lost == pytest.approx(460.0 * 8 / HOUR)


def test_run_workloads_takes_pools_and_reports_them() -> None:
    workloads = [at(0.0, job("a"), HOUR), at(0.0, job("b", tolerant=True), HOUR)]
    cpu = make_node("cpu-0", gpus=0)
    run = run_workloads(
        [cpu], workloads, "bestfit", 0, node_pools=PoolSettings((on_demand(), spot()))
    )
    assert run.pools is not None
    assert run.replay.never_ran == 0
    assert [u.added for u in run.pools.pools] == [1, 1]
    assert run.pools.cost == pytest.approx(
        sum(u.node_hours * u.hourly_price for u in run.pools.pools), abs=1e-3
    )


@pytest.mark.parametrize(
    ("outages", "with_on_demand", "jobs", "nodes", "refused"),
    [
        ([(3600.0, 1800.0)], True, [0.0], {"a": (0.0, "sp")}, 0),
        ([(0.0, 1800.0)], True, [0.0], {"a": (0.0, "od")}, 1),
        ([(0.0, 1800.0)], True, [0.0, 7200.0], {"a": (0.0, "od"), "b": (7200.0, "sp")}, 1),
        ([(0.0, 1000.0)], False, [0.0], {"a": (1080.0, "sp")}, 6),
    ],
    ids=["outage-later-spot-grows", "outage-falls-back-to-on-demand",
         "after-the-outage-spot-grows-again", "no-fallback-asks-again-every-3m"],
)  # fmt: skip
def test_a_spot_pool_out_of_capacity_refuses_nodes_and_the_next_pool_grows(
    outages: list[tuple[float, float]],
    with_on_demand: bool,
    jobs: list[float],
    nodes: dict[str, tuple[float, str]],
    refused: int,
) -> None:
    pools = [spot(outages=outages), *([on_demand()] if with_on_demand else [])]
    work = [
        at(start, job(name, tolerant=True), 600.0) for name, start in zip("ab", jobs, strict=False)
    ]
    _, binds, report = play(work, pools)
    assert {name: (binds.of(name)[0][0], binds.of(name)[0][1][:2]) for name in nodes} == nodes
    assert report.pools[0].insufficient_capacity == refused
    said = [a for a in report.actions if "InsufficientCapacity" in a]
    assert len(said) == refused
    if refused:
        assert said[0].startswith("t=0s: sp: InsufficientCapacity for +1 (no spot capacity until")
    if refused and with_on_demand:
        (fallback,) = [a for a in report.actions if a.startswith("t=0s: +1 od")]
        assert "not sp is out of capacity" in fallback


def test_capacity_outages_must_be_in_order_and_not_overlap() -> None:
    with pytest.raises(ValueError, match="must be in order and not overlap"):
        spot(outages=[(0.0, 600.0), (300.0, 600.0)])
    with pytest.raises(ValueError, match="lasts finite seconds above 0"):
        CapacityOutage(0.0, 0.0)


def test_pool_names_must_be_distinct() -> None:
    with pytest.raises(ValueError, match="distinct names"):
        PoolSettings((on_demand(), on_demand()))


job_specs = st.lists(
    st.tuples(
        st.floats(0.0, 4000.0),  # arrival
        st.sampled_from([1, 2, 4, 8]),  # GPUs per pod
        st.integers(1, 3),  # pods
        st.floats(60.0, 3000.0),  # runtime
        st.booleans(),  # tolerates spot
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job_specs, st.sampled_from([0.0, 30.0, 240.0]), st.integers(2, 6))
def test_every_job_that_a_pool_can_hold_completes_within_the_pools_bounds(
    specs: list[tuple[float, int, int, float, bool]], delay: float, max_nodes: int
) -> None:
    pools = [
        on_demand(delay=delay, max_nodes=max_nodes),
        dataclasses.replace(spot(delay), max_nodes=max_nodes),
    ]
    workloads = [
        at(arrival, job(f"j{i}", gpus=gpus, pods=min(pods, max_nodes), tolerant=tolerant), runtime)
        for i, (arrival, gpus, pods, runtime, tolerant) in enumerate(specs)
    ]
    sim, binds, report = play(workloads, pools)
    assert not sim.pending
    assert report.never == ()
    for workload in workloads:
        gang = workload.workload
        for pod in gang.pods:
            assert binds.of(pod.name), f"{pod.name} never ran"
    for _, counts in report.timeline:
        assert all(0 <= c <= max_nodes for c in counts)
    for usage in report.pools:
        assert usage.cost == pytest.approx(usage.node_hours * usage.hourly_price, abs=1e-3)
        assert usage.nodes_at_end == usage.nodes_at_start + usage.added - usage.removed - usage.lost
        # Each pod bound on a pool node that was there (joined, not gone) at the time.
    work = sum(
        w.duration * len(w.workload.pods) * w.workload.pods[0].gpu.count
        for w in workloads
        if w.duration
    )
    assert report.node_hours * 8 >= work / HOUR - 1e-4  # node-hours are rounded to 1e-6


def test_a_costed_run_prices_pods_on_pool_nodes_by_their_capacity_type() -> None:
    prices = default_prices()
    # A node each (two pods of 2 GPUs would share the cheaper on-demand node).
    workloads = [at(0.0, job("a"), HOUR), at(0.0, job("b", tolerant=True), HOUR)]
    pools = (
        make_node_pool("od", price=30.0, gpus=8, model="H100"),
        make_node_pool("sp", CapacityType.SPOT, price=12.0, gpus=8, model="H100"),
    )
    run = run_workloads(
        [], workloads, "bestfit", 0, node_pools=PoolSettings(pools), cost=CostSettings(prices)
    )
    (report,) = run.cost
    assert report.total.gpu_hours == pytest.approx(16.0)
    spot_price = prices.gpu_rate("H100", CapacityType.SPOT).hourly
    on_demand_price = prices.gpu_rate("H100", CapacityType.ON_DEMAND).hourly
    assert report.total.gpu_cost == pytest.approx(8 * spot_price + 8 * on_demand_price)


def test_a_gang_takes_an_idle_node_of_a_full_pool_and_asks_only_for_the_rest() -> None:
    # The gang needs two nodes; the pool may have two and has one, busy until 60, then idle.
    workloads = [at(0.0, job("one", gpus=1), 60.0), at(1.0, job("g", pods=2), 60.0)]
    _, binds, report = play(workloads, [on_demand(max_nodes=2)])
    starts = sorted(binds.of("g-0") + binds.of("g-1"))
    assert {t for t, _ in starts} == {starts[0][0]}
    assert 60.0 <= starts[0][0] <= 70.0
    assert {node for _, node in starts} == {"od-00000", "od-00001"}
    assert report.pools[0].added == 2


def test_work_waiting_for_a_full_pool_runs_once_an_unneeded_node_leaves() -> None:
    # The gang needs three nodes; the pool may have three. "two" ends at 60 and its node
    # idles: with it the gang needs two more, four in all, so it waits; the idle node leaves
    # at 660; "one" (a GPU of eight: unneeded, but no other node could take it) keeps its
    # node until it ends at 3000, and then the gang takes that node and two new ones.
    pool = on_demand(max_nodes=3)
    workloads = [
        at(0.0, job("one", gpus=1), 3000.0),
        at(0.0, job("two", gpus=8), 60.0),
        at(1.0, job("g", pods=3), 60.0),
    ]
    _, binds, report = play(workloads, [pool])
    (start, _) = binds.of("g-0")[0]
    assert 3000.0 <= start <= 3000.0 + 20.0
    assert report.pools[0].removed == 1
    assert report.pools[0].nodes_peak <= 3


def test_a_costed_pool_run_leaves_the_clusters_idle_time_to_the_pools_report() -> None:
    workloads = [at(0.0, job("a", gpus=2), HOUR)]
    pools = (make_node_pool("od", price=30.0, gpus=8, model="H100"),)
    run = run_workloads(
        [],
        workloads,
        "bestfit",
        0,
        node_pools=PoolSettings(pools),
        cost=CostSettings(default_prices()),
    )
    (report,) = run.cost
    assert [g.name for g in report.groups] == ["default"]  # no __idle__ line
    assert not any("idle GPU time is left out" in note for note in report.notes)
    assert any("the bill is the node pools' cost" in note for note in report.notes)
