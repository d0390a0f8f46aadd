"""KEDA ScaledObjects: KEDA's defaults, scale to zero and idle replicas, the HPA behaviour they
carry, prometheus triggers on gpufleet's metrics, and bad input naming the file, the object
and the field."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.model.autoscaling import (
    Aggregate,
    Behavior,
    MetricSource,
    MetricTarget,
    ScaleTarget,
    ScaleToZero,
    ScalingRules,
    TargetType,
)
from gpufleet.testing.autoscaling_builders import (
    LATENCY,
    QUEUE,
    RPS,
    deployment,
    prometheus_trigger,
    scaled_object,
)
from tests.io.autoscaling_helpers import assert_names, read_one, refused
from tests.io.conftest import WriteFile

SCALED_OBJECT = "ScaledObject ml/llm"
P95 = (
    "histogram_quantile(0.95, sum by (le) "
    "(rate(gpufleet_inference_latency_seconds_bucket{deployment='llm'}[2m])))"
)


def test_kedas_defaults(write_file: WriteFile) -> None:
    spec = read_one(write_file, deployment(), scaled_object())
    assert spec.target == ScaleTarget("Deployment", "llm", "ml")
    # minReplicaCount 0 (woken to 1), maxReplicaCount 100, cooldown 300 s, polling 30 s.
    assert (spec.min_replicas, spec.max_replicas, spec.floor) == (1, 100, 0)
    assert spec.scale_to_zero == ScaleToZero(300.0, 0.0, 30.0)
    assert spec.metrics == (
        MetricTarget(QUEUE, MetricSource.EXTERNAL, TargetType.AVERAGE_VALUE, 10.0, Aggregate.SUM),
    )
    assert spec.behavior == Behavior()
    assert spec.declared_by == SCALED_OBJECT


def test_every_field_read(write_file: WriteFile) -> None:
    triggers = [
        prometheus_trigger(activation="2.5"),
        prometheus_trigger(P95, threshold=1.5, metric_type="Value"),
        prometheus_trigger("avg(rate(gpufleet_inference_requests_total[1m]))", threshold="4"),
    ]
    obj = scaled_object(
        triggers=triggers,
        pollingInterval=10,
        cooldownPeriod=600,
        initialCooldownPeriod=120,
        minReplicaCount=0,
        maxReplicaCount=6,
        advanced={
            "restoreToOriginalReplicaCount": True,
            "horizontalPodAutoscalerConfig": {
                "name": "keda-hpa-llm",
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}},
            },
        },
    )
    obj["spec"]["scaleTargetRef"] = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "llm"}
    spec = read_one(write_file, deployment(kind="StatefulSet"), obj)
    assert spec.target == ScaleTarget("StatefulSet", "llm", "ml")
    assert spec.scale_to_zero == ScaleToZero(600.0, 120.0, 10.0)
    assert spec.max_replicas == 6
    ext, average, value = MetricSource.EXTERNAL, TargetType.AVERAGE_VALUE, TargetType.VALUE
    assert spec.metrics == (
        MetricTarget(QUEUE, ext, average, 10.0, Aggregate.SUM, 2.5),
        MetricTarget(LATENCY, ext, value, 1.5, Aggregate.P95),
        MetricTarget(RPS, ext, average, 4.0, Aggregate.AVG),
    )
    assert spec.behavior.scale_down.stabilization_window_s == 60
    assert spec.behavior.scale_down.policies == Behavior().scale_down.policies


@pytest.mark.parametrize(
    ("fields", "min_replicas", "floor"),
    [
        pytest.param({"minReplicaCount": 2}, 2, 2, id="min-2-never-zero"),
        pytest.param({"minReplicaCount": 3, "idleReplicaCount": 0}, 3, 0, id="idle-0-wakes-to-min"),
    ],
)
def test_min_and_idle_replicas(
    write_file: WriteFile, fields: dict[str, Any], min_replicas: int, floor: int
) -> None:
    spec = read_one(write_file, deployment(), scaled_object(**fields))
    assert (spec.min_replicas, spec.floor) == (min_replicas, floor)


def test_scaling_rules_of_the_hpa_config(write_file: WriteFile) -> None:
    behavior = {"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}
    obj = scaled_object(advanced={"horizontalPodAutoscalerConfig": {"behavior": behavior}})
    spec = read_one(write_file, deployment(), obj)
    assert spec.behavior.scale_up == ScalingRules(0, spec.behavior.scale_up.policies)
    assert [(p.value, p.period_s) for p in spec.behavior.scale_up.policies] == [(1, 60)]


def with_trigger(**trigger: Any) -> dict[str, Any]:
    return scaled_object(triggers=[{**prometheus_trigger(), **trigger}])


def with_metadata(**metadata: Any) -> dict[str, Any]:
    trigger = prometheus_trigger()
    trigger["metadata"].update(metadata)
    return scaled_object(triggers=[trigger])


BAD = {
    "cpu-trigger": (
        scaled_object(
            triggers=[{"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}}]
        ),
        "spec.triggers[0].type",
        "gpufleet reads prometheus triggers (its metrics are Prometheus series), got 'cpu'",
    ),
    "unknown-metric-in-query": (
        with_metadata(query="sum(rabbitmq_queue_messages_ready)"),
        "spec.triggers[0].metadata.query",
        "unknown metric 'rabbitmq_queue_messages_ready'",
    ),
    "query-not-mapped": (
        with_metadata(query="sum(gpufleet_inference_queue_depth) / count(up)"),
        "spec.triggers[0].metadata.query",
        "cannot map the query",
    ),
    "query-missing": (
        scaled_object(triggers=[{"type": "prometheus", "metadata": {"threshold": "3"}}]),
        "spec.triggers[0].metadata.query",
        "required: a PromQL query",
    ),
    "metadata-typo": (
        with_metadata(activationTreshold="3"),
        "spec.triggers[0].metadata.activationTreshold",
        "did you mean 'activationThreshold'?",
    ),
    "threshold-missing": (
        scaled_object(triggers=[prometheus_trigger(threshold=None)]),
        "spec.triggers[0].metadata.threshold",
        "required",
    ),
    "threshold-zero": (
        with_metadata(threshold="0"),
        "spec.triggers[0].metadata.threshold",
        "expected a number above 0, got '0'",
    ),
    "threshold-not-a-number": (
        with_metadata(threshold="ten"),
        "spec.triggers[0].metadata.threshold",
        "expected a number, got 'ten'",
    ),
    "negative-activation": (
        with_metadata(activationThreshold="-1"),
        "spec.triggers[0].metadata.activationThreshold",
        "expected a number 0 or more, got '-1'",
    ),
    "utilization-metric-type": (
        with_trigger(metricType="Utilization"),
        "spec.triggers[0].metricType",
        "Utilization is for cpu and memory triggers",
    ),
    "fallback": (
        scaled_object(fallback={"failureThreshold": 3, "replicas": 2}),
        "spec.fallback",
        "not supported: when metrics are missing gpufleet keeps the replica count",
    ),
    "scaling-modifiers": (
        scaled_object(advanced={"scalingModifiers": {"formula": "a + b", "target": "2"}}),
        "spec.advanced.scalingModifiers",
        "not supported",
    ),
    "idle-other-than-zero": (
        scaled_object(idleReplicaCount=1, minReplicaCount=2),
        "spec.idleReplicaCount",
        "KEDA supports only 0 here, got 1",
    ),
    "idle-not-below-min": (
        scaled_object(idleReplicaCount=0),
        "spec.idleReplicaCount",
        "must be less than minReplicaCount (0)",
    ),
    "max-below-min": (
        scaled_object(minReplicaCount=4, maxReplicaCount=2),
        "spec.maxReplicaCount",
        "must be at least minReplicaCount (4), got 2",
    ),
    "negative-cooldown": (
        scaled_object(cooldownPeriod=-5),
        "spec.cooldownPeriod",
        "greater than or equal to 0",
    ),
    "no-triggers": (
        scaled_object(triggers=[]),
        "spec.triggers",
        "at least 1 item",
    ),
    "missing-target": (
        {**scaled_object(), "spec": {"triggers": [prometheus_trigger()]}},
        "spec.scaleTargetRef",
        "required, but missing",
    ),
    "unknown-field": (
        scaled_object(minReplicas=1),
        "spec.minReplicas",
        "did you mean 'minReplicaCount'?",
    ),
    "target-kind": (
        {
            **scaled_object(),
            "spec": {
                "scaleTargetRef": {"kind": "Job", "name": "llm"},
                "triggers": [prometheus_trigger()],
            },
        },
        "spec.scaleTargetRef.kind",
        "gpufleet scales Deployment, StatefulSet, ReplicaSet, got 'Job'",
    ),
    "scale-to-zero-on-latency-only": (
        scaled_object(triggers=[prometheus_trigger(P95, threshold="1", metric_type="Value")]),
        "spec.triggers",
        "scale to zero (minReplicaCount 0, or idleReplicaCount 0) needs a trigger on queue depth",
    ),
    "wrong-api-version": (
        {**scaled_object(), "apiVersion": "keda.k8s.io/v1alpha1"},
        "apiVersion",
        "expected keda.sh/v1alpha1 for a ScaledObject",
    ),
}


@pytest.mark.parametrize(("obj", "field", "message"), BAD.values(), ids=BAD.keys())
def test_bad_scaled_objects_name_file_object_and_field(
    write_file: WriteFile, obj: dict[str, Any], field: str, message: str
) -> None:
    path, error = refused(write_file, deployment(), obj)
    assert_names(error, path, 2, SCALED_OBJECT, field, message)
