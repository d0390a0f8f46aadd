"""The cost section of `simulate --scenario`: per run label and grouping, the lines of its median
run (so that every line still splits and the lines still add up), every seed's total beside
them; the HTML section draws a stacked bar per grouping and a table per run label."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.backends.sim.results import (
    DelayStats,
    QueueTimeline,
    ReplayRun,
    TenancyRun,
    TenancyStats,
    Timeline,
)
from gpufleet.economics import CostReport, PodRun, Window, cost_of_runs
from gpufleet.report.scenario_cost import TOTAL, CostRow, median_run, summarize_cost
from gpufleet.report.scenario_html import cost_section
from gpufleet.report.scenario_summary import LabelledRun, Variant
from gpufleet.testing.builders import make_node
from gpufleet.testing.economics_builders import HOUR, price_list

PRICES = price_list()
NODES = [make_node("n", gpus=4, model="H100")]
WINDOW = Window(0.0, 10 * HOUR)


def report(*holds: tuple[str, float, float | None], by: str = "queue") -> CostReport:
    """Pods of (queue, GPU-hours over the window, utilisation or None: unmeasured)."""
    runs = [
        PodRun(f"ml/{i}", str(i), "ml", f"p{i}", "n", 0.0, hours / 4 * HOUR, False, 4.0,
               "H100", cpu=1.0, queue=queue)
        for i, (queue, hours, _) in enumerate(holds)
    ]  # fmt: skip
    util = {("ml", f"p{i}"): u for i, (_, _, u) in enumerate(holds) if u is not None}
    return dataclasses.replace(cost_of_runs(runs, NODES, PRICES, WINDOW, by, util), runs=())


def tenancy_run(*cost: CostReport) -> TenancyRun:
    replay = ReplayRun(
        policy="default", seed=0, seconds=1.0, nodes=1, pods=1, capacity_gpu_milli=4000,
        queueing_delay=DelayStats(), queueing_delay_by_class={}, delays=[],
        timeline=Timeline(), never_ran=0, never_ran_examples=[], classes={},
    )  # fmt: skip
    tenancy = TenancyStats({}, {}, QueueTimeline(), 0, 0.0, 0, 0.0)
    return TenancyRun(replay, tenancy, 50.0, cost=cost)


def labelled(seed: int, *cost: CostReport, variant: Variant = Variant.QUEUES) -> LabelledRun:
    return LabelledRun("default", seed, variant, tenancy_run(*cost))


@pytest.mark.parametrize(
    ("hours_by_seed", "median_seed"),
    [
        pytest.param({42: 4.0}, 42, id="one-seed"),
        pytest.param({42: 4.0, 43: 12.0, 44: 8.0}, 44, id="odd"),
        pytest.param({42: 12.0, 43: 4.0}, 43, id="even-the-lower-middle"),
        pytest.param({42: 8.0, 43: 8.0, 44: 8.0, 45: 1.0}, 42, id="ties-by-seed"),
    ],
)
def test_the_median_run_is_the_one_of_median_total_cost(
    hours_by_seed: dict[int, float], median_seed: int
) -> None:
    runs = [labelled(seed, report(("a", hours, 0.5))) for seed, hours in hours_by_seed.items()]
    assert median_run(runs).seed == median_seed
    [summary] = summarize_cost(runs)
    assert summary.seed == median_seed
    assert summary.seeds == list(hours_by_seed)
    assert sorted(summary.allocated_by_seed) == sorted(hours_by_seed)
    assert [row.seed for row in summary.rows] == [median_seed] * len(summary.rows)


def test_every_grouping_of_a_label_shows_the_same_run() -> None:
    runs = [
        labelled(seed, report(("a", hours, 0.5)), report(("a", hours, 0.5), by="namespace"))
        for seed, hours in ((42, 4.0), (43, 8.0), (44, 6.0))
    ]
    assert [(s.by, s.seed) for s in summarize_cost(runs)] == [("queue", 44), ("namespace", 44)]


def test_a_summary_per_label_and_grouping_in_the_order_asked() -> None:
    runs = [
        labelled(42, report(("a", 2.0, 0.5)), report(("a", 2.0, 0.5), by="namespace")),
        labelled(42, report(("b", 4.0, None)), report(("b", 4.0, None), by="namespace"),
                 variant=Variant.FIFO),
    ]  # fmt: skip
    summaries = summarize_cost(runs)
    assert [(s.run, s.by) for s in summaries] == [
        ("default/queues", "queue"),
        ("default/queues", "namespace"),
        ("default/fifo", "queue"),
        ("default/fifo", "namespace"),
    ]
    fifo = summaries[2]
    assert [row.group for row in fifo.rows] == ["b", "__idle__", TOTAL]
    assert fifo.lines[0].gpu_util_pct is None  # unmeasured, not 0 %
    assert fifo.lines[0].unmeasured == pytest.approx(40.0)


def test_runs_without_cost_have_no_summary_and_no_section() -> None:
    assert summarize_cost([labelled(42)]) == []
    assert cost_section([], "prices.yaml") is None


HOLDS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.floats(0.0, 5.0),  # at most 8 x 5: the 40 GPU-hours the node offers
        st.none() | st.floats(0.0, 1.0),
    ),
    min_size=1,
    max_size=8,
)


def _split(row: CostRow) -> float:
    return row.used + row.idle + row.unmeasured


@given(st.lists(HOLDS, min_size=1, max_size=4))
def test_the_rows_split_and_add_up(seeds: list[list[tuple[str, float, float | None]]]) -> None:
    runs = [labelled(42 + i, report(*holds)) for i, holds in enumerate(seeds)]
    [summary] = summarize_cost(runs)
    for row in summary.rows:
        assert row.allocated == pytest.approx(_split(row), abs=1e-5)
    for part in ("gpu_hours", "allocated", "used", "idle", "unmeasured"):
        summed = sum(getattr(row, part) for row in summary.lines)
        assert summed == pytest.approx(getattr(summary.total, part), abs=1e-5)
    # The window is the node's 4 GPUs for 10 hours: every GPU-hour is someone's or idle.
    assert summary.total.gpu_hours == pytest.approx(40.0, abs=1e-5)


def test_the_section_draws_a_stacked_bar_per_grouping_and_a_table_per_run() -> None:
    runs = [
        labelled(42, report(("a", 2.0, 0.5), ("b", 4.0, None)),
                 report(("a", 2.0, 0.5), by="namespace")),
    ]  # fmt: skip
    section = cost_section(summarize_cost(runs), "my-prices.yaml")
    assert section is not None
    assert section.heading == "Cost"
    assert "my-prices.yaml" in section.note
    assert [heading for heading, _ in section.figures] == [
        "Cost by queue: used, idle and unmeasured",
        "Cost by namespace: used, idle and unmeasured",
    ]
    figure = section.figures[0][1]
    assert figure.layout.barmode == "stack"
    assert [trace.name for trace in figure.data] == ["used", "idle", "unmeasured"]
    assert list(figure.data[2].x[1]) == ["b", "a", "__idle__"]  # most allocated first
    assert figure.data[2].y[0] == pytest.approx(40.0)  # b: 4 GPU-hours never measured
    assert [heading for heading, _, _ in section.tables] == [
        "Cost by queue (default/queues, seed 42)",
        "Cost by namespace (default/queues, seed 42)",
    ]
