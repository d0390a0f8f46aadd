"""Alert rules as a PrometheusRule: the object's shape, the PromQL of each rule, durations and
quoting. (``promtool check rules`` on the file is the integration tests' job.)"""

from __future__ import annotations

import pytest
import yaml

from gpufleet.io.fleet.alert_rules import builtin_alert_rules
from gpufleet.io.fleet.prometheus_rules import (
    alert_expression,
    prometheus_rule,
    rule_file,
    to_yaml,
)
from gpufleet.model.alerts import (
    Aggregation,
    AlertMetric,
    AlertRule,
    AlertScope,
    Comparison,
    label_set,
    promql_duration,
)


def test_the_built_in_rules_as_a_prometheus_rule() -> None:
    document = yaml.safe_load(
        to_yaml(prometheus_rule(builtin_alert_rules(), namespace="monitoring"))
    )
    assert document["apiVersion"] == "monitoring.coreos.com/v1"
    assert document["kind"] == "PrometheusRule"
    assert document["metadata"] == {
        "name": "gpufleet-alerts",
        "namespace": "monitoring",
        "labels": {"app.kubernetes.io/name": "gpufleet"},
    }
    [group] = document["spec"]["groups"]
    by_alert = {rule["alert"]: rule for rule in group["rules"]}
    assert {name: (r["expr"], r.get("for"), r["labels"]) for name, r in by_alert.items()} == {
        "GpuMemoryHigh": (
            "100 * DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > 90",
            "5m",
            {"severity": "warning"},
        ),
        "GpuUtilisationLow": (
            'avg_over_time(DCGM_FI_DEV_GPU_UTIL{pod!=""}[1h]) < 20',
            "2h",
            {"severity": "info"},
        ),
        "GpuTemperatureHigh": ("DCGM_FI_DEV_GPU_TEMP > 85", "5m", {"severity": "warning"}),
        "GpuXidError": ("DCGM_FI_DEV_XID_ERRORS > 0", None, {"severity": "critical"}),
        "WorkloadGpuIdle": (
            '(avg_over_time((avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""}))[5m:]) '
            "< 40) and on (namespace, pod) (time() - kube_pod_start_time) >= 3600",
            "1h",
            {"severity": "warning"},
        ),
    }
    for rule in group["rules"]:
        assert set(rule["annotations"]) == {"summary", "description"}
    device_summary = by_alert["GpuTemperatureHigh"]["annotations"]["summary"]
    for label in ("$labels.gpu", "$labels.Hostname", "$labels.pod"):
        assert label in device_summary
    assert "$labels.pod" in by_alert["WorkloadGpuIdle"]["annotations"]["summary"]
    assert "{{ $value" in by_alert["GpuUtilisationLow"]["annotations"]["description"]


def test_the_plain_rule_file_has_the_same_groups() -> None:
    rules = builtin_alert_rules()
    assert rule_file(rules)["groups"] == prometheus_rule(rules)["spec"]["groups"]


def rule(**changes: object) -> AlertRule:
    fields: dict[str, object] = {
        "name": "r",
        "metric": AlertMetric.GPU_UTIL,
        "comparison": Comparison.LT,
        "threshold": 20.0,
    }
    fields.update(changes)
    return AlertRule(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "expr"),
    [
        ({}, "DCGM_FI_DEV_GPU_UTIL < 20"),
        (
            {"aggregation": Aggregation.MAX, "window_s": 600.0, "comparison": Comparison.GE},
            "max_over_time(DCGM_FI_DEV_GPU_UTIL[10m]) >= 20",
        ),
        (
            {"aggregation": Aggregation.LAST, "window_s": 90.0},
            "last_over_time(DCGM_FI_DEV_GPU_UTIL[1m30s]) < 20",
        ),
        (
            {"aggregation": Aggregation.QUANTILE, "quantile": 0.9, "window_s": 3600.0},
            "quantile_over_time(0.9, DCGM_FI_DEV_GPU_UTIL[1h]) < 20",
        ),
        (
            {
                "metric": AlertMetric.FB_USED_PERCENT,
                "aggregation": Aggregation.MIN,
                "window_s": 300.0,
                "comparison": Comparison.GT,
                "threshold": 97.5,
            },
            "min_over_time((100 * DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + "
            "DCGM_FI_DEV_FB_FREE))[5m:]) > 97.5",
        ),
        (
            {"scope": AlertScope("ml", None, label_set({"modelName": 'a"b\\c'}))},
            'DCGM_FI_DEV_GPU_UTIL{modelName="a\\"b\\\\c", namespace="ml"} < 20',
        ),
        (
            {
                "metric": AlertMetric.WORKLOAD_GPU_UTIL,
                "scope": AlertScope(namespace="ml"),
                "min_running_s": 5400.0,
            },
            '(avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!="", namespace="ml"}) < 20) '
            'and on (namespace, pod) (time() - kube_pod_start_time{namespace="ml"}) >= 5400',
        ),
        (
            {"scope": AlertScope(allocated=True)},
            'DCGM_FI_DEV_GPU_UTIL{pod!=""} < 20',
        ),
        (
            {
                "metric": AlertMetric.FB_USED_PERCENT,
                "comparison": Comparison.GT,
                "threshold": 90,
                "scope": AlertScope(namespace="ml", allocated=True),
            },
            '100 * DCGM_FI_DEV_FB_USED{pod!="", namespace="ml"} / '
            '(DCGM_FI_DEV_FB_USED{pod!="", namespace="ml"} + '
            'DCGM_FI_DEV_FB_FREE{pod!="", namespace="ml"}) > 90',
        ),
    ],
    ids=[
        "instant",
        "max-over-window",
        "last-over-window",
        "quantile",
        "memory-percent-subquery",
        "scope-quoted",
        "workload-min-running",
        "allocated",
        "allocated-memory-percent",
    ],
)
def test_promql_of_a_rule(changes: dict[str, object], expr: str) -> None:
    assert alert_expression(rule(**changes)) == expr


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (5, "5s"), (300, "5m"), (5400, "1h30m"), (90061, "25h1m1s"), (1.5, "1s500ms")],
    ids=["zero", "seconds", "minutes", "hours-minutes", "past-a-day", "milliseconds"],
)
def test_promql_durations(seconds: float, text: str) -> None:
    assert promql_duration(seconds) == text


def test_a_duration_finer_than_a_millisecond_is_refused() -> None:
    with pytest.raises(ValueError, match="whole milliseconds"):
        promql_duration(0.0005)
