"""``gpufleet alerts`` lists a running control plane's alerts: a table, wide, JSON or YAML."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from gpufleet.api.schemas import AlertStateName, AlertView
from gpufleet.cli.remote import use_http
from gpufleet.cli.remote_render import alert_order, alert_subject
from gpufleet.testing.service import ServiceHarness
from tests.cli.test_remote import as_
from tests.service.test_live_observing import (
    HOT,
    IDLE_FAST,
    harness_with,
    run_rounds,
    submit,
)


@pytest.fixture
def observed(env: Path, tmp_path: Path) -> Iterator[ServiceHarness]:
    harness = harness_with(tmp_path, IDLE_FAST, HOT)
    submit(harness, "team-a", "notebook", "idle")
    run_rounds(harness, 30 * 60)
    client = TestClient(harness.app)
    with use_http(lambda _: client):
        yield harness
    client.close()
    harness.close()


def test_the_table_names_state_alert_and_subject(observed: ServiceHarness) -> None:
    result = as_(observed, "admin", "alerts")
    assert result.code == 0, result.err
    (row,) = result.rows("WorkloadIdleFast")
    assert row.split()[:4] == ["firing", "warning", "WorkloadIdleFast", "team-a/notebook"]
    in_use = result.rows("AnyGpuInUse")
    assert len(in_use) == 2
    assert len({row.split("AnyGpuInUse")[1].split("(")[0] for row in in_use}) == 2, (
        "each GPU is its own subject"
    )


def test_wide_shows_the_condition(observed: ServiceHarness) -> None:
    result = as_(observed, "admin", "alerts", "-o", "wide", "--state", "firing")
    assert result.code == 0, result.err
    assert "avg(gpufleet_workload_gpu_util[5m]) < 40" in result.out
    assert "team-a/Pod/notebook" in result.out


@pytest.mark.parametrize("fmt", ["json", "yaml"], ids=["json", "yaml"])
def test_machine_output_is_the_api_object(observed: ServiceHarness, fmt: str) -> None:
    result = as_(observed, "team-a", "alerts", "-o", fmt)
    assert result.code == 0, result.err
    data = json.loads(result.out) if fmt == "json" else yaml.safe_load(result.out)
    assert data["rules"] == 2
    assert {a["rule"] for a in data["alerts"]} == {"workload-idle-fast", "any-gpu-in-use"}


def test_a_bad_state_is_bad_input(observed: ServiceHarness) -> None:
    result = as_(observed, "admin", "alerts", "--state", "burning")
    assert result.code == 2
    assert "burning" in result.err


def test_no_alerts_says_so(observed: ServiceHarness) -> None:
    result = as_(observed, "team-b", "alerts", "--state", "pending")
    assert result.code == 0, result.err
    assert "No alerts (2 rules evaluated)." in result.out


def view(state: str, severity: str, name: str, **labels: str) -> AlertView:
    return AlertView(
        rule=name.lower(),
        alertname=name,
        state=AlertStateName(state),
        severity=severity,
        summary="",
        condition="",
        value=0.0,
        labels=labels,
        active_at=0.0,
    )


@pytest.mark.parametrize(
    ("labels", "subject"),
    [
        ({"Hostname": "n1", "gpu": "3"}, "n1 gpu 3"),
        ({"Hostname": "n1", "gpu": "3", "namespace": "ml", "pod": "nb-0"}, "n1 gpu 3 (ml/nb-0)"),
        ({"namespace": "ml", "pod": "nb-0"}, "ml/nb-0"),
        ({"cluster": "c1"}, "cluster=c1"),
        ({}, "-"),
    ],
    ids=["gpu", "gpu-held-by-a-pod", "pod", "other-labels", "none"],
)
def test_alert_subject(labels: dict[str, str], subject: str) -> None:
    assert alert_subject(view("firing", "info", "A", **labels)) == subject


def test_alerts_are_listed_firing_first_and_most_severe_first() -> None:
    alerts = [
        view("resolved", "critical", "Xid"),
        view("pending", "critical", "Hot"),
        view("firing", "info", "Idle"),
        view("firing", "critical", "Xid"),
        view("firing", "warning", "Memory"),
    ]
    ordered = [(a.state.value, a.alertname) for a in sorted(alerts, key=alert_order)]
    assert ordered == [
        ("firing", "Xid"),
        ("firing", "Memory"),
        ("firing", "Idle"),
        ("pending", "Hot"),
        ("resolved", "Xid"),
    ]
