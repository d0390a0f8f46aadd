"""Alert rules written for Prometheus: PromQL on the DCGM names, as a ``PrometheusRule``
(``monitoring.coreos.com/v1``, the Prometheus Operator's) or as a plain rule file
(``groups:``, what ``promtool check rules`` and ``promtool test rules`` read).

Owns the translation of one :class:`~gpufleet.model.alerts.AlertRule` into an alerting rule
that gives the same verdicts as gpufleet's own engine (:mod:`gpufleet.telemetry.rules`) on the
same series:

* the metric: a DCGM family as a selector with the scope's matchers; memory in percent as
  ``100 * DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)``; a workload's
  utilisation as ``avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""})``;
* the aggregation: ``avg_over_time`` and its kin over the window (a subquery ``[1h:]`` when the
  metric is an expression), ``last`` without a window as the instant value (Prometheus' 5m
  lookback, the engine's too);
* the comparison with the threshold, and ``minRunning`` as ``and on (namespace, pod)
  (time() - kube_pod_start_time) >= seconds`` (kube-state-metrics' start of each pod);
* ``alert`` the rule's :attr:`~gpufleet.model.alerts.AlertRule.alert_name`, ``for``, the
  ``severity`` label, and a summary naming the GPU, its ``Hostname`` and the pod.

It reads no files; ``gpufleet alerts export`` (the CLI) writes what this returns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from gpufleet.model.alerts import (
    WORKLOAD_LABELS,
    WORKLOAD_START_TIME,
    Aggregation,
    AlertMetric,
    AlertRule,
)

API_VERSION = "monitoring.coreos.com/v1"
KIND = "PrometheusRule"
DEFAULT_NAME = "gpufleet-alerts"
GROUP_NAME = "gpufleet.gpu"

_FB_USED = AlertMetric.FB_USED.value
_FB_FREE = "DCGM_FI_DEV_FB_FREE"
_GPU_UTIL = AlertMetric.GPU_UTIL.value


def promql_duration(seconds: float) -> str:
    """A Prometheus duration: ``1h``, ``5m``, ``1h30m``, ``90s`` -> ``1m30s``, ``1500ms`` ->
    ``1s500ms``; whole milliseconds (ValueError otherwise)."""
    millis = round(seconds * 1000)
    if seconds < 0 or not math.isclose(millis, seconds * 1000, abs_tol=1e-6):
        raise ValueError(f"a Prometheus duration is whole milliseconds, not {seconds}s")
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _string(value: str) -> str:
    """A PromQL string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def selector(metric: str, matchers: Mapping[str, str], extra: Iterable[str] = ()) -> str:
    """``metric{name="value",...}`` (``extra``: matchers already written, first)."""
    written = [*extra, *(f"{name}={_string(value)}" for name, value in sorted(matchers.items()))]
    return f"{metric}{{{', '.join(written)}}}" if written else metric


def metric_expression(rule: AlertRule) -> tuple[str, bool]:
    """The rule's metric in PromQL over its scope, and whether it is a plain selector."""
    return metric_query(rule.metric, rule.scope.matchers())


def metric_query(metric: AlertMetric, matchers: Mapping[str, str]) -> tuple[str, bool]:
    """``metric`` in PromQL over the series ``matchers`` select, and whether it is a plain
    selector (the Prometheus reader, ``gpufleet.backends.prometheus``, asks the same)."""
    match metric:
        case AlertMetric.FB_USED_PERCENT:
            used = selector(_FB_USED, matchers)
            free = selector(_FB_FREE, matchers)
            return f"100 * {used} / ({used} + {free})", False
        case AlertMetric.WORKLOAD_GPU_UTIL:
            held = selector(_GPU_UTIL, matchers, ['pod!=""'])
            return f"avg by ({', '.join(WORKLOAD_LABELS)}) ({held})", False
        case _:
            return selector(metric.value, matchers), True


def aggregated_expression(rule: AlertRule) -> str:
    """The value a rule compares: its metric aggregated over its window."""
    expression, plain = metric_expression(rule)
    if rule.aggregation is Aggregation.LAST and rule.window_s == 0:
        return expression
    ranged = f"{expression}[{promql_duration(rule.window_s)}]"
    if not plain:
        ranged = f"({expression})[{promql_duration(rule.window_s)}:]"
    if rule.aggregation is Aggregation.QUANTILE:
        assert rule.quantile is not None
        return f"quantile_over_time({_number(rule.quantile)}, {ranged})"
    return f"{rule.aggregation.value}_over_time({ranged})"


def alert_expression(rule: AlertRule) -> str:
    """The rule's ``expr``: the series for which its condition holds."""
    condition = f"{aggregated_expression(rule)} {rule.comparison.value} {_number(rule.threshold)}"
    if rule.min_running_s <= 0:
        return condition
    on_workload = {k: v for k, v in rule.scope.matchers().items() if k in WORKLOAD_LABELS}
    started = selector(WORKLOAD_START_TIME, on_workload)
    return (
        f"({condition}) and on ({', '.join(WORKLOAD_LABELS)}) "
        f"(time() - {started}) >= {_number(rule.min_running_s)}"
    )


def _summary(rule: AlertRule) -> str:
    what = rule.summary or f"{rule.metric.value} {rule.comparison.value} {_number(rule.threshold)}"
    if rule.metric.per_workload:
        where = "pod {{ $labels.namespace }}/{{ $labels.pod }}"
    else:
        where = (
            "GPU {{ $labels.gpu }} ({{ $labels.modelName }}) on {{ $labels.Hostname }}"
            "{{ if $labels.pod }}, held by pod {{ $labels.namespace }}/{{ $labels.pod }}"
            "{{ end }}"
        )
    return f"{where}: {what}"


def _description(rule: AlertRule) -> str:
    value = _with_unit('{{ $value | printf "%.1f" }}', rule.metric.unit)
    threshold = _with_unit(_number(rule.threshold), rule.metric.unit)
    return (
        f"gpufleet rule {rule.name}: {aggregated_name(rule)} is {value} "
        f"({rule.comparison.value} {threshold})"
    )


def _with_unit(amount: str, unit: str) -> str:
    return amount + unit if unit in ("", "%") else f"{amount} {unit}"


def aggregated_name(rule: AlertRule) -> str:
    """``avg of DCGM_FI_DEV_GPU_UTIL over 1h``, for people."""
    if rule.aggregation is Aggregation.LAST and rule.window_s == 0:
        return rule.metric.value
    fn = rule.aggregation.value
    if rule.aggregation is Aggregation.QUANTILE:
        fn = f"quantile {_number(rule.quantile or 0.0)}"
    return f"{fn} of {rule.metric.value} over {promql_duration(rule.window_s)}"


def alerting_rule(rule: AlertRule) -> dict[str, Any]:
    """One entry of a rule group's ``rules``."""
    entry: dict[str, Any] = {"alert": rule.alert_name, "expr": alert_expression(rule)}
    if rule.for_s > 0:
        entry["for"] = promql_duration(rule.for_s)
    entry["labels"] = {"severity": rule.severity.value}
    entry["annotations"] = {"summary": _summary(rule), "description": _description(rule)}
    return entry


def rule_groups(rules: Iterable[AlertRule]) -> list[dict[str, Any]]:
    """The ``groups`` of a Prometheus rule file (one group, every rule)."""
    return [{"name": GROUP_NAME, "rules": [alerting_rule(rule) for rule in rules]}]


def rule_file(rules: Iterable[AlertRule]) -> dict[str, Any]:
    """A plain Prometheus rule file (``promtool check rules`` reads it)."""
    return {"groups": rule_groups(rules)}


def prometheus_rule(
    rules: Iterable[AlertRule],
    name: str = DEFAULT_NAME,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The rules as a ``PrometheusRule`` object (``labels``: for the operator's
    ``ruleSelector``, such as ``release: kube-prometheus-stack``)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = {"app.kubernetes.io/name": "gpufleet", **(labels or {})}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {"groups": rule_groups(rules)},
    }


def to_yaml(document: Mapping[str, Any]) -> str:
    """``document`` as YAML, keys in the order written."""
    return yaml.safe_dump(dict(document), sort_keys=False, allow_unicode=True, width=1000)
