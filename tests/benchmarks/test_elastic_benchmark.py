"""benchmarks/elastic.py small: its week has the shape it says, and a --quick run writes both
parts' results with their invariants (no target asserted: the full run measures those)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from benchmarks.elastic import DAY, NEEDS, arrivals, batch_pools, batch_week, main
from gpufleet.io.cluster_traces.shapes import bundled_shape_table
from gpufleet.model.capacity import SPOT_TAINT
from gpufleet.scheduling.capacity import tolerates_spot


def test_arrivals_are_busier_on_weekday_afternoons_than_nights_and_weekends() -> None:
    times = arrivals(20_000, 7, np.random.default_rng(0))
    assert len(times) == 20_000
    assert bool(np.all(np.diff(times) >= 0))
    assert times[0] >= 0
    assert times[-1] <= 7 * DAY
    day, hour = times // DAY, (times % DAY) // 3600
    weekday_afternoons = np.sum((day < 5) & (hour >= 12) & (hour < 16))
    weekday_nights = np.sum((day < 5) & (hour < 4))
    weekend_afternoons = np.sum((day >= 5) & (hour >= 12) & (hour < 16))
    assert weekday_afternoons > 2 * weekday_nights
    assert weekday_afternoons / 5 > 2 * weekend_afternoons / 2


def test_the_week_mixes_gangs_spot_tolerant_and_non_preemptible_jobs() -> None:
    week = batch_week(bundled_shape_table(), 2, 200, 0, 4 * 3600)
    assert len(week.workloads) == 400
    assert sum(week.needs.values()) == 400
    assert set(week.needs) == set(NEEDS)
    assert week.gangs == sum(t.workload.gang_size > 1 for t in week.workloads) > 0
    for timed in week.workloads:
        workload = timed.workload
        spot = all(tolerates_spot(p.tolerations) for p in workload.pods)
        assert spot == (workload.checkpoint_interval is not None)
        assert not (spot and not workload.preemptible)
        assert timed.duration is not None
        assert 60 <= timed.duration <= 4 * 3600
        assert all(p.gpu.count >= 1 for p in workload.pods)
    assert SPOT_TAINT.key == "gpufleet.dev/capacity-type"


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("elastic")
    assert main(["--quick", "--stress", "--spot-outages", "--out", str(out)]) == 0
    text = (out / "elastic.md").read_text()
    assert text.startswith("# Elastic capacity")
    assert "### Five ways to buy the week" in text
    assert "### Spot interruption rate" in text
    loaded: dict[str, Any] = json.loads((out / "elastic.json").read_text())
    return loaded


def test_a_quick_run_reports_the_batch_part(quick: dict[str, Any]) -> None:
    (batch,) = quick["batch"]
    elastic = batch["elastic"]
    assert elastic["cost"] > 0
    assert elastic["node_hours"] > 0
    assert 0 < elastic["completed"] <= elastic["jobs"] == batch["workload"]["jobs"]
    assert elastic["gpu_hours_done"] > 0
    assert elastic["gpu_hours_lost"] >= 0
    assert sum(elastic["node_hours_by_pool"].values()) == pytest.approx(elastic["node_hours"], 1e-4)
    tried = batch["static_tried"]
    assert tried[0]["peak_nodes"] == elastic["peak_nodes"]  # the first size tried: the peak
    assert batch["baseline"] in {s["label"] for s in tried}
    for static in tried:
        # a static fleet is paid for the period (--quick: one day), not for its run's drain
        assert static["node_hours"] == pytest.approx(static["peak_nodes"] * 24, rel=1e-9)
        assert static["cost"] == pytest.approx(static["node_hours"] * 98.32, rel=1e-3)
        assert static["hours"] >= 0
    baseline = next(s for s in tried if s["label"] == batch["baseline"])
    assert batch["cost_reduction"] == pytest.approx(1 - elastic["cost"] / baseline["cost"], 1e-3)


def test_a_quick_run_prices_the_five_ways_from_the_price_list(quick: dict[str, Any]) -> None:
    (batch,) = quick["batch"]
    tried = {s["label"]: s for s in batch["static_tried"]}
    baseline, at_peak = tried[batch["baseline"]], tried[batch["static_at_peak"]]
    assert at_peak["peak_nodes"] == batch["elastic"]["peak_nodes"]
    reserved = batch["reserved"]
    # the same fleet and run, at the list's reserved p5.48xlarge price (EC2 Capacity Blocks)
    assert reserved["peak_nodes"] == baseline["peak_nodes"]
    assert reserved["node_hours"] == baseline["node_hours"]
    assert reserved["cost"] == pytest.approx(reserved["node_hours"] * 39.33, rel=1e-3)
    assert reserved["cost"] < baseline["cost"]
    on_demand = batch["on_demand_only"]
    assert set(on_demand["node_hours_by_pool"]) == {"h100-on-demand"}
    assert on_demand["spot_gpu_hours"] == 0
    assert on_demand["spot_interruptions"] == 0
    assert batch["autoscaling_only_reduction"] == pytest.approx(
        1 - on_demand["cost"] / baseline["cost"], abs=1e-4
    )


def test_a_quick_run_sweeps_the_spot_interruption_rate(quick: dict[str, Any]) -> None:
    (batch,) = quick["batch"]
    assert batch["stress_factors"] == [10.0, 100.0]
    assert [s["label"] for s in batch["stress"]] == [
        "elastic (on-demand + spot), spot rate x10",
        "elastic (on-demand + spot), spot rate x100",
    ]
    for side in batch["stress"]:
        assert side["completed"] <= side["jobs"]
        assert side["gpu_hours_lost"] >= 0


def test_spot_outages_take_the_spot_pool_out_each_afternoon() -> None:
    on_demand, spot = batch_pools(16, days=1.0)
    assert on_demand.outages == ()
    assert [(o.start / 3600, o.end / 3600) for o in spot.outages] == [(12, 18), (36, 42)]
    assert batch_pools(16)[1].outages == ()


def test_a_quick_run_with_spot_outages_moves_work_off_spot(quick: dict[str, Any]) -> None:
    (batch,) = quick["batch"]
    outages, elastic = batch["spot_outages"], batch["elastic"]
    assert outages["label"] == (
        "elastic (on-demand + spot), spot out of capacity 12:00-18:00 daily"
    )
    assert outages["completed"] == outages["jobs"]
    assert outages["spot_gpu_hours"] < elastic["spot_gpu_hours"]


def test_a_quick_run_reports_the_inference_part(quick: dict[str, Any]) -> None:
    (serving,) = quick["inference"]
    scaled, static = serving["autoscaled"], serving["static"]
    assert static["serving"]["replicas_min"] == static["serving"]["replicas_max"]
    assert scaled["serving"]["scaled_by"].startswith("annotations")
    for side in (scaled, static):
        assert 0 <= side["serving"]["minutes_met_pct"] <= 100
        assert side["serving"]["minutes"] == 24 * 60
        assert side["node_gpu_hours"] >= side["serving"]["gpu_hours"] * 0.99 > 0
    checks = {c["check"] for c in quick["checks"]}
    assert len(checks) == 5
