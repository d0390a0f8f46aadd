"""autoscaling/v2 HorizontalPodAutoscalers: every metric type gpufleet reads, behaviour with
Kubernetes' defaults field by field, scale to zero, and bad input naming the file, the object
and the field."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.model.autoscaling import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    Behavior,
    MetricSource,
    MetricTarget,
    PolicyType,
    ScaleTarget,
    ScaleToZero,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
    TargetType,
)
from gpufleet.testing.autoscaling_builders import (
    GPU_UTIL,
    LATENCY,
    QUEUE,
    RPS,
    deployment,
    external_metric,
    hpa,
    object_metric,
    pods_metric,
)
from tests.io.autoscaling_helpers import assert_names, read_one, refused
from tests.io.conftest import WriteFile

HPA = "HorizontalPodAutoscaler ml/llm"


def test_an_hpa_reads_every_metric_type(write_file: WriteFile) -> None:
    metrics = [
        pods_metric("DCGM_FI_DEV_GPU_UTIL", "70"),
        pods_metric("gpufleet_inference_queue_depth", 8),
        object_metric("gpufleet_inference_latency_seconds", "500m"),
        object_metric("gpufleet_inference_requests_per_second", "20", average=True),
        external_metric("gpufleet_workload_gpu_util", "60", average=False),
        external_metric("gpufleet_inference_queue_depth", "1k"),
    ]
    spec = read_one(write_file, deployment(), hpa(metrics=metrics, minReplicas=2, max_replicas=12))
    assert spec.target == ScaleTarget("Deployment", "llm", "ml")
    assert (spec.min_replicas, spec.max_replicas, spec.scale_to_zero) == (2, 12, None)
    assert spec.declared_by == HPA
    pods, obj, ext = MetricSource.PODS, MetricSource.OBJECT, MetricSource.EXTERNAL
    average, value = TargetType.AVERAGE_VALUE, TargetType.VALUE
    assert spec.metrics == (
        MetricTarget(GPU_UTIL, pods, average, 70.0),
        MetricTarget(QUEUE, pods, average, 8.0),
        MetricTarget(LATENCY, obj, value, 0.5),
        MetricTarget(RPS, obj, average, 20.0),
        MetricTarget(GPU_UTIL, ext, value, 60.0),
        MetricTarget(QUEUE, ext, average, 1000.0),
    )
    assert spec.behavior == Behavior()


@pytest.mark.parametrize(
    ("behavior", "expected"),
    [
        pytest.param({}, Behavior(), id="empty"),
        pytest.param(
            {"scaleDown": {"stabilizationWindowSeconds": 60}},
            Behavior(DEFAULT_SCALE_UP, ScalingRules(60, DEFAULT_SCALE_DOWN.policies)),
            id="a-window-keeps-the-default-policies",
        ),
        pytest.param(
            {
                "scaleUp": {
                    "selectPolicy": "Min",
                    "policies": [{"type": "Percent", "value": 50, "periodSeconds": 60}],
                    "tolerance": "0.05",
                },
                "scaleDown": {"selectPolicy": "Disabled"},
            },
            Behavior(
                ScalingRules(
                    0, (ScalingPolicy(PolicyType.PERCENT, 50, 60),), SelectPolicy.MIN, 0.05
                ),
                ScalingRules(300, DEFAULT_SCALE_DOWN.policies, SelectPolicy.DISABLED),
            ),
            id="policies-select-and-tolerance",
        ),
    ],
)
def test_behavior_fields_not_given_take_kubernetes_defaults(
    write_file: WriteFile, behavior: dict[str, Any], expected: Behavior
) -> None:
    assert read_one(write_file, deployment(), hpa(behavior=behavior)).behavior == expected


def test_min_replicas_zero_is_scale_to_zero(write_file: WriteFile) -> None:
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 120}}
    spec = read_one(
        write_file,
        deployment(),
        hpa(metrics=[external_metric()], minReplicas=0, behavior=behavior),
    )
    assert (spec.min_replicas, spec.floor) == (1, 0)
    assert spec.scale_to_zero == ScaleToZero(120.0, 0.0, 15.0)


def test_status_is_ignored(write_file: WriteFile) -> None:
    obj = hpa()
    obj["status"] = {"currentReplicas": 3, "desiredReplicas": 3}
    assert read_one(write_file, deployment(), obj).max_replicas == 10


def spec_with(**fields: Any) -> dict[str, Any]:
    obj = hpa()
    obj["spec"].update(fields)
    return obj


def first_metric(**target: Any) -> dict[str, Any]:
    metric = pods_metric()
    metric["pods"]["target"] = target
    return hpa(metrics=[metric])


BAD = {
    "unknown-metric": (
        hpa(metrics=[pods_metric("http_requests_total")]),
        "spec.metrics[0].pods.metric.name",
        "unknown metric 'http_requests_total' (known: gpufleet_inference_queue_depth, "
        "gpufleet_inference_requests_per_second, gpufleet_inference_latency_seconds, "
        "DCGM_FI_DEV_GPU_UTIL, gpufleet_workload_gpu_util)",
    ),
    "unknown-external-metric": (
        hpa(metrics=[pods_metric(), external_metric("queue_messages_ready")]),
        "spec.metrics[1].external.metric.name",
        "unknown metric 'queue_messages_ready'",
    ),
    "cpu-resource-metric": (
        hpa(
            metrics=[
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80},
                    },
                }
            ]
        ),
        "spec.metrics[0].type",
        "Resource metrics are not read: gpufleet does not measure CPU or memory",
    ),
    "no-metrics-means-cpu": (
        hpa(metrics=[]),
        "spec.metrics",
        "required: without metrics Kubernetes scales on CPU",
    ),
    "max-below-min": (
        hpa(minReplicas=5, max_replicas=3),
        "spec.maxReplicas",
        "must be at least minReplicas (5), got 3",
    ),
    "negative-min": (
        hpa(minReplicas=-1),
        "spec.minReplicas",
        "greater than or equal to 0",
    ),
    "max-as-text": (hpa(max_replicas="10"), "spec.maxReplicas", "valid integer"),
    "missing-target": (
        {**hpa(), "spec": {"maxReplicas": 3, "metrics": [pods_metric()]}},
        "spec.scaleTargetRef",
        "required, but missing",
    ),
    "unknown-field": (spec_with(maxReplica=3), "spec.maxReplica", "did you mean 'maxReplicas'?"),
    "unknown-field-at-the-top": (
        {**hpa(), "replicas": 3},
        "replicas",
        "unknown field",
    ),
    "target-kind-not-scaled": (
        spec_with(scaleTargetRef={"kind": "DaemonSet", "name": "llm"}),
        "spec.scaleTargetRef.kind",
        "gpufleet scales Deployment, StatefulSet, ReplicaSet, got 'DaemonSet'",
    ),
    "target-api-version": (
        spec_with(
            scaleTargetRef={"apiVersion": "extensions/v1beta1", "kind": "Deployment", "name": "llm"}
        ),
        "spec.scaleTargetRef.apiVersion",
        "expected apps/v1 for a Deployment",
    ),
    "pods-metric-with-value": (
        first_metric(type="Value", value="3"),
        "spec.metrics[0].pods.target.type",
        "a Pods metric takes AverageValue, got Value",
    ),
    "target-value-missing": (
        first_metric(type="AverageValue"),
        "spec.metrics[0].pods.target.averageValue",
        "required for type AverageValue",
    ),
    "target-value-of-the-other-type": (
        first_metric(type="AverageValue", averageValue="3", value="4"),
        "spec.metrics[0].pods.target.value",
        "must be unset for type AverageValue",
    ),
    "target-negative": (
        first_metric(type="AverageValue", averageValue="-2"),
        "spec.metrics[0].pods.target.averageValue",
        "must be positive, got -2",
    ),
    "target-not-a-quantity": (
        first_metric(type="AverageValue", averageValue="ten"),
        "spec.metrics[0].pods.target.averageValue",
        "not a Kubernetes quantity: 'ten'",
    ),
    "source-of-another-type": (
        hpa(metrics=[{"type": "External", "pods": pods_metric()["pods"]}]),
        "spec.metrics[0].pods",
        "must be unset for type External",
    ),
    "latency-per-pod": (
        hpa(metrics=[pods_metric("gpufleet_inference_latency_seconds", "1")]),
        "spec.metrics[0].type",
        "p95 latency is the workload's figure (Object or External)",
    ),
    "empty-policies": (
        spec_with(behavior={"scaleUp": {"policies": []}}),
        "spec.behavior.scaleUp.policies",
        "must specify at least one policy (leave policies out for the defaults)",
    ),
    "period-too-long": (
        spec_with(
            behavior={
                "scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1801}]}
            }
        ),
        "spec.behavior.scaleDown.policies[0].periodSeconds",
        "less than or equal to 1800",
    ),
    "policy-value-zero": (
        spec_with(
            behavior={
                "scaleDown": {"policies": [{"type": "Pods", "value": 0, "periodSeconds": 15}]}
            }
        ),
        "spec.behavior.scaleDown.policies[0].value",
        "greater than 0",
    ),
    "window-too-long": (
        spec_with(behavior={"scaleDown": {"stabilizationWindowSeconds": 3601}}),
        "spec.behavior.scaleDown.stabilizationWindowSeconds",
        "less than or equal to 3600",
    ),
    "select-policy-spelling": (
        spec_with(behavior={"scaleUp": {"selectPolicy": "max"}}),
        "spec.behavior.scaleUp.selectPolicy",
        "'Max', 'Min' or 'Disabled'",
    ),
    "tolerance-out-of-range": (
        spec_with(behavior={"scaleUp": {"tolerance": "1.5"}}),
        "spec.behavior.scaleUp.tolerance",
        "expected 0 or more and below 1, got '1.5'",
    ),
    "scale-to-zero-without-traffic-metric": (
        hpa(
            minReplicas=0,
            metrics=[external_metric("gpufleet_inference_latency_seconds", "1", average=False)],
        ),
        "spec.minReplicas",
        "0 (scale to zero) needs an Object or External metric of queue depth or requests per "
        "second",
    ),
    "v1-hpa": (
        {**hpa(), "apiVersion": "autoscaling/v1"},
        "apiVersion",
        "expected autoscaling/v2 for a HorizontalPodAutoscaler, got 'autoscaling/v1'",
    ),
}


@pytest.mark.parametrize(("obj", "field", "message"), BAD.values(), ids=BAD.keys())
def test_bad_hpas_name_file_object_and_field(
    write_file: WriteFile, obj: dict[str, Any], field: str, message: str
) -> None:
    path, error = refused(write_file, deployment(), obj)
    assert_names(error, path, 2, HPA, field, message)
