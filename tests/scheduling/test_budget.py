"""The ``budget`` admission check: each action at 0%, past its warning and at 100%; the text
explain gives; committed hours of running work; a Block budget never exceeded by more than one
admitted workload's worth (hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.economics import BudgetState
from gpufleet.model.events import PodDeleted
from gpufleet.model.queues import BudgetAction, BudgetPeriod, QueueBudget
from gpufleet.model.times import TimeFormat, simulated_time, wall_clock_time
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.plugins.budget import (
    BUDGET_PRIORITY,
    BudgetCheck,
    BudgetSnapshot,
    budget_check_of,
    held_gpus,
)
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

#: A Wednesday, noon UTC: its week ends on Monday 2026-11-30. The cores here are on the wall
#: clock (Unix seconds, as on Kubernetes and ``serve --local``): they read instants as dates.
NOW = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()
HOUR = 3600.0


def budgeted_core(action: BudgetAction, hours: float = 100.0, nominal: float = 4) -> SchedulerCore:
    budget = QueueBudget(hours, BudgetPeriod.WEEK, 0.8, action)
    return make_core(
        [make_node("n0", gpus=8)],
        [
            make_queue("org", gpus=8),
            make_queue("research", gpus=nominal, parent="org", budget=budget),
            make_queue("other", gpus=8 - nominal, parent="org"),
        ],
        time_format=wall_clock_time,
    )


def check_of(core: SchedulerCore) -> BudgetCheck:
    check = budget_check_of(core.admission_checks)
    assert check is not None
    return check


WAITS = (
    "waiting for admission check budget: queue research has used 100.0 of 100 GPU-hours this "
    "week (budget {action}); resets 2026-11-30 00:00:00 UTC"
)


@pytest.mark.parametrize(
    ("action", "used", "gpus", "admitted", "priority", "message"),
    [
        (BudgetAction.BLOCK, 0.0, 2, True, 0, None),
        (BudgetAction.BLOCK, 85.0, 2, True, 0, None),
        (BudgetAction.BLOCK, 100.0, 2, False, None, WAITS.format(action="Block")),
        (BudgetAction.NOMINAL_ONLY, 0.0, 6, True, 0, None),
        (BudgetAction.NOMINAL_ONLY, 85.0, 6, True, 0, None),
        (BudgetAction.NOMINAL_ONLY, 100.0, 2, True, 0, None),
        (
            BudgetAction.NOMINAL_ONLY,
            100.0,
            6,
            False,
            None,
            WAITS.format(action="NominalOnly") + "; only within nominal quota",
        ),
        (BudgetAction.PREEMPTIBLE, 0.0, 2, True, 0, None),
        (BudgetAction.PREEMPTIBLE, 85.0, 2, True, 0, None),
        (BudgetAction.PREEMPTIBLE, 100.0, 2, True, BUDGET_PRIORITY, None),
    ],
    ids=[
        "block-0%",
        "block-warn",
        "block-100%",
        "nominal-only-0%-borrowing",
        "nominal-only-warn-borrowing",
        "nominal-only-100%-within-nominal",
        "nominal-only-100%-borrowing",
        "preemptible-0%",
        "preemptible-warn",
        "preemptible-100%",
    ],
)
def test_each_action_at_0_percent_warn_and_100_percent(
    action: BudgetAction,
    used: float,
    gpus: int,
    admitted: bool,
    priority: int | None,
    message: str | None,
) -> None:
    core = budgeted_core(action)
    check_of(core).observe(BudgetSnapshot(NOW, {"research": used}))
    job = make_workload("train", "research", gpus=gpus)
    EchoCluster(core).submit(job, now=NOW)
    assert (job.key in core.running) is admitted
    if admitted:
        assert core.running[job.key].workload.priority == priority
    else:
        (why,) = core.explain_pending()
        assert (why.waiting_for, why.message) == ("budget", message)
    status = check_of(core).status("research")
    assert status is not None
    expected = {0.0: BudgetState.OK, 85.0: BudgetState.WARN, 100.0: BudgetState.EXHAUSTED}
    assert status.state is expected[used]


def test_a_workload_admitted_as_preemptible_is_preempted_by_a_lower_priority_one() -> None:
    core = budgeted_core(BudgetAction.PREEMPTIBLE, nominal=8)
    cluster = EchoCluster(core)
    check_of(core).observe(BudgetSnapshot(NOW, {"research": 100.0}))
    cheap = make_workload("cheap", "research", gpus=8, priority=100)
    cluster.submit(cheap, now=NOW)
    assert core.running[cheap.key].workload.priority == BUDGET_PRIORITY
    # Next week the budget is fresh: a workload of priority 0 preempts the one of priority 100
    # that the spent budget admitted as preemptible.
    next_week = NOW + 7 * 24 * HOUR
    check_of(core).observe(BudgetSnapshot(next_week, {"research": 0.0}))
    urgent = make_workload("urgent", "research", gpus=8, priority=0)
    cluster.submit(urgent, now=next_week)
    assert set(core.running) == {urgent.key}
    assert cheap.pods[0].key in cluster.evicted
    # Back in its queue, it gets its own priority once no spent budget demotes it.
    assert check_of(core).admitted_as(core.pending.get(cheap.key).workload).priority == 100  # type: ignore[union-attr]


def test_committed_hours_of_running_work_count_at_once() -> None:
    """A 30-GPU-hour job spends a 25 GPU-hour budget as it is admitted: a second one admitted
    in the same turn (no time passes) waits."""
    core = budgeted_core(BudgetAction.BLOCK, hours=25.0)
    check_of(core).observe(BudgetSnapshot(NOW, {"research": 0.0}))
    first = make_workload("first", "research", gpus=2, runtime=15 * HOUR)
    second = make_workload("second", "research", gpus=2, runtime=15 * HOUR)
    EchoCluster(core).submit(first, second, now=NOW)
    assert set(core.running) == {first.key}
    status = check_of(core).status("research")
    assert status is not None
    assert status.used_gpu_hours == pytest.approx(30.0)


def test_a_parent_budget_covers_its_children() -> None:
    budget = QueueBudget(10.0, BudgetPeriod.DAY, action=BudgetAction.BLOCK)
    core = make_core(
        [make_node("n0", gpus=8)],
        [make_queue("team", gpus=8, budget=budget), make_queue("project", gpus=8, parent="team")],
        time_format=wall_clock_time,
    )
    check_of(core).observe(BudgetSnapshot(NOW, {"team": 10.0}))
    job = make_workload("job", "project", gpus=1)
    EchoCluster(core).submit(job, now=NOW)
    (why,) = core.explain_pending()
    assert why.message.endswith("queue team has used 10.0 of 10 GPU-hours today (budget Block); "
                                "resets 2026-11-26 00:00:00 UTC")  # fmt: skip


@pytest.mark.parametrize(
    ("now", "time_format", "resets"),
    [
        (NOW, wall_clock_time, "resets 2026-11-26 00:00:00 UTC"),
        (12 * HOUR, simulated_time, "resets t=1d00h"),
    ],
    ids=["wall-clock", "simulated"],
)
def test_the_reset_reads_in_the_worlds_format(
    now: float, time_format: TimeFormat, resets: str
) -> None:
    """A spent budget's reset in the world's format: a date on the wall clock, ``t=`` in a
    simulated cluster (its clock starts at 0: a date would read 1970-01-02)."""
    budget = QueueBudget(10.0, BudgetPeriod.DAY, action=BudgetAction.BLOCK)
    core = make_core(
        [make_node("n0", gpus=8)], [make_queue("team", gpus=8, budget=budget)],
        time_format=time_format,
    )  # fmt: skip
    check_of(core).observe(BudgetSnapshot(now, {"team": 10.0}))
    EchoCluster(core).submit(make_workload("job", "team", gpus=1), now=now)
    (why,) = core.explain_pending()
    assert why.message.endswith(f"(budget Block); {resets}")
    assert "1970" not in why.message


def test_a_snapshot_of_the_last_period_counts_nothing_in_this_one() -> None:
    core = budgeted_core(BudgetAction.BLOCK)
    check_of(core).observe(BudgetSnapshot(NOW - 7 * 24 * HOUR, {"research": 100.0}))
    job = make_workload("job", "research", gpus=1)
    EchoCluster(core).submit(job, now=NOW)
    assert job.key in core.running


@settings(max_examples=40, deadline=None)
@given(
    budget=st.floats(1.0, 60.0),
    jobs=st.lists(
        st.tuples(st.integers(1, 4), st.floats(0.5, 12.0), st.floats(0.0, 20.0)),
        min_size=1,
        max_size=12,
    ),
)
def test_a_block_budget_is_exceeded_by_at_most_one_admitted_workload(
    budget: float, jobs: list[tuple[int, float, float]]
) -> None:
    """Invariant: where every workload runs exactly its expected run time and the world hands
    the check the exact hours used before each turn, the GPU-hours a Block budget's queue uses
    in a period never exceed the budget by more than the GPU-hours of one workload admitted in
    it (gpus x run time): a workload is admitted only while used + committed < budget."""
    start = datetime(2026, 11, 23, tzinfo=UTC).timestamp()  # a Monday: one week, one period
    core = budgeted_core(BudgetAction.BLOCK, hours=budget, nominal=8)
    cluster = EchoCluster(core)
    check = check_of(core)
    workloads = [
        make_workload(f"j{i}", "research", gpus=g, runtime=h * HOUR)
        for i, (g, h, _) in enumerate(jobs)
    ]
    runtime = {w.key: h * HOUR for w, (_, h, _) in zip(workloads, jobs, strict=True)}
    arrivals = sorted((start + at * HOUR, i) for i, (_, _, at) in enumerate(jobs))
    ran: dict[str, tuple[float, float]] = {}  # key -> (gpus, started)

    def used_by(now: float) -> float:
        return sum(g * (min(now, s + runtime[k]) - s) / HOUR for k, (g, s) in ran.items())

    def turn(now: float) -> None:
        check.observe(BudgetSnapshot(now, {"research": used_by(now)}))
        cluster.settle(now)
        for w in workloads:
            if w.key in core.running and w.key not in ran:
                ran[w.key] = (w.pods[0].gpu.count, now)

    pending = list(arrivals)
    now = start
    while pending or core.running:
        ends = {k: ran[k][1] + runtime[k] for k in core.running}
        now = min([*(a for a, _ in pending[:1]), *ends.values()])
        # As the control loop does: the turn's events first, then the count, then cycles.
        for key in [k for k, end in ends.items() if end <= now]:
            pod = core.running[key].workload.pods[0].key
            del cluster.running[pod]
            core.handle(PodDeleted(pod))
        while pending and pending[0][0] <= now:
            core.add(workloads[pending.pop(0)[1]])
        turn(now)
    worth = max((g * h for g, h, _ in jobs), default=0.0)
    assert used_by(now) <= budget + worth + 1e-6


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(
            st.sampled_from(["research", "other"]),
            st.sampled_from([1, 2, 0]),  # whole GPUs; 0: a share of one
            st.integers(1, 2),  # pods
        ),
        min_size=1,
        max_size=8,
    ),
    ends=st.lists(st.integers(0, 20), max_size=6),
)
def test_the_gpus_held_under_a_budget_are_kept_as_workloads_come_and_go(
    shapes: list[tuple[str, int, int]], ends: list[int]
) -> None:
    """What the check keeps per queue (what the world counts hours from each turn) equals a
    recount of the running set's placements, for the budgeted subtree's queues only."""
    core = budgeted_core(BudgetAction.BLOCK, hours=1e9)
    cluster = EchoCluster(core)
    for i, (queue, gpus, pods) in enumerate(shapes):
        shape: dict[str, object] = {"gpus": gpus} if gpus else {"gpus": 0, "milli": 250}
        cluster.submit(make_workload(f"w{i}", queue, pods=pods, **shape), now=NOW)  # type: ignore[arg-type]
    for pick in ends:
        bound = sorted(cluster.running)
        if bound:
            cluster.finish(bound[pick % len(bound)], now=NOW)
    recount: dict[str, float] = {}
    for queue, in_queue in core.state.running.by_queue.items():
        if queue == "research":
            held = sum(held_gpus(r.bound.values()) for r in in_queue.values())
            if held:
                recount[queue] = held
    assert check_of(core).held == pytest.approx(recount)
