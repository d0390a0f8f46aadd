"""Alert rules as plain data: comparisons as PromQL has them, rules checked on construction."""

from __future__ import annotations

import math

import pytest

from gpufleet.model.alerts import (
    Aggregation,
    AlertMetric,
    AlertRule,
    AlertScope,
    Comparison,
    Severity,
    label_set,
)


@pytest.mark.parametrize(
    ("comparison", "value", "holds"),
    [
        (Comparison.GT, 91.0, True),
        (Comparison.GT, 90.0, False),
        (Comparison.GE, 90.0, True),
        (Comparison.LT, 19.9, True),
        (Comparison.LE, 20.0, True),
        (Comparison.EQ, 90.0, True),
        (Comparison.NE, 90.0, False),
        (Comparison.NE, math.nan, False),
    ],
    ids=["gt", "gt-equal", "ge-equal", "lt", "le-equal", "eq", "ne-equal", "nan-never"],
)
def test_comparisons(comparison: Comparison, value: float, holds: bool) -> None:
    threshold = 20.0 if comparison in (Comparison.LT, Comparison.LE) else 90.0
    assert comparison.holds(value, threshold) is holds


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": ""}, "needs a name"),
        ({"threshold": math.inf}, "finite"),
        ({"for_s": -1.0}, "for must be a duration"),
        ({"aggregation": Aggregation.AVG}, "needs a window"),
        ({"quantile": 0.5}, "a quantile is given"),
        (
            {"aggregation": Aggregation.QUANTILE, "window_s": 60.0, "quantile": 1.5},
            "between 0 and 1",
        ),
        ({"min_running_s": 60.0}, "minRunning applies to workload metrics"),
        ({"scope": AlertScope(labels=(("bad-name", "x"),))}, "not a Prometheus label name"),
        ({"scope": AlertScope(queue="research")}, "carry no queue label"),
        (
            {"metric": AlertMetric.WORKLOAD_GPU_UTIL, "scope": AlertScope(queue="research")},
            "carry no queue label",
        ),
        ({"scope": AlertScope(labels=(("team", "vision"),))}, "no such label"),
        (
            {"metric": AlertMetric.WORKLOAD_GPU_UTIL, "scope": AlertScope(labels=(("gpu", "0"),))},
            "no such label",
        ),
        ({"scope": AlertScope(labels=(("err_code", "79"),))}, "no such label"),
    ],
    ids=[
        "no-name",
        "infinite-threshold",
        "negative-for",
        "avg-without-window",
        "quantile-without-aggregation",
        "quantile-out-of-range",
        "min-running-on-device",
        "bad-label",
        "queue-on-device",
        "queue-on-workload",
        "unknown-label-on-device",
        "device-label-on-workload",
        "xid-label-on-temperature",
    ],
)
def test_bad_rules_are_refused(changes: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {
        "name": "r",
        "metric": AlertMetric.GPU_TEMP,
        "comparison": Comparison.GT,
        "threshold": 85.0,
    }
    fields.update(changes)
    with pytest.raises(ValueError, match=message):
        AlertRule(**fields)  # type: ignore[arg-type]


def test_an_alert_is_identified_by_its_series_labels_with_name_and_severity() -> None:
    rule = AlertRule(
        "gpu-memory-high",
        AlertMetric.FB_USED_PERCENT,
        Comparison.GT,
        90.0,
        severity=Severity.CRITICAL,
        scope=AlertScope("ml", None, label_set({"Hostname": "a"})),
    )
    assert rule.alert_name == "GpuMemoryHigh"
    assert rule.lookback_s == 300.0
    assert rule.scope.matchers() == {"Hostname": "a", "namespace": "ml"}
    assert rule.alert_labels(label_set({"gpu": "0", "severity": "x"})) == (
        ("alertname", "GpuMemoryHigh"),
        ("gpu", "0"),
        ("severity", "critical"),
    )
