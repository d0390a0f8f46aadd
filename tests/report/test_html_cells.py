"""The HTML report's tables show times as people read them, not raw seconds."""

from __future__ import annotations

import pytest

from gpufleet.report.html import html_table
from gpufleet.report.scenario_summary import Comparison, ExplainRow, QueueSummary, RunSummary, Unit
from gpufleet.report.summary import ReplaySummary


def queue_row() -> QueueSummary:
    return QueueSummary(
        run="default/queues", queue="llm", depth=1, seeds=[42], nominal_gpus=8.0,
        workloads=10, admitted=9, completed=8, delay_p50=2349.0, delay_p95=7500.0,
        delay_max=97380.0, jct_p50=5400.0, gpu_hours_used=12.5, gpu_hours_entitled=16.0,
        preemptions=1, gpu_hours_lost=0.5, longest_short_of_nominal=59.0,
    )  # fmt: skip


def run_row() -> RunSummary:
    return RunSummary(
        run="default/queues", seeds=[42], allocation_busy_pct=81.3, pod_delay_p50=8.1,
        pod_delay_p95=60.0, delay_p95_by_priority_class={"batch": 3600.0, "(none)": 0.0},
        high_priority_class="batch", high_priority_p95=None, workloads=10, completed=8,
        waiting_at_end=2, partial_gangs=0, preemptions=1, gpu_hours_lost=0.5,
        median_seconds=2.5,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "shown", "hidden"),
    [
        pytest.param(
            [queue_row()],
            [
                "<td>39m09s</td>",
                "<td>2h05m</td>",
                "<td>1d03h</td>",
                "<td>1h30m</td>",
                "<td>59s</td>",
            ],
            ["2349", "7500", "97380"],
            id="queue-delays",
        ),
        pytest.param(
            [run_row()],
            ["<td>8.1s</td>", "<td>1m00s</td>", "batch: 1h00m<br>(none): 0s", "<td>2.5s</td>"],
            ["3600.0"],
            id="run-delays-per-class",
        ),
        pytest.param(
            [ExplainRow("default/queues", 42, 1800.0, "llm/a", "llm", 1, "quota", "m", 3600.0)],
            ["<td>t=30m00s</td>", "<td>t=1h00m</td>"],
            ["1800", "3600"],
            id="explain-instants",
        ),
        pytest.param(
            [ExplainRow("default/queues", 42, None, "llm/a", "llm", 1, "quota", "m", None)],
            ["<td>-</td>"],
            ["t="],
            id="explain-at-the-end",
        ),
        pytest.param(
            [
                Comparison("default", "p95 delay", Unit.SECONDS, 339.0, 0.0),
                Comparison("default", "allocation", Unit.PERCENT, 81.3, 81.8, False),
            ],
            ["<td>5m39s</td>", "<td>0s</td>", "<td>81.3%</td>", "<td>81.8%</td>"],
            ["339.0"],
            id="comparison-by-unit",
        ),
        pytest.param(
            [ReplaySummary("default", [42], 12.5, 2349.0, 7500.0, 81.3, 0, 2.0)],
            ["<td>12s</td>", "<td>39m09s</td>", "<td>2h05m</td>", "<td>81.3</td>"],
            ["2349"],
            id="replay-delays",
        ),
    ],
)
def test_time_cells_read_as_durations_and_instants(
    rows: list[object], shown: list[str], hidden: list[str]
) -> None:
    page = html_table(rows)  # type: ignore[arg-type]
    for text in shown:
        assert text in page
    for text in hidden:
        assert text not in page
