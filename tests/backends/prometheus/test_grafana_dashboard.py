"""deploy/grafana/gpufleet-gpus.json: a Grafana dashboard model on a ``${datasource}``
Prometheus variable whose every query is valid PromQL, checked against a real Prometheus
scraping the node agent: each panel target (Grafana's variables substituted) must succeed, and
return series where every metric it reads is served; each variable's ``label_values`` too."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.backends.prometheus import PrometheusSeries
from gpufleet.metrics import families
from gpufleet.testing.prometheus import FakeGpuExporter, PrometheusProcess

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "gpufleet-gpus.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: What Grafana puts for its variables: built-ins for a 1-hour range at 1-second steps, and
#: the dashboard's own at their defaults ("All" is ``.*``).
VARIABLES = {
    "__rate_interval": "1m",
    "__interval": "1s",
    "__interval_ms": "1000",
    "__range": "1h",
    "__range_s": "3600",
    "Hostname": ".*",
    "namespace": ".*",
    "team_label": "label_team",
}
#: The names the dashboard may read: gpufleet's families (dcgm-exporter's, the control plane's
#: cost and idle counters among them) and kube-state-metrics' pod series.
KNOWN_METRICS = {family.name for family in families.ALL} | {
    "kube_pod_labels",
    "kube_pod_owner",
    "kube_pod_start_time",
}
METRIC_NAME = re.compile(r"\b(?:DCGM_FI_\w+|gpufleet_\w+|kube_\w+)\b")
LABEL_VALUES = re.compile(r"label_values\((?P<selector>.+),\s*(?P<label>\w+)\)")


def load() -> dict[str, Any]:
    model: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return model


def panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    found = []
    for panel in model["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def targets() -> list[tuple[str, str]]:
    """(panel title / refId, expr) of every target."""
    return [
        (f"{panel['title']}/{target['refId']}", target["expr"])
        for panel in panels(load())
        for target in panel.get("targets", [])
    ]


def substitute(expr: str, variables: dict[str, str] | None = None) -> str:
    """``expr`` with Grafana's variables (``$name``, ``${name}``, ``[[name]]``) replaced by
    ``variables`` (default :data:`VARIABLES`)."""
    given = VARIABLES if variables is None else variables

    def value(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        assert name in given, f"unknown variable {name!r} in {expr!r}"
        return given[name]

    written = re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", value, expr)
    assert "$" not in written, written
    return written


def test_model_shape() -> None:
    model = load()
    assert model["uid"] == "gpufleet-gpus"
    assert model["title"]
    variables = {variable["name"]: variable for variable in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    every = panels(model)
    ids = [panel["id"] for panel in every]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in every:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]


@pytest.mark.parametrize(
    "topic",
    [
        "by namespace",
        "by team",
        "by workload type",
        "memory",
        "temperature",
        "power",
        "allocated vs used",
        "idle gpu-hours",
        "cost",
    ],
)
def test_every_topic_has_a_panel(topic: str) -> None:
    titles = [panel["title"].lower() for panel in panels(load())]
    assert any(topic in title for title in titles), titles


@pytest.fixture(scope="module")
def served_metrics(gpu_exporter: FakeGpuExporter) -> set[str]:
    return {
        sample.name
        for family in text_string_to_metric_families(gpu_exporter.text())
        for sample in family.samples
    }


@pytest.mark.parametrize(("where", "expr"), targets(), ids=[where for where, _ in targets()])
def test_every_query_runs_on_prometheus(
    prometheus: PrometheusProcess, served_metrics: set[str], where: str, expr: str
) -> None:
    result = prometheus.query(substitute(expr))  # AssertionError unless status success
    read = set(METRIC_NAME.findall(expr))
    assert read, f"{where} reads no metric: {expr}"
    assert read <= KNOWN_METRICS, f"{where} reads unknown {sorted(read - KNOWN_METRICS)}"
    if read <= served_metrics:
        assert result, f"{where}: no series, though the agent serves {sorted(read)}: {expr}"


def variable_queries() -> list[tuple[str, str, str]]:
    found = []
    for variable in load()["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES.fullmatch(variable["definition"])
            assert match, f"variable {variable['name']}: {variable['definition']}"
            assert variable["query"]["query"] == variable["definition"]
            found.append((variable["name"], match["selector"], match["label"]))
    return found


@pytest.fixture(scope="module")
def reader(prometheus: PrometheusProcess) -> Iterator[PrometheusSeries]:
    with PrometheusSeries(prometheus.url) as series:
        yield series


@pytest.mark.parametrize(("name", "selector", "label"), variable_queries(), ids=lambda v: str(v))
def test_every_variable_has_values(
    reader: PrometheusSeries, name: str, selector: str, label: str
) -> None:
    assert reader.label_values(selector, label), f"variable {name}: no {label} on {selector}"
