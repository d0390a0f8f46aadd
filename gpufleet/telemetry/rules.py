"""gpufleet's own evaluation of alert rules, round by round, with Prometheus' ``for`` semantics.

Owns the query protocol a series store answers (:class:`SeriesQuery`), the evaluation of one
rule's condition over it (:func:`matching_series`) and the alert state of a set of rules
(:class:`RuleEngine`). Each round (:meth:`RuleEngine.evaluate`, ``now`` passed in) queries
every rule, compares, and advances each alert exactly as Prometheus' ``AlertingRule.Eval`` does:

* an alert is identified by its labels: the series' labels with ``alertname`` and
  ``severity`` (:meth:`~gpufleet.model.alerts.AlertRule.alert_labels`);
* a label set whose condition holds and that has no active alert becomes ``pending``, active
  from this round; it turns ``firing`` in the first round (this one included, when ``for`` is
  0) at which it has held for at least ``for`` (``now - active_at >= for``);
* a label set that stops holding, or whose series disappears: a ``pending`` alert returns to
  ``inactive`` (it never fired: no notification), a ``firing`` one becomes ``resolved``;
* a resolved alert is kept, for views and notifications, for ``resolved_retention_s``
  (Prometheus: 15 minutes); holding again starts a new ``pending`` alert.

``keep_firing_for`` is not supported. It stores no series, reads no clock and sends nothing: the
store (``telemetry/series``) answers the queries, the edges notify.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Protocol

from gpufleet.model.alerts import (
    LOOKBACK_S,
    WORKLOAD_LABELS,
    WORKLOAD_START_TIME,
    Aggregation,
    Alert,
    AlertRule,
    AlertState,
    AlertTransition,
    LabelSet,
)
from gpufleet.telemetry.series_query import FilteringQuery

#: How long a resolved alert stays (Prometheus' ``resolvedRetention``).
RESOLVED_RETENTION_S = 900.0
#: The labels an alert adds to its series' (``AlertRule.alert_labels``).
ALERT_ONLY_LABELS = ("alertname", "severity")
#: Series label sets a rule keeps numbered, at most (then those with no alert are forgotten).
IDENTITIES_KEPT = 100_000


class SeriesQuery(Protocol):
    """What the rule engine asks of a series store: one value per series.

    ``query(metric, fn, window_s, now, matchers, quantile)``: for each series of ``metric``
    (an :class:`~gpufleet.model.alerts.AlertMetric` value, or :data:`WORKLOAD_START_TIME`)
    whose labels equal every ``matchers`` entry (a matcher on a label the series lacks does
    not match), ``fn`` (an :class:`~gpufleet.model.alerts.Aggregation` value) of its samples
    with timestamps in ``(now - window_s, now]``: ``avg``, ``max``, ``min``, ``last`` (the
    latest sample), or ``quantile`` (the ``quantile`` 0..1 of the samples, interpolated as
    PromQL's ``quantile_over_time``). A series with no sample in the window is left out. The
    result maps the series' labels (sorted (name, value) pairs, without the metric name) to
    the value.
    """

    def query(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str],
        quantile: float | None = None,
    ) -> Mapping[LabelSet, float]: ...


def matching_series(rule: AlertRule, source: SeriesQuery, now: float) -> dict[LabelSet, float]:
    """The series for which ``rule``'s condition holds at ``now``, with their values (the
    aggregated value that was compared)."""
    matchers = rule.scope.matchers()
    metric, fn, window = rule.metric.value, rule.aggregation.value, rule.lookback_s
    if isinstance(source, FilteringQuery):
        where = (rule.comparison.value, rule.threshold)
        values = source.query_where(metric, fn, window, now, matchers, rule.quantile, where)
    else:
        values = source.query(metric, fn, window, now, matchers, rule.quantile)
    scope = rule.scope
    holding = {
        labels: value
        for labels, value in values.items()
        if rule.comparison.holds(value, rule.threshold) and scope.admits(labels)
    }
    if rule.min_running_s > 0 and holding:
        started = _workload_starts(source, now, matchers)
        holding = {
            labels: value
            for labels, value in holding.items()
            if _workload_key(labels) in started
            and now - started[_workload_key(labels)] >= rule.min_running_s
        }
    return holding


@lru_cache(maxsize=1 << 16)  # the same pods' label sets come back every round
def _workload_key(labels: LabelSet) -> tuple[str, ...] | None:
    named = dict(labels)
    if any(name not in named for name in WORKLOAD_LABELS):
        return None
    return tuple(named[name] for name in WORKLOAD_LABELS)


def _workload_starts(
    source: SeriesQuery, now: float, matchers: Mapping[str, str]
) -> dict[tuple[str, ...] | None, float]:
    """Each workload's start, by its :data:`WORKLOAD_LABELS` (only the matchers on them apply:
    a start series carries no others)."""
    on_workload = {k: v for k, v in matchers.items() if k in WORKLOAD_LABELS}
    starts = source.query(WORKLOAD_START_TIME, Aggregation.LAST.value, LOOKBACK_S, now, on_workload)
    found: dict[tuple[str, ...] | None, float] = {}
    for labels, start in starts.items():
        key = _workload_key(labels)
        if key is not None:
            found[key] = start
    return found


class _RuleAlerts:
    """One rule's alerts. Each alert label set gets a small number (its series' labels are
    looked up once per round, and every other step uses the number: hashing label sets was
    most of a busy round), and the last value compared is kept apart from the alert, which
    changes only with its state."""

    __slots__ = ("alerts", "ids", "labels", "values")

    def __init__(self) -> None:
        #: Series labels -> the number of their alert's label set.
        self.ids: dict[LabelSet, int] = {}
        #: Number -> the alert's label set (the series' with ``alertname`` and ``severity``).
        self.labels: list[LabelSet] = []
        self.alerts: dict[int, Alert] = {}
        self.values: dict[int, float] = {}

    def identified(self, rule: AlertRule, series: Mapping[LabelSet, float]) -> dict[int, float]:
        """``series`` by their alerts' numbers; series never seen are numbered now."""
        if len(self.ids) > IDENTITIES_KEPT:
            self._renumber()
        ids, found = self.ids, {}
        for labels, value in series.items():
            number = ids.get(labels)
            if number is None:
                number = ids[labels] = len(self.labels)
                self.labels.append(rule.alert_labels(labels))
            found[number] = value
        return found

    def _renumber(self) -> None:
        """Forget the numbers of series that have no alert now (series come and go)."""
        kept = {number: self.labels[number] for number in self.alerts}
        series = {labels: number for labels, number in self.ids.items() if number in kept}
        renumbered = {old: new for new, old in enumerate(kept)}
        self.labels = list(kept.values())
        self.ids = {labels: renumbered[number] for labels, number in series.items()}
        self.alerts = {renumbered[n]: alert for n, alert in self.alerts.items()}
        self.values = {renumbered[n]: value for n, value in self.values.items()}

    def restore(self, alert: Alert) -> None:
        """Hold ``alert`` (of a restart) under its series' labels: its own without
        ``alertname`` and ``severity``."""
        series = tuple(pair for pair in alert.labels if pair[0] not in ALERT_ONLY_LABELS)
        number = self.ids.get(series)
        if number is None:
            number = self.ids[series] = len(self.labels)
            self.labels.append(alert.labels)
        self.alerts[number] = alert
        self.values[number] = alert.value

    def current(self) -> list[Alert]:
        """The alerts, in label order, each with the last value compared."""
        out = []
        for number, alert in self.alerts.items():
            value = self.values[number]
            out.append(alert if alert.value == value else replace(alert, value=value))
        return sorted(out, key=_alert_labels)


class RuleEngine:
    """The alerts of a set of rules, advanced one round at a time.

    Rounds come in order of ``now`` (an earlier one is a ValueError). Rule names are unique.
    """

    def __init__(
        self, rules: Iterable[AlertRule], resolved_retention_s: float = RESOLVED_RETENTION_S
    ) -> None:
        self._rules: dict[str, AlertRule] = {}
        for rule in rules:
            if rule.name in self._rules:
                raise ValueError(f"two alert rules are named {rule.name!r}")
            self._rules[rule.name] = rule
        self._retention = resolved_retention_s
        self._state: dict[str, _RuleAlerts] = {name: _RuleAlerts() for name in self._rules}
        self._last: float | None = None

    @property
    def rules(self) -> Sequence[AlertRule]:
        return tuple(self._rules.values())

    def evaluate(self, source: SeriesQuery, now: float) -> list[AlertTransition]:
        """One round at ``now``: every rule queried and its alerts advanced; the transitions,
        rule by rule, each rule's in label order. An alert that starts holding with ``for``
        0 moves twice in the round: inactive -> pending, then pending -> firing."""
        if self._last is not None and now < self._last:
            raise ValueError(f"rounds go forward in time: {now} is before {self._last}")
        self._last = now
        transitions: list[AlertTransition] = []
        for rule in self._rules.values():
            state = self._state[rule.name]
            holding = state.identified(rule, matching_series(rule, source, now))
            transitions += self._advance(rule, state, holding, now)
        return transitions

    def _advance(
        self, rule: AlertRule, state: _RuleAlerts, holding: Mapping[int, float], now: float
    ) -> list[AlertTransition]:
        changes: list[AlertTransition] = []
        name, alerts, values, labels_of = rule.name, state.alerts, state.values, state.labels
        # Alerts and transitions are made with their constructors, not dataclasses.replace:
        # a busy round makes thousands of them.
        for number in alerts.keys() | holding.keys():
            alert = alerts.get(number)
            value = holding.get(number)
            if value is not None:
                values[number] = value
                if alert is None or alert.state is AlertState.RESOLVED:
                    labels = labels_of[number]
                    alert = alerts[number] = Alert(name, labels, AlertState.PENDING, value, now)
                    changes.append(
                        AlertTransition(
                            name, labels, AlertState.INACTIVE, AlertState.PENDING, value, now
                        )
                    )
                if alert.state is AlertState.PENDING and now - alert.active_at >= rule.for_s:
                    labels = labels_of[number]
                    alerts[number] = Alert(
                        name, labels, AlertState.FIRING, value, alert.active_at, now
                    )
                    changes.append(
                        AlertTransition(
                            name, labels, AlertState.PENDING, AlertState.FIRING, value, now
                        )
                    )
                continue
            assert alert is not None
            last = values[number]
            if alert.state is AlertState.PENDING:
                changes.append(
                    AlertTransition(
                        name, alert.labels, AlertState.PENDING, AlertState.INACTIVE, last, now
                    )
                )
                del alerts[number], values[number]
            elif alert.state is AlertState.FIRING:
                alerts[number] = Alert(
                    name, alert.labels, AlertState.RESOLVED, last, alert.active_at,
                    alert.fired_at, now,
                )  # fmt: skip
                changes.append(
                    AlertTransition(
                        name, alert.labels, AlertState.FIRING, AlertState.RESOLVED, last, now
                    )
                )
            elif alert.resolved_at is not None and now - alert.resolved_at > self._retention:
                del alerts[number], values[number]
        changes.sort(key=_by_labels)  # in label order (stable: one alert's two moves stay)
        return changes

    def replace_rules(self, rules: Iterable[AlertRule]) -> None:
        """Evaluate ``rules`` from the next round on: a rule kept unchanged keeps its alerts,
        a changed or new one starts with none (its old alerts are dropped, unnotified), as
        Prometheus does when a rule file is reloaded. Checked whole before anything changes."""
        fresh = RuleEngine(rules, self._retention)
        for name, rule in fresh._rules.items():
            if self._rules.get(name) == rule:
                fresh._state[name] = self._state[name]
        self._rules, self._state = fresh._rules, fresh._state

    def restore(self, alerts: Iterable[Alert]) -> int:
        """Hold ``alerts`` as a restarted server kept them (``service/alert_state``): each goes
        back under its rule, in its state, with its ``active_at`` (a ``for`` continues from it)
        and ``fired_at``; an alert of a rule not evaluated now is left out. How many were
        restored. Called before the first round."""
        restored = 0
        for alert in alerts:
            state = self._state.get(alert.rule)
            if state is not None and alert.state is not AlertState.INACTIVE:
                state.restore(alert)
                restored += 1
        return restored

    def alerts(self, rule: str | None = None) -> list[Alert]:
        """The alerts held now (pending, firing, and recently resolved), of one rule or all,
        each with the last value compared."""
        names = self._rules if rule is None else (rule,)
        return [alert for name in names for alert in self._state[name].current()]

    def active(self) -> list[Alert]:
        """Pending and firing alerts of every rule."""
        return [a for a in self.alerts() if a.state in (AlertState.PENDING, AlertState.FIRING)]


def _alert_labels(alert: Alert) -> LabelSet:
    return alert.labels


def _by_labels(transition: AlertTransition) -> LabelSet:
    return transition.labels
