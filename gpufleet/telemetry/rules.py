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
    holding = {
        labels: value
        for labels, value in values.items()
        if rule.comparison.holds(value, rule.threshold)
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
        self._alerts: dict[str, dict[LabelSet, Alert]] = {name: {} for name in self._rules}
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
            holding = {
                rule.alert_labels(series): value
                for series, value in matching_series(rule, source, now).items()
            }
            transitions += self._advance(rule, self._alerts[rule.name], holding, now)
        return transitions

    def _advance(
        self,
        rule: AlertRule,
        alerts: dict[LabelSet, Alert],
        holding: Mapping[LabelSet, float],
        now: float,
    ) -> list[AlertTransition]:
        changes: list[AlertTransition] = []

        def move(alert: Alert, after: Alert) -> None:
            changes.append(
                AlertTransition(rule.name, alert.labels, alert.state, after.state, after.value, now)
            )

        for labels in sorted(alerts.keys() | holding.keys()):
            alert = alerts.get(labels)
            if labels in holding:
                value = holding[labels]
                if alert is None or alert.state is AlertState.RESOLVED:
                    before = Alert(rule.name, labels, AlertState.INACTIVE, value, now)
                    alert = replace(before, state=AlertState.PENDING)
                    move(before, alert)
                else:
                    alert = replace(alert, value=value)
                if alert.state is AlertState.PENDING and now - alert.active_at >= rule.for_s:
                    firing = replace(alert, state=AlertState.FIRING, fired_at=now)
                    move(alert, firing)
                    alert = firing
                alerts[labels] = alert
                continue
            assert alert is not None
            if alert.state is AlertState.PENDING:
                move(alert, replace(alert, state=AlertState.INACTIVE))
                del alerts[labels]
            elif alert.state is AlertState.FIRING:
                resolved = replace(alert, state=AlertState.RESOLVED, resolved_at=now)
                move(alert, resolved)
                alerts[labels] = resolved
            elif alert.resolved_at is not None and now - alert.resolved_at > self._retention:
                del alerts[labels]
        return changes

    def replace_rules(self, rules: Iterable[AlertRule]) -> None:
        """Evaluate ``rules`` from the next round on: a rule kept unchanged keeps its alerts,
        a changed or new one starts with none (its old alerts are dropped, unnotified), as
        Prometheus does when a rule file is reloaded. Checked whole before anything changes."""
        fresh = RuleEngine(rules, self._retention)
        for name, rule in fresh._rules.items():
            if self._rules.get(name) == rule:
                fresh._alerts[name] = self._alerts[name]
        self._rules, self._alerts = fresh._rules, fresh._alerts

    def alerts(self, rule: str | None = None) -> list[Alert]:
        """The alerts held now (pending, firing, and recently resolved), of one rule or all."""
        names = self._rules if rule is None else (rule,)
        return [alert for name in names for _, alert in sorted(self._alerts[name].items())]

    def active(self) -> list[Alert]:
        """Pending and firing alerts of every rule."""
        return [a for a in self.alerts() if a.state in (AlertState.PENDING, AlertState.FIRING)]
