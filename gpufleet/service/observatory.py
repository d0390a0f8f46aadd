"""What a control plane sees its GPUs do, and the alerts it draws from that, round by round.

Owns :class:`Observatory`, one per plane: its series (a ``GroupedSeriesQuery``: the embedded
plane's own store fed by a ``SeriesRecorder``; on Kubernetes a Prometheus reader), the rule
engine over the built-in rules and the ``GPUAlertRule`` objects put through the API, and the
rounds: each :meth:`Observatory.observe` records a reading (where the plane records its own),
evaluates every rule at the plane's time and tells the subscribers (notifications, idle
policies, the event stream) what changed, outside its lock. A round whose series cannot be read
(Prometheus down) changes no alert and says why in :attr:`Observatory.last_error`.

Also :class:`ObservatoryThread`, which calls a plane's round every step of the plane's clock.
Who feeds it (what a plane reads, which pods carry which tags) is the plane's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.model.alerts import Alert, AlertRule, AlertState, AlertTransition
from gpufleet.telemetry.alert_dispatch import WallTime, same_time
from gpufleet.telemetry.recording import PodKey, PodTags, SeriesRecorder
from gpufleet.telemetry.rules import RuleEngine
from gpufleet.telemetry.series_layout import Labels
from gpufleet.telemetry.series_query import (
    FilteringQuery,
    GroupedSeriesQuery,
    RawSample,
    SampleQuery,
    SeriesUnavailableError,
    UnknownMetricError,
)
from gpufleet.telemetry.series_window import Where, filtered
from gpufleet.telemetry.source import NodeTelemetry

log = logging.getLogger(__name__)

#: Missed instants a late round evaluates to catch up, at most (older ones are skipped, and
#: counted in ``Observatory.rounds_skipped``).
CATCH_UP_ROUNDS = 40
#: Seconds of the plane's clock between rounds (the store's fine step, dcgm-exporter's default
#: collection interval is 30 s; Prometheus' rule evaluation default 1 m: 15 s is finer than both).
STEP_S = 15.0


@dataclass(frozen=True, slots=True)
class ObservedRound:
    """One round: when, the alerts that changed state, and every alert held after it."""

    now: float
    transitions: Sequence[AlertTransition]
    alerts: Sequence[Alert]

    @property
    def firing(self) -> list[Alert]:
        return [a for a in self.alerts if a.state is AlertState.FIRING]


RoundSubscriber = Callable[[ObservedRound], None]


class LockedSeries:
    """A ``GroupedSeriesQuery`` answered under the observatory's lock (the store is not
    thread-safe; the API queries while the plane records)."""

    def __init__(self, inner: GroupedSeriesQuery, lock: threading.RLock) -> None:
        self.inner = inner
        self._lock = lock

    def query(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str] | None = None,
        quantile: float | None = None,
        *,
        by: Sequence[str] | None = None,
        across: str = "sum",
    ) -> dict[Labels, float]:
        with self._lock:
            return self.inner.query(
                metric, fn, window_s, now, matchers, quantile, by=by, across=across
            )

    def query_where(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str],
        quantile: float | None,
        where: Where,
    ) -> dict[Labels, float]:
        inner = self.inner
        with self._lock:
            if isinstance(inner, FilteringQuery):
                return dict(inner.query_where(metric, fn, window_s, now, matchers, quantile, where))
            return filtered(inner.query(metric, fn, window_s, now, matchers, quantile), where)

    def samples(
        self,
        metric: str,
        start: float,
        end: float,
        matchers: Mapping[str, str] | None = None,
    ) -> dict[Labels, list[RawSample]]:
        """The inner series' raw samples (``SampleQuery``); UnknownMetricError where it keeps
        none."""
        inner = self.inner
        if not isinstance(inner, SampleQuery):
            raise UnknownMetricError(metric, [])
        with self._lock:
            return inner.samples(metric, start, end, matchers)


class Observatory:
    """See the module docstring. ``clock`` is the plane's (simulated or wall) time."""

    def __init__(
        self,
        series: GroupedSeriesQuery,
        rules: Sequence[AlertRule],
        clock: Callable[[], float],
        recorder: SeriesRecorder | None = None,
        step_s: float = STEP_S,
    ) -> None:
        if not step_s > 0:
            raise ValueError(f"the observatory's step must be positive, got {step_s}")
        self.lock = threading.RLock()
        self.series = LockedSeries(series, self.lock)
        self.recorder = recorder
        self.engine = RuleEngine(rules)
        self.step_s = step_s
        self.rounds = 0
        #: Rounds evaluated late, without a reading of their own, to catch up (see ``due``).
        self.rounds_caught_up = 0
        #: Instants not evaluated at all: more were missed than ``CATCH_UP_ROUNDS``.
        self.rounds_skipped = 0
        self.last_round: float | None = None
        #: Why the latest round could not read its series (None: it could).
        self.last_error: str | None = None
        #: The plane's time -> Unix time, for what is sent out (the simulated cluster's is
        #: ``wall_time.PlaneWallTime``; the identity where the clock is the wall's).
        self.wall_time: WallTime = same_time
        self._raw = series
        self._clock = clock
        self._subscribers: list[RoundSubscriber] = []

    def now(self) -> float:
        return self._clock()

    @property
    def rules(self) -> Sequence[AlertRule]:
        with self.lock:
            return self.engine.rules

    def replace_rules(self, rules: Sequence[AlertRule]) -> None:
        """Evaluate ``rules`` from the next round (see ``RuleEngine.replace_rules``)."""
        with self.lock:
            self.engine.replace_rules(rules)

    def alerts(self) -> list[Alert]:
        with self.lock:
            return self.engine.alerts()

    def subscribe(self, subscriber: RoundSubscriber) -> Callable[[], None]:
        """Call ``subscriber`` after every round (outside the lock); returns how to stop."""
        with self.lock:
            self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            with self.lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)

        return unsubscribe

    def due(self, now: float) -> list[float]:
        """The instants a round at ``now`` evaluates, oldest first: the multiples of the step
        after the last round, up to ``now`` (none: not yet time). Rounds run at fixed instants
        whenever the thread gets to run them, so a ``for`` is judged as Prometheus' rule manager
        judges it; more than ``CATCH_UP_ROUNDS`` missed are skipped and counted."""
        step = self.step_s
        newest = (now // step) * step
        with self.lock:
            last = self.last_round
        if last is None:
            return [newest]
        if newest <= last:
            return []
        missed = round((newest - last) / step)
        if missed > CATCH_UP_ROUNDS:
            with self.lock:
                self.rounds_skipped += missed - CATCH_UP_ROUNDS
            missed = CATCH_UP_ROUNDS
        return [newest - step * k for k in range(missed - 1, -1, -1)]

    def catch_up(self, now: float) -> list[float]:
        """Evaluate every due instant but the newest (with the series as recorded so far) and
        return the newest, for the caller's reading; empty when no round is due."""
        instants = self.due(now)
        for at in instants[:-1]:
            self.observe(at)
            with self.lock:
                self.rounds_caught_up += 1
        return instants[-1:]

    def observe(
        self,
        now: float,
        readings: Sequence[NodeTelemetry] | None = None,
        tags: Mapping[PodKey, PodTags] | None = None,
    ) -> ObservedRound:
        """One round at ``now``: record ``readings`` (when this observatory records its own),
        evaluate every rule, tell the subscribers."""
        with self.lock:
            if self.last_round is not None and now < self.last_round:
                raise ValueError(f"rounds go forward in time: {now} is before {self.last_round}")
            if self.recorder is not None and readings is not None:
                self.recorder.record(now, readings, tags)
                self.recorder.forget_ended(now)
            try:
                transitions = self.engine.evaluate(self._raw, now)
                self.last_error = None
            except SeriesUnavailableError as error:
                transitions = []
                if self.last_error != str(error):
                    log.warning("alert rules not evaluated: %s", error)
                self.last_error = str(error)
            self.rounds += 1
            self.last_round = now
            observed = ObservedRound(now, transitions, self.engine.alerts())
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            try:
                subscriber(observed)
            except Exception:  # one subscriber's bug must not stop the others or the rounds
                log.exception("an observatory subscriber failed at %s", now)
        return observed


class ObservatoryThread:
    """Calls ``round_`` every ``step_s`` of the plane's clock ``now`` (scaled by ``speed``
    on the wall), until stopped; a round that raises is logged and the next one runs."""

    def __init__(
        self,
        round_: Callable[[], object],
        step_s: float,
        speed: float = 1.0,
        min_wall_s: float = 0.05,
    ) -> None:
        self._round = round_
        self._period = max(min_wall_s, step_s / speed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpufleet-observe", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self._round()
            except Exception:
                log.exception("an observatory round failed")
            next_at += self._period
            self._stop.wait(max(0.0, next_at - time.monotonic()))
