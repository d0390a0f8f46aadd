"""Autoscaling declared in files: gpufleet's annotations on a workload, HorizontalPodAutoscalers
and KEDA ScaledObjects, each read into an :class:`~gpufleet.model.autoscaling.AutoscalingSpec`
and joined to the workload it scales.

Owns the annotations (on a Deployment's, StatefulSet's or ReplicaSet's own
``metadata.annotations``)::

    gpufleet.dev/min-replicas: "1"             # default 1; 0: scale to zero, woken by traffic
    gpufleet.dev/max-replicas: "8"             # required
    gpufleet.dev/target-queue-depth: "10"      # requests waiting per replica
    gpufleet.dev/target-rps-per-replica: "4"   # requests per second per replica
    gpufleet.dev/target-latency: 800ms         # p95 latency of the workload's requests
    gpufleet.dev/target-gpu-utilization: "70"  # percent, the mean of the ready replicas'
    gpufleet.dev/scale-up-stabilization: 0s    # default 0s
    gpufleet.dev/scale-down-stabilization: 5m  # default 5m
    gpufleet.dev/scale-to-zero-after: 5m       # min-replicas 0 only: KEDA's cooldownPeriod
    gpufleet.dev/model-load-time: 90s          # default 60s: how long before a new replica serves

(at least one target; several: the highest proposal wins, as in an HPA). Queue depth and
request rate compare the workload's total (the router's waiting requests included) with the
target times the replicas, as an External ``AverageValue`` metric does, so that replicas are
added while new ones still load their model; GPU utilisation is a per-replica average of the
ready ones; latency a ``Value``. The rate policies are Kubernetes' defaults (an HPA object
says others). ``model-load-time`` is the workload's whoever declares its autoscaling (the
annotations, an HPA or a ScaledObject).

And :class:`AutoscalingReader`, which collects those three and the workload objects and joins
them (:meth:`AutoscalingReader.specs`): an autoscaler whose target is not among the objects
read, two autoscalers of one workload (Kubernetes reports ``AmbiguousSelector``; KEDA's
webhook refuses the second), autoscaling annotations on a Pod or Job (nothing to scale) or on
a pod template (they belong on the object) are errors naming the file, the object and the
field. :func:`read_autoscaling` reads files with it. The HPA's format is
:mod:`gpufleet.io.kube.autoscaling_hpa`'s, the ScaledObject's
:mod:`gpufleet.io.kube.autoscaling_keda`'s.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.io.errors import quoted
from gpufleet.io.kube import autoscaling_hpa, autoscaling_keda
from gpufleet.io.kube.pods import WORKLOAD_API_VERSIONS
from gpufleet.io.kube.schema import check_kube_object
from gpufleet.io.manifests import Context, Manifest, input_files, load_manifests, object_name
from gpufleet.io.quantities import parse_duration_seconds
from gpufleet.model.autoscaling import (
    DEFAULT_COOLDOWN_S,
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    DEFAULT_SYNC_PERIOD_S,
    MAX_STABILIZATION_WINDOW_S,
    AutoscalingSpec,
    Behavior,
    InferenceMetric,
    MetricSource,
    MetricTarget,
    ScaleTarget,
    ScaleToZero,
    TargetType,
)

PREFIX = "gpufleet.dev/"
MIN_REPLICAS = f"{PREFIX}min-replicas"
MAX_REPLICAS = f"{PREFIX}max-replicas"
TARGET_QUEUE_DEPTH = f"{PREFIX}target-queue-depth"
TARGET_RPS = f"{PREFIX}target-rps-per-replica"
TARGET_LATENCY = f"{PREFIX}target-latency"
TARGET_GPU_UTILIZATION = f"{PREFIX}target-gpu-utilization"
SCALE_UP_STABILIZATION = f"{PREFIX}scale-up-stabilization"
SCALE_DOWN_STABILIZATION = f"{PREFIX}scale-down-stabilization"
SCALE_TO_ZERO_AFTER = f"{PREFIX}scale-to-zero-after"
MODEL_LOAD_TIME = f"{PREFIX}model-load-time"
#: The annotations that declare autoscaling (model-load-time alone does not).
AUTOSCALING_ANNOTATIONS = (
    MIN_REPLICAS, MAX_REPLICAS, TARGET_QUEUE_DEPTH, TARGET_RPS, TARGET_LATENCY,
    TARGET_GPU_UTILIZATION, SCALE_UP_STABILIZATION, SCALE_DOWN_STABILIZATION,
    SCALE_TO_ZERO_AFTER,
)  # fmt: skip
ANNOTATIONS = (*AUTOSCALING_ANNOTATIONS, MODEL_LOAD_TIME)
#: Beginnings of annotation names that are this module's: another name so begun is a typo.
_OWN_BEGINNINGS = tuple(
    f"{PREFIX}{b}" for b in ("min-rep", "max-rep", "target-", "scale-", "model-load")
)
#: The kinds whose replicas gpufleet scales, and the other workload kinds (nothing to scale).
SCALABLE_KINDS = tuple(autoscaling_hpa.SCALABLE_KINDS)
#: The target annotations and their metrics.
_TARGETS = {
    TARGET_QUEUE_DEPTH: InferenceMetric.QUEUE_DEPTH,
    TARGET_RPS: InferenceMetric.REQUESTS_PER_SECOND,
    TARGET_LATENCY: InferenceMetric.LATENCY_P95,
    TARGET_GPU_UTILIZATION: InferenceMetric.GPU_UTILIZATION,
}
#: How each is compared: traffic as a total against the target per replica (an External
#: AverageValue), so that it does not wait for loading replicas; latency as the workload's
#: p95 (a Value); utilisation per ready replica.
_TARGET_KINDS = {
    InferenceMetric.QUEUE_DEPTH: (MetricSource.EXTERNAL, TargetType.AVERAGE_VALUE),
    InferenceMetric.REQUESTS_PER_SECOND: (MetricSource.EXTERNAL, TargetType.AVERAGE_VALUE),
    InferenceMetric.LATENCY_P95: (MetricSource.EXTERNAL, TargetType.VALUE),
    InferenceMetric.GPU_UTILIZATION: (MetricSource.PODS, TargetType.UTILIZATION),
}
#: The kinds that declare autoscaling.
AUTOSCALER_KINDS = (autoscaling_hpa.KIND, autoscaling_keda.KIND)


def _number(context: Context, text: str, field: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise context.error(field, f"expected {what}, got {quoted(text)}") from None
    if not math.isfinite(value) or value <= 0:
        raise context.error(field, f"expected {what} above 0, got {quoted(text)}")
    return value


def _count(context: Context, text: str, field: str, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise context.error(field, f"expected a whole number, got {quoted(text)}") from None
    if value < minimum:
        raise context.error(field, f"expected a whole number >= {minimum}, got {value}")
    return value


def _seconds(context: Context, text: str, field: str) -> float:
    return context.parse(parse_duration_seconds, text, field)


def _window(context: Context, text: str, field: str) -> int:
    seconds = _seconds(context, text, field)
    if not seconds.is_integer() or seconds > MAX_STABILIZATION_WINDOW_S:
        raise context.error(field, f"expected whole seconds up to 1h, got {quoted(text)}")
    return int(seconds)


def model_load_time(context: Context, annotations: Mapping[str, str]) -> float | None:
    """The ``gpufleet.dev/model-load-time`` of a workload, if it says one."""
    text = annotations.get(MODEL_LOAD_TIME)
    if text is None:
        return None
    return _seconds(context, text, f"metadata.annotations[{MODEL_LOAD_TIME}]")


def _check_names(context: Context, annotations: Mapping[str, str], path: str) -> None:
    for key in annotations:
        if key.startswith(_OWN_BEGINNINGS) and key not in ANNOTATIONS:
            close = difflib.get_close_matches(key, ANNOTATIONS, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(ANNOTATIONS)}"
            raise context.error(f"{path}[{key}]", f"unknown annotation; {hint}")


def annotations_spec(
    context: Context, target: ScaleTarget, annotations: Mapping[str, str]
) -> AutoscalingSpec | None:
    """The autoscaling a workload's annotations declare, or None when they declare none."""
    if not any(key in annotations for key in AUTOSCALING_ANNOTATIONS):
        return None

    def field(key: str) -> str:
        return f"metadata.annotations[{key}]"

    metrics: list[MetricTarget] = []
    for key, metric in _TARGETS.items():
        text = annotations.get(key)
        if text is None:
            continue
        if metric is InferenceMetric.LATENCY_P95:
            value = _seconds(context, text, field(key))
            if value <= 0:
                raise context.error(field(key), f"expected a latency above 0, got {quoted(text)}")
        else:
            value = _number(context, text, field(key), "a number")
        if metric is InferenceMetric.GPU_UTILIZATION and value > 100:
            raise context.error(field(key), f"expected a percentage up to 100, got {quoted(text)}")
        source, kind = _TARGET_KINDS[metric]
        metrics.append(MetricTarget(metric, source, kind, value))
    if not metrics:
        targets = ", ".join(k for k in AUTOSCALING_ANNOTATIONS if "/target-" in k)
        raise context.error(
            "metadata.annotations", f"autoscaling needs at least one target: {targets}"
        )
    if MAX_REPLICAS not in annotations:
        raise context.error(field(MAX_REPLICAS), "required with autoscaling annotations")
    maximum = _count(context, annotations[MAX_REPLICAS], field(MAX_REPLICAS), 1)
    minimum = 1
    if MIN_REPLICAS in annotations:
        minimum = _count(context, annotations[MIN_REPLICAS], field(MIN_REPLICAS), 0)
    if maximum < minimum:
        raise context.error(
            field(MAX_REPLICAS), f"must be at least min-replicas ({minimum}), got {maximum}"
        )
    up, down = DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN
    if SCALE_UP_STABILIZATION in annotations:
        window = _window(
            context, annotations[SCALE_UP_STABILIZATION], field(SCALE_UP_STABILIZATION)
        )
        up = dataclasses.replace(up, stabilization_window_s=window)
    if SCALE_DOWN_STABILIZATION in annotations:
        window = _window(
            context, annotations[SCALE_DOWN_STABILIZATION], field(SCALE_DOWN_STABILIZATION)
        )
        down = dataclasses.replace(down, stabilization_window_s=window)
    scale_to_zero = None
    if minimum == 0:
        cooldown = DEFAULT_COOLDOWN_S
        if SCALE_TO_ZERO_AFTER in annotations:
            cooldown = _seconds(
                context, annotations[SCALE_TO_ZERO_AFTER], field(SCALE_TO_ZERO_AFTER)
            )
        if not any(
            m.metric in (InferenceMetric.QUEUE_DEPTH, InferenceMetric.REQUESTS_PER_SECOND)
            for m in metrics
        ):
            raise context.error(
                field(MIN_REPLICAS),
                f"0 (scale to zero) needs {TARGET_QUEUE_DEPTH} or {TARGET_RPS}: at zero "
                "replicas only requests waiting or arriving can wake the workload",
            )
        scale_to_zero = ScaleToZero(cooldown, polling_interval_s=DEFAULT_SYNC_PERIOD_S)
    elif SCALE_TO_ZERO_AFTER in annotations:
        raise context.error(
            field(SCALE_TO_ZERO_AFTER), f'only with {MIN_REPLICAS}: "0" (scale to zero)'
        )
    return AutoscalingSpec(
        target,
        max(minimum, 1),
        maximum,
        tuple(metrics),
        Behavior(up, down),
        scale_to_zero,
        declared_by=f"annotations of {target}",
    )


@dataclass(frozen=True, slots=True)
class _Declared:
    spec: AutoscalingSpec
    context: Context
    field: str


@dataclass(frozen=True, slots=True)
class _Workload:
    context: Context
    model_load_s: float | None


def _says_autoscaling(manifest: Mapping[str, Any]) -> bool:
    """Whether an object's own annotations name any of this module's (the readers of the
    object check its shape)."""
    metadata = manifest.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping):
        return False
    return any(isinstance(key, str) and key.startswith(_OWN_BEGINNINGS) for key in annotations)


class AutoscalingReader:
    """Collects autoscalers and workload objects (:meth:`add`), then joins them
    (:meth:`specs`); see the module docstring."""

    def __init__(self, strict: bool = True) -> None:
        """``strict``: refuse an HPA's or ScaledObject's unknown fields (files, requests; not
        objects a live API server validated)."""
        self.strict = strict
        self._declared: list[_Declared] = []
        self._workloads: dict[str, _Workload] = {}

    def add(self, manifest: Mapping[str, Any], source: str, location: str | None = None) -> None:
        """An HPA, a ScaledObject or a workload object; any other kind is passed over."""
        if location is None and isinstance(manifest, Manifest):
            location = manifest.location
        kind = manifest.get("kind")
        if self.strict and kind in (autoscaling_hpa.KIND, autoscaling_keda.KIND):
            check_kube_object(manifest, source, location)
        if kind == autoscaling_hpa.KIND:
            spec = autoscaling_hpa.hpa_from_object(manifest, source, location)
            self._declare(spec, manifest, source, location, "spec.scaleTargetRef.name")
        elif kind == autoscaling_keda.KIND:
            spec = autoscaling_keda.scaled_object_from_object(manifest, source, location)
            self._declare(spec, manifest, source, location, "spec.scaleTargetRef.name")
        elif isinstance(kind, str) and kind in WORKLOAD_API_VERSIONS:
            self._add_workload(manifest, kind, source, location)

    def _declare(
        self,
        spec: AutoscalingSpec,
        manifest: Mapping[str, Any],
        source: str,
        location: str | None,
        field: str,
    ) -> None:
        context = Context(source, location).naming(spec.declared_by)
        self._declared.append(_Declared(spec, context, field))

    def _add_workload(
        self, manifest: Mapping[str, Any], kind: str, source: str, location: str | None
    ) -> None:
        if kind not in SCALABLE_KINDS and not _says_autoscaling(manifest):
            return  # a scenario's thousands of pods cost one look at their annotations
        context = Context(source, location)
        name, namespace = object_name(context, manifest, kind)
        target = ScaleTarget(kind, name, namespace or "default")
        context = context.naming(str(target))
        metadata = context.mapping(manifest.get("metadata"), "metadata")
        annotations = context.string_map(metadata.get("annotations"), "metadata.annotations")
        _check_names(context, annotations, "metadata.annotations")
        spec = manifest.get("spec")
        template = spec.get("template") if isinstance(spec, Mapping) else None
        template_meta = template.get("metadata") if isinstance(template, Mapping) else None
        if isinstance(template_meta, Mapping):
            inner = context.string_map(
                template_meta.get("annotations"), "spec.template.metadata.annotations"
            )
            for key in inner:
                if key in ANNOTATIONS:
                    raise context.error(
                        f"spec.template.metadata.annotations[{key}]",
                        f"belongs on the {kind}'s own metadata.annotations: the {kind} is "
                        "what is scaled, not each pod",
                    )
        if kind not in SCALABLE_KINDS:
            declared = [key for key in AUTOSCALING_ANNOTATIONS if key in annotations]
            if declared:
                raise context.error(
                    f"metadata.annotations[{declared[0]}]",
                    f"a {kind} has no replicas to scale; give it as a Deployment or StatefulSet",
                )
            return
        self._workloads[target.key] = _Workload(context, model_load_time(context, annotations))
        spec_of_annotations = annotations_spec(context, target, annotations)
        if spec_of_annotations is not None:
            self._declared.append(_Declared(spec_of_annotations, context, "metadata.annotations"))

    def specs(self) -> list[AutoscalingSpec]:
        """Every autoscaling declared, joined to its workload (its model-load time taken from
        the workload's annotation): all or an InputError."""
        found: list[AutoscalingSpec] = []
        by_target: dict[str, _Declared] = {}
        for declared in self._declared:
            target = declared.spec.target
            workload = self._workloads.get(target.key)
            if workload is None:
                raise declared.context.error(
                    declared.field,
                    f"names {target}, which is not among the objects read (a "
                    f"{target.kind} of that name and namespace must be given with it)",
                )
            first = by_target.get(target.key)
            if first is not None:
                where = first.context.source
                if first.context.location is not None:
                    where = f"{where}:{first.context.location}"
                raise declared.context.error(
                    declared.field,
                    f"{target} is autoscaled already by {first.spec.declared_by} (at {where}); "
                    "a workload has one autoscaler",
                )
            by_target[target.key] = declared
            spec = declared.spec
            if workload.model_load_s is not None:
                spec = dataclasses.replace(spec, model_load_s=workload.model_load_s)
            found.append(spec)
        return found


def read_autoscaling(paths: str | Path | Iterable[str | Path]) -> list[AutoscalingSpec]:
    """Every autoscaling declared in files and directories (see the module docstring); objects
    of other kinds are passed over."""
    if isinstance(paths, str | Path):
        paths = [paths]
    reader = AutoscalingReader()
    for path in paths:
        for file in input_files(path):
            for manifest in load_manifests(file):
                reader.add(manifest, str(file))
    return reader.specs()
