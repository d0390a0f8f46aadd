"""Alert notifications leave the control plane: Alertmanager webhook payloads POSTed to the
receivers of a routing configuration, from a thread of their own.

Owns :class:`AlertNotifier` (an observatory subscriber: each round's alerts go through a
:class:`~gpufleet.telemetry.alert_dispatch.Dispatcher` and the payloads due are queued),
:class:`WebhookSender` (the thread that POSTs them: JSON, a timeout, bounded retries with
exponential backoff for connection errors and 5xx answers as Alertmanager retries them, none
for 4xx; a full queue drops, never blocks the plane) and :class:`NotificationMetrics` (the
:data:`~gpufleet.metrics.families.ALERTING` counters, a prometheus-client collector).
Deciding what is due is ``telemetry/alert_dispatch``; reading the routing file is
``io/alert_routing``; wiring ``serve --alert-config/--alert-webhook`` is the plane's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from gpufleet.io.fleet.alert_routing import AlertRouting
from gpufleet.metrics import families
from gpufleet.model.alerts import Alert, AlertRule
from gpufleet.service.observatory import ObservedRound
from gpufleet.telemetry.alert_dispatch import (
    Dispatcher,
    Notification,
    WallTime,
    rule_annotations,
    same_time,
)

log = logging.getLogger(__name__)

USER_AGENT = "gpufleet-alerts"
#: A POST: (url, JSON body, timeout) -> the HTTP status (raises OSError when unreachable).
Post = Callable[[str, bytes, float], int]


def post_json(url: str, body: bytes, timeout_s: float) -> int:
    """POST ``body`` as JSON; the answer's status (an HTTP error's too)."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": USER_AGENT},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


class NotificationMetrics(Collector):
    """Notifications delivered and failed, by receiver (thread-safe; collected on scrape)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.delivered: Counter[str] = Counter()
        self.failed: Counter[tuple[str, str]] = Counter()

    def count_delivered(self, receiver: str) -> None:
        with self._lock:
            self.delivered[receiver] += 1

    def count_failed(self, receiver: str, reason: str) -> None:
        with self._lock:
            self.failed[(receiver, reason)] += 1

    def collect(self) -> Iterator[CounterMetricFamily]:
        with self._lock:
            delivered, failed = dict(self.delivered), dict(self.failed)
        sent = families.ALERT_NOTIFICATIONS
        family = CounterMetricFamily(sent.name, sent.help, labels=sent.labels)
        for receiver, count in sorted(delivered.items()):
            family.add_metric([receiver], count)
        yield family
        lost = families.ALERT_NOTIFICATIONS_FAILED
        family = CounterMetricFamily(lost.name, lost.help, labels=lost.labels)
        for (receiver, reason), count in sorted(failed.items()):
            family.add_metric([receiver, reason], count)
        yield family


@dataclass(frozen=True, slots=True)
class _Delivery:
    receiver: str
    url: str
    body: bytes


class WebhookSender:
    """POSTs queued payloads from its own thread; :meth:`submit` never blocks."""

    def __init__(
        self,
        metrics: NotificationMetrics | None = None,
        *,
        timeout_s: float = 10.0,
        attempts: int = 4,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        queue_size: int = 1_000,
        post: Post = post_json,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be 1 or more, got {attempts}")
        self.metrics = metrics or NotificationMetrics()
        self._timeout = timeout_s
        self._attempts = attempts
        self._backoff = backoff_s
        self._max_backoff = max_backoff_s
        self._post = post
        self._queue: queue.Queue[_Delivery | None] = queue.Queue(queue_size)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="gpufleet-webhooks", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop after the delivery in progress (retries waiting are cut short)."""
        self._stop.set()
        if self._thread is not None:
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)
            self._thread.join(timeout_s)
            self._thread = None

    def submit(self, receiver: str, url: str, payload: Mapping[str, Any]) -> bool:
        """Queue ``payload`` for ``url``; False (counted, logged) when the queue is full."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        try:
            self._queue.put_nowait(_Delivery(receiver, url, body))
        except queue.Full:
            self._failed(_Delivery(receiver, url, body), "queue_full", "the send queue is full")
            return False
        return True

    def pending(self) -> int:
        """Deliveries queued or in progress."""
        return self._queue.unfinished_tasks

    def _run(self) -> None:
        while not self._stop.is_set():
            delivery = self._queue.get()
            try:
                if delivery is not None:
                    self._deliver(delivery)
            finally:
                self._queue.task_done()

    def _deliver(self, delivery: _Delivery) -> None:
        wait = self._backoff
        reason, detail = "connection", ""
        for attempt in range(self._attempts):
            if attempt:
                if self._stop.wait(wait):
                    break
                wait = min(wait * 2, self._max_backoff)
            try:
                status = self._post(delivery.url, delivery.body, self._timeout)
            except (OSError, ValueError) as error:  # unreachable, refused, timed out, bad URL
                reason, detail = "connection", str(error)
                continue
            if 200 <= status < 300:
                self.metrics.count_delivered(delivery.receiver)
                return
            reason, detail = f"http_{status // 100}xx", f"HTTP {status}"
            if status < 500:
                break  # the receiver refuses it: retrying will not help (as Alertmanager)
        self._failed(delivery, reason, detail)

    def _failed(self, delivery: _Delivery, reason: str, detail: str) -> None:
        self.metrics.count_failed(delivery.receiver, reason)
        log.warning(
            "alert notification to receiver %s (%s) not delivered: %s",
            delivery.receiver,
            delivery.url,
            detail,
        )


class AlertNotifier:
    """Subscribe :meth:`on_round` to an observatory: the notifications of ``config``'s routes
    are queued to a :class:`WebhookSender` as they fall due. ``clock`` is the plane's clock,
    for :meth:`tick` (timers due between rounds); ``rules`` gives the current rules, whose
    summaries annotate the alerts; ``external_url`` is where gpufleet's API answers (the
    payload's ``externalURL`` and each alert's ``generatorURL``); ``wall`` maps the plane's
    time to the wall's for the payloads. ``kept`` is what an earlier server's dispatcher held
    (``Dispatcher.snapshot``), and ``keep`` is called with the snapshot after every round that
    changed an alert or sent something, so that a restart neither notifies a firing alert again
    as new nor forgets to notify its resolution."""

    def __init__(
        self,
        config: AlertRouting,
        clock: Callable[[], float],
        *,
        rules: Callable[[], Sequence[AlertRule]] = tuple,
        external_url: str = "",
        sender: WebhookSender | None = None,
        wall: WallTime = same_time,
        kept: Mapping[str, Any] | None = None,
        keep: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.config = config
        self.sender = sender or WebhookSender()
        self._clock = clock
        self._rules = rules
        self._lock = threading.Lock()
        self._annotate = rule_annotations(())
        self._last: Sequence[Alert] = ()
        self._keep = keep
        self.dispatcher = Dispatcher(
            config.routes,
            annotate=lambda alert: self._annotate(alert),
            external_url=external_url,
            wall=wall,
        )
        if kept is not None:
            self.dispatcher.restore(kept)

    @property
    def metrics(self) -> NotificationMetrics:
        return self.sender.metrics

    def start(self) -> None:
        self.sender.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self.sender.stop(timeout_s)

    def on_round(self, observed: ObservedRound) -> None:
        """Take a round's alerts; queue what is due at its time."""
        with self._lock:
            self._annotate = rule_annotations(self._rules())
            self._last = tuple(observed.alerts)
            due = self.dispatcher.round(self._last, observed.now)
            self._send(due)
            if self._keep is not None and (due or observed.transitions):
                self._keep(self.dispatcher.snapshot())

    def tick(self) -> None:
        """Queue what is due now by the clock, with the latest round's alerts."""
        with self._lock:
            now = self._clock()
            if self.dispatcher.last is not None and now < self.dispatcher.last:
                return
            due = self.dispatcher.round(self._last, now)
            self._send(due)
            if self._keep is not None and due:
                self._keep(self.dispatcher.snapshot())

    def _send(self, due: Sequence[Notification]) -> None:
        for notification in due:
            if notification.route.target:  # a receiver without webhooks: taken, not sent
                self.sender.submit(
                    notification.route.receiver, notification.route.target, notification.payload
                )
