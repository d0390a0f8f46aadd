"""The numbers behind `simulate --scenario`'s tables: medians, queue order, FIFO comparison."""

from __future__ import annotations

import pytest

from gpufleet.backends.sim.results import (
    DelayStats,
    QueueStats,
    QueueTimeline,
    ReplayRun,
    TenancyRun,
    TenancyStats,
    Timeline,
)
from gpufleet.model.times import format_duration
from gpufleet.report.scenario_summary import (
    LabelledRun,
    QueueTree,
    Unit,
    Variant,
    compare_with_fifo,
    high_priority_class,
    summarize_queues,
    summarize_runs,
)


def tenancy_run(
    allocation: float = 50.0,
    queues: dict[str, QueueStats] | None = None,
    class_p95: dict[str, float] | None = None,
    partial_gangs: int = 0,
    preemptions: int = 0,
) -> TenancyRun:
    """A run's results with only what the summaries read set."""
    replay = ReplayRun(
        policy="default", seed=0, seconds=1.0, nodes=1, pods=1, capacity_gpu_milli=1000,
        queueing_delay=DelayStats(), queueing_delay_by_class={}, delays=[],
        timeline=Timeline(), never_ran=0, never_ran_examples=[], classes={},
    )  # fmt: skip
    tenancy = TenancyStats(
        queues=queues or {},
        queueing_delay_by_priority_class={
            name: DelayStats(p95=p95, count=1) for name, p95 in (class_p95 or {}).items()
        },
        timeline=QueueTimeline(),
        partial_gangs=partial_gangs,
        partial_gang_seconds=0.0,
        preemptions=preemptions,
        gpu_hours_lost=0.0,
    )
    return TenancyRun(replay, tenancy, allocation)


def labelled(seed: int, run: TenancyRun, variant: Variant = Variant.QUEUES) -> LabelledRun:
    return LabelledRun("default", seed, variant, run)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(0, "0s", id="zero"),
        pytest.param(8.14, "8.1s", id="tenths-below-ten"),
        pytest.param(42.4, "42s", id="seconds"),
        pytest.param(59.6, "1m00s", id="rounds-up-to-a-minute"),
        pytest.param(3725, "1h02m", id="hours"),
        pytest.param(90000, "1d01h", id="days"),
        pytest.param(-5, "-5s", id="negative"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_queue_tree_orders_children_under_parents() -> None:
    tree = QueueTree({"org": None, "a": "org", "b": "org", "a1": "a"})
    assert tree.ordered(["b", "a1", "default", "org", "a"]) == [
        ("org", 0),
        ("b", 1),
        ("a", 1),
        ("a1", 2),
        ("default", 0),
    ]


@pytest.mark.parametrize(
    ("classes", "expected"),
    [
        pytest.param([], None, id="none"),
        pytest.param(["(none)"], None, id="only-unclassed"),
        pytest.param(["batch", "high", "(none)"], "high", id="highest-value"),
        pytest.param(["mystery", "batch"], "batch", id="unknown-ranks-lowest"),
    ],
)
def test_high_priority_class(classes: list[str], expected: str | None) -> None:
    assert high_priority_class(classes, {"batch": 100, "high": 1000}) == expected


def test_queue_rows_take_medians_and_skip_unused_queues() -> None:
    def stats(delay_p95: float, used: float) -> dict[str, QueueStats]:
        team = QueueStats(
            "team", 8.0, workloads=4, admitted=4, completed=4,
            queueing_delay=DelayStats(p95=delay_p95, count=4), gpu_hours_used=used,
        )  # fmt: skip
        return {"team": team, "default": QueueStats("default", 0.0)}

    runs = [
        labelled(seed, tenancy_run(queues=stats(p95, used)))
        for seed, p95, used in ((1, 10.0, 5.0), (2, 30.0, 9.0), (3, 20.0, 7.0))
    ]
    (row,) = summarize_queues(runs, QueueTree({"team": None}))
    assert (row.run, row.queue, row.seeds) == ("default/queues", "team", [1, 2, 3])
    assert (row.delay_p95, row.gpu_hours_used, row.workloads) == (20.0, 7.0, 4)


def test_run_rows_report_the_worst_partial_gangs_and_the_scenarios_top_class() -> None:
    runs = [
        labelled(1, tenancy_run(allocation=50.0, class_p95={"batch": 5.0})),
        labelled(2, tenancy_run(allocation=70.0, class_p95={"batch": 7.0}, partial_gangs=2)),
        labelled(3, tenancy_run(allocation=60.0, class_p95={"batch": 6.0})),
    ]
    (row,) = summarize_runs(runs, {"batch": 100, "high": 1000}, ["batch", "high"])
    assert row.allocation_busy_pct == 60.0
    assert row.partial_gangs == 2
    assert row.delay_p95_by_priority_class == {"batch": 6.0}
    # The scenario has "high" workloads, none of which started: reported, without a delay.
    assert (row.high_priority_class, row.high_priority_p95) == ("high", None)


def test_comparison_with_fifo_pairs_the_metrics_of_each_policy() -> None:
    ours = tenancy_run(allocation=80.0, class_p95={"high": 10.0, "batch": 600.0}, preemptions=3)
    fifo = tenancy_run(allocation=70.0, class_p95={"high": 900.0, "batch": 300.0})
    rows = summarize_runs(
        [labelled(1, ours), labelled(1, fifo, Variant.FIFO)], {"high": 1000, "batch": 100}
    )
    table = {
        c.metric: (c.unit, c.queues, c.fifo, c.lower_is_better)
        for c in compare_with_fifo(rows, ["default"])
    }
    assert table["cluster GPU allocation (busy window)"] == (Unit.PERCENT, 80.0, 70.0, False)
    assert table["high p95 delay"] == (Unit.SECONDS, 10.0, 900.0, True)
    assert table["batch p95 delay"] == (Unit.SECONDS, 600.0, 300.0, True)
    assert table["preemptions"] == (Unit.COUNT, 3, 0, True)
    assert compare_with_fifo(rows[:1], ["default"]) == []  # no baseline, no comparison
