"""Which of gpufleet's metrics a KEDA ``prometheus`` trigger's query asks for, and how.

Owns :func:`query_metric`: the query parsed as PromQL (``promql-parser``, Prometheus 2.45's
grammar) and matched against the forms gpufleet can answer from a world's readings, each a
:class:`QueryMetric` (an :class:`~gpufleet.model.autoscaling.InferenceMetric` and the
:class:`~gpufleet.model.autoscaling.Aggregate` that makes the workload's one figure):

* ``sum|avg|max|min [by|without (...)] (METRIC{...})``: a gauge gpufleet exports,
  ``gpufleet_inference_queue_depth``, ``gpufleet_inference_requests_per_second``,
  ``DCGM_FI_DEV_GPU_UTIL`` or ``gpufleet_workload_gpu_util``;
* ``sum|avg|max|min (rate|irate(gpufleet_inference_requests_total{...}[w]))``: requests per
  second;
* ``histogram_quantile(0.95, sum by (le) (rate|irate(gpufleet_inference_latency_seconds_bucket
  {...}[w])))``: the p95 latency.

Label matchers, ``by`` labels and rate windows are accepted and not used: a world's readings
are the workload's own. Anything else (another metric, quantile, function, arithmetic,
``offset`` or ``@``) raises ValueError saying what was found and what is read; KEDA itself needs
a query that returns one value, which a bare per-replica gauge does not. It evaluates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import promql_parser as promql

from gpufleet.io.errors import quoted
from gpufleet.model.autoscaling import Aggregate, InferenceMetric

#: Gauges by name, as a query may name them.
GAUGES = {
    InferenceMetric.QUEUE_DEPTH.value: InferenceMetric.QUEUE_DEPTH,
    InferenceMetric.REQUESTS_PER_SECOND.value: InferenceMetric.REQUESTS_PER_SECOND,
    InferenceMetric.GPU_UTILIZATION.value: InferenceMetric.GPU_UTILIZATION,
    "gpufleet_workload_gpu_util": InferenceMetric.GPU_UTILIZATION,
}
REQUESTS_COUNTER = "gpufleet_inference_requests_total"
LATENCY_BUCKETS = f"{InferenceMetric.LATENCY_P95.value}_bucket"
#: The quantile of latency gpufleet's worlds give.
LATENCY_QUANTILE = 0.95
KNOWN_NAMES = (*GAUGES, REQUESTS_COUNTER, LATENCY_BUCKETS)
_AGGREGATES = {
    aggregate.value: aggregate for aggregate in Aggregate if aggregate is not Aggregate.P95
}
_RATES = ("rate", "irate")
FORMS = (
    "sum|avg|max|min(<gauge>{...}) with a gauge of "
    f"{', '.join(GAUGES)}; sum|avg|max|min(rate({REQUESTS_COUNTER}{{...}}[1m])); "
    f"histogram_quantile({LATENCY_QUANTILE}, sum by (le) (rate({LATENCY_BUCKETS}{{...}}[1m])))"
)


@dataclass(frozen=True, slots=True)
class QueryMetric:
    metric: InferenceMetric
    aggregate: Aggregate


def query_metric(query: str) -> QueryMetric:
    """The metric and aggregate ``query`` asks for (see the module docstring)."""
    try:
        expr = promql.parse(query)
    except ValueError as error:
        raise ValueError(f"not valid PromQL ({error}): {quoted(query)}") from None
    expr = _unwrap(expr)
    if isinstance(expr, promql.Call) and expr.func.name == "histogram_quantile":
        return _latency(expr, query)
    if isinstance(expr, promql.AggregateExpr):
        operator = str(expr.op)
        aggregate = _AGGREGATES.get(operator)
        if aggregate is None:
            raise _unreadable(query, f"the aggregation {operator}")
        return QueryMetric(_aggregated(_unwrap(expr.expr), query), aggregate)
    if isinstance(expr, promql.VectorSelector) and expr.name in GAUGES:
        raise ValueError(
            f"{expr.name} has a series per replica, and KEDA needs one value: aggregate it, "
            f"e.g. sum({expr.name}{{...}}); got {quoted(query)}"
        )
    raise _unreadable(query, _what(expr))


def _aggregated(expr: promql.Expr, query: str) -> InferenceMetric:
    if isinstance(expr, promql.VectorSelector):
        name = _name(expr, query)
        if name in GAUGES:
            return GAUGES[name]
        if name == REQUESTS_COUNTER:
            raise _unreadable(query, f"{name} without rate() (a counter: take its rate)")
        raise _unknown(name, query)
    if isinstance(expr, promql.Call) and expr.func.name in _RATES:
        name = _rate_of(expr, query)
        if name == REQUESTS_COUNTER:
            return InferenceMetric.REQUESTS_PER_SECOND
        if name in GAUGES:
            raise _unreadable(query, f"{expr.func.name}() of the gauge {name}")
        raise _unknown(name, query)
    raise _unreadable(query, _what(expr))


def _latency(call: promql.Call, query: str) -> QueryMetric:
    quantile, inner = (_unwrap(arg) for arg in call.args)
    if not isinstance(quantile, promql.NumberLiteral) or quantile.val != LATENCY_QUANTILE:
        raise _unreadable(
            query, f"histogram_quantile({quantile}, ...): gpufleet measures the p95 latency only"
        )
    if not (
        isinstance(inner, promql.AggregateExpr)
        and str(inner.op) == "sum"
        and inner.modifier is not None
        and inner.modifier.type == promql.AggModifierType.By
        and inner.modifier.labels == ["le"]
    ):
        raise _unreadable(query, "histogram_quantile of something other than sum by (le) (...)")
    rate = _unwrap(inner.expr)
    if not (isinstance(rate, promql.Call) and rate.func.name in _RATES):
        raise _unreadable(query, f"histogram_quantile over {_what(rate)}, not a rate of buckets")
    name = _rate_of(rate, query)
    if name != LATENCY_BUCKETS:
        raise (
            _unknown(name, query)
            if name not in KNOWN_NAMES
            else _unreadable(query, f"histogram_quantile over {name}")
        )
    return QueryMetric(InferenceMetric.LATENCY_P95, Aggregate.P95)


def _rate_of(call: promql.Call, query: str) -> str:
    (arg,) = call.args
    arg = _unwrap(arg)
    if not isinstance(arg, promql.MatrixSelector):
        raise _unreadable(query, f"{call.func.name}() of {_what(arg)}")
    return _name(arg.vector_selector, query)


def _name(selector: promql.VectorSelector, query: str) -> str:
    if selector.offset is not None or selector.at is not None:
        raise _unreadable(query, "offset or @ (a value from the past)")
    if selector.name is None:
        raise _unreadable(query, "a selector without a metric name")
    return selector.name


def _unwrap(expr: promql.Expr) -> promql.Expr:
    while isinstance(expr, promql.ParenExpr):
        expr = expr.expr
    return expr


def _what(expr: object) -> str:
    if isinstance(expr, promql.Call):
        return f"the function {expr.func.name}()"
    if isinstance(expr, promql.BinaryExpr):
        return "arithmetic or a comparison"
    if isinstance(expr, promql.VectorSelector):
        return f"the metric {expr.name}"
    if isinstance(expr, promql.NumberLiteral):
        return "a number"
    return type(expr).__name__


def _unreadable(query: str, found: str) -> ValueError:
    return ValueError(
        f"cannot map the query {quoted(query)} to a gpufleet metric: {found} is not read "
        f"(gpufleet reads: {FORMS})"
    )


def _unknown(name: str, query: str) -> ValueError:
    return ValueError(
        f"unknown metric {quoted(name)} in the query {quoted(query)} (known: "
        f"{', '.join(KNOWN_NAMES)})"
    )
