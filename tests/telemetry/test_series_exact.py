"""Values at integers and at thresholds come back from the series store exactly (issue 29,
item 1): a device's XID 79 is 79, not 79.00146, and ``temp >= 85``, ``XID == 79``,
``util <= 40`` fire on the values the device reported, as they do in Prometheus."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.alerts import AlertMetric, AlertRule, AlertState, Comparison
from gpufleet.telemetry.rules import RuleEngine
from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_layout import RULE_METRICS, MetricSpec, as_labels

GPU = as_labels({"gpu": "0", "Hostname": "n0"})
SPECS = {spec.name: spec for spec in RULE_METRICS}


def _stored(metric: str, values: list[float]) -> SeriesStore:
    store = SeriesStore()
    row = store.add(metric, GPU)
    for step, value in enumerate(values):
        store.append(step * 15.0, [row], [value])
    return store


@pytest.mark.parametrize(
    ("metric", "value"),
    [
        (AlertMetric.XID_ERRORS, 79.0),
        (AlertMetric.XID_ERRORS, 13.0),
        (AlertMetric.XID_ERRORS, 254.0),
        (AlertMetric.GPU_TEMP, 85.0),
        (AlertMetric.GPU_TEMP, 84.5),
        (AlertMetric.GPU_UTIL, 40.0),
        (AlertMetric.GPU_UTIL, 20.0),
        (AlertMetric.GPU_UTIL, 99.0),
        (AlertMetric.POWER_USAGE, 650.0),
        (AlertMetric.POWER_USAGE, 312.25),
        (AlertMetric.FB_USED, 73_728.0),
        (AlertMetric.FB_USED_PERCENT, 90.0),
        (AlertMetric.WORKLOAD_GPU_UTIL, 40.0),
    ],
    ids=[
        "xid-79", "xid-13", "xid-top", "temp-85", "temp-half", "util-40", "util-20", "util-99",
        "power-650", "power-quarter", "memory-mib", "memory-percent-90", "workload-40",
    ],
)  # fmt: skip
@pytest.mark.parametrize("fn", ["last", "max", "min", "avg"])
def test_integers_and_thresholds_come_back_exact(
    metric: AlertMetric, value: float, fn: str
) -> None:
    store = _stored(metric.value, [value] * 4)
    assert store.query(metric.value, fn, 300, 45.0) == {GPU: value}


@pytest.mark.parametrize(
    ("metric", "comparison", "threshold", "value", "fires"),
    [
        (AlertMetric.XID_ERRORS, Comparison.EQ, 79, 79, True),
        (AlertMetric.XID_ERRORS, Comparison.NE, 79, 79, False),
        (AlertMetric.GPU_TEMP, Comparison.GE, 85, 85, True),
        (AlertMetric.GPU_TEMP, Comparison.GT, 85, 85, False),
        (AlertMetric.GPU_UTIL, Comparison.LE, 40, 40, True),
        (AlertMetric.GPU_UTIL, Comparison.LT, 40, 40, False),
    ],
    ids=["xid-eq", "xid-ne", "temp-ge", "temp-gt", "util-le", "util-lt"],
)
def test_rules_at_their_threshold_fire_as_in_prometheus(
    metric: AlertMetric, comparison: Comparison, threshold: float, value: float, fires: bool
) -> None:
    rule = AlertRule("at-threshold", metric, comparison, threshold)
    engine = RuleEngine([rule])
    engine.evaluate(_stored(metric.value, [value]), 0.0)
    states = [alert.state for alert in engine.alerts()]
    assert states == ([AlertState.FIRING] if fires else [])
    if fires:
        assert engine.alerts()[0].value == value


def test_every_rule_metric_is_coded_in_steps_of_a_resolution() -> None:
    """The guard: a metric a rule may watch states its resolution (no metric coded over an
    uneven split of its range, where integers come back off)."""
    for spec in RULE_METRICS:
        assert spec.resolution is not None, spec.name
        assert spec.code_top(65534) >= spec.hi


@pytest.mark.parametrize(
    "metric", [m for m in AlertMetric if m is not AlertMetric.FB_USED], ids=str
)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_every_integer_of_a_range_is_exact(metric: AlertMetric, data: st.DataObject) -> None:
    spec = SPECS[metric.value]
    value = float(data.draw(st.integers(int(spec.lo), int(spec.hi))))
    assert _stored(metric.value, [value]).query(metric.value, "last", 300, 0.0) == {GPU: value}


@settings(max_examples=100, deadline=None)
@given(
    metric=st.sampled_from(list(AlertMetric)),
    fraction=st.floats(0.0, 1.0, allow_nan=False),
)
def test_any_value_is_within_half_a_resolution(metric: AlertMetric, fraction: float) -> None:
    spec: MetricSpec = SPECS[metric.value]
    assert spec.resolution is not None
    value = spec.lo + fraction * (spec.hi - spec.lo)
    found = _stored(metric.value, [value]).query(metric.value, "last", 300, 0.0)[GPU]
    assert abs(found - value) <= spec.resolution / 2 + 1e-9
    assert np.isclose(found / spec.resolution, round(found / spec.resolution))


@pytest.mark.parametrize(
    ("resolution", "message"),
    [(0.3, "power of two"), (-0.5, "power of two"), (0.0, "power of two")],
    ids=["not-power", "negative", "zero"],
)
def test_a_resolution_is_a_power_of_two(resolution: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MetricSpec("m", 0.0, 1.0, "", resolution)
