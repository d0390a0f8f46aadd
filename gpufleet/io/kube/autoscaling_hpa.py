"""``autoscaling/v2`` HorizontalPodAutoscaler objects read into
:class:`~gpufleet.model.autoscaling.AutoscalingSpec`, and the ``behavior`` schema a KEDA
ScaledObject shares.

Owns the format (pydantic, ``extra="forbid"``: Kubernetes' own fields, each checked as the API
server checks it) and its meaning in gpufleet:

* ``scaleTargetRef``: a Deployment, StatefulSet or ReplicaSet (``apps/v1``);
* ``minReplicas`` (default 1; 0 is scale to zero, Kubernetes' alpha ``HPAScaleToZero``, which
  needs an Object or External metric: gpufleet wakes the workload when a queue-depth or
  request-rate figure is above 0 and lets it go to zero after the scale-down stabilisation
  window without one) and ``maxReplicas`` (at least ``minReplicas``);
* ``metrics``: ``Pods`` (``AverageValue``), ``Object`` and ``External`` (``Value`` or
  ``AverageValue``) of a metric gpufleet knows (:data:`HPA_METRICS`); an Object's
  ``describedObject`` and a metric's ``selector`` stand for the workload's own figure and are
  not used further. ``Resource`` and ``ContainerResource`` metrics are refused: gpufleet does
  not measure CPU or memory, and metrics-server serves nothing for ``nvidia.com/gpu`` (GPU
  utilisation is a ``Pods`` metric, ``DCGM_FI_DEV_GPU_UTIL``, as prometheus-adapter serves
  dcgm-exporter's series). With no ``metrics`` Kubernetes scales on CPU: refused too;
* ``behavior``: ``scaleUp`` and ``scaleDown`` (``stabilizationWindowSeconds``,
  ``selectPolicy``, ``policies`` of ``Pods`` or ``Percent`` per ``periodSeconds``, and
  ``tolerance``), each field that is not given taking Kubernetes' default
  (:data:`~gpufleet.model.autoscaling.DEFAULT_SCALE_UP`, ``DEFAULT_SCALE_DOWN``);
* ``status``: ignored.

An unknown metric names the file, the object and the field, and lists the known names. It
decides nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.fields import check_object_fields
from gpufleet.io.manifests import Context, named_object
from gpufleet.io.quantities import parse_quantity
from gpufleet.io.validation import validation_error
from gpufleet.model.autoscaling import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    DEFAULT_SYNC_PERIOD_S,
    TRAFFIC_METRICS,
    AutoscalingSpec,
    Behavior,
    InferenceMetric,
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

KIND = "HorizontalPodAutoscaler"
API_VERSIONS = ("autoscaling/v2",)
SPEC_FIELDS = ("scaleTargetRef", "minReplicas", "maxReplicas", "metrics", "behavior")
#: The kinds gpufleet scales, and their API version.
SCALABLE_KINDS = {"Deployment": "apps/v1", "StatefulSet": "apps/v1", "ReplicaSet": "apps/v1"}
#: Metric names an HPA (through an adapter) or a query may use, and what they are.
HPA_METRICS = {
    InferenceMetric.QUEUE_DEPTH.value: InferenceMetric.QUEUE_DEPTH,
    InferenceMetric.REQUESTS_PER_SECOND.value: InferenceMetric.REQUESTS_PER_SECOND,
    InferenceMetric.LATENCY_P95.value: InferenceMetric.LATENCY_P95,
    InferenceMetric.GPU_UTILIZATION.value: InferenceMetric.GPU_UTILIZATION,
    "gpufleet_workload_gpu_util": InferenceMetric.GPU_UTILIZATION,
}
_RESOURCE_REFUSAL = (
    "gpufleet does not measure CPU or memory, and metrics-server serves no nvidia.com/gpu "
    "utilisation: for GPU utilisation use a Pods metric DCGM_FI_DEV_GPU_UTIL (AverageValue, "
    "percent), as prometheus-adapter serves dcgm-exporter's series"
)


def known_metrics() -> str:
    return ", ".join(HPA_METRICS)


def _quantity(value: object) -> float:
    if value is None:
        raise ValueError("expected a quantity, got nothing")
    number = float(parse_quantity(value))
    if not math.isfinite(number):
        raise ValueError(f"expected a finite quantity, got {quoted(value)}")
    return number


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class PolicySpec(Strict):
    type: PolicyType
    value: int = Field(gt=0, strict=True)
    period_seconds: int = Field(alias="periodSeconds", gt=0, le=1800, strict=True)


class RulesSpec(Strict):
    """``HPAScalingRules``: a field not given takes the direction's default."""

    stabilization_window_seconds: int | None = Field(
        default=None, alias="stabilizationWindowSeconds", ge=0, le=3600, strict=True
    )
    select_policy: SelectPolicy | None = Field(default=None, alias="selectPolicy")
    policies: list[PolicySpec] | None = None
    tolerance: float | None = None

    @field_validator("policies")
    @classmethod
    def _some_policy(cls, value: list[PolicySpec] | None) -> list[PolicySpec] | None:
        if value is not None and not value:
            raise ValueError(
                "must specify at least one policy (leave policies out for the defaults)"
            )
        return value

    @field_validator("tolerance", mode="before")
    @classmethod
    def _tolerance(cls, value: object) -> float | None:
        if value is None:
            return None
        number = _quantity(value)
        if not 0 <= number < 1:
            raise ValueError(f"expected 0 or more and below 1, got {quoted(value)}")
        return number

    def rules(self, defaults: ScalingRules) -> ScalingRules:
        policies = defaults.policies
        if self.policies is not None:
            policies = tuple(
                ScalingPolicy(p.type, p.value, p.period_seconds) for p in self.policies
            )
        return ScalingRules(
            defaults.stabilization_window_s
            if self.stabilization_window_seconds is None
            else self.stabilization_window_seconds,
            policies,
            defaults.select_policy if self.select_policy is None else self.select_policy,
            defaults.tolerance if self.tolerance is None else self.tolerance,
        )


class BehaviorSpec(Strict):
    scale_up: RulesSpec | None = Field(default=None, alias="scaleUp")
    scale_down: RulesSpec | None = Field(default=None, alias="scaleDown")

    def behavior(self) -> Behavior:
        up = DEFAULT_SCALE_UP if self.scale_up is None else self.scale_up.rules(DEFAULT_SCALE_UP)
        down = DEFAULT_SCALE_DOWN
        if self.scale_down is not None:
            down = self.scale_down.rules(DEFAULT_SCALE_DOWN)
        return Behavior(up, down)


class TargetRefSpec(Strict):
    api_version: str | None = Field(default=None, alias="apiVersion")
    kind: str = Field(min_length=1)
    name: str = Field(min_length=1)


class MetricIdentifierSpec(Strict):
    name: str = Field(min_length=1)
    selector: dict[str, Any] | None = None


class TargetSpec(Strict):
    type: Literal["Utilization", "Value", "AverageValue"]
    value: float | None = None
    average_value: float | None = Field(default=None, alias="averageValue")
    average_utilization: int | None = Field(default=None, alias="averageUtilization", gt=0)

    @field_validator("value", "average_value", mode="before")
    @classmethod
    def _quantities(cls, value: object) -> float | None:
        return None if value is None else _quantity(value)


class PodsSource(Strict):
    metric: MetricIdentifierSpec
    target: TargetSpec


class ObjectSource(Strict):
    described_object: TargetRefSpec = Field(alias="describedObject")
    metric: MetricIdentifierSpec
    target: TargetSpec


class ExternalSource(Strict):
    metric: MetricIdentifierSpec
    target: TargetSpec


class ResourceSource(Strict):
    name: str
    target: TargetSpec


class ContainerResourceSource(Strict):
    name: str
    container: str
    target: TargetSpec


class MetricSpecModel(Strict):
    type: Literal["Resource", "ContainerResource", "Pods", "Object", "External"]
    resource: ResourceSource | None = None
    container_resource: ContainerResourceSource | None = Field(
        default=None, alias="containerResource"
    )
    pods: PodsSource | None = None
    object_: ObjectSource | None = Field(default=None, alias="object")
    external: ExternalSource | None = None


class HpaSpec(Strict):
    """``spec`` of a HorizontalPodAutoscaler."""

    scale_target_ref: TargetRefSpec = Field(alias="scaleTargetRef")
    min_replicas: int = Field(default=1, alias="minReplicas", ge=0, strict=True)
    max_replicas: int = Field(alias="maxReplicas", ge=1, strict=True)
    metrics: list[MetricSpecModel] | None = None
    behavior: BehaviorSpec | None = None


def parse_spec(model: type[Strict], spec: Mapping[str, Any], context: Context, prefix: str) -> Any:
    """``spec`` validated by ``model``; the first problem as an InputError at ``prefix.field``."""
    try:
        return model.model_validate(spec)
    except ValidationError as error:
        found = validation_error(error, spec, context.source, context.location, model)
        field = prefix if found.field is None else f"{prefix}.{found.field}"
        raise InputError(found.source, found.reason, found.location, field) from None


def scale_target(ref: TargetRefSpec, namespace: str, context: Context, field: str) -> ScaleTarget:
    """The workload a ``scaleTargetRef`` names, checked to be one gpufleet scales."""
    version = SCALABLE_KINDS.get(ref.kind)
    if version is None:
        raise context.error(
            f"{field}.kind",
            f"gpufleet scales {', '.join(SCALABLE_KINDS)}, got {quoted(ref.kind)}",
        )
    if ref.api_version is not None and ref.api_version != version:
        raise context.error(
            f"{field}.apiVersion",
            f"expected {version} for a {ref.kind}, got {quoted(ref.api_version)}",
        )
    context.name(ref.name, f"{field}.name")
    return ScaleTarget(ref.kind, ref.name, namespace)


def metric_of(name: str, context: Context, field: str) -> InferenceMetric:
    """The metric a name means, or an InputError listing the known names."""
    metric = HPA_METRICS.get(name)
    if metric is None:
        raise context.error(field, f"unknown metric {quoted(name)} (known: {known_metrics()})")
    return metric


def hpa_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> AutoscalingSpec:
    """One HorizontalPodAutoscaler object (see the module docstring)."""
    context, name, namespace = named_object(obj, source, location, KIND, API_VERSIONS)
    check_object_fields(context, obj, SPEC_FIELDS)
    spec: HpaSpec = parse_spec(
        HpaSpec, context.mapping(obj.get("spec"), "spec", required=True), context, "spec"
    )
    target = scale_target(spec.scale_target_ref, namespace, context, "spec.scaleTargetRef")
    if spec.max_replicas < spec.min_replicas:
        raise context.error(
            "spec.maxReplicas",
            f"must be at least minReplicas ({spec.min_replicas}), got {spec.max_replicas}",
        )
    if not spec.metrics:
        raise context.error(
            "spec.metrics",
            "required: without metrics Kubernetes scales on CPU, which gpufleet does not "
            f"measure; give a Pods, Object or External metric of: {known_metrics()}",
        )
    metrics = tuple(_metric(m, context, f"spec.metrics[{i}]") for i, m in enumerate(spec.metrics))
    behavior = Behavior() if spec.behavior is None else spec.behavior.behavior()
    scale_to_zero = None
    if spec.min_replicas == 0:
        if not any(m.metric in TRAFFIC_METRICS and not m.source.per_replica for m in metrics):
            raise context.error(
                "spec.minReplicas",
                "0 (scale to zero) needs an Object or External metric of queue depth or "
                "requests per second: at zero replicas only requests waiting or arriving can "
                "wake the workload",
            )
        scale_to_zero = ScaleToZero(
            cooldown_s=float(behavior.scale_down.stabilization_window_s),
            polling_interval_s=DEFAULT_SYNC_PERIOD_S,
        )
    return AutoscalingSpec(
        target,
        max(spec.min_replicas, 1),
        spec.max_replicas,
        metrics,
        behavior,
        scale_to_zero,
        declared_by=f"{KIND} {namespace}/{name}",
    )


def _metric(spec: MetricSpecModel, context: Context, field: str) -> MetricTarget:
    sources = {
        "Resource": spec.resource,
        "ContainerResource": spec.container_resource,
        "Pods": spec.pods,
        "Object": spec.object_,
        "External": spec.external,
    }
    given = [kind for kind, value in sources.items() if value is not None]
    member = spec.type[0].lower() + spec.type[1:]
    if given != [spec.type]:
        others = [k for k in given if k != spec.type]
        if others:
            extra = others[0][0].lower() + others[0][1:]
            raise context.error(f"{field}.{extra}", f"must be unset for type {spec.type}")
        raise context.error(f"{field}.{member}", f"required for type {spec.type}")
    if spec.type in ("Resource", "ContainerResource"):
        raise context.error(
            f"{field}.type", f"{spec.type} metrics are not read: {_RESOURCE_REFUSAL}"
        )
    source = sources[spec.type]
    assert isinstance(source, PodsSource | ObjectSource | ExternalSource)
    metric = metric_of(source.metric.name, context, f"{field}.{member}.metric.name")
    where = f"{field}.{member}.target"
    target = source.target
    if spec.type == "Pods" and target.type != "AverageValue":
        raise context.error(f"{where}.type", f"a Pods metric takes AverageValue, got {target.type}")
    if target.type == "Utilization":
        raise context.error(
            f"{where}.type", f"Utilization is for Resource metrics; a {spec.type} metric takes "
            "Value or AverageValue"
        )  # fmt: skip
    wanted, unwanted = ("value", "averageValue")
    if target.type == "AverageValue":
        wanted, unwanted = unwanted, wanted
    value = target.value if target.type == "Value" else target.average_value
    if target.average_utilization is not None:
        raise context.error(f"{where}.averageUtilization", f"must be unset for type {target.type}")
    if (target.average_value if target.type == "Value" else target.value) is not None:
        raise context.error(f"{where}.{unwanted}", f"must be unset for type {target.type}")
    if value is None:
        raise context.error(f"{where}.{wanted}", f"required for type {target.type}")
    if value <= 0:
        raise context.error(f"{where}.{wanted}", f"must be positive, got {value:g}")
    try:
        return MetricTarget(
            metric,
            MetricSource(spec.type),
            TargetType(target.type),
            value,
        )
    except ValueError as error:
        raise context.error(f"{field}.type", str(error)) from None
