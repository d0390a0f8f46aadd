"""Alert notifications POSTed to a real HTTP receiver on loopback: payloads as the dispatcher
makes them, retries with backoff, failures counted and logged, a plane never blocked."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpufleet.io.fleet.alert_routing import AlertRouting, webhook_routing
from gpufleet.model.alerts import AlertMetric, AlertRule, Comparison
from gpufleet.service.alert_webhooks import AlertNotifier, WebhookSender
from gpufleet.service.alertmanager_push import AlertmanagerError, push_alerts
from gpufleet.service.observatory import ObservedRound
from gpufleet.telemetry.alert_dispatch import Dispatcher, Route, rule_annotations
from gpufleet.testing.alert_builders import firing_alert, resolved
from gpufleet.testing.waiting import wait_until
from gpufleet.testing.webhook_receiver import WebhookReceiver

T0 = 1_700_000_000.0
HOT = firing_alert("gpu-hot", T0, gpu="0", Hostname="n1", modelName="H100")
RULE = AlertRule("gpu-hot", AlertMetric.GPU_TEMP, Comparison.GT, 85.0, summary="hot")


def fast_sender(**options: float) -> WebhookSender:
    return WebhookSender(backoff_s=0.01, timeout_s=2.0, **options)  # type: ignore[arg-type]


def test_payloads_reach_the_receiver_as_the_dispatcher_makes_them() -> None:
    with WebhookReceiver() as receiver:
        routing = webhook_routing(receiver.url + "/hook")
        notifier = AlertNotifier(routing, lambda: T0, rules=lambda: [RULE], sender=fast_sender())
        notifier.start()
        try:
            for offset, alerts in (
                (0, [HOT]),
                (15, [HOT]),
                (30, [HOT]),
                (45, [resolved(HOT, T0 + 45)]),
            ):
                notifier.on_round(ObservedRound(T0 + offset, [], alerts))
            assert receiver.wait_for(lambda got: len(got) == 1)
        finally:
            notifier.stop()
    (got,) = receiver.received
    assert (got.path, got.content_type) == ("/hook", "application/json")
    reference = Dispatcher(routing.routes, annotate=rule_annotations([RULE]))
    reference.round([HOT], T0)
    (expected,) = reference.round([HOT], T0 + 30)
    assert got.body == expected.payload
    assert got.body["alerts"][0]["annotations"]["summary"] == "GPU 0 (H100) on n1: hot"
    assert notifier.metrics.delivered["webhook"] == 1


def test_5xx_and_refused_connections_are_retried_with_backoff() -> None:
    with WebhookReceiver(statuses=[503, 500]) as receiver:
        sender = fast_sender(attempts=3)
        sender.start()
        sender.submit("ops", receiver.url, {"n": 1})
        assert receiver.wait_for(lambda got: len(got) == 1)
        sender.stop()
    assert receiver.attempts == 3
    assert sender.metrics.delivered == {"ops": 1}
    assert not sender.metrics.failed


def test_4xx_is_not_retried_and_is_counted(caplog: pytest.LogCaptureFixture) -> None:
    with WebhookReceiver(statuses=[400, 400]) as receiver:
        sender = fast_sender(attempts=3)
        sender.start()
        sender.submit("ops", receiver.url, {"n": 1})
        wait_until(lambda: sender.metrics.failed)
        sender.stop()
    assert receiver.attempts == 1
    assert sender.metrics.failed == {("ops", "http_4xx"): 1}
    assert "HTTP 400" in caplog.text


def test_an_unreachable_receiver_fails_after_the_attempts(caplog: pytest.LogCaptureFixture) -> None:
    with WebhookReceiver() as receiver:
        closed = receiver.url
    sender = fast_sender(attempts=2)
    sender.start()
    with caplog.at_level(logging.WARNING):
        sender.submit("ops", closed, {"n": 1})
        wait_until(lambda: sender.metrics.failed)
    sender.stop()
    assert sender.metrics.failed == {("ops", "connection"): 1}
    assert "not delivered" in caplog.text


def test_a_full_queue_drops_and_never_blocks() -> None:
    release = threading.Event()

    def stuck(url: str, body: bytes, timeout: float) -> int:
        release.wait(5)
        return 200

    sender = WebhookSender(queue_size=1, post=stuck)
    sender.start()
    try:
        start = time.monotonic()
        results = [sender.submit("ops", "http://x", {"n": n}) for n in range(4)]
        assert time.monotonic() - start < 1.0
        assert results[-1] is False
        assert sender.metrics.failed[("ops", "queue_full")] >= 1
    finally:
        release.set()
        sender.stop()


def test_the_counters_are_exposed_under_gpufleets_names() -> None:
    sender = WebhookSender()
    sender.metrics.count_delivered("ops")
    sender.metrics.count_failed("ops", "http_5xx")
    registry = CollectorRegistry()
    registry.register(sender.metrics)
    text = generate_latest(registry).decode()
    assert 'gpufleet_alert_notifications_total{receiver="ops"} 1.0' in text
    assert 'gpufleet_alert_notifications_failed_total{reason="http_5xx",receiver="ops"} 1.0' in text


def test_tick_flushes_between_rounds_by_the_plane_clock() -> None:
    clock = [T0]
    routing = AlertRouting((Route("ops", group_wait_s=10, target="http://x"),))
    sent: list[str] = []

    class Recording(WebhookSender):
        def submit(self, receiver: str, url: str, payload: object) -> bool:
            sent.append(receiver)
            return True

    notifier = AlertNotifier(routing, lambda: clock[0], sender=Recording())
    notifier.on_round(ObservedRound(T0, [], [HOT]))
    notifier.tick()
    assert sent == []
    clock[0] = T0 + 10
    notifier.tick()
    assert sent == ["ops"]


def test_push_alerts_posts_what_prometheus_posts() -> None:
    with WebhookReceiver(statuses=[200, 500]) as receiver:
        assert push_alerts(receiver.url, [HOT], T0 + 10, rules=[RULE]) == 1
        (got,) = receiver.received
        assert got.path == "/api/v2/alerts"
        assert [a["labels"]["alertname"] for a in got.body] == ["gpu-hot"]
        with pytest.raises(AlertmanagerError, match="HTTP 500"):
            push_alerts(receiver.url, [HOT], T0 + 10)
    assert push_alerts("http://127.0.0.1:9", [], T0) == 0
