"""How an inference workload's replica count is autoscaled: plain data.

Owns the metrics gpufleet scales on (:class:`InferenceMetric`, with the names it exports them
under), a metric with its target (:class:`MetricTarget`, as ``autoscaling/v2``'s
``MetricSpec`` and ``MetricTarget`` say it), the scaling behaviour (:class:`Behavior`: per
direction a stabilisation window, rate policies and ``selectPolicy``, with Kubernetes'
defaults), scale to zero (:class:`ScaleToZero`, KEDA's activation and ``cooldownPeriod``), the
whole :class:`AutoscalingSpec` of one workload (bounds, metrics, behaviour, the model-load time
of a new replica), and what a world measured at one moment (:class:`MetricReading`).

Reading specs from annotations, HorizontalPodAutoscalers and KEDA ScaledObjects is
:mod:`gpufleet.io.kube.autoscaling`'s; deciding is :mod:`gpufleet.elastic.replicas`'; scaling is the
world's. Nothing here reads a clock or a metric source.

The metrics, as gpufleet exports them and as an HPA's or a KEDA trigger's query names them,
each with its *natural figure* (the one number for the whole workload):

* ``gpufleet_inference_queue_depth``: requests outstanding (waiting, or being served), a gauge
  per replica; in all: the sum, the router's queue included (what wakes a workload at zero
  replicas). Being served counts too, as Knative's concurrency does: a target on requests
  waiting alone reads 0 whenever capacity suffices and so asks for the minimum, then for the
  maximum once the queue builds again (the flapping a waiting-only target shows);
* ``gpufleet_inference_requests_per_second``: requests arriving per second, per replica (the
  rate of the counter ``gpufleet_inference_requests_total``); in all: the sum;
* ``gpufleet_inference_latency_seconds``: request latency, a histogram; as a target, the 95th
  percentile of all the workload's requests;
* ``DCGM_FI_DEV_GPU_UTIL``: GPU utilisation in percent, a replica's the mean over its GPUs
  (``gpufleet_workload_gpu_util``); in all: the mean over the replicas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.model.times import format_duration
from gpufleet.model.workload import workload_key


class InferenceMetric(StrEnum):
    """A metric an inference workload scales on, by the name gpufleet exports it under."""

    QUEUE_DEPTH = "gpufleet_inference_queue_depth"
    REQUESTS_PER_SECOND = "gpufleet_inference_requests_per_second"
    LATENCY_P95 = "gpufleet_inference_latency_seconds"
    GPU_UTILIZATION = "DCGM_FI_DEV_GPU_UTIL"

    @property
    def words(self) -> str:
        return _WORDS[self]

    @property
    def unit(self) -> str:
        """What follows a value in words: ``s``, ``%``, `` req/s`` or nothing."""
        return _UNITS[self]

    @property
    def natural(self) -> Aggregate:
        """How the workload's one figure is made of its replicas' values."""
        return _NATURAL[self]

    def show(self, value: float) -> str:
        """A value in words: ``42``, ``3.5 req/s``, ``0.82s``, ``71%``."""
        if self is InferenceMetric.LATENCY_P95:
            return f"{value:.3g}s"
        return f"{value:.4g}{self.unit}"


class Aggregate(StrEnum):
    """How one figure is made of the replicas' values: PromQL's aggregation operators, and the
    workload's 95th percentile of latency (``histogram_quantile(0.95, ...)``), which only a
    world can give (a quantile is not made of the replicas' quantiles)."""

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    P95 = "p95"


_WORDS = {
    InferenceMetric.QUEUE_DEPTH: "queue depth",
    InferenceMetric.REQUESTS_PER_SECOND: "requests per second",
    InferenceMetric.LATENCY_P95: "p95 latency",
    InferenceMetric.GPU_UTILIZATION: "GPU utilisation",
}
_UNITS = {
    InferenceMetric.QUEUE_DEPTH: "",
    InferenceMetric.REQUESTS_PER_SECOND: " req/s",
    InferenceMetric.LATENCY_P95: "s",
    InferenceMetric.GPU_UTILIZATION: "%",
}
_NATURAL = {
    InferenceMetric.QUEUE_DEPTH: Aggregate.SUM,
    InferenceMetric.REQUESTS_PER_SECOND: Aggregate.SUM,
    InferenceMetric.LATENCY_P95: Aggregate.P95,
    InferenceMetric.GPU_UTILIZATION: Aggregate.AVG,
}
#: Metrics that can wake a workload at zero replicas: only requests waiting or arriving exist
#: then.
TRAFFIC_METRICS = frozenset({InferenceMetric.QUEUE_DEPTH, InferenceMetric.REQUESTS_PER_SECOND})


class MetricSource(StrEnum):
    """Where a value comes from, as ``autoscaling/v2``'s metric types: ``Pods``, each ready
    replica's own value; ``Object`` and ``External``, one figure for the whole workload."""

    PODS = "Pods"
    OBJECT = "Object"
    EXTERNAL = "External"

    @property
    def per_replica(self) -> bool:
        return self is MetricSource.PODS


class TargetType(StrEnum):
    """How a value is compared with its target, as ``autoscaling/v2``'s ``MetricTarget``:
    ``Value`` (the workload's figure), ``AverageValue`` (per replica) and ``Utilization``
    (per replica, in percent of what it holds: GPU utilisation)."""

    VALUE = "Value"
    AVERAGE_VALUE = "AverageValue"
    UTILIZATION = "Utilization"


@dataclass(frozen=True, slots=True)
class MetricTarget:
    """One metric and its target. ``aggregate`` (for a workload figure: Object and External)
    says how the figure is made of the replicas' values; None is the metric's natural figure.
    ``activation_threshold``: with scale to zero, the workload wakes when its figure is above
    this (KEDA's ``activationThreshold``: strictly above, 0 by default)."""

    metric: InferenceMetric
    source: MetricSource
    target_type: TargetType
    value: float
    aggregate: Aggregate | None = None
    activation_threshold: float = 0.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.value) or self.value <= 0:
            raise ValueError(f"a target must be above 0, got {self.value}")
        if not math.isfinite(self.activation_threshold) or self.activation_threshold < 0:
            raise ValueError(
                f"an activation threshold must be 0 or more, got {self.activation_threshold}"
            )
        if self.source.per_replica and self.target_type is TargetType.VALUE:
            raise ValueError("a per-replica (Pods) metric takes an AverageValue target")
        if not self.source.per_replica and self.target_type is TargetType.UTILIZATION:
            raise ValueError("a Utilization target is per replica (Pods)")
        if self.aggregate is Aggregate.P95 and self.metric is not InferenceMetric.LATENCY_P95:
            raise ValueError(f"a p95 is taken of latency only, not of {self.metric.words}")
        if self.metric is InferenceMetric.LATENCY_P95 and self.source.per_replica:
            raise ValueError("p95 latency is the workload's figure (Object or External)")

    @property
    def figure(self) -> Aggregate:
        """How the workload's figure of this metric is made."""
        return self.aggregate or self.metric.natural

    def describe(self) -> str:
        """``queue depth 10 per replica``, ``p95 latency 0.5s``."""
        if self.target_type is TargetType.VALUE:
            return f"{self.metric.words} {self.metric.show(self.value)}"
        return f"{self.metric.words} {self.metric.show(self.value)} per replica"


class PolicyType(StrEnum):
    """A rate policy's unit: replicas (``Pods``) or percent of the replicas at the period's
    start (``Percent``)."""

    PODS = "Pods"
    PERCENT = "Percent"


class SelectPolicy(StrEnum):
    """Which policy wins: the one allowing the most change (``Max``), the least (``Min``), or
    none: no scaling in that direction (``Disabled``)."""

    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


#: Kubernetes' bounds (pkg/apis/autoscaling/validation).
MAX_PERIOD_S = 1800
MAX_STABILIZATION_WINDOW_S = 3600
#: The HPA controller's --horizontal-pod-autoscaler-tolerance.
DEFAULT_TOLERANCE = 0.1


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """At most ``value`` replicas (or percent) of change within any ``period_s`` seconds."""

    type: PolicyType
    value: int
    period_s: int

    def __post_init__(self) -> None:
        if self.value <= 0:
            raise ValueError(f"a policy's value must be above 0, got {self.value}")
        if not 0 < self.period_s <= MAX_PERIOD_S:
            raise ValueError(
                f"a policy's period must be 1 to {MAX_PERIOD_S} seconds, got {self.period_s}"
            )

    def describe(self) -> str:
        """``Pods 4 per 15s``, ``Percent 100 per 1m00s``."""
        return f"{self.type} {self.value} per {format_duration(self.period_s)}"


@dataclass(frozen=True, slots=True)
class ScalingRules:
    """One direction's behaviour (``HPAScalingRules``)."""

    stabilization_window_s: int
    policies: tuple[ScalingPolicy, ...]
    select_policy: SelectPolicy = SelectPolicy.MAX
    tolerance: float = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        if not 0 <= self.stabilization_window_s <= MAX_STABILIZATION_WINDOW_S:
            raise ValueError(
                f"a stabilization window must be 0 to {MAX_STABILIZATION_WINDOW_S} seconds, "
                f"got {self.stabilization_window_s}"
            )
        if not self.policies:
            raise ValueError("must specify at least one policy")
        if not math.isfinite(self.tolerance) or not 0 <= self.tolerance < 1:
            raise ValueError(f"a tolerance must be 0 or more and below 1, got {self.tolerance}")

    @property
    def longest_period_s(self) -> int:
        return max(policy.period_s for policy in self.policies)


#: Kubernetes' defaults (pkg/apis/autoscaling/v2/defaults.go): scale up at once, by 4 replicas
#: or 100% every 15 s, whichever is more; scale down after 5 minutes of lower
#: recommendations (the controller's --horizontal-pod-autoscaler-downscale-stabilization),
#: by up to 100% every 15 s.
DEFAULT_SCALE_UP = ScalingRules(
    0, (ScalingPolicy(PolicyType.PODS, 4, 15), ScalingPolicy(PolicyType.PERCENT, 100, 15))
)
DEFAULT_SCALE_DOWN = ScalingRules(300, (ScalingPolicy(PolicyType.PERCENT, 100, 15),))


@dataclass(frozen=True, slots=True)
class Behavior:
    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN

    @property
    def longest_period_s(self) -> int:
        return max(self.scale_up.longest_period_s, self.scale_down.longest_period_s)

    @property
    def longest_window_s(self) -> int:
        return max(self.scale_up.stabilization_window_s, self.scale_down.stabilization_window_s)


#: KEDA's defaults (cooldownPeriod, initialCooldownPeriod, pollingInterval).
DEFAULT_COOLDOWN_S = 300.0
DEFAULT_POLLING_INTERVAL_S = 30.0
#: The HPA controller's --horizontal-pod-autoscaler-sync-period.
DEFAULT_SYNC_PERIOD_S = 15.0
#: How long a new replica takes to load its model before it serves, unless told: a model of a
#: few billion parameters read from a node's disk and moved to the GPU.
DEFAULT_MODEL_LOAD_S = 60.0


@dataclass(frozen=True, slots=True)
class ScaleToZero:
    """The workload idles at zero replicas while no metric is above its activation threshold
    (KEDA): the first request wakes it, to ``min_replicas``; it goes back to zero once no metric
    has been active for ``cooldown_s``, or, never active since the autoscaler started, after
    ``initial_cooldown_s``. Activity is looked at every ``polling_interval_s`` (KEDA's
    ``pollingInterval``), whatever the calls' cadence."""

    cooldown_s: float = DEFAULT_COOLDOWN_S
    initial_cooldown_s: float = 0.0
    polling_interval_s: float = DEFAULT_POLLING_INTERVAL_S

    def __post_init__(self) -> None:
        for name, value in (
            ("cooldown", self.cooldown_s),
            ("initial cooldown", self.initial_cooldown_s),
        ):
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"a {name} must be 0 seconds or more, got {value}")
        if not math.isfinite(self.polling_interval_s) or self.polling_interval_s <= 0:
            raise ValueError(
                f"a polling interval must be above 0 seconds, got {self.polling_interval_s}"
            )


@dataclass(frozen=True, slots=True)
class ScaleTarget:
    """The object whose replicas are scaled (``scaleTargetRef``)."""

    kind: str
    name: str
    namespace: str = "default"

    @property
    def key(self) -> str:
        """The workload key of the object: ``namespace/Kind/name``."""
        return workload_key(self.namespace, self.name, self.kind)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class AutoscalingSpec:
    """How one workload is autoscaled.

    It runs between ``min_replicas`` (at least 1) and ``max_replicas`` while active; with
    ``scale_to_zero``, it idles at 0 while no metric is active. A new replica serves only after
    ``model_load_s``. The world asks for a decision every ``sync_period_s`` (the HPA's 15 s;
    a ScaledObject's ``pollingInterval``); ``declared_by`` names what declared it
    (``HorizontalPodAutoscaler ml/llm``), for explanations.
    """

    target: ScaleTarget
    min_replicas: int
    max_replicas: int
    metrics: tuple[MetricTarget, ...]
    behavior: Behavior = field(default_factory=Behavior)
    scale_to_zero: ScaleToZero | None = None
    model_load_s: float = DEFAULT_MODEL_LOAD_S
    sync_period_s: float = DEFAULT_SYNC_PERIOD_S
    declared_by: str = ""

    def __post_init__(self) -> None:
        if self.min_replicas < 1:
            raise ValueError(
                f"min replicas must be 1 or more (0 is scale to zero), got {self.min_replicas}"
            )
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"max replicas ({self.max_replicas}) must be at least min replicas "
                f"({self.min_replicas})"
            )
        if not self.metrics:
            raise ValueError("expected at least one metric")
        if not math.isfinite(self.model_load_s) or self.model_load_s < 0:
            raise ValueError(
                f"a model load time must be 0 seconds or more, got {self.model_load_s}"
            )
        if not math.isfinite(self.sync_period_s) or self.sync_period_s <= 0:
            raise ValueError(f"a sync period must be above 0 seconds, got {self.sync_period_s}")
        if self.scale_to_zero is not None and not any(
            m.metric in TRAFFIC_METRICS for m in self.metrics
        ):
            raise ValueError(
                "scale to zero needs a queue depth or requests-per-second metric: at zero "
                "replicas only requests waiting or arriving can wake the workload"
            )

    @property
    def floor(self) -> int:
        """The fewest replicas it may run: 0 with scale to zero, else ``min_replicas``."""
        return 0 if self.scale_to_zero is not None else self.min_replicas


@dataclass(frozen=True, slots=True)
class MetricReading:
    """What a world measured of one metric at one moment: ``replicas``, one value for each
    ready replica that reported one (a ready replica without a value is *missing*; a replica
    still loading its model reports none), and ``workload``, the workload's natural figure
    when the world has it (the router's queue counts here, so it is what a workload at zero
    replicas reports). Values are 0 or more."""

    replicas: tuple[float, ...] = ()
    workload: float | None = None

    def __post_init__(self) -> None:
        values = (*self.replicas, *(() if self.workload is None else (self.workload,)))
        for value in values:
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"a metric value must be finite and 0 or more, got {value}")

    def figure(self, metric: InferenceMetric, aggregate: Aggregate) -> float | None:
        """The workload's figure made by ``aggregate``: the world's own figure when it is the
        metric's natural one and given, else made of the replicas' values (None when it
        cannot be: no replica reported, or a p95 the world did not give)."""
        if aggregate is metric.natural and self.workload is not None:
            return self.workload
        if not self.replicas or aggregate is Aggregate.P95:
            return None
        if aggregate is Aggregate.SUM:
            return math.fsum(self.replicas)
        if aggregate is Aggregate.AVG:
            return math.fsum(self.replicas) / len(self.replicas)
        return max(self.replicas) if aggregate is Aggregate.MAX else min(self.replicas)
