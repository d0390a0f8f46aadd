"""A workload's metrics over Prometheus' HTTP API (the loopback fake of ``conftest``): the
PromQL the replica autoscaler sends for a workload's pods, what it makes of the answers, and a
server that is down."""

from __future__ import annotations

import pytest

from gpufleet.backends.prometheus import PrometheusSeries, PrometheusUnavailableError
from gpufleet.backends.prometheus.inference import (
    PrometheusInferenceMetrics,
    ServingPods,
    metric_query,
    series_selectors,
)
from gpufleet.model.autoscaling import InferenceMetric, MetricReading
from tests.backends.prometheus.conftest import FakeApi

QUEUE = InferenceMetric.QUEUE_DEPTH
LATENCY = InferenceMetric.LATENCY_P95
GPU = InferenceMetric.GPU_UTILIZATION


@pytest.mark.parametrize(
    ("serving", "selectors"),
    [
        (
            ServingPods("ml", "Deployment", "chat", ("chat-1", "chat-0"), frozenset({"chat-0"})),
            ['namespace="ml", pod=~"chat-0|chat-1"', 'namespace="ml", deployment="chat"'],
        ),
        (
            ServingPods("ml", "StatefulSet", "db.v2", ("db.v2-0",)),
            ['namespace="ml", pod=~"db\\\\.v2-0"', 'namespace="ml", statefulset="db.v2"'],
        ),
        (ServingPods("ml", "ReplicaSet", "rs"), ['namespace="ml", replicaset="rs"']),
    ],
    ids=["deployment", "dots-escaped", "no-pods"],
)
def test_a_workloads_series_are_its_pods_and_those_naming_it(
    serving: ServingPods, selectors: list[str]
) -> None:
    assert series_selectors(serving) == selectors


def test_gpu_utilisation_is_read_of_pods_only() -> None:
    with pytest.raises(ValueError, match="has none"):
        metric_query(GPU, ServingPods("ml", "Deployment", "chat"))


def test_ready_pods_must_be_its_pods() -> None:
    with pytest.raises(ValueError, match=r"ready pods \['x'\]"):
        ServingPods("ml", "Deployment", "chat", ("chat-0",), frozenset({"x"}))


def test_the_queue_depth_asked_and_read(fake_api: FakeApi) -> None:
    serving = ServingPods("ml", "Deployment", "chat", ("chat-0", "chat-1"), frozenset({"chat-0"}))
    fake_api.answer_vector(({"pod": "chat-0"}, "5"), ({"pod": "chat-1"}, "2"), ({}, "4"))
    reader = PrometheusInferenceMetrics(PrometheusSeries(fake_api.url))
    readings = reader.read(serving, [QUEUE], 1700000000.0)
    assert readings == {QUEUE: MetricReading((5.0,), 11.0)}
    (asked,) = fake_api.asked
    assert asked.one("query") == metric_query(QUEUE, serving)
    assert asked.one("time") == "1700000000.0"


@pytest.mark.parametrize(
    ("value", "reading"),
    [("0.8", MetricReading((), 0.8)), ("NaN", MetricReading()), ("+Inf", MetricReading())],
    ids=["value", "no-requests", "infinite"],
)
def test_a_latency_without_requests_is_no_value(
    fake_api: FakeApi, value: str, reading: MetricReading
) -> None:
    fake_api.answer_vector(({}, value))
    reader = PrometheusInferenceMetrics(PrometheusSeries(fake_api.url))
    serving = ServingPods("ml", "Deployment", "chat", ("chat-0",), frozenset({"chat-0"}))
    assert reader.read(serving, [LATENCY], 0.0) == {LATENCY: reading}


def test_no_series_is_no_value_not_zero(fake_api: FakeApi) -> None:
    reader = PrometheusInferenceMetrics(PrometheusSeries(fake_api.url))
    serving = ServingPods("ml", "Deployment", "chat", ("chat-0",), frozenset({"chat-0"}))
    assert reader.read(serving, [QUEUE, GPU], 0.0) == {
        QUEUE: MetricReading(),
        GPU: MetricReading(),
    }
    # No pod, nothing asked of GPU utilisation.
    fake_api.asked.clear()
    assert reader.read(ServingPods("ml", "Deployment", "chat"), [GPU], 0.0) == {
        GPU: MetricReading()
    }
    assert fake_api.asked == []


def test_a_prometheus_that_is_down_raises(fake_api: FakeApi) -> None:
    fake_api.answer_json({"status": "error", "errorType": "unavailable", "error": "x"}, 503)
    reader = PrometheusInferenceMetrics(PrometheusSeries(fake_api.url))
    serving = ServingPods("ml", "Deployment", "chat")
    with pytest.raises(PrometheusUnavailableError, match="HTTP 503"):
        reader.read(serving, [QUEUE], 0.0)
