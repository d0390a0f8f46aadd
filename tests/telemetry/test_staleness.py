"""A series missing from the newest snapshot is stale, as Prometheus marks a series stale at
the first scrape without it (issue 29 item 5): a GPU that stops reporting resolves its alert
at the next round, not after the 5-minute lookback."""

from __future__ import annotations

import math

import pytest

from gpufleet.model.alerts import Aggregation, AlertMetric, AlertRule, AlertState, Comparison
from gpufleet.telemetry.rules import RuleEngine
from gpufleet.telemetry.series import SeriesStore

TEMP = AlertMetric.GPU_TEMP.value
GONE, STAYS = {"gpu": "0", "Hostname": "a"}, {"gpu": "1", "Hostname": "b"}


def instant(window_s: float = 0.0) -> AlertRule:
    aggregation = Aggregation.LAST
    return AlertRule(
        "hot", AlertMetric.GPU_TEMP, Comparison.GT, 85, aggregation=aggregation, window_s=window_s
    )


@pytest.mark.parametrize(
    ("rule", "after_stop", "state_after"),
    [
        (instant(), "absent", AlertState.RESOLVED),
        (instant(), "nan", AlertState.RESOLVED),
        (instant(), "reports", AlertState.FIRING),
        # last_over_time(x[10m]) skips staleness markers in Prometheus too
        (instant(window_s=600.0), "absent", AlertState.FIRING),
    ],
    ids=["stops-reporting", "reports-no-sample", "keeps-reporting", "last-over-an-explicit-window"],
)
def test_a_gpu_that_stops_reporting_resolves_at_the_next_round(
    rule: AlertRule, after_stop: str, state_after: AlertState
) -> None:
    store = SeriesStore()
    gone, stays = store.add(TEMP, GONE), store.add(TEMP, STAYS)
    engine = RuleEngine([rule])
    for k in range(5):
        store.append(k * 15.0, [gone, stays], [90.0, 50.0])
        engine.evaluate(store, k * 15.0)
    assert [a.state for a in engine.alerts()] == [AlertState.FIRING]
    now = 5 * 15.0
    if after_stop == "absent":
        store.append(now, [stays], [50.0])
    else:
        store.append(now, [gone, stays], [math.nan if after_stop == "nan" else 90.0, 50.0])
    engine.evaluate(store, now)
    assert [a.state for a in engine.alerts()] == [state_after]
