"""``benchmarks/telemetry_store.py``: its compressed time sees every pod, and a small run builds,
saves and restores the store as ``serve`` does."""

from __future__ import annotations

import pytest

from benchmarks.telemetry_store import DAY, Fleet, child


@pytest.mark.parametrize("round_s", [900, 6 * 3_600], ids=["15-min", "6-h"])
def test_rounds_far_apart_still_see_every_pod(round_s: int) -> None:
    start = 1_700_000_000.0
    fleet = Fleet(gpus=16, pods_per_day=200, days=2, start=start)
    seen: set[str] = set()
    since = start - round_s
    for now in range(int(start), int(start + 2 * DAY), round_s):
        _, tags = fleet.at(float(now), since)
        seen |= {pod for _, pod in tags}
        since = float(now)
    ran = {
        f"job-{i}-worker-0"
        for i, (began, ended) in enumerate(zip(fleet.pod_start, fleet.pod_end, strict=True))
        if began < since and ended > start - round_s  # ran between the first round and the last
    }
    assert len(ran) > 300
    assert ran <= seen


def test_a_small_run_keeps_a_summary_per_pod_and_restores_the_same() -> None:
    found = child(16, 40, 2, 1, 0.25, 6 * 3_600, 6 * 3_600, 0.25, False)
    assert found["restored_same"]
    assert found["pod_summaries"] >= 60  # 80 pods start over the 2 days, a few in the last hour
    assert found["workload_series"] > 0
    assert found["rss_peak_mb"] >= found["rss_built_mb"] > 0
