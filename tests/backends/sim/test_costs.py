"""The cost of a simulated run: what its pods held, priced and split allocated / used / idle /
unmeasured as serve's report is, with their utilisation sampled from the usage profiles.

A pod's used share follows its profile (training busy, an idle notebook never), a pod never
sampled is unmeasured (never 0 %), an unpriced model is counted in hours at no cost; on every
line allocated = used + idle + unmeasured, the lines add up to the total, the pods' GPU-hours
are those the queues counted, the total is the cluster's GPUs over the window, and sampling
changes nothing in the run."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.backends.sim.costs import CostSettings
from gpufleet.backends.sim.results import TenancyRun
from gpufleet.backends.sim.run import run_workloads
from gpufleet.backends.sim.telemetry import SimTelemetry
from gpufleet.economics import IDLE, UNALLOCATED, CostGroup, CostReport
from gpufleet.model import Node, Placement
from gpufleet.model.actions import Bind
from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.scheduling.target import typical_shapes
from gpufleet.telemetry.profiles import USAGE_PROFILE_ANNOTATION
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.economics_builders import HOUR, price_list

#: H100 at 10 per GPU-hour; a vCPU-hour 0.05, a GiB-hour 0.01 (a pod: 1 vCPU, 1 GiB).
PRICES = price_list()
HOST = 0.05 + 0.01
GROUPINGS = (("queue",), ("namespace",), ("team",), ("namespace", "team"))


def job(
    name: str,
    profile: str,
    gpus: int = 1,
    namespace: str = "ml",
    queue: str = "default",
    team: str | None = None,
    milli: int | None = None,
    mig: str | None = None,
) -> Workload:
    workload = make_workload(
        name, queue=queue, gpus=gpus, namespace=namespace, milli=milli, mig=mig
    )
    pods = tuple(
        dataclasses.replace(p, annotations={USAGE_PROFILE_ANNOTATION: profile})
        for p in workload.pods
    )
    labels = {"team": team} if team else {}
    return dataclasses.replace(workload, pods=pods, labels=labels)


def h100(name: str = "n", gpus: int = 2) -> Node:
    return make_node(name, gpus=gpus, model="H100")


def run(
    workloads: Sequence[TimedWorkload],
    nodes: Sequence[Node] = (),
    cost: CostSettings | None = None,
    **options: object,
) -> TenancyRun:
    return run_workloads(
        list(nodes) or [h100()], workloads, "bestfit", 0,
        cost=cost or CostSettings(PRICES, GROUPINGS), **options,  # type: ignore[arg-type]
    )  # fmt: skip


def line(report: CostReport, name: str) -> CostGroup:
    return next(g for g in report.groups if g.name == name)


def test_a_busy_training_job_is_used_and_an_idle_notebook_is_idle() -> None:
    result = run(
        [
            TimedWorkload(job("train", "training", namespace="a"), 0.0, 2 * HOUR),
            TimedWorkload(job("nb", "idle", namespace="b"), 0.0, 2 * HOUR),
        ]
    )
    by_namespace = result.cost[1]
    train, notebook = line(by_namespace, "a"), line(by_namespace, "b")
    for group in (train, notebook):
        assert group.gpu_hours == pytest.approx(2.0)
        assert group.allocated == pytest.approx(2 * 10.0 + 2 * HOST)
        assert group.gpu_unmeasured_cost == 0
    assert train.utilisation is not None
    assert 0.6 < train.utilisation < 0.97
    assert notebook.utilisation == 0
    assert notebook.used == pytest.approx(2 * HOST)  # only its CPU and memory
    assert notebook.idle == pytest.approx(20.0)
    assert by_namespace.measured
    assert by_namespace.notes == ()


@pytest.mark.parametrize(
    ("sample_every_s", "arrives_at", "runs_for", "measured"),
    [
        pytest.param(60.0, 600.0, 3600.0, True, id="sampled"),
        pytest.param(None, 600.0, 3600.0, False, id="not-sampled"),
        pytest.param(60.0, 610.0, 30.0, False, id="shorter-than-a-step"),
    ],
)
def test_a_pod_never_sampled_is_unmeasured_not_idle(
    sample_every_s: float | None, arrives_at: float, runs_for: float, measured: bool
) -> None:
    cost = CostSettings(PRICES, (("namespace",),), sample_every_s)
    result = run(
        [
            TimedWorkload(job("first", "training", namespace="other"), 0.0, 60.0),
            TimedWorkload(job("short", "training", namespace="ml"), arrives_at, runs_for),
        ],
        cost=cost,
    )
    group = line(result.cost[0], "ml")
    hours = runs_for / HOUR
    assert group.gpu_hours == pytest.approx(hours)
    if measured:
        assert group.utilisation is not None
        assert group.utilisation > 0
        assert group.gpu_unmeasured_cost == 0
    else:
        assert group.utilisation is None
        assert group.gpu_unmeasured_cost == pytest.approx(10.0 * hours)
        assert group.unmeasured_gpu_hours == pytest.approx(hours)
        assert group.used == pytest.approx(HOST * hours)
        assert group.idle == pytest.approx(0.0)
    assert result.cost[0].measured is (sample_every_s is not None)


def test_an_unpriced_model_counts_its_hours_at_no_cost_and_is_named() -> None:
    result = run(
        [TimedWorkload(job("train", "training"), 0.0, HOUR)],
        nodes=[make_node("a100", gpus=2, model="A100")],
    )
    report = result.cost[0]
    group = line(report, "default")
    assert group.unpriced_gpu_hours == pytest.approx(1.0)
    assert group.gpu_cost == 0
    assert group.allocated == pytest.approx(HOST)
    idle = line(report, IDLE)  # the other A100, nobody's: in hours, at no cost
    assert (idle.gpu_hours, idle.unpriced_gpu_hours, idle.allocated) == (1.0, 1.0, 0.0)
    assert report.total.gpu_hours == pytest.approx(2.0)
    assert report.unpriced_models == ("A100",)
    assert any("A100" in note for note in report.notes)


def test_the_cluster_idle_is_the_gpu_time_nobody_held_until_the_last_pod_ends() -> None:
    result = run([TimedWorkload(job("train", "training", gpus=1), 0.0, 3 * HOUR)])
    report = result.cost[0]
    assert report.window.end == pytest.approx(3 * HOUR)
    idle = line(report, IDLE)
    assert idle.gpu_hours == pytest.approx(3.0)  # the second GPU, all along
    assert idle.idle == pytest.approx(30.0)
    assert report.total.gpu_hours == pytest.approx(2 * 3.0)


def test_grouping_by_a_label_puts_workloads_without_it_in_unallocated() -> None:
    result = run(
        [
            TimedWorkload(job("a", "training", team="vision"), 0.0, HOUR),
            TimedWorkload(job("b", "training"), 0.0, HOUR),
        ]
    )
    by_team = result.cost[2]
    assert by_team.by == ("team",)
    assert [g.name for g in by_team.groups] == ["vision", UNALLOCATED]
    assert by_team.runs == ()  # the pods' own lines are not kept


def test_sampling_utilisation_changes_nothing_in_the_run() -> None:
    workloads = [
        TimedWorkload(job("nb", "notebook", gpus=2), 0.0, 5 * HOUR),
        TimedWorkload(job("train", "training", gpus=2), 600.0, 2 * HOUR),
        TimedWorkload(job("debug", "debug"), 1234.5, 0.5 * HOUR),
    ]
    plain = run_workloads([h100(gpus=2), h100("m", gpus=1)], workloads, "bestfit", 0)
    costed = run([*workloads], nodes=[h100(gpus=2), h100("m", gpus=1)])
    assert plain.cost == ()
    assert costed.cost
    assert costed.tenancy.queues == plain.tenancy.queues
    assert costed.replay.delays == plain.replay.delays
    assert costed.replay.timeline == plain.replay.timeline


def test_the_lean_utilisation_is_what_the_devices_report() -> None:
    """SimTelemetry.pod_utilisation (what the meter and the idle policies read) is the mean of
    the devices each pod holds, as read() reports them: whole GPUs, shares, MIG slices."""
    nodes = [
        make_node("n", gpus=2, model="H100"),
        make_node("m", gpus=1, model="A100", mig={0: ["3g.20gb", "2g.10gb"]}),
    ]
    whole = job("whole", "training", gpus=2)
    share_a = job("share-a", "notebook", gpus=0, milli=500)
    share_b = job("share-b", "inference", gpus=0, milli=500)
    sliced = job("sliced", "inference", gpus=0, mig="3g.20gb")
    timed = [TimedWorkload(w, 0.0, 10 * HOUR) for w in (whole, share_a, share_b, sliced)]
    pods = [p for t in timed for p in t.workload.pods]
    sim = SimulatedCluster(nodes, (), Mode.REPLAY, typical_shapes(pods), workloads=timed)
    sim.poll_events()
    sim.apply(
        [
            Bind(whole.pods[0], Placement("n", (0,))),
            Bind(share_a.pods[0], Placement("n", (1,), 500)),
            Bind(share_b.pods[0], Placement("n", (1,), 500)),
            Bind(sliced.pods[0], Placement("m", mig_slices=((0, 0),))),
        ]
    )
    telemetry = SimTelemetry(sim, seed=7)
    for at in (0.0, 90.0, 3600.0, 7 * 3600.0 + 17.0):
        sim.clock.advance_to(at)
        lean = telemetry.pod_utilisation()
        assert telemetry.pod_utilisation(at) == lean
        devices = {s.uuid: s.gpu_util for n in telemetry.read() for s in n.samples}
        held: dict[tuple[str, str], list[float]] = {}
        for node in telemetry.read():
            for user in node.users:
                held.setdefault((user.namespace, user.pod), []).append(devices[user.uuid])
        assert lean == {pod: sum(v) / len(v) for pod, v in held.items()}
        assert len(lean) == 4


def test_the_telemetry_kept_between_samples_follows_what_runs() -> None:
    """SimTelemetry keeps the pods' domains until a placement, a release or a restart in place
    changes them: after each, it reads what a new SimTelemetry reads."""
    nodes = [make_node("n", gpus=2, model="H100")]
    first, second = job("first", "training"), job("second", "notebook")
    timed = [TimedWorkload(w, 0.0, 10 * HOUR) for w in (first, second)]
    pods = [p for t in timed for p in t.workload.pods]
    sim = SimulatedCluster(nodes, (), Mode.REPLAY, typical_shapes(pods), workloads=timed)
    sim.poll_events()
    kept = SimTelemetry(sim, seed=3)

    def same_as_fresh(at: float) -> dict[tuple[str, str], float]:
        sim.clock.advance_to(at)
        reading = kept.pod_utilisation()
        assert reading == SimTelemetry(sim, seed=3).pod_utilisation()
        return reading

    sim.apply([Bind(first.pods[0], Placement("n", (0,)))])
    assert set(same_as_fresh(60.0)) == {("ml", "first")}
    sim.apply([Bind(second.pods[0], Placement("n", (1,)))])
    assert set(same_as_fresh(120.0)) == {("ml", "first"), ("ml", "second")}
    before = same_as_fresh(1800.0)
    # A restart in place: the run starts again where it is (its profile's ramp with it).
    work = sim.books.works[first.pods[0].key]
    work.started = 1800.0
    sim.books.run_starts += 1
    assert same_as_fresh(1800.0) != before


PROFILES = st.sampled_from(["training", "inference", "notebook", "debug", "idle"])
WORKLOADS = st.lists(
    st.tuples(
        PROFILES,
        st.integers(1, 2),  # GPUs
        st.sampled_from(["a", "b"]),  # queue
        st.sampled_from(["ml", "web"]),  # namespace
        st.sampled_from([None, "vision", "nlp"]),  # team label
        st.floats(0.0, 2 * HOUR),  # arrival
        st.floats(120.0, 3 * HOUR),  # run time
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(WORKLOADS)
def test_every_report_adds_up_and_counts_the_hours_the_pods_held(
    drawn: list[tuple[str, int, str, str, str | None, float, float]],
) -> None:
    workloads = [
        TimedWorkload(job(f"w{i}", profile, gpus, namespace, queue, team), at, runtime)
        for i, (profile, gpus, queue, namespace, team, at, runtime) in enumerate(drawn)
    ]
    nodes = [h100("n1"), h100("n2")]
    queues = {"a": make_queue("a", gpus=2, borrow=2), "b": make_queue("b", gpus=2, borrow=2)}
    result = run(workloads, nodes, queues=queues)
    held = sum(q.gpu_hours_used for name, q in result.tenancy.queues.items() if name in queues)
    assert len(result.cost) == len(GROUPINGS)
    for report in result.cost:
        total = report.total
        for group in (*report.groups, total):
            assert group.allocated == pytest.approx(
                group.used + group.idle + group.gpu_unmeasured_cost, abs=1e-9
            )
            assert group.idle >= -1e-9
        for part in ("gpu_hours", "allocated", "used", "idle", "gpu_unmeasured_cost"):
            summed = sum(getattr(g, part) for g in report.groups)
            assert summed == pytest.approx(getattr(total, part), abs=1e-9)
        pods_held = sum(g.gpu_hours for g in report.groups if g.name != IDLE)
        assert pods_held == pytest.approx(held, abs=1e-3)  # the queues round to 1e-3
        assert total.gpu_hours == pytest.approx(4 * report.window.hours, abs=1e-6)
        assert total.allocated == pytest.approx(result.cost[0].total.allocated)
