"""GPUAlertRule objects: read field by field, bad input naming file, document, rule and field,
and the built-in rules holding the seeds' thresholds."""

from __future__ import annotations

import pytest

from gpufleet.io.errors import InputError
from gpufleet.io.fleet.alert_rules import builtin_alert_rules, read_alert_rules
from gpufleet.model.alerts import (
    Aggregation,
    AlertMetric,
    AlertRule,
    AlertScope,
    Comparison,
    Severity,
)
from tests.io.conftest import WriteFile

HEADER = """
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: NAME}
spec:
"""


def rule_text(spec: str, name: str = "r") -> str:
    body = "".join(f"  {line}\n" for line in spec.strip().splitlines())
    return HEADER.replace("NAME", name).lstrip("\n") + body


def test_a_rule_reads_every_field(write_file: WriteFile) -> None:
    path = write_file(
        "rules.yaml",
        rule_text(
            """
            metric: DCGM_FI_DEV_POWER_USAGE
            aggregation: quantile
            quantile: 0.95
            window: 1h30m
            comparison: ">="
            threshold: 650.5
            for: 10m
            severity: critical
            scope: {namespace: ml, labels: {modelName: NVIDIA H100 80GB HBM3}}
            summary: power draw high
            """.replace("            ", ""),
            name="power-high",
        ),
    )
    assert read_alert_rules(path) == [
        AlertRule(
            name="power-high",
            metric=AlertMetric.POWER_USAGE,
            comparison=Comparison.GE,
            threshold=650.5,
            aggregation=Aggregation.QUANTILE,
            window_s=5400.0,
            for_s=600.0,
            severity=Severity.CRITICAL,
            scope=AlertScope("ml", None, (("modelName", "NVIDIA H100 80GB HBM3"),)),
            quantile=0.95,
            summary="power draw high",
        )
    ]


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ("DCGM_FI_DEV_GPU_TEMP", AlertMetric.GPU_TEMP),
        ("GPU_TEMP", AlertMetric.GPU_TEMP),
        ("xid_errors", AlertMetric.XID_ERRORS),
        ("gpufleet_workload_gpu_util", AlertMetric.WORKLOAD_GPU_UTIL),
    ],
    ids=["dcgm-name", "short-name", "lower-case", "gpufleet-name"],
)
def test_metric_spellings(write_file: WriteFile, metric: str, expected: AlertMetric) -> None:
    path = write_file("r.yaml", rule_text(f"metric: {metric}\ncomparison: gt\nthreshold: 1"))
    assert read_alert_rules(path)[0].metric is expected


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            "metric: DCGM_FI_DEV_SM_CLOCK\ncomparison: '>'\nthreshold: 1",
            "spec.metric",
            "unknown metric 'DCGM_FI_DEV_SM_CLOCK' (known: DCGM_FI_DEV_GPU_UTIL, "
            "DCGM_FI_DEV_FB_USED, gpufleet_gpu_memory_used_percent, DCGM_FI_DEV_GPU_TEMP, "
            "DCGM_FI_DEV_POWER_USAGE, DCGM_FI_DEV_XID_ERRORS, gpufleet_workload_gpu_util)",
        ),
        (
            "metric: GPU_UTIL\ncomparison: '>'\nthreshold: 1\nfor: 5 minutes",
            "spec.for",
            "expected seconds or a duration such as 90s, 5m or 1h30m, got '5 minutes'",
        ),
        (
            "metric: GPU_UTIL\naggregation: avg\nwindow: -1h\ncomparison: '<'\nthreshold: 1",
            "spec.window",
            "not negative",
        ),
        (
            "metric: GPU_UTIL\ncomparison: '=>'\nthreshold: 1",
            "spec.comparison",
            "expected one of > >= < <= == != (or gt, ge, lt, le, eq, ne), got '=>'",
        ),
        ("metric: GPU_UTIL\ncomparison: '>'", "spec.threshold", "required, but missing"),
        (
            "metric: GPU_UTIL\ncomparison: '>'\nthreshold: 1\nseverity: page",
            "spec.severity",
            "'info', 'warning' or 'critical'",
        ),
        (
            "metric: GPU_UTIL\ncomparison: '>'\nthreshold: 1\nwindw: 1h",
            "spec.windw",
            "did you mean 'window'?",
        ),
        (
            "metric: GPU_UTIL\naggregation: avg\ncomparison: '<'\nthreshold: 1",
            "spec",
            "aggregation avg needs a window longer than 0",
        ),
        (
            "metric: GPU_UTIL\naggregation: quantile\nwindow: 1h\ncomparison: '<'\nthreshold: 1",
            "spec",
            "a quantile is given with aggregation quantile, and only then",
        ),
        (
            "metric: GPU_TEMP\ncomparison: '>'\nthreshold: 1\nminRunning: 1h",
            "spec",
            "minRunning applies to workload metrics (gpufleet_workload_gpu_util), "
            "not DCGM_FI_DEV_GPU_TEMP",
        ),
        (
            "metric: GPU_UTIL\ncomparison: '>'\nthreshold: 1\nscope: {labels: {team-a: x}}",
            "spec.scope.labels",
            "'team-a' is not a Prometheus label name",
        ),
        (
            "metric: GPU_TEMP\ncomparison: '>'\nthreshold: 1\n"
            "summary: 'GPU {{ $labels.gpu | toUpper }} is hot'",
            "spec.summary",
            "summary may use {{ $labels.NAME }} and {{ $value }} only (expanded by gpufleet and "
            "by Prometheus alike), not '{{ $labels.gpu | toUpper }} is hot'",
        ),
    ],
    ids=[
        "unknown-metric",
        "bad-duration",
        "negative-window",
        "bad-comparison",
        "no-threshold",
        "bad-severity",
        "unknown-field",
        "avg-without-window",
        "quantile-without-q",
        "min-running-on-device-metric",
        "bad-label-name",
        "summary-template-beyond-references",
    ],
)
def test_bad_rules_name_file_document_rule_and_field(
    write_file: WriteFile, spec: str, field: str, message: str
) -> None:
    ok = rule_text("metric: GPU_UTIL\ncomparison: '>'\nthreshold: 1", name="fine")
    path = write_file("rules.yaml", ok + "---\n" + rule_text(spec, name="broken"))
    with pytest.raises(InputError) as caught:
        read_alert_rules(path)
    error = caught.value
    assert error.source == str(path)
    assert error.location == "document 2 (line 9), GPUAlertRule broken"
    assert error.field == field
    assert message in error.reason


def test_another_kind_is_refused(write_file: WriteFile) -> None:
    path = write_file("rules.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(InputError, match=r"expected kind GPUAlertRule .* got 'ConfigMap'"):
        read_alert_rules(path)


def test_two_rules_of_one_name_are_refused(write_file: WriteFile) -> None:
    one = rule_text("metric: GPU_UTIL\ncomparison: '>'\nthreshold: 1", name="same")
    write_file("rules/a.yaml", one)
    path = write_file("rules/b.yaml", one)
    with pytest.raises(InputError, match=r"a second GPUAlertRule named 'same'; the first is at"):
        read_alert_rules(path.parent)


def test_the_built_in_rules_hold_the_seeds_thresholds() -> None:
    rules = {rule.name: rule for rule in builtin_alert_rules()}
    summary = {
        name: (
            r.metric,
            r.aggregation,
            r.window_s,
            r.comparison,
            r.threshold,
            r.for_s,
            r.min_running_s,
        )
        for name, r in rules.items()
    }
    last, avg, gt, lt = Aggregation.LAST, Aggregation.AVG, Comparison.GT, Comparison.LT
    assert summary == {
        "gpu-memory-high": (AlertMetric.FB_USED_PERCENT, last, 0.0, gt, 90.0, 300.0, 0.0),
        "gpu-utilisation-low": (AlertMetric.GPU_UTIL, avg, 3600.0, lt, 20.0, 7200.0, 0.0),
        "gpu-temperature-high": (AlertMetric.GPU_TEMP, last, 0.0, gt, 85.0, 300.0, 0.0),
        "gpu-xid-error": (AlertMetric.XID_ERRORS, last, 0.0, gt, 0.0, 0.0, 0.0),
        "workload-gpu-idle": (
            AlertMetric.WORKLOAD_GPU_UTIL, avg, 300.0, lt, 40.0, 3600.0, 3600.0
        ),
    }  # fmt: skip
    assert rules["gpu-xid-error"].severity is Severity.CRITICAL
