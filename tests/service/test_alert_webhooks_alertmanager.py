"""gpufleet's webhook payloads are Alertmanager's: the same alerts pushed to a real
Alertmanager (Debian's prometheus-alertmanager, on loopback, with a webhook receiver on
loopback) and fed to gpufleet's dispatcher give payloads of the same structure, group key,
labels, annotations, fingerprints, times and status, firing then resolved.

What legitimately differs: ``externalURL`` (Alertmanager's own address; gpufleet's is its API)
and the moment of each flush (Alertmanager's wall-clock timers against our rounds), so the
dispatcher is fed at the times Alertmanager flushed. Small group_wait and group_interval keep
it to a few seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gpufleet.model.alerts import Alert, AlertMetric, AlertRule, Comparison
from gpufleet.service.alertmanager_push import push_alerts
from gpufleet.telemetry.alert_dispatch import Dispatcher, Route, rule_annotations
from gpufleet.testing.alert_builders import firing_alert, resolved
from gpufleet.testing.alertmanager import AlertmanagerProcess, alertmanager_binary
from gpufleet.testing.webhook_receiver import Received, WebhookReceiver

pytestmark = pytest.mark.skipif(
    alertmanager_binary() is None,
    reason="no Alertmanager (`make test` installs Debian's prometheus-alertmanager where it can)",
)
RULE = AlertRule("gpu-hot", AlertMetric.GPU_TEMP, Comparison.GT, 85.0, summary="hot")
ROUTE = Route("hook", group_wait_s=1, group_interval_s=2, repeat_interval_s=3600)
EXTERNAL_URL = "http://gpufleet.test:8080"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as running:
        yield running


@pytest.fixture
def alertmanager(tmp_path: Path, receiver: WebhookReceiver) -> Iterator[str]:
    with AlertmanagerProcess(
        tmp_path,
        receiver.url + "/hook",
        receiver=ROUTE.receiver,
        group_by=("alertname",),
        group_wait_s=ROUTE.group_wait_s,
        group_interval_s=ROUTE.group_interval_s,
        repeat_interval_s=ROUTE.repeat_interval_s,
    ) as running:
        yield running.url


def comparable(payload: dict[str, Any]) -> dict[str, Any]:
    """A payload without what legitimately differs, times as instants."""
    kept = {k: v for k, v in payload.items() if k != "externalURL"}
    kept["alerts"] = [
        {**a, "startsAt": instant(a["startsAt"]), "endsAt": instant(a["endsAt"])}
        for a in payload["alerts"]
    ]
    return kept


def instant(text: str) -> datetime | None:
    if text.startswith("0001-01-01"):
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_alertmanager_delivers_what_our_dispatcher_makes(
    alertmanager: str, receiver: WebhookReceiver
) -> None:
    start = round(time.time(), 3)
    hot0 = firing_alert("gpu-hot", start, value=91, gpu="0", Hostname="n1", modelName="H100")
    hot1 = firing_alert("gpu-hot", start, value=88, gpu="1", Hostname="n1", modelName="H100")
    ours = Dispatcher([ROUTE], annotate=rule_annotations([RULE]), external_url=EXTERNAL_URL)

    def push(alerts: list[Alert], now: float) -> None:
        push_alerts(alertmanager, alerts, now, rules=[RULE], external_url=EXTERNAL_URL)

    push([hot0, hot1], start)
    ours.round([hot0, hot1], start)
    assert receiver.wait_for(lambda got: len(got) >= 1, timeout_s=8)
    first = receiver.received[0]
    (expected,) = ours.round([hot0, hot1], start + ROUTE.group_wait_s)
    assert_same(first, expected.payload)
    assert first.body["externalURL"] != EXTERNAL_URL  # Alertmanager's own address

    gone = resolved(hot1, round(time.time(), 3))
    push([hot0, gone], gone.resolved_at or 0.0)
    ours.round([hot0, gone], gone.resolved_at or 0.0)
    assert receiver.wait_for(lambda got: len(got) >= 2, timeout_s=8)
    second = receiver.received[1]
    (expected,) = ours.round([hot0, gone], start + ROUTE.group_wait_s + ROUTE.group_interval_s + 60)
    assert_same(second, expected.payload)
    assert [a["status"] for a in second.body["alerts"]] == ["firing", "resolved"]


def assert_same(got: Received, ours: dict[str, Any]) -> None:
    assert got.path == "/hook"
    assert sorted(got.body) == sorted(ours)
    theirs = comparable(got.body)
    mine = comparable(ours)
    assert json.dumps(theirs, default=str, sort_keys=True, indent=1) == json.dumps(
        mine, default=str, sort_keys=True, indent=1
    )
