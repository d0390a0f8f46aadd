"""KEDA ``keda.sh/v1alpha1`` ScaledObjects read into
:class:`~gpufleet.model.autoscaling.AutoscalingSpec`.

Owns the format (pydantic, ``extra="forbid"``) with KEDA's defaults and its meaning:

* ``scaleTargetRef``: ``name``, ``kind`` (default Deployment), ``apiVersion`` (default
  ``apps/v1``), ``envSourceContainerName`` (not used);
* ``minReplicaCount`` (default 0: scale to zero, woken by an active trigger, to 1) and
  ``maxReplicaCount`` (default 100); ``idleReplicaCount`` 0 with ``minReplicaCount`` N: idle at
  zero, woken to N (KEDA supports no other idle count);
* ``pollingInterval`` (default 30 s: how often activity is looked at), ``cooldownPeriod``
  (300 s) and ``initialCooldownPeriod`` (0 s), as KEDA uses them for scale to zero;
* ``advanced.horizontalPodAutoscalerConfig.behavior``: the HPA's ``behavior``
  (:mod:`gpufleet.io.kube.autoscaling_hpa`); its ``name`` and ``restoreToOriginalReplicaCount`` are
  not used;
* ``triggers``: ``prometheus`` triggers whose ``metadata.query`` asks for one of gpufleet's
  metrics (:mod:`gpufleet.io.kube.promql_metric`), with ``threshold`` (the target) and
  ``activationThreshold`` (default 0), ``metricType`` ``AverageValue`` (KEDA's default) or
  ``Value``; the connection settings (``serverAddress``, ``authenticationRef``...) are not used.

Refused, saying why: other trigger types (gpufleet's metrics are read through Prometheus),
``fallback`` and ``advanced.scalingModifiers`` (not modelled), an ``idleReplicaCount`` other
than 0, and scale to zero without a queue-depth or request-rate trigger (nothing could wake
the workload). Errors name the file, the object and the field. It decides nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from gpufleet.io.errors import quoted
from gpufleet.io.fields import check_object_fields, unknown_field
from gpufleet.io.kube.autoscaling_hpa import BehaviorSpec, Strict, parse_spec, scale_target
from gpufleet.io.kube.autoscaling_hpa import TargetRefSpec as HpaTargetRef
from gpufleet.io.kube.promql_metric import query_metric
from gpufleet.io.manifests import Context, named_object
from gpufleet.model.autoscaling import (
    TRAFFIC_METRICS,
    AutoscalingSpec,
    Behavior,
    MetricSource,
    MetricTarget,
    ScaleToZero,
    TargetType,
)

KIND = "ScaledObject"
API_VERSIONS = ("keda.sh/v1alpha1",)
SPEC_FIELDS = (
    "scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod",
    "idleReplicaCount", "minReplicaCount", "maxReplicaCount", "advanced", "fallback", "triggers",
)  # fmt: skip
#: The prometheus scaler's metadata: what gpufleet uses, and its connection settings.
PROMETHEUS_METADATA = (
    "query", "threshold", "activationThreshold", "serverAddress", "namespace", "queryParameters",
    "customHeaders", "ignoreNullValues", "unsafeSsl", "timeout", "authModes", "cortexOrgID",
    "metricName",
)  # fmt: skip


class KedaTargetRef(Strict):
    name: str = Field(min_length=1)
    kind: str = "Deployment"
    api_version: str = Field(default="apps/v1", alias="apiVersion")
    env_source_container_name: str | None = Field(default=None, alias="envSourceContainerName")


class HpaConfigSpec(Strict):
    name: str | None = None
    behavior: BehaviorSpec | None = None


class AdvancedSpec(Strict):
    restore_to_original_replica_count: bool | None = Field(
        default=None, alias="restoreToOriginalReplicaCount", strict=True
    )
    horizontal_pod_autoscaler_config: HpaConfigSpec | None = Field(
        default=None, alias="horizontalPodAutoscalerConfig"
    )
    scaling_modifiers: dict[str, Any] | None = Field(default=None, alias="scalingModifiers")


class AuthenticationRefSpec(Strict):
    name: str
    kind: str | None = None


class TriggerSpec(Strict):
    type: str = Field(min_length=1)
    name: str | None = None
    metadata: dict[str, str | int | float | bool]
    authentication_ref: AuthenticationRefSpec | None = Field(
        default=None, alias="authenticationRef"
    )
    metric_type: Literal["AverageValue", "Value", "Utilization"] = Field(
        default="AverageValue", alias="metricType"
    )
    use_cached_metrics: bool | None = Field(default=None, alias="useCachedMetrics", strict=True)


class ScaledObjectSpec(Strict):
    """``spec`` of a ScaledObject."""

    scale_target_ref: KedaTargetRef = Field(alias="scaleTargetRef")
    polling_interval: int = Field(default=30, alias="pollingInterval", gt=0, strict=True)
    cooldown_period: int = Field(default=300, alias="cooldownPeriod", ge=0, strict=True)
    initial_cooldown_period: int = Field(
        default=0, alias="initialCooldownPeriod", ge=0, strict=True
    )
    idle_replica_count: int | None = Field(
        default=None, alias="idleReplicaCount", ge=0, strict=True
    )
    min_replica_count: int = Field(default=0, alias="minReplicaCount", ge=0, strict=True)
    max_replica_count: int = Field(default=100, alias="maxReplicaCount", ge=1, strict=True)
    advanced: AdvancedSpec | None = None
    fallback: dict[str, Any] | None = None
    triggers: list[TriggerSpec] = Field(min_length=1)


def scaled_object_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> AutoscalingSpec:
    """One ScaledObject (see the module docstring)."""
    context, name, namespace = named_object(obj, source, location, KIND, API_VERSIONS)
    check_object_fields(context, obj, SPEC_FIELDS)
    spec: ScaledObjectSpec = parse_spec(
        ScaledObjectSpec, context.mapping(obj.get("spec"), "spec", required=True), context, "spec"
    )
    ref = spec.scale_target_ref
    target = scale_target(
        HpaTargetRef.model_validate(
            {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
        ),
        namespace,
        context,
        "spec.scaleTargetRef",
    )
    if spec.fallback is not None:
        raise context.error(
            "spec.fallback",
            "not supported: when metrics are missing gpufleet keeps the replica count, as the "
            "HPA does",
        )
    if spec.advanced is not None and spec.advanced.scaling_modifiers is not None:
        raise context.error(
            "spec.advanced.scalingModifiers",
            "not supported: give each metric as its own trigger (the highest proposal wins)",
        )
    minimum, maximum = spec.min_replica_count, spec.max_replica_count
    if maximum < minimum:
        raise context.error(
            "spec.maxReplicaCount",
            f"must be at least minReplicaCount ({minimum}), got {maximum}",
        )
    idle = spec.idle_replica_count
    if idle is not None:
        if idle != 0:
            raise context.error("spec.idleReplicaCount", f"KEDA supports only 0 here, got {idle}")
        if minimum == 0:
            raise context.error(
                "spec.idleReplicaCount",
                f"must be less than minReplicaCount ({minimum}): give minReplicaCount 1 or more",
            )
    metrics = tuple(
        _trigger(trigger, context, f"spec.triggers[{i}]") for i, trigger in enumerate(spec.triggers)
    )
    behavior = Behavior()
    config = None if spec.advanced is None else spec.advanced.horizontal_pod_autoscaler_config
    if config is not None and config.behavior is not None:
        behavior = config.behavior.behavior()
    scale_to_zero = None
    if minimum == 0 or idle == 0:
        if not any(m.metric in TRAFFIC_METRICS for m in metrics):
            raise context.error(
                "spec.triggers",
                "scale to zero (minReplicaCount 0, or idleReplicaCount 0) needs a trigger on "
                "queue depth or requests per second: at zero replicas only requests waiting or "
                "arriving can wake the workload",
            )
        scale_to_zero = ScaleToZero(
            float(spec.cooldown_period),
            float(spec.initial_cooldown_period),
            float(spec.polling_interval),
        )
    return AutoscalingSpec(
        target,
        max(minimum, 1),
        maximum,
        metrics,
        behavior,
        scale_to_zero,
        declared_by=f"{KIND} {namespace}/{name}",
    )


def _trigger(trigger: TriggerSpec, context: Context, field: str) -> MetricTarget:
    if trigger.type != "prometheus":
        raise context.error(
            f"{field}.type",
            f"gpufleet reads prometheus triggers (its metrics are Prometheus series), got "
            f"{quoted(trigger.type)}",
        )
    if trigger.metric_type == "Utilization":
        raise context.error(
            f"{field}.metricType",
            "Utilization is for cpu and memory triggers; give AverageValue or Value",
        )
    metadata = trigger.metadata
    for key in metadata:
        if key not in PROMETHEUS_METADATA:
            raise context.error(f"{field}.metadata.{key}", unknown_field(key, PROMETHEUS_METADATA))
    query = metadata.get("query")
    if not isinstance(query, str) or not query.strip():
        raise context.error(f"{field}.metadata.query", "required: a PromQL query")
    try:
        found = query_metric(query)
    except ValueError as error:
        raise context.error(f"{field}.metadata.query", str(error)) from None
    threshold = _value(metadata.get("threshold"), context, f"{field}.metadata.threshold", True)
    activation = _value(
        metadata.get("activationThreshold", "0"),
        context,
        f"{field}.metadata.activationThreshold",
        False,
    )
    kind = TargetType.AVERAGE_VALUE if trigger.metric_type == "AverageValue" else TargetType.VALUE
    try:
        return MetricTarget(
            found.metric, MetricSource.EXTERNAL, kind, threshold, found.aggregate, activation
        )
    except ValueError as error:
        raise context.error(f"{field}.metadata.query", str(error)) from None


def _value(value: object, context: Context, field: str, positive: bool) -> float:
    """A number of a trigger's metadata (KEDA's metadata are text; YAML may give numbers)."""
    if value is None:
        raise context.error(field, "required")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise context.error(field, f"expected a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise context.error(field, f"expected a number, got {quoted(value)}") from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "above 0" if positive else "0 or more"
        raise context.error(field, f"expected a number {bound}, got {quoted(value)}")
    return number
