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
  ``severity`` label, and the annotations (a summary naming the GPU, its ``Hostname`` and the
  pod; a description with the value) as templates of
  :mod:`gpufleet.model.alert_annotations`, which gpufleet's own notifications render alike.

It reads no files; ``gpufleet alerts export`` (the CLI) writes what this returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from gpufleet.model.alert_annotations import annotation_templates
from gpufleet.model.alerts import (
    HOLDER_LABEL,
    WORKLOAD_LABELS,
    WORKLOAD_START_TIME,
    Aggregation,
    AlertMetric,
    AlertRule,
    promql_duration,
    promql_number,
)

API_VERSION = "monitoring.coreos.com/v1"
KIND = "PrometheusRule"
DEFAULT_NAME = "gpufleet-alerts"
GROUP_NAME = "gpufleet.gpu"

_FB_USED = AlertMetric.FB_USED.value
_FB_FREE = "DCGM_FI_DEV_FB_FREE"
_GPU_UTIL = AlertMetric.GPU_UTIL.value


def _string(value: str) -> str:
    """A PromQL string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def selector(metric: str, matchers: Mapping[str, str], extra: Iterable[str] = ()) -> str:
    """``metric{name="value",...}`` (``extra``: matchers already written, first)."""
    written = [*extra, *(f"{name}={_string(value)}" for name, value in sorted(matchers.items()))]
    return f"{metric}{{{', '.join(written)}}}" if written else metric


def metric_expression(rule: AlertRule) -> tuple[str, bool]:
    """The rule's metric in PromQL over its scope, and whether it is a plain selector."""
    return metric_query(rule.metric, rule.scope.matchers(), allocated=rule.scope.allocated)


def metric_query(
    metric: AlertMetric, matchers: Mapping[str, str], *, allocated: bool = False
) -> tuple[str, bool]:
    """``metric`` in PromQL over the series ``matchers`` select (``allocated``: only devices
    a pod holds, ``pod!=""``), and whether it is a plain selector (the Prometheus reader,
    ``gpufleet.backends.prometheus``, asks the same)."""
    held_only = [f'{HOLDER_LABEL}!=""'] if allocated else []
    match metric:
        case AlertMetric.FB_USED_PERCENT:
            used = selector(_FB_USED, matchers, held_only)
            free = selector(_FB_FREE, matchers, held_only)
            return f"100 * {used} / ({used} + {free})", False
        case AlertMetric.WORKLOAD_GPU_UTIL:
            held = selector(_GPU_UTIL, matchers, [f'{HOLDER_LABEL}!=""'])
            return f"avg by ({', '.join(WORKLOAD_LABELS)}) ({held})", False
        case _:
            return selector(metric.value, matchers, held_only), True


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
        return f"quantile_over_time({promql_number(rule.quantile)}, {ranged})"
    return f"{rule.aggregation.value}_over_time({ranged})"


def alert_expression(rule: AlertRule) -> str:
    """The rule's ``expr``: the series for which its condition holds."""
    condition = (
        f"{aggregated_expression(rule)} {rule.comparison.value} {promql_number(rule.threshold)}"
    )
    if rule.min_running_s <= 0:
        return condition
    on_workload = {k: v for k, v in rule.scope.matchers().items() if k in WORKLOAD_LABELS}
    started = selector(WORKLOAD_START_TIME, on_workload)
    return (
        f"({condition}) and on ({', '.join(WORKLOAD_LABELS)}) "
        f"(time() - {started}) >= {promql_number(rule.min_running_s)}"
    )


def alerting_rule(rule: AlertRule) -> dict[str, Any]:
    """One entry of a rule group's ``rules``."""
    entry: dict[str, Any] = {"alert": rule.alert_name, "expr": alert_expression(rule)}
    if rule.for_s > 0:
        entry["for"] = promql_duration(rule.for_s)
    entry["labels"] = {"severity": rule.severity.value}
    entry["annotations"] = annotation_templates(rule)
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
