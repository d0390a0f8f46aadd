"""The PromQL of a window query: what :class:`~gpufleet.backends.prometheus.series.PrometheusSeries`
sends for ``query(metric, fn, window_s, now, matchers, quantile, by=..., across=...)``.

Owns the metric names the reader knows (:data:`KNOWN_METRICS`), the check of a query's
arguments (the same ``ValueError`` cases as the store's) and :func:`window_query`:

* the metric: the DCGM families and the two derived ones as the exported alert rules write
  them (:func:`gpufleet.io.fleet.prometheus_rules.metric_query`: memory in percent from
  ``DCGM_FI_DEV_FB_USED`` and ``_FREE``, a pod's utilisation as the average over the GPUs it
  holds), ``kube_pod_start_time`` as kube-state-metrics serves it;
* ``fn``: ``<fn>_over_time(metric[window])`` (``quantile_over_time(q, ...)``,
  ``count_over_time``), a subquery ``(expr)[window:step]`` for a derived metric; ``last`` over
  :data:`~gpufleet.model.alerts.LOOKBACK_S` is the instant value (Prometheus' lookback, which
  also honours staleness: a series gone from its target is gone at once);
* ``by``/``across``: ``<across> by (labels) (...)``, ``<across>(...)`` for one group.

Windows: Prometheus 2 (Debian's 2.42) closes a range on the left, ``[now - w, now]``;
Prometheus 3 and the store open it, ``(now - w, now]``. A sample exactly on the left edge can
count in one and not in the other. ``count`` of a derived metric counts subquery steps, not
scrapes. It sends nothing: the reader does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from gpufleet.io.fleet.prometheus_rules import metric_query, selector
from gpufleet.model.alerts import (
    LABEL_NAME,
    LOOKBACK_S,
    WORKLOAD_START_TIME,
    AlertMetric,
    promql_duration,
)

WINDOW_FNS = ("avg", "max", "min", "quantile", "last", "count")
ACROSS_FNS = ("sum", "avg", "max", "min", "count")
#: Every metric the reader answers: the alert rules' metrics and the workloads' starts.
KNOWN_METRICS = (*(metric.value for metric in AlertMetric), WORKLOAD_START_TIME)


def check_query(
    fn: str,
    window_s: float,
    now: float,
    quantile: float | None,
    across: str,
    matchers: Mapping[str, str] | None,
    by: Sequence[str] | None,
) -> None:
    """ValueError naming what is wrong with a query's arguments (as the store raises)."""
    if fn not in WINDOW_FNS:
        raise ValueError(f"query: fn {fn!r} is not one of {list(WINDOW_FNS)}")
    if across not in ACROSS_FNS:
        raise ValueError(f"query: across {across!r} is not one of {list(ACROSS_FNS)}")
    if fn == "quantile" and (quantile is None or not 0.0 <= quantile <= 1.0):
        raise ValueError(f"query: fn quantile needs a quantile within 0..1, got {quantile}")
    if not (math.isfinite(window_s) and window_s > 0 and math.isfinite(now)):
        raise ValueError(f"query: window {window_s} s must be positive and now {now} finite")
    for what, names in (("matcher", list(matchers or ())), ("by", list(by or ()))):
        for name in names:
            if not LABEL_NAME.fullmatch(name):
                raise ValueError(f"query: {what} label {name!r} is not a Prometheus label name")


def metric_expression(metric: str, matchers: Mapping[str, str]) -> tuple[str, bool]:
    """``metric`` over the series ``matchers`` select, and whether it is a plain selector
    (a ``KeyError``-free lookup: the caller checked ``metric`` is known)."""
    if metric == WORKLOAD_START_TIME:
        return selector(metric, matchers), True
    return metric_query(AlertMetric(metric), matchers)


def duration(seconds: float) -> str:
    """``seconds`` as a PromQL duration, to the millisecond (at least 1 ms)."""
    return promql_duration(max(round(seconds * 1000), 1) / 1000)


def window_query(
    metric: str,
    fn: str,
    window_s: float,
    matchers: Mapping[str, str] | None = None,
    quantile: float | None = None,
    *,
    by: Sequence[str] | None = None,
    across: str = "sum",
    subquery_step_s: float | None = None,
) -> str:
    """The PromQL of one window query (see the module docstring); arguments checked by
    :func:`check_query` first. ``subquery_step_s``: the resolution of a derived metric's
    subquery (None: the server's evaluation interval, as the exported rules leave it)."""
    expression, plain = metric_expression(metric, dict(matchers or {}))
    if fn == "last" and math.isclose(window_s, LOOKBACK_S):
        windowed = expression
    else:
        if plain:
            ranged = f"{expression}[{duration(window_s)}]"
        else:
            step = "" if subquery_step_s is None else duration(subquery_step_s)
            ranged = f"({expression})[{duration(window_s)}:{step}]"
        if fn == "quantile":
            assert quantile is not None
            windowed = f"quantile_over_time({quantile!r}, {ranged})"
        else:
            windowed = f"{fn}_over_time({ranged})"
    if by is None:
        return windowed
    if not by:
        return f"{across}({windowed})"
    return f"{across} by ({', '.join(by)}) ({windowed})"
