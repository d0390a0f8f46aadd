"""Alert state across restarts of ``gpufleet serve`` (issue 29 item 6): the alerts' states and
what the notifier sent are kept in the plane's store, so that a restarted server does not send
a firing alert again as new, sends the ``resolved`` of one that stopped after the restart, and
lets a ``for`` go on from the kept ``active_at``; and what leaves the simulated cluster carries
wall-clock times (its own clock counts simulated seconds from 0)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli.serve_observing import observe_settings, start_notifier
from gpufleet.model.alerts import AlertMetric, AlertRule, AlertState, Comparison, Severity
from gpufleet.service.alert_webhooks import AlertNotifier
from gpufleet.service.wall_time import PlaneWallTime
from gpufleet.telemetry.workload_notices import WorkloadOutcome
from gpufleet.testing.service import ServiceHarness, as_yaml, pod_doc
from gpufleet.testing.webhook_receiver import Received, WebhookReceiver
from tests.service.test_live_observing import harness_with, run_rounds

YAML = {"Content-Type": "application/yaml"}
NOTICES = {outcome.value for outcome in WorkloadOutcome}
#: Fires on the GPU a pod holds, at once; resolves when the pod ends (its series goes).
HELD = AlertRule(
    name="held-gpu",
    metric=AlertMetric.WORKLOAD_GPU_UTIL,
    comparison=Comparison.GE,
    threshold=0.0,
    severity=Severity.WARNING,
)
SLOW = AlertRule(
    name="held-gpu-slow",
    metric=AlertMetric.WORKLOAD_GPU_UTIL,
    comparison=Comparison.GE,
    threshold=0.0,
    for_s=600.0,
)


def submit(harness: ServiceHarness, runtime: str) -> None:
    doc = pod_doc("trainer", runtime=runtime, namespace="team-a")
    response = harness.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(doc), headers=YAML
    )
    assert response.status_code == 201, response.text


def notifier_of(harness: ServiceHarness, receiver: WebhookReceiver) -> AlertNotifier:
    settings = observe_settings(None, False, None, alert_webhook=receiver.url)
    assert settings.routing is not None
    return start_notifier(harness.plane, settings.routing, "http://gpufleet.example")


def restart(harness: ServiceHarness, notifier: AlertNotifier) -> None:
    notifier.stop()
    harness.plane.stop()
    harness.restart()


def sent(received: list[Received]) -> list[tuple[str, str]]:
    """The alerts sent (not the workload notices that go to the same webhook)."""
    return [
        (a["status"], a["startsAt"])
        for r in received
        for a in r.body["alerts"]
        if a["labels"]["alertname"] not in NOTICES
    ]


def year(rfc3339: str) -> int:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).year


@pytest.mark.parametrize(
    ("runtime", "after_restart_s", "expected"),
    [
        ("20m", 10 * 60, ["firing"]),
        ("20m", 30 * 60, ["firing", "resolved"]),
    ],
    ids=["still-firing-not-sent-again", "resolved-after-restart-is-sent"],
)
def test_a_restart_goes_on_with_the_alerts_and_what_was_sent(
    tmp_path: Path, runtime: str, after_restart_s: float, expected: list[str]
) -> None:
    harness = harness_with(tmp_path, HELD)
    with WebhookReceiver() as receiver:
        notifier = notifier_of(harness, receiver)
        submit(harness, runtime)
        run_rounds(harness, 5 * 60)
        assert receiver.wait_for(lambda got: len(sent(got)) >= 1)
        restart(harness, notifier)
        observatory = harness.plane.observatory
        assert observatory is not None
        assert [a.state for a in observatory.alerts()] == [AlertState.FIRING]
        notifier = notifier_of(harness, receiver)
        try:
            run_rounds(harness, after_restart_s)
            receiver.wait_for(lambda got: len(sent(got)) >= len(expected), timeout_s=2.0)
            assert notifier.sender.pending() == 0
        finally:
            notifier.stop()
    statuses = [status for status, _ in sent(receiver.received)]
    assert statuses == expected
    starts = {starts for _, starts in sent(receiver.received)}
    assert len(starts) == 1, "one alert, one startsAt, before and after the restart"
    assert year(starts.pop()) >= 2020, "wall-clock times, not the simulated clock's 1970"
    harness.close()


def test_a_for_goes_on_from_the_kept_active_at(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, SLOW)
    submit(harness, "10h")
    run_rounds(harness, 5 * 60)
    observatory = harness.plane.observatory
    assert observatory is not None
    (pending,) = observatory.alerts()
    assert pending.state is AlertState.PENDING
    harness.plane.stop()
    harness.restart()
    observatory = harness.plane.observatory
    assert observatory is not None
    (kept,) = observatory.alerts()
    assert (kept.labels, kept.state, kept.active_at) == (
        pending.labels,
        pending.state,
        pending.active_at,
    )
    run_rounds(harness, 6 * 60)  # to 660 s: 600 s after it became active at 60 s
    (firing,) = observatory.alerts()
    assert firing.state is AlertState.FIRING
    assert firing.active_at == pending.active_at
    assert firing.fired_at == pending.active_at + SLOW.for_s
    harness.close()


def test_a_changed_rule_starts_over(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, SLOW)
    submit(harness, "10h")
    run_rounds(harness, 5 * 60)
    harness.plane.stop()
    harness.options = harness.options.__class__(
        speed=harness.options.speed, alert_rules=(AlertRule(**{**_fields(SLOW), "for_s": 60.0}),)
    )
    harness.restart()
    observatory = harness.plane.observatory
    assert observatory is not None
    assert observatory.alerts() == []
    harness.close()


def _fields(rule: AlertRule) -> dict[str, Any]:
    return {name: getattr(rule, name) for name in rule.__dataclass_fields__}


@pytest.mark.parametrize(
    ("segments", "at", "expected"),
    [
        ([(0.0, 1_700_000_000.0, 60.0)], 600.0, 1_700_000_010.0),
        ([(0.0, 1_700_000_000.0, 60.0), (600.0, 1_800_000_000.0, 1.0)], 300.0, 1_700_000_005.0),
        ([(0.0, 1_700_000_000.0, 60.0), (600.0, 1_800_000_000.0, 1.0)], 610.0, 1_800_000_010.0),
    ],
    ids=["one-run-at-speed-60", "an-earlier-run-keeps-its-times", "the-run-after-a-restart"],
)
def test_the_wall_time_of_the_clusters_instants(
    segments: list[tuple[float, float, float]], at: float, expected: float
) -> None:
    assert PlaneWallTime(segments)(at) == pytest.approx(expected)


def test_the_simulated_planes_wall_time_is_now_and_kept(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, HELD)
    observatory = harness.plane.observatory
    assert observatory is not None
    assert year(datetime.now().isoformat()) == year(
        datetime.fromtimestamp(observatory.wall_time(0.0)).isoformat()
    )
    run_rounds(harness, 60 * 60)
    harness.plane.stop()
    before = observatory.wall_time(30.0)
    harness.restart()
    again = harness.plane.observatory
    assert again is not None
    assert again.wall_time(30.0) == before
    harness.close()
