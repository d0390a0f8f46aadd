"""Autoscaling specs, readings and the Kubernetes objects that declare them, built plainly for
tests: a spec with Kubernetes' defaults unless told, rules as Kubernetes' own tests make them
(``generateScalingRules``), scale events spread as they spread them
(``generateEventsUniformDistribution``), and Deployments, HorizontalPodAutoscalers and KEDA
ScaledObjects as plain dicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.elastic.replica_behavior import Timed
from gpufleet.model.autoscaling import (
    Aggregate,
    AutoscalingSpec,
    Behavior,
    InferenceMetric,
    MetricReading,
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

Obj = dict[str, Any]
QUEUE = InferenceMetric.QUEUE_DEPTH
RPS = InferenceMetric.REQUESTS_PER_SECOND
LATENCY = InferenceMetric.LATENCY_P95
GPU_UTIL = InferenceMetric.GPU_UTILIZATION


def per_replica(
    metric: InferenceMetric = QUEUE, target: float = 10.0, utilization: bool = False
) -> MetricTarget:
    """A ``Pods`` metric: each ready replica's value against ``target`` (``AverageValue``, or
    ``Utilization`` in percent)."""
    kind = TargetType.UTILIZATION if utilization else TargetType.AVERAGE_VALUE
    return MetricTarget(metric, MetricSource.PODS, kind, target)


def workload_figure(
    metric: InferenceMetric = QUEUE,
    target: float = 10.0,
    average: bool = True,
    source: MetricSource = MetricSource.EXTERNAL,
    aggregate: Aggregate | None = None,
    activation: float = 0.0,
) -> MetricTarget:
    """An External (or Object) metric: the workload's figure against ``target`` per replica
    (``AverageValue``) or in all (``Value``)."""
    kind = TargetType.AVERAGE_VALUE if average else TargetType.VALUE
    return MetricTarget(metric, source, kind, target, aggregate, activation)


def rules(
    pods: int = 0,
    pods_period: int = 0,
    percent: int = 0,
    percent_period: int = 0,
    window: int = 0,
    select: SelectPolicy = SelectPolicy.MAX,
    tolerance: float = 0.1,
) -> ScalingRules:
    """One direction's rules as Kubernetes' ``generateScalingRules`` makes them: a Pods policy
    when ``pods``, a Percent policy when ``percent``."""
    policies: list[ScalingPolicy] = []
    if pods:
        policies.append(ScalingPolicy(PolicyType.PODS, pods, pods_period))
    if percent:
        policies.append(ScalingPolicy(PolicyType.PERCENT, percent, percent_period))
    return ScalingRules(window, tuple(policies), select, tolerance)


def uniform_events(changes: list[int], period_s: int, now: float) -> tuple[Timed, ...]:
    """Scale events spread over the last ``period_s`` seconds, each in the middle of its share
    of it, at whole seconds (Kubernetes' ``generateEventsUniformDistribution``)."""
    share = period_s / len(changes)
    return tuple(
        Timed(now - int(period_s - share * (i + 1) + share / 2), change)
        for i, change in enumerate(changes)
    )


def autoscaling_spec(
    *metrics: MetricTarget,
    min_replicas: int = 1,
    max_replicas: int = 10,
    behavior: Behavior | None = None,
    scale_to_zero: ScaleToZero | None = None,
    model_load_s: float = 60.0,
    name: str = "llm",
    namespace: str = "ml",
) -> AutoscalingSpec:
    """The autoscaling of Deployment ``namespace/name`` (a queue-depth target of 10 per ready
    replica unless ``metrics`` are given)."""
    return AutoscalingSpec(
        ScaleTarget("Deployment", name, namespace),
        min_replicas,
        max_replicas,
        metrics or (per_replica(),),
        behavior or Behavior(),
        scale_to_zero,
        model_load_s,
    )


def reading(*replicas: float, workload: float | None = None) -> MetricReading:
    return MetricReading(tuple(float(v) for v in replicas), workload)


# ------------------------------------------------------------------ Kubernetes objects
def deployment(
    name: str = "llm",
    namespace: str = "ml",
    replicas: int = 1,
    annotations: Mapping[str, str] | None = None,
    kind: str = "Deployment",
) -> Obj:
    """A Deployment (or StatefulSet, ReplicaSet) of one-GPU replicas."""
    metadata: Obj = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = dict(annotations)
    container = {
        "name": "server",
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": 1}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [container]},
            },
        },
    }


def pods_metric(name: str = QUEUE.value, average_value: object = "10") -> Obj:
    return {
        "type": "Pods",
        "pods": {
            "metric": {"name": name},
            "target": {"type": "AverageValue", "averageValue": average_value},
        },
    }


def external_metric(name: str = QUEUE.value, value: object = "10", average: bool = True) -> Obj:
    target = (
        {"type": "AverageValue", "averageValue": value}
        if average
        else {"type": "Value", "value": value}
    )
    return {"type": "External", "external": {"metric": {"name": name}, "target": target}}


def object_metric(name: str = QUEUE.value, value: object = "10", average: bool = False) -> Obj:
    target = (
        {"type": "AverageValue", "averageValue": value}
        if average
        else {"type": "Value", "value": value}
    )
    return {
        "type": "Object",
        "object": {
            "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "llm"},
            "metric": {"name": name},
            "target": target,
        },
    }


def hpa(
    name: str = "llm",
    namespace: str = "ml",
    target: str = "llm",
    metrics: list[Obj] | None = None,
    max_replicas: object = 10,
    **spec: Any,
) -> Obj:
    """An ``autoscaling/v2`` HorizontalPodAutoscaler of Deployment ``target``; ``spec`` adds or
    replaces fields (``minReplicas=2``, ``behavior={...}``)."""
    body: Obj = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
        "maxReplicas": max_replicas,
        "metrics": [pods_metric()] if metrics is None else metrics,
        **spec,
    }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def prometheus_trigger(
    query: str = f'sum({QUEUE.value}{{deployment="llm"}})',
    threshold: object = "10",
    activation: object | None = None,
    metric_type: str | None = None,
) -> Obj:
    metadata: Obj = {"serverAddress": "http://prometheus:9090", "query": query}
    if threshold is not None:
        metadata["threshold"] = threshold
    if activation is not None:
        metadata["activationThreshold"] = activation
    trigger: Obj = {"type": "prometheus", "metadata": metadata}
    if metric_type is not None:
        trigger["metricType"] = metric_type
    return trigger


def scaled_object(
    name: str = "llm",
    namespace: str = "ml",
    target: str = "llm",
    triggers: list[Obj] | None = None,
    **spec: Any,
) -> Obj:
    """A KEDA ScaledObject of Deployment ``target``; ``spec`` adds or replaces fields."""
    body: Obj = {
        "scaleTargetRef": {"name": target},
        "triggers": [prometheus_trigger()] if triggers is None else triggers,
        **spec,
    }
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }
