"""The built-in alert rules in deploy/: ``deploy/prometheus-rules.yaml`` and the chart's copy
are what ``gpufleet alerts export`` writes (so they cannot drift from the rules), and the chart
installs them as a PrometheusRule only when ``alerts.prometheusRule.enabled``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from tests.deploy.helm_render import Chart, manifest_objects, render
from tests.deploy.support import (
    CHART,
    CHART_PROMETHEUS_RULES,
    PROMETHEUS_RULES,
    SCHEDULER_NAMESPACE,
    object_key,
)

RELEASE = "gpufleet"
REGENERATE = {
    PROMETHEUS_RULES: ["--namespace", SCHEDULER_NAMESPACE],
    CHART_PROMETHEUS_RULES: ["--format", "rules"],
}


def exported(*args: str) -> str:
    result = CliRunner().invoke(app, ["alerts", "export", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("path", list(REGENERATE), ids=lambda p: p.name + "@" + p.parent.name)
def test_file_is_the_command_output(path: Path) -> None:
    args = REGENERATE[path]
    command = " ".join(["gpufleet alerts export", *args, "-o", str(path)])
    assert path.read_text() == exported(*args), f"stale: regenerate with `{command}`"


def _render(values: dict[str, Any], namespace: str = SCHEDULER_NAMESPACE) -> list[dict[str, Any]]:
    return manifest_objects(render(Chart.load(CHART), RELEASE, namespace, values))


def _prometheus_rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == "PrometheusRule"]


def test_chart_leaves_them_out_by_default() -> None:
    assert _prometheus_rules(_render({})) == []


@pytest.mark.parametrize("namespace", [SCHEDULER_NAMESPACE, "monitoring"])
def test_chart_installs_the_deploy_prometheus_rule_when_enabled(namespace: str) -> None:
    plain = {object_key(obj) for obj in _render({}, namespace)}
    objects = _render({"alerts": {"prometheusRule": {"enabled": True}}}, namespace)
    added = [obj for obj in objects if object_key(obj) not in plain]
    assert added == _prometheus_rules(objects)
    [rule] = added
    shipped = yaml.safe_load(PROMETHEUS_RULES.read_text())
    assert rule["apiVersion"] == shipped["apiVersion"]
    assert rule["metadata"]["name"] == shipped["metadata"]["name"]
    assert rule["metadata"]["namespace"] == namespace
    assert rule["spec"] == shipped["spec"]
    labels = rule["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "gpufleet"
    assert labels["app.kubernetes.io/managed-by"] == "Helm"
    assert labels["app.kubernetes.io/component"] == "alerts"


def test_chart_adds_the_labels_for_the_operators_rule_selector() -> None:
    values = {
        "alerts": {
            "prometheusRule": {
                "enabled": True,
                "name": "gpu-rules",
                "labels": {"release": "kube-prometheus-stack"},
            }
        }
    }
    [rule] = _prometheus_rules(_render(values))
    assert rule["metadata"]["name"] == "gpu-rules"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
