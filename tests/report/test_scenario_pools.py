"""The node pools' rows, line and section: a row per pool and their total, the median run over
seeds, the section's tables and its figure of nodes over time, and the HTML page."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.backends.sim.node_pools import PoolSettings
from gpufleet.backends.sim.run import run_workloads
from gpufleet.model.capacity import CapacityType
from gpufleet.model.workload import TimedWorkload
from gpufleet.report.html import write_report
from gpufleet.report.scenario_pools import TOTAL, pools_section, summarize_pools
from gpufleet.report.scenario_summary import LabelledRun, Variant
from gpufleet.testing.builders import make_node, make_node_pool, make_workload

HOUR = 3600.0


def _run(seed: int, gangs: int = 1) -> LabelledRun:
    """A reserved node there from the start and an on-demand pool: ``gangs`` gangs of
    2 x 8 GPUs for an hour."""
    reserved = make_node_pool(
        "reserved", CapacityType.RESERVED, price=5.0, min_nodes=1, max_nodes=1, model="H100"
    )
    on_demand = make_node_pool("on-demand", price=20.0, max_nodes=4, model="H100", delay=60.0)
    work = [
        TimedWorkload(make_workload(f"g{i}", pods=2, gpus=8), created=0.0, duration=HOUR)
        for i in range(gangs)
    ]
    result = run_workloads(
        [make_node("cpu", gpus=0)], work, "default", seed,
        node_pools=PoolSettings((reserved, on_demand)),
    )  # fmt: skip
    return LabelledRun("default", seed, Variant.QUEUES, result)


def test_a_row_per_pool_then_the_total_and_a_line_for_the_terminal() -> None:
    (summary,) = summarize_pools([_run(1)], "USD")
    reserved, on_demand, total = summary.rows
    assert (reserved.pool, reserved.capacity_type, reserved.node) == ("reserved", "reserved",
                                                                      "8 x H100")  # fmt: skip
    assert (reserved.nodes_at_start, reserved.added, reserved.removed) == (1, 0, 0)
    assert on_demand.added >= 1
    for row in (reserved, on_demand):
        assert row.nodes_at_end == row.nodes_at_start + row.added - row.removed - row.lost
    assert total.pool == TOTAL
    assert total.cost == pytest.approx(reserved.cost + on_demand.cost)
    assert total.node_hours == pytest.approx(reserved.node_hours + on_demand.node_hours)
    assert total.nodes_peak <= reserved.nodes_peak + on_demand.nodes_peak
    assert on_demand.cost == pytest.approx(on_demand.node_hours * 20.0, abs=1e-3)
    assert summary.line.startswith(f"2 pools, {total.added} node(s) added, {total.removed} removed")
    assert summary.line.endswith(f"{total.cost:,.2f} USD (the bill)")


def test_several_seeds_show_the_median_run_and_keep_every_seeds_cost() -> None:
    runs = [_run(1, gangs=1), _run(2, gangs=2), _run(3, gangs=3)]
    (summary,) = summarize_pools(runs, "USD")
    assert summary.seed == 2
    assert summary.rows[-1].cost == runs[1].result.pools.cost  # type: ignore[union-attr]
    assert set(summary.cost_by_seed) == {1, 2, 3}


def test_runs_without_pools_have_no_section() -> None:
    plain = run_workloads([make_node("n")], [], "default", 1)
    runs = [LabelledRun("default", 1, Variant.QUEUES, plain)]
    assert summarize_pools(runs) == []
    assert pools_section([], runs) is None


def test_the_section_renders_the_pool_table_the_actions_and_nodes_over_time(
    tmp_path: Path,
) -> None:
    runs = [_run(1)]
    section = pools_section(summarize_pools(runs, "USD"), runs)
    assert section is not None
    assert section.heading == "Node pools"
    headings = [heading for heading, _, _ in section.tables]
    assert headings[:2] == ["Pools (default/queues, seed 1)",
                            "What the autoscaler did (default/queues, seed 1)"]  # fmt: skip
    ((title, figure),) = section.figures
    assert title == "Nodes per pool (default/queues, seed 1)"
    assert [trace.name for trace in figure.data] == ["reserved", "on-demand"]
    assert all(trace.line.shape == "hv" for trace in figure.data)
    pools = runs[0].result.pools
    assert pools is not None
    for trace, usage in zip(figure.data, pools.pools, strict=True):
        assert (max(trace.y), trace.y[-1]) == (usage.nodes_peak, usage.nodes_at_end)
    page = tmp_path / "report.html"
    write_report(page, "t", "d", [], [], own_sections=[section])
    html = page.read_text()
    assert "<h2>Node pools</h2>" in html
    assert "price per node hour" in html
    assert "on-demand" in html
    assert TOTAL in html
    assert "plotly" in html
