"""Which gpufleet metric a KEDA prometheus trigger's query asks for: the forms read, and the
queries refused with what was found."""

from __future__ import annotations

import re

import pytest

from gpufleet.io.kube.promql_metric import QueryMetric, query_metric
from gpufleet.model.autoscaling import Aggregate, InferenceMetric
from gpufleet.testing.autoscaling_builders import GPU_UTIL, LATENCY, QUEUE, RPS

LATENCY_BUCKETS = "gpufleet_inference_latency_seconds_bucket"

READ = {
    "sum-of-queue": (
        'sum(gpufleet_inference_queue_depth{namespace="ml", deployment="llm"})',
        QUEUE,
        Aggregate.SUM,
    ),
    "avg-by-labels": ("avg by (deployment) (gpufleet_inference_queue_depth)", QUEUE, Aggregate.AVG),
    "max-without-labels": (
        "max without (pod) (gpufleet_inference_requests_per_second)",
        RPS,
        Aggregate.MAX,
    ),
    "min-in-parentheses": ("(min((DCGM_FI_DEV_GPU_UTIL{pod=~'llm-.*'})))", GPU_UTIL, Aggregate.MIN),
    "workload-gpu-util": ("avg(gpufleet_workload_gpu_util)", GPU_UTIL, Aggregate.AVG),
    "rate-of-requests": (
        "sum(rate(gpufleet_inference_requests_total{deployment='llm'}[1m]))",
        RPS,
        Aggregate.SUM,
    ),
    "irate-by-after": (
        "sum(irate(gpufleet_inference_requests_total[30s])) by (deployment)",
        RPS,
        Aggregate.SUM,
    ),
    "p95-latency": (
        f"histogram_quantile(0.95, sum by (le) (rate({LATENCY_BUCKETS}{{deployment='llm'}}[2m])))",
        LATENCY,
        Aggregate.P95,
    ),
    "p95-latency-by-after": (
        f"histogram_quantile(0.95, sum(rate({LATENCY_BUCKETS}[5m])) by (le))",
        LATENCY,
        Aggregate.P95,
    ),
}


@pytest.mark.parametrize(("query", "metric", "aggregate"), READ.values(), ids=READ.keys())
def test_queries_read(query: str, metric: InferenceMetric, aggregate: Aggregate) -> None:
    assert query_metric(query) == QueryMetric(metric, aggregate)


REFUSED = {
    "unknown-metric": (
        "sum(http_requests_in_flight)",
        "unknown metric 'http_requests_in_flight' in the query 'sum(http_requests_in_flight)' "
        "(known: gpufleet_inference_queue_depth,",
    ),
    "not-promql": ("sum(gpufleet_inference_queue_depth", "not valid PromQL"),
    "bare-per-replica-gauge": (
        "gpufleet_inference_queue_depth",
        "has a series per replica, and KEDA needs one value: aggregate it",
    ),
    "arithmetic": (
        "sum(gpufleet_inference_queue_depth) / 2",
        "arithmetic or a comparison is not read",
    ),
    "other-aggregation": (
        "topk(1, gpufleet_inference_queue_depth)",
        "the aggregation topk is not read",
    ),
    "counter-without-rate": ("sum(gpufleet_inference_requests_total)", "a counter: take its rate"),
    "rate-of-a-gauge": ("sum(rate(gpufleet_inference_queue_depth[1m]))", "rate() of the gauge"),
    "p99": (
        f"histogram_quantile(0.99, sum by (le) (rate({LATENCY_BUCKETS}[1m])))",
        "gpufleet measures the p95 latency only",
    ),
    "quantile-without-le": (
        f"histogram_quantile(0.95, sum(rate({LATENCY_BUCKETS}[1m])))",
        "histogram_quantile of something other than sum by (le)",
    ),
    "quantile-of-unknown-buckets": (
        "histogram_quantile(0.95, sum by (le) (rate(http_duration_seconds_bucket[1m])))",
        "unknown metric 'http_duration_seconds_bucket'",
    ),
    "offset": ("sum(gpufleet_inference_queue_depth offset 5m)", "offset or @"),
    "other-function": (
        "sum(delta(gpufleet_inference_queue_depth[5m]))",
        "the function delta() is not read",
    ),
    "no-metric-name": (
        'sum({__name__="gpufleet_inference_queue_depth"})',
        "a selector without a metric name",
    ),
}


@pytest.mark.parametrize(("query", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_queries_refused_say_what_was_found(query: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        query_metric(query)


def test_a_refusal_lists_the_forms_read() -> None:
    with pytest.raises(ValueError, match=r"gpufleet reads: sum\|avg\|max\|min\(<gauge>"):
        query_metric("sum(gpufleet_inference_queue_depth) * 2")
