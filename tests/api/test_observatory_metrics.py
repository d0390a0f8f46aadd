"""``/metrics`` counts the observatory's rounds as Prometheus counts its rule group's
iterations: evaluated, caught up late (a round thread that ran behind), skipped (further behind
than it catches up) (issue 29 item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.service.observatory import CATCH_UP_ROUNDS, STEP_S
from gpufleet.testing.service import ServiceHarness, gpu_nodes, make_harness


def rounds_served(harness: ServiceHarness) -> dict[str, float]:
    text = harness.client("admin").get("/metrics").text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("gpufleet_observatory_rounds")
        for sample in family.samples
        if sample.name.endswith("_total")
    }


@pytest.mark.parametrize(
    ("late_by_steps", "rounds", "caught_up", "skipped"),
    [
        (1, 2, 0, 0),
        (5, 6, 4, 0),
        (CATCH_UP_ROUNDS + 10, 1 + CATCH_UP_ROUNDS, CATCH_UP_ROUNDS - 1, 10),
    ],
    ids=["on-time", "late-catches-up", "too-late-skips"],
)
def test_rounds_caught_up_and_skipped_are_counters_on_metrics(
    tmp_path: Path, late_by_steps: int, rounds: int, caught_up: int, skipped: int
) -> None:
    harness = make_harness(tmp_path, gpu_nodes(1, gpus=1))
    harness.advance(STEP_S)
    harness.plane.observing.round()  # the first round, at the first instant
    harness.advance(STEP_S * late_by_steps)  # the thread ran late by this many steps
    harness.plane.observing.round()
    assert rounds_served(harness) == {
        "gpufleet_observatory_rounds_total": rounds,
        "gpufleet_observatory_rounds_caught_up_total": caught_up,
        "gpufleet_observatory_rounds_skipped_total": skipped,
    }
    harness.close()
