"""The Kubernetes examples of autoscaling a vLLM server (``examples/autoscaling/kubernetes``):
gpufleet's own annotations, a KEDA ScaledObject and an HPA on prometheus-adapter's metrics,
each read by gpufleet's readers as what it says; and every metric they and the adapter's rules
name is one the recording rules record."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpufleet.io.kube.autoscaling import read_autoscaling
from gpufleet.model.autoscaling import (
    Aggregate,
    InferenceMetric,
    MetricSource,
    MetricTarget,
    TargetType,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "autoscaling" / "kubernetes"
QUEUE = InferenceMetric.QUEUE_DEPTH
LATENCY = InferenceMetric.LATENCY_P95
GPU = InferenceMetric.GPU_UTILIZATION
EXT, PODS = MetricSource.EXTERNAL, MetricSource.PODS
AVERAGE, VALUE = TargetType.AVERAGE_VALUE, TargetType.VALUE


@pytest.mark.parametrize(
    ("file", "declared_by", "metrics"),
    [
        (
            "llm-gpufleet.yaml",
            "annotations of Deployment ml-serving/llm",
            (MetricTarget(QUEUE, EXT, AVERAGE, 8.0), MetricTarget(LATENCY, EXT, VALUE, 4.0)),
        ),
        (
            "llm-keda.yaml",
            "ScaledObject ml-serving/llm",
            (
                MetricTarget(QUEUE, EXT, AVERAGE, 8.0, Aggregate.SUM),
                MetricTarget(LATENCY, EXT, VALUE, 4.0, Aggregate.P95),
            ),
        ),
        (
            "llm-hpa.yaml",
            "HorizontalPodAutoscaler ml-serving/llm",
            (MetricTarget(QUEUE, PODS, AVERAGE, 8.0), MetricTarget(GPU, PODS, AVERAGE, 80.0)),
        ),
    ],
    ids=["gpufleet", "keda", "hpa"],
)
def test_each_example_reads_as_it_says(
    file: str, declared_by: str, metrics: tuple[MetricTarget, ...]
) -> None:
    (spec,) = read_autoscaling(EXAMPLES / file)
    assert spec.declared_by == declared_by
    assert (spec.min_replicas, spec.max_replicas, spec.floor) == (1, 6, 1)
    assert spec.metrics == metrics
    assert spec.behavior.scale_down.stabilization_window_s == 600
    assert spec.model_load_s == 180.0


def recorded() -> set[str]:
    rules = yaml.safe_load((EXAMPLES / "vllm-rules.yaml").read_text())
    return {rule["record"] for group in rules["groups"] for rule in group["rules"]}


def test_what_the_examples_read_is_what_the_rules_record() -> None:
    names = recorded()
    assert names == {
        "gpufleet_inference_queue_depth",
        "gpufleet_inference_requests_total",
        "gpufleet_inference_latency_seconds_bucket",
        "gpufleet_workload_gpu_util",
    }
    adapter = yaml.safe_load((EXAMPLES / "prometheus-adapter.yaml").read_text())
    for rule in adapter["rules"]["custom"]:
        (series,) = re.findall(r"^(\w+)\{", rule["seriesQuery"])
        assert series in names, rule["seriesQuery"]
    queried = set()
    for file in ("llm-keda.yaml", "llm-hpa.yaml"):
        text = (EXAMPLES / file).read_text()
        queried |= set(re.findall(r"\b(gpufleet_\w+)", text))
    assert queried <= names, queried - names
