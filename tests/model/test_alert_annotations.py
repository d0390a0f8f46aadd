"""An alert's annotations: the Go template exported for Prometheus and the text gpufleet renders
come from the same parts; a summary's references are found as Go's lexer finds actions; values
print as Go prints them. That Prometheus renders the templates as gpufleet renders the text is
``tests/io/test_prometheus_rules_promtool.py``'s, with the real promtool."""

from __future__ import annotations

import math

import pytest

from gpufleet.model.alert_annotations import (
    LabelRef,
    Text,
    ValueRef,
    annotation_templates,
    check_summary,
    go_fixed1,
    go_float,
    render_annotations,
    summary_parts,
)
from gpufleet.model.alerts import Aggregation, AlertMetric, AlertRule, Comparison

GPU0 = {"gpu": "0", "modelName": "H100", "Hostname": "n1", "namespace": "ml", "pod": "nb"}


def test_a_windowed_rule_names_its_aggregation_in_both() -> None:
    rule = AlertRule(
        "util-low", AlertMetric.GPU_UTIL, Comparison.LT, 20, Aggregation.AVG, window_s=3600
    )
    assert annotation_templates(rule) == {
        "summary": "GPU {{ $labels.gpu }} ({{ $labels.modelName }}) on {{ $labels.Hostname }}"
        "{{ if $labels.pod }}, held by pod {{ $labels.namespace }}/{{ $labels.pod }}{{ end }}: "
        "DCGM_FI_DEV_GPU_UTIL < 20",
        "description": "gpufleet rule util-low: avg of DCGM_FI_DEV_GPU_UTIL over 1h is "
        '{{ $value | printf "%.1f" }}% (< 20%)',
    }
    assert render_annotations(rule, GPU0, 4.26) == {
        "summary": "GPU 0 (H100) on n1, held by pod ml/nb: DCGM_FI_DEV_GPU_UTIL < 20",
        "description": "gpufleet rule util-low: avg of DCGM_FI_DEV_GPU_UTIL over 1h is 4.3% "
        "(< 20%)",
    }


def test_a_summary_references_labels_and_the_value() -> None:
    rule = AlertRule(
        "hot",
        AlertMetric.GPU_TEMP,
        Comparison.GT,
        85,
        summary="GPU {{$labels.gpu}} at {{ $value }} C{{ $labels.absent }}",
    )
    assert annotation_templates(rule)["summary"].endswith(
        ": GPU {{ $labels.gpu }} at {{ $value }} C{{ $labels.absent }}"
    )
    unheld = {"gpu": "3", "Hostname": "n2"}
    assert render_annotations(rule, unheld, 91.5)["summary"] == "GPU 3 () on n2: GPU 3 at 91.5 C"


def test_a_workload_rule_names_the_pod() -> None:
    rule = AlertRule("idle", AlertMetric.WORKLOAD_GPU_UTIL, Comparison.LT, 40, summary="idle")
    labels = {"namespace": "ml", "pod": "nb"}
    assert annotation_templates(rule)["summary"] == (
        "pod {{ $labels.namespace }}/{{ $labels.pod }}: idle"
    )
    assert render_annotations(rule, labels, 3.0)["summary"] == "pod ml/nb: idle"


def test_text_that_looks_like_an_action_is_written_as_text() -> None:
    """A rule made in code is not checked: its other ``{{`` is a string action in the
    template, so that Prometheus prints it as gpufleet does (and still loads the file)."""
    rule = AlertRule("odd", AlertMetric.GPU_TEMP, Comparison.GT, 85, summary="a {{ b }}")
    assert annotation_templates(rule)["summary"].endswith(': a {{ "{{" }} b }}')
    assert render_annotations(rule, GPU0, 90)["summary"].endswith(": a {{ b }}")


@pytest.mark.parametrize(
    "summary",
    ["plain", "{{ $labels.gpu }}", "{{$value}}", "{{\t$labels.Hostname }}", "}} and {", ""],
)
def test_summaries_both_engines_expand(summary: str) -> None:
    check_summary(summary)


@pytest.mark.parametrize(
    "summary",
    [
        "{{ $labels.gpu | toUpper }}",
        "{{ .Labels.gpu }}",
        "{{- $value }}",
        "{{ $value -}}",
        "{{{ $value }}",  # Go's lexer starts the action at the first {{
        "{{ $labels.gpu }} then {{ humanize $value }}",
        "unclosed {{ $value",
    ],
)
def test_other_actions_are_refused(summary: str) -> None:
    with pytest.raises(ValueError, match=r"summary may use \{\{ \$labels.NAME \}\}"):
        check_summary(summary)


def test_summary_parts() -> None:
    assert summary_parts("GPU {{ $labels.gpu }}: {{ $value }}!") == (
        Text("GPU "),
        LabelRef("gpu"),
        Text(": "),
        ValueRef(),
        Text("!"),
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (88.0, "88"),
        (85.5, "85.5"),
        (0.1, "0.1"),
        (100000.0, "100000"),
        (999999.0, "999999"),
        (1000000.0, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1.5e-7, "1.5e-07"),
        (1e100, "1e+100"),
        (-42.25, "-42.25"),
        (0.0, "0"),
        (-0.0, "-0"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ],
)
def test_values_print_as_go_prints_a_float64(value: float, text: str) -> None:
    assert go_float(value) == text


@pytest.mark.parametrize(
    ("value", "text"), [(88.0, "88.0"), (4.25, "4.2"), (-0.04, "-0.0"), (math.inf, "+Inf")]
)
def test_one_decimal_as_go_printf(value: float, text: str) -> None:
    assert go_fixed1(value) == text
