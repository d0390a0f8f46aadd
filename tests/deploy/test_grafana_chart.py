"""The Grafana dashboard in the chart: files/grafana/ holds deploy/grafana/'s dashboard, and
the chart installs it as a ConfigMap labelled for Grafana's sidecar only when
``grafana.dashboard.enabled``. (Its queries are checked against a real Prometheus in
tests/backends/prometheus/test_grafana_dashboard.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.deploy.helm_render import Chart, manifest_objects, render
from tests.deploy.support import CHART, DEPLOY, SCHEDULER_NAMESPACE, object_key

RELEASE = "gpufleet"
DASHBOARD = DEPLOY / "grafana" / "gpufleet-gpus.json"
CHART_DASHBOARD = CHART / "files" / "grafana" / "gpufleet-gpus.json"


def _render(values: dict[str, Any], namespace: str = SCHEDULER_NAMESPACE) -> list[dict[str, Any]]:
    return manifest_objects(render(Chart.load(CHART), RELEASE, namespace, values))


def _dashboards(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        obj
        for obj in objects
        if obj["kind"] == "ConfigMap" and obj["metadata"]["labels"].get("grafana_dashboard")
    ]


def test_chart_copy_is_the_deploy_dashboard() -> None:
    assert CHART_DASHBOARD.read_text() == DASHBOARD.read_text(), (
        f"stale: cp {DASHBOARD} {CHART_DASHBOARD}"
    )


def test_chart_leaves_it_out_by_default() -> None:
    assert _dashboards(_render({})) == []


@pytest.mark.parametrize("namespace", [SCHEDULER_NAMESPACE, "monitoring"])
def test_chart_installs_the_dashboard_when_enabled(namespace: str) -> None:
    plain = {object_key(obj) for obj in _render({}, namespace)}
    objects = _render({"grafana": {"dashboard": {"enabled": True}}}, namespace)
    added = [obj for obj in objects if object_key(obj) not in plain]
    assert added == _dashboards(objects)
    [config_map] = added
    metadata = config_map["metadata"]
    assert metadata["name"] == "gpufleet-grafana-dashboard"
    assert metadata["namespace"] == namespace
    assert metadata["labels"]["grafana_dashboard"] == "1"
    assert metadata["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert "annotations" not in metadata
    assert list(config_map["data"]) == ["gpufleet-gpus.json"]
    assert json.loads(config_map["data"]["gpufleet-gpus.json"]) == json.loads(DASHBOARD.read_text())


def test_chart_puts_it_where_grafana_looks() -> None:
    values = {
        "grafana": {
            "dashboard": {
                "enabled": True,
                "name": "gpus",
                "namespace": "grafana",
                "annotations": {"grafana_folder": "GPUs"},
            }
        }
    }
    [config_map] = _dashboards(_render(values))
    assert config_map["metadata"]["name"] == "gpus"
    assert config_map["metadata"]["namespace"] == "grafana"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
