"""Kubernetes workload objects (Pod, batch/v1 Job, apps/v1 Deployment, StatefulSet and
ReplicaSet) as timed model pods.

Owns the reading of one object into :class:`~gpufleet.model.workload.TimedPod` values: names
(``<job>-<i>`` for the pods of a Job, ``min(parallelism, completions)`` of them, or of a
Deployment's, StatefulSet's or ReplicaSet's ``replicas``; all checked as Kubernetes checks
names: :mod:`gpufleet.io.names`), namespace, labels and annotations, the scheduling constraints
(nodeSelector, tolerations, allowed GPU models, priority, scheduling gates), the simulation
times from ``gpufleet.dev/`` annotations, and each pod's restartPolicy and simulated failures
(what a controller does with them is ``job_rules``'). Requests (extended resources included)
come from ``kube.resources``; node affinity, pod affinity and anti-affinity and topology spread
constraints from ``kube.affinity``. It does not read files or check that pod names are unique
across a file (``kubernetes.read_pods`` does) or resolve PriorityClass names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.io.errors import quoted
from gpufleet.io.kube.affinity import placement_rules, required_node_affinity
from gpufleet.io.kube.dra import pod_resource_claims
from gpufleet.io.kube.job_rules import restart_policy, sim_failures
from gpufleet.io.kube.resources import Annotations, pod_requests
from gpufleet.io.manifests import Context, describe, object_name
from gpufleet.io.names import NameRule, name_problem
from gpufleet.io.quantities import parse_duration_seconds
from gpufleet.model import GFD_LABELS, Pod, TaintEffect, Toleration
from gpufleet.model.workload import TimedPod

SUBMIT_AT_ANNOTATION = "gpufleet.dev/submit-at"
SIM_DURATION_ANNOTATION = "gpufleet.dev/sim-duration"
EXPECTED_RUNTIME_ANNOTATION = "gpufleet.dev/expected-runtime"
GPU_MODELS_ANNOTATION = "gpufleet.dev/gpu-models"
OWN_ANNOTATION_PREFIX = "gpufleet.dev/"
JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

WORKLOAD_API_VERSIONS = {
    "Pod": "v1",
    "Job": "batch/v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "ReplicaSet": "apps/v1",
}
SUPPORTED = "Pod (v1), Job (batch/v1), Deployment, StatefulSet or ReplicaSet (apps/v1)"
#: Kinds whose pods are ``replicas`` copies of one template, each a workload of its own.
REPLICATED_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")
_EFFECT_VALUES = frozenset(e.value for e in TaintEffect)


def pods_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> list[TimedPod]:
    """The pods of one Pod, Job, Deployment, StatefulSet or ReplicaSet; errors name ``source``,
    ``location``, the object."""
    context = Context(source, location)
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        raise context.error("kind", f"expected {SUPPORTED}, got {describe(kind)}")
    if kind not in WORKLOAD_API_VERSIONS:
        named = context.naming(_loose_name(obj, kind))
        spec = obj.get("spec")
        if isinstance(spec, dict) and ("template" in spec or "jobTemplate" in spec):
            raise named.error("kind", f"kind {kind} is not supported (expected {SUPPORTED})")
        raise named.error("kind", f"expected {SUPPORTED}, got kind {kind}")
    name, namespace = object_name(context, obj, kind)
    namespace = namespace or "default"
    context = context.naming(f"{kind} {namespace}/{name}")
    api_version = obj.get("apiVersion")
    expected = WORKLOAD_API_VERSIONS[kind]
    if api_version is not None and api_version != expected:
        raise context.error(
            "apiVersion", f"expected {expected} for a {kind}, got {describe(api_version)}"
        )
    metadata = context.mapping(obj.get("metadata"), "metadata")
    if kind == "Pod":
        annotations = _annotations(context, metadata, "metadata", None)
        labels = context.labels(metadata.get("labels"), "metadata.labels")
        spec = context.mapping(obj.get("spec"), "spec", required=True)
        status = context.mapping(obj.get("status"), "status")
        return [_pod(context, name, namespace, labels, annotations, spec, "spec", status)]

    spec = context.mapping(obj.get("spec"), "spec", required=True)
    indexed = kind == "Job" and spec.get("completionMode") == "Indexed"
    if kind == "Job":
        parallelism = context.integer(spec.get("parallelism", 1), "spec.parallelism", 0)
        completions = spec.get("completions")
        indexes = parallelism
        if completions is not None:
            indexes = context.integer(completions, "spec.completions", 0)
            parallelism = min(parallelism, indexes)
        replicas = parallelism
        _check_pod_names(context, name, indexes if indexed else replicas, kind, indexed)
    else:
        replicas = context.integer(spec.get("replicas", 1), "spec.replicas", 0)
        _check_pod_names(context, name, replicas, kind, indexed)
    context.labels(metadata.get("labels"), "metadata.labels")
    template = context.mapping(spec.get("template"), "spec.template", required=True)
    template_metadata = context.mapping(template.get("metadata"), "spec.template.metadata")
    annotations = _annotations(context, template_metadata, "spec.template.metadata", metadata)
    labels = context.labels(template_metadata.get("labels"), "spec.template.metadata.labels")
    if kind == "Job":
        labels.update(dict.fromkeys(JOB_NAME_LABELS, name))
    pod_spec = context.mapping(template.get("spec"), "spec.template.spec", required=True)
    first = _pod(
        context, f"{name}-0", namespace, labels, annotations, pod_spec, "spec.template.spec"
    )
    pods: list[TimedPod] = []
    for i in range(replicas):
        pod = first.pod
        extra = {COMPLETION_INDEX: str(i)} if indexed else {}
        pod = dataclasses.replace(
            pod,
            name=f"{name}-{i}",
            labels={**pod.labels, **extra},
            annotations={**pod.annotations, **extra},
        )
        pods.append(dataclasses.replace(first, pod=pod))
    return pods


def _node_selector(
    context: Context, spec: Mapping[str, Any], spec_path: str
) -> tuple[tuple[str, str], ...]:
    """``nodeSelector``, and ``nodeName`` as the node's host name label: a pod that names its
    node goes there or nowhere (the kubelet admits it if it fits), through its queue as any
    other. On Kubernetes such a pod is bound already: its backend reads it as placed."""
    selector = context.labels(spec.get("nodeSelector"), f"{spec_path}.nodeSelector")
    node_name = spec.get("nodeName")
    if node_name is None:
        return tuple(sorted(selector.items()))
    named = context.name(node_name, f"{spec_path}.nodeName")
    pairs = {*selector.items(), (GFD_LABELS.HOSTNAME, named)}
    return tuple(sorted(pairs))


def _check_pod_names(context: Context, name: str, count: int, kind: str, indexed: bool) -> None:
    """The names of an object's pods (``<name>-<i>``) must be valid too: DNS-1123 labels where
    they are the pods' hostnames (a StatefulSet's; an Indexed Job's, as Kubernetes checks),
    else subdomains."""
    if count == 0:
        return
    last = f"{name}-{count - 1}"
    hostname = kind == "StatefulSet" or indexed
    problem = name_problem(last, NameRule.LABEL if hostname else NameRule.SUBDOMAIN)
    if problem is not None:
        why = " (its pods' names are their hostnames)" if hostname else ""
        raise context.error(
            "metadata.name", f"its pods would be named up to {quoted(last)}, which {problem}{why}"
        )


def _loose_name(obj: Mapping[str, Any], kind: str) -> str:
    """``Kind namespace/name`` as far as the object says, for errors about the object itself."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        return kind
    namespace = metadata.get("namespace")
    return f"{kind} {namespace if isinstance(namespace, str) else 'default'}/{metadata['name']}"


def _annotations(
    context: Context,
    metadata: Mapping[str, Any],
    path: str,
    owner: Mapping[str, Any] | None,
) -> Annotations:
    """The pod's annotations; a Job's or Deployment's own gpufleet.dev/ ones fill in the gaps."""
    values = context.string_map(metadata.get("annotations"), f"{path}.annotations")
    paths = {key: f"{path}.annotations[{key}]" for key in values}
    if owner is not None:
        for key, value in context.string_map(
            owner.get("annotations"), "metadata.annotations"
        ).items():
            if key.startswith(OWN_ANNOTATION_PREFIX) and key not in values:
                values[key] = value
                paths[key] = f"metadata.annotations[{key}]"
    return Annotations(values, paths)


def _pod(
    context: Context,
    name: str,
    namespace: str,
    labels: dict[str, str],
    annotations: Annotations,
    spec: Mapping[str, Any],
    spec_path: str,
    status: Mapping[str, Any] | None = None,
) -> TimedPod:
    requests = pod_requests(context, spec, spec_path, annotations)
    priority = spec.get("priority")
    affinity_path = f"{spec_path}.affinity"
    affinity = context.mapping(spec.get("affinity"), affinity_path)
    pod = Pod(
        name,
        namespace,
        requests.cpu_milli,
        requests.memory_mib,
        requests.gpu,
        gpu_models=_gpu_models(context, annotations),
        node_selector=_node_selector(context, spec, spec_path),
        required_affinity=required_node_affinity(context, affinity, affinity_path),
        tolerations=_tolerations(context, spec.get("tolerations"), f"{spec_path}.tolerations"),
        priority=0 if priority is None else context.int32(priority, f"{spec_path}.priority"),
        labels=labels,
        annotations=dict(annotations.values),
        extended=requests.extended,
        rules=placement_rules(context, spec, spec_path, namespace, labels),
        scheduling_gates=scheduling_gates(context, spec, spec_path),
        resource_claims=pod_resource_claims(context, spec, status or {}, spec_path),
    )
    created = 0.0
    if SUBMIT_AT_ANNOTATION in annotations.values:
        created = context.parse(
            parse_duration_seconds,
            annotations.values[SUBMIT_AT_ANNOTATION],
            annotations.path(SUBMIT_AT_ANNOTATION),
        )
    deleted = None
    for key in (SIM_DURATION_ANNOTATION, EXPECTED_RUNTIME_ANNOTATION):
        if key in annotations.values:
            duration = context.parse(
                parse_duration_seconds, annotations.values[key], annotations.path(key)
            )
            deleted = created + duration
            break
    policy = restart_policy(context, spec.get("restartPolicy"), f"{spec_path}.restartPolicy")
    return TimedPod(pod, created, deleted, None, policy, sim_failures(context, annotations))


def scheduling_gates(context: Context, spec: Mapping[str, Any], spec_path: str) -> tuple[str, ...]:
    """``spec.schedulingGates``: a list of ``{name: <qualified name>}``, each name once, as
    the API server checks them. While any is left kube-scheduler does not place the pod."""
    path = f"{spec_path}.schedulingGates"
    names: list[str] = []
    for i, item in enumerate(context.sequence(spec.get("schedulingGates"), path)):
        where = f"{path}[{i}]"
        entry = context.mapping(item, where)
        name = context.label_key(context.text(entry.get("name"), f"{where}.name"), f"{where}.name")
        if name in names:
            raise context.error(f"{where}.name", f"gate {quoted(name)} is given twice")
        names.append(name)
    return tuple(names)


def _gpu_models(context: Context, annotations: Annotations) -> frozenset[str] | None:
    text = annotations.values.get(GPU_MODELS_ANNOTATION)
    if text is None:
        return None
    models = frozenset(m.strip() for m in text.replace(",", "|").split("|") if m.strip())
    if not models:
        raise context.error(
            annotations.path(GPU_MODELS_ANNOTATION),
            f"expected GPU models separated by '|' (e.g. 'A100|H100'), got {quoted(text)}",
        )
    return models


def _tolerations(context: Context, value: object, path: str) -> tuple[Toleration, ...]:
    tolerations: list[Toleration] = []
    for i, item in enumerate(context.sequence(value, path)):
        where = f"{path}[{i}]"
        entry = context.mapping(item, where)
        key = context.text(entry.get("key"), f"{where}.key", "")
        if key:
            context.label_key(key, f"{where}.key")
        operator = context.text(entry.get("operator"), f"{where}.operator", "Equal")
        if operator not in ("Equal", "Exists"):
            raise context.error(
                f"{where}.operator", f"expected Equal or Exists, got {quoted(operator)}"
            )
        value_text = context.text(entry.get("value"), f"{where}.value", "")
        if operator == "Exists" and value_text:
            raise context.error(
                f"{where}.value",
                f"expected no value with operator Exists, got {quoted(value_text)}",
            )
        context.label_value(value_text, f"{where}.value")
        if not key and operator != "Exists":
            raise context.error(
                f"{where}.operator", "a toleration without a key must use operator Exists"
            )
        effect = context.text(entry.get("effect"), f"{where}.effect", "")
        if effect and effect not in _EFFECT_VALUES:
            raise context.error(
                f"{where}.effect",
                f"expected one of {', '.join(sorted(_EFFECT_VALUES))} or nothing, "
                f"got {quoted(effect)}",
            )
        tolerations.append(
            Toleration(key or None, operator, value_text, TaintEffect(effect) if effect else None)
        )
    return tuple(tolerations)


def pods_from_template(
    context: Context,
    owner_metadata: Mapping[str, Any],
    template: Mapping[str, Any],
    template_path: str,
    namespace: str,
    names: Sequence[str],
    extra_labels: Mapping[str, str] | None = None,
) -> list[TimedPod]:
    """Pods named ``names`` from one pod template of an owner object (a PyTorchJob replica set).

    ``template_path`` says where the template sits in the object, for errors. The pods get the
    template's labels plus ``extra_labels``, and its annotations with the owner's ``gpufleet.dev/``
    ones filling the gaps, as :func:`pods_from_object` does for a Job. The template is read
    (and checked) even when ``names`` is empty.
    """
    metadata_path = f"{template_path}.metadata"
    template_metadata = context.mapping(template.get("metadata"), metadata_path)
    annotations = _annotations(context, template_metadata, metadata_path, owner_metadata)
    context.labels(owner_metadata.get("labels"), "metadata.labels")
    labels = context.labels(template_metadata.get("labels"), f"{metadata_path}.labels")
    for pod_name in names[-1:]:
        problem = name_problem(pod_name)
        if problem is not None:
            raise context.error(
                "metadata.name",
                f"its pods would be named up to {quoted(pod_name)}, which {problem}",
            )
    labels.update(extra_labels or {})
    spec_path = f"{template_path}.spec"
    pod_spec = context.mapping(template.get("spec"), spec_path, required=True)
    first_name = names[0] if names else "template"
    first = _pod(context, first_name, namespace, labels, annotations, pod_spec, spec_path)
    return [
        dataclasses.replace(first, pod=dataclasses.replace(first.pod, name=name)) for name in names
    ]
