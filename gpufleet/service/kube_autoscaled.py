"""Which workloads on a Kubernetes cluster gpufleet scales, read from the objects the API sent.

Owns :func:`survey`: of the Deployments, StatefulSets and ReplicaSets, those whose own
annotations declare gpufleet's autoscaling (:mod:`gpufleet.io.kube.autoscaling`, read by the same
:class:`~gpufleet.io.kube.autoscaling.AutoscalingReader` as files, so the same checks apply: a
misspelt annotation, a target missing, annotations on the pod template), each as
:class:`Autoscaled` (its spec, its ``spec.replicas``, its pod selector); and the ones it leaves
alone with a word, each :class:`Passed`:

* annotations that do not read (the error's field and reason): nothing is scaled until they do;
* a workload that a HorizontalPodAutoscaler or a KEDA ScaledObject of the cluster also targets
  (``spec.scaleTargetRef``, in the workload's namespace): that one is in charge, as two HPAs of
  one target are refused by Kubernetes (``AmbiguousSelector``) and a second ScaledObject by
  KEDA's webhook.

A ReplicaSet that a Deployment (or anything) controls is passed over in silence: the
Deployment controller copies the Deployment's annotations onto its ReplicaSets, and the
Deployment is what is scaled. Also :func:`serving_pods`: the pods of a workload as the HPA
controller finds them (its selector, in its namespace; pods being deleted and pods that
finished left out; ready by their ``Ready`` condition). It calls nothing and decides nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.backends.prometheus.inference import ServingPods
from gpufleet.io.errors import InputError
from gpufleet.io.kube.affinity import label_selector
from gpufleet.io.kube.autoscaling import SCALABLE_KINDS, AutoscalingReader
from gpufleet.io.manifests import Context
from gpufleet.model.autoscaling import AutoscalingSpec, ScaleTarget
from gpufleet.model.selectors import LabelSelector

Obj = dict[str, Any]
#: Where the errors of annotations read from the API say they were read.
SOURCE = "the API server"
#: Event reasons of the workloads left alone.
INVALID = "GpufleetAutoscalingInvalid"
DEFERRED = "GpufleetAutoscalingDeferred"


@dataclass(frozen=True, slots=True)
class Autoscaled:
    """A workload gpufleet scales: its object as the API sent it, what its annotations
    declare, its ``spec.replicas`` and its pod selector (None: it selects no pod)."""

    obj: Obj
    spec: AutoscalingSpec
    replicas: int
    selector: LabelSelector | None

    @property
    def target(self) -> ScaleTarget:
        return self.spec.target

    @property
    def resource_version(self) -> str:
        return str((self.obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True, slots=True)
class Passed:
    """A workload with gpufleet's autoscaling annotations that is not scaled, and why (an
    event's type, reason and message)."""

    obj: Obj
    target: ScaleTarget
    type: str
    reason: str
    message: str


def _metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _target_of(obj: Mapping[str, Any]) -> ScaleTarget:
    metadata = _metadata(obj)
    return ScaleTarget(
        str(obj.get("kind")), str(metadata.get("name")), str(metadata.get("namespace") or "default")
    )


def _controlled(obj: Mapping[str, Any]) -> bool:
    return any(ref.get("controller") for ref in _metadata(obj).get("ownerReferences") or ())


def claims(autoscalers: Iterable[Obj]) -> dict[str, list[str]]:
    """{workload key: the autoscalers that target it, ``HorizontalPodAutoscaler ml/chat``}.
    An HPA that KEDA made for a ScaledObject (owned by it) is named by its ScaledObject."""
    found: dict[str, list[str]] = {}
    for obj in autoscalers:
        kind, metadata = str(obj.get("kind")), _metadata(obj)
        if kind == "HorizontalPodAutoscaler" and any(
            ref.get("kind") == "ScaledObject" for ref in metadata.get("ownerReferences") or ()
        ):
            continue
        spec = obj.get("spec")
        ref = spec.get("scaleTargetRef") if isinstance(spec, dict) else None
        if not isinstance(ref, dict) or not ref.get("name"):
            continue
        namespace = str(metadata.get("namespace") or "default")
        target = ScaleTarget(str(ref.get("kind") or "Deployment"), str(ref["name"]), namespace)
        found.setdefault(target.key, []).append(f"{kind} {namespace}/{metadata.get('name')}")
    return found


def survey(
    workloads: Iterable[Obj], autoscalers: Iterable[Obj]
) -> tuple[list[Autoscaled], list[Passed]]:
    """The workloads gpufleet scales, and those it leaves alone (see the module docstring);
    ``autoscalers`` are the cluster's HorizontalPodAutoscalers and ScaledObjects."""
    claimed = claims(autoscalers)
    scaled: list[Autoscaled] = []
    passed: list[Passed] = []
    for obj in workloads:
        kind = obj.get("kind")
        if kind not in SCALABLE_KINDS or (kind == "ReplicaSet" and _controlled(obj)):
            continue
        target = _target_of(obj)
        try:
            spec = _spec_of(obj)
        except InputError as error:
            what = error.reason if error.field is None else f"{error.field}: {error.reason}"
            message = f"autoscaling annotations not read, replicas left as they are: {what}"
            passed.append(Passed(obj, target, "Warning", INVALID, message))
            continue
        if spec is None:
            continue
        others = claimed.get(target.key)
        if others:
            message = (
                f"also autoscaled by {', '.join(sorted(others))}: that one is in charge of its "
                "replicas, gpufleet's annotations are not acted on"
            )
            passed.append(Passed(obj, target, "Normal", DEFERRED, message))
            continue
        try:
            selector = _selector(obj, target)
        except InputError as error:
            message = f"its pods cannot be found, replicas left as they are: {error.reason}"
            passed.append(Passed(obj, target, "Warning", INVALID, message))
            continue
        replicas = (obj.get("spec") or {}).get("replicas", 1)
        count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
        scaled.append(Autoscaled(obj, spec, max(count, 0), selector))
    return scaled, passed


def _spec_of(obj: Obj) -> AutoscalingSpec | None:
    """What the object's annotations declare (None: no autoscaling); an InputError when they
    do not read."""
    reader = AutoscalingReader(strict=False)  # the API server validated the object
    reader.add(obj, SOURCE)
    specs = reader.specs()
    return specs[0] if specs else None


def _selector(obj: Obj, target: ScaleTarget) -> LabelSelector | None:
    spec = obj.get("spec")
    value = spec.get("selector") if isinstance(spec, dict) else None
    return label_selector(Context(SOURCE, str(target)), value, "spec.selector")


def _ready(obj: Mapping[str, Any]) -> bool:
    status = obj.get("status") or {}
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def serving_pods(scaled: Autoscaled, pods: Iterable[Obj], replicas: int) -> ServingPods:
    """The pods of ``scaled`` among ``pods``: those of its namespace its selector matches, not
    being deleted and not finished; ready by their Ready condition, at most ``replicas`` of
    them (while a scale-down's pods are still going, the oldest are those that stay, as the
    ReplicaSet controller deletes the newest first)."""
    target = scaled.target
    found: list[tuple[str, str, bool]] = []
    if scaled.selector is not None:
        for obj in pods:
            metadata = _metadata(obj)
            if str(metadata.get("namespace") or "default") != target.namespace:
                continue
            if metadata.get("deletionTimestamp"):
                continue
            if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            labels = metadata.get("labels") or {}
            if not scaled.selector.matches(labels):
                continue
            created = str(metadata.get("creationTimestamp") or "")
            found.append((created, str(metadata.get("name")), _ready(obj)))
    found.sort()
    ready = [name for _, name, up in found if up][: max(replicas, 0)]
    return ServingPods(
        target.namespace,
        target.kind,
        target.name,
        tuple(sorted(name for _, name, _ in found)),
        frozenset(ready),
    )
