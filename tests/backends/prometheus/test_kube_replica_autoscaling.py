"""The whole way on Kubernetes: a vLLM pod's own metrics, scraped by a real Prometheus that
records them under gpufleet's names (``examples/autoscaling/kubernetes/vllm-rules.yaml``),
read by the plane's replica scaler over HTTP, and its Deployment scaled through the fake API
server's ``scale`` subresource."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.agent.metrics_server import MetricsServer
from gpufleet.backends.prometheus import PrometheusSeries
from gpufleet.backends.prometheus.inference import PrometheusInferenceMetrics
from gpufleet.testing.prometheus import PrometheusProcess, prometheus_binary
from gpufleet.testing.waiting import wait_until
from tests.service.test_kube_autoscaling import (
    ANNOTATIONS,
    NAMESPACE,
    FakeMetrics,
    NoSeries,
    Scaling,
    deployment,
)
from tests.service.test_kube_plane import Cluster, cluster  # noqa: F401  (fixture)

RULES = Path(__file__).resolve().parents[3] / "examples/autoscaling/kubernetes/vllm-rules.yaml"


class VllmExporter:
    """What vLLM's /metrics serves of its scheduler for pod ``chat-0`` (the pod and namespace
    labels as a PodMonitor attaches them), with the counts the test sets."""

    def __init__(self) -> None:
        self.running = 10
        self.waiting = 32
        self._server = MetricsServer("127.0.0.1", 0, self.text)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self._server.port}"

    def text(self) -> str:
        labels = f'namespace="{NAMESPACE}",pod="chat-0",model_name="llama",engine="0"'
        return (
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{{{labels}}} {self.running}\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{labels}}} {self.waiting}\n"
        )

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[PrometheusProcess]:
    if prometheus_binary() is None:
        pytest.skip("no prometheus binary (Debian's `prometheus` package installs it)")
    exporter = VllmExporter()
    try:
        with PrometheusProcess(tmp_path, [exporter.target], rule_files=[RULES]) as server:
            server.wait_for('gpufleet_inference_queue_depth{pod="chat-0"} == 42', timeout_s=30)
            yield server
    finally:
        exporter.close()


def test_a_vllm_queue_in_prometheus_scales_its_deployment(
    cluster: Cluster,  # noqa: F811
    recorded: PrometheusProcess,
) -> None:
    series = PrometheusSeries(recorded.url)
    observatory = cluster.plane.observe_with(NoSeries())
    observatory.replace_rules([])
    scaler = cluster.plane.autoscale_replicas(PrometheusInferenceMetrics(series))
    wait_until(lambda: scaler.synced, "the scaler's informers to list")
    scaling = Scaling(cluster, FakeMetrics(), scaler, observatory, now=time.time())
    cluster.server.create(deployment("chat", 1, ANNOTATIONS))
    scaling.controllers_run()
    scaling.round(after_s=0.0)
    assert scaling.replicas() == 5
    (event,) = scaling.events()
    assert event.message == "New size: 5; reason: queue depth 42 per replica over target 10: 1 -> 5"
