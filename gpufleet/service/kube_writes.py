"""The objects a submission to ``gpufleet serve --kubeconfig`` writes to the cluster.

Owns turning accepted manifests into the objects to create: every pod template (a Pod itself; a
Job's, Deployment's, StatefulSet's or ReplicaSet's template; each replica set's of a PyTorchJob
or MPIJob; the head's, each worker group's and a given submitter template's of a RayCluster or
RayJob) gets this scheduler's name, the tenant label, the queue label and our kind and workload
annotations (the workload annotation is its key, ``namespace/Kind/name``); a gang (a Job with
parallelism above one, an operator's job) also gets the pod-group label and a gpufleet PodGroup
with its minMember, written first, named ``<kind>-<name>`` (:func:`gang_name`); a Job's
templates carry its completions; the queue label of every template is the queue the
submission was checked against. These marks are gpufleet's: a submission that carries one of
them itself (any ``gpufleet.dev/`` label or annotation but the documented user inputs,
:data:`USER_LABELS` and :data:`USER_ANNOTATIONS`) is refused (:func:`refuse_own_marks`), and
none of them is what the plane reads to tell whose a pod is (:mod:`.kube_identity`). A pod or
template that places itself (``nodeName``, another ``schedulerName``) is refused
(:func:`refuse_placement`), never rewritten. It writes
nothing itself (the plane does, through :class:`~gpufleet.kube_client.writer.ObjectWriter`)
and decides nothing about admission (the plane checks first); it says why a write was refused
(:func:`refusal_message`) and what the plane records of each object created
(:func:`created_record`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.kube import autoscaling, job_rules, workload_settings
from gpufleet.io.kube import pods as kube_pods
from gpufleet.io.kube import resources as kube_resources
from gpufleet.io.manifests import Manifest
from gpufleet.kube_client.api import ApiError
from gpufleet.kube_client.writer import ObjectWriter
from gpufleet.model.idle import EXEMPT_LABEL
from gpufleet.model.jobs import JobSpec
from gpufleet.model.queues import QUEUE_LABEL, TENANT_LABEL, queue_named_by
from gpufleet.model.workload import POD_GROUP_LABEL, Workload, workload_key
from gpufleet.service.auth import Principal
from gpufleet.service.store import CreatedObject
from gpufleet.telemetry.profiles import USAGE_PROFILE_ANNOTATION

Obj = dict[str, Any]
LABEL_VALUE_MAX = 63

WORKLOAD_ANNOTATION = "gpufleet.dev/workload"
KIND_ANNOTATION = "gpufleet.dev/kind"
COMPLETIONS_ANNOTATION = "gpufleet.dev/completions"
#: Kinds whose controller (the Job controller, an operator) makes the pods, as a gang.
CONTROLLED_KINDS = ("Job", "PyTorchJob", "MPIJob", "RayCluster", "RayJob")
#: Kinds whose controller makes replicas, each a workload of its own; each pod names its owner.
REPLICATED_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")
OWNER_ANNOTATION = "gpufleet.dev/owner"
OWN_PREFIX = "gpufleet.dev/"
#: The ``gpufleet.dev/`` labels a submission may carry: its queue (checked against the queues
#: the tenant may use), its pod group (a gang, in its own namespace) and the idle exemption.
USER_LABELS = frozenset({QUEUE_LABEL, POD_GROUP_LABEL, EXEMPT_LABEL})
#: The ``gpufleet.dev/`` annotations a submission may carry (the readers' documented inputs).
USER_ANNOTATIONS = frozenset({
    kube_pods.SUBMIT_AT_ANNOTATION, kube_pods.SIM_DURATION_ANNOTATION,
    kube_pods.EXPECTED_RUNTIME_ANNOTATION, kube_pods.GPU_MODELS_ANNOTATION,
    job_rules.SIM_FAILURES_ANNOTATION, job_rules.SIM_FAIL_AFTER_ANNOTATION,
    job_rules.SIM_EXIT_CODE_ANNOTATION,
    kube_resources.GPU_MILLI_ANNOTATION, kube_resources.GPU_MEMORY_ANNOTATION,
    workload_settings.PREEMPTIBLE_ANNOTATION, workload_settings.MIXED_MODELS_ANNOTATION,
    workload_settings.CHECKPOINT_INTERVAL_ANNOTATION,
    workload_settings.CHECKPOINT_ON_NOTICE_ANNOTATION,
    workload_settings.TOPOLOGY_ANNOTATION, workload_settings.TOPOLOGY_LEVEL_ANNOTATION,
    USAGE_PROFILE_ANNOTATION, *autoscaling.ANNOTATIONS,
})  # fmt: skip


def pod_group_of(labels: Mapping[str, str]) -> str | None:
    return labels.get(POD_GROUP_LABEL)


def gang_name(kind: str, name: str) -> str:
    """The PodGroup (and pod-group label) of a gang we write: ``<kind>-<name>`` in lower case,
    as Kueue names its Workloads, so that a Job and a PyTorchJob named alike (two objects, as
    names are unique per kind) are two gangs. A label value holds 63 characters: a longer one
    keeps its start and ends with a hash of the whole."""
    full = f"{kind.lower()}-{name}"
    if len(full) <= LABEL_VALUE_MAX:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[: LABEL_VALUE_MAX - 9].rstrip('-.')}-{digest}"


def refuse_own_marks(manifests: Sequence[Manifest]) -> None:
    """InputError naming the first ``gpufleet.dev/`` label or annotation of an object or of one
    of its pod templates that is not a user input: gpufleet sets its own marks (the tenant, the
    workload, the binding's devices...), and one a tenant wrote would pass for gpufleet's."""
    for manifest in manifests:
        obj: Obj = _deep_copy(manifest)
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        name = f"{obj.get('kind')} {metadata.get('namespace') or ''}/{metadata.get('name')}"
        places: list[tuple[str, object]] = [("metadata", metadata)]
        if obj.get("kind") != "Pod":
            places += [(f"{path}.metadata", t.get("metadata")) for path, t in _template_paths(obj)]
        for path, meta in places:
            if not isinstance(meta, dict):
                continue
            for field, allowed in (("labels", USER_LABELS), ("annotations", USER_ANNOTATIONS)):
                marks = meta.get(field)
                for key in marks if isinstance(marks, dict) else ():
                    if str(key).startswith(OWN_PREFIX) and key not in allowed:
                        raise InputError(
                            "request",
                            f"{key} is set by gpufleet, not by a submission (a submission may "
                            f"set only {', '.join(sorted(allowed))})",
                            f"{manifest.location}, {name}",
                            f"{path}.{field}[{key}]",
                        )


def submission_of(
    obj: Mapping[str, Any], workloads: Mapping[str, tuple[str, Workload, tuple[JobSpec, ...]]]
) -> str:
    """The workload key an object :func:`objects_to_write` made is filed under: a gang's
    PodGroup and a pod of a submitted pod group go with their gang, anything else is its own."""
    metadata = obj.get("metadata") or {}
    namespace, name = str(metadata.get("namespace")), str(metadata.get("name"))
    kind = str(obj.get("kind"))
    if kind == "PodGroup":
        for key, (found_kind, workload, _) in workloads.items():
            made = found_kind in CONTROLLED_KINDS and workload.namespace == namespace
            if made and gang_name(found_kind, workload.name) == name:
                return key
    group = pod_group_of(metadata.get("labels") or {}) if kind == "Pod" else None
    if group and workload_key(namespace, group, "PodGroup") in workloads:
        return workload_key(namespace, group, "PodGroup")
    return workload_key(namespace, name, kind)


def objects_to_write(
    manifests: Sequence[Mapping[str, Any]],
    principal: Principal,
    scheduler_name: str,
    workloads: Mapping[str, tuple[str, Workload, tuple[JobSpec, ...]]],
) -> list[Obj]:
    """The objects to create for accepted ``manifests``: PodGroups for gangs first, then the
    objects themselves with our scheduler, tenant, queue and workload marks."""
    groups: list[Obj] = []
    objects: list[Obj] = []
    for manifest in manifests:
        obj: Obj = _deep_copy(manifest)
        kind = str(obj["kind"])
        metadata = obj.setdefault("metadata", {})
        namespace = metadata.get("namespace") or principal.default_namespace()
        metadata["namespace"] = namespace
        name = str(metadata["name"])
        key = workload_key(namespace, name, kind)
        found = workloads.get(key)
        if kind == "PodGroup":
            obj.setdefault("apiVersion", "gpufleet.dev/v1alpha1")
            groups.append(obj)
            continue
        templates = _pod_templates(obj)
        gang = found is not None and len(found[1].pods) > 1 and kind in CONTROLLED_KINDS
        for template in templates:
            meta = template.setdefault("metadata", {})
            labels = meta.setdefault("labels", {})
            labels[TENANT_LABEL] = principal.tenant
            queue = _checked_queue(obj, templates, workloads, found)
            if queue is not None:
                labels[QUEUE_LABEL] = queue
            if gang and not labels.get(POD_GROUP_LABEL):
                labels[POD_GROUP_LABEL] = gang_name(kind, name)
            annotations = meta.setdefault("annotations", {})
            annotations[KIND_ANNOTATION] = kind
            if kind in CONTROLLED_KINDS:
                annotations[WORKLOAD_ANNOTATION] = key
            if kind == "Job" and found is not None and found[2]:
                annotations[COMPLETIONS_ANNOTATION] = str(found[2][0].tasks)
            if kind in REPLICATED_KINDS:
                annotations[OWNER_ANNOTATION] = f"{kind}/{name}"
            template.setdefault("spec", {})["schedulerName"] = scheduler_name
        if gang and found is not None:
            groups.append({
                "apiVersion": "gpufleet.dev/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": gang_name(kind, name), "namespace": namespace,
                             "labels": {TENANT_LABEL: principal.tenant}},
                "spec": {"minMember": found[1].gang_size},
            })  # fmt: skip
        objects.append(obj)
    return groups + objects


def refuse_placement(manifests: Sequence[Mapping[str, Any]], scheduler_name: str) -> None:
    """Raise :class:`InputError` (a 422) for a pod or pod template that places itself: a
    ``nodeName`` (the kubelet runs it without any scheduler, outside every quota) or a
    ``schedulerName`` other than ``scheduler_name`` (another scheduler would place it, outside
    gpufleet's quotas). No ``schedulerName`` is ours: it is set when written."""
    for manifest in manifests:
        kind = str(manifest.get("kind"))
        if kind == "PodGroup":
            continue
        name = str((manifest.get("metadata") or {}).get("name"))
        obj: Obj = _deep_copy(manifest)
        paths = [("", obj)] if kind == "Pod" else _template_paths(obj)
        for path, template in paths:
            spec = template.get("spec")
            if not isinstance(spec, Mapping):
                continue
            where = f"{path}.spec" if path else "spec"
            if spec.get("nodeName"):
                raise InputError(
                    f"{kind} {name}",
                    f"{quoted(spec['nodeName'])}: a pod submitted here may not name its node: "
                    "that bypasses gpufleet's scheduler and every quota (choose nodes with "
                    "nodeSelector or node affinity instead)",
                    field=f"{where}.nodeName",
                )
            chosen = spec.get("schedulerName")
            if chosen and chosen != scheduler_name:
                raise InputError(
                    f"{kind} {name}",
                    f"{quoted(chosen)}: pods submitted here are placed by gpufleet "
                    f"({scheduler_name!r}, or leave it out): another scheduler would place "
                    "them outside gpufleet's quotas",
                    field=f"{where}.schedulerName",
                )


def _checked_queue(
    obj: Obj,
    templates: Sequence[Obj],
    workloads: Mapping[str, tuple[str, Workload, tuple[JobSpec, ...]]],
    found: tuple[str, Workload, tuple[JobSpec, ...]] | None,
) -> str | None:
    """The queue the submission of ``obj`` was checked against, for its pods' label (a
    template's own label may differ: the object's wins when read). A replica's workload is
    not keyed by its object: its queue is the one the reader took, the object's label, else its
    template's."""
    checked = found or workloads.get(submission_of(obj, workloads))
    if checked is not None:
        return checked[1].queue
    if obj.get("kind") == "Pod":
        return None
    named = queue_named_by((obj.get("metadata") or {}).get("labels") or {})
    if named is None and len(templates) == 1:
        named = queue_named_by((templates[0].get("metadata") or {}).get("labels") or {})
    return None if named is None else str(named)


def _pod_templates(obj: Obj) -> list[Obj]:
    """The pod (for a Pod: the object itself) or pod templates of a workload object."""
    if obj.get("kind") == "Pod":
        return [obj]
    return [template for _, template in _template_paths(obj)]


def _template_paths(obj: Obj) -> list[tuple[str, Obj]]:
    """(path, template) of each pod template of a workload object that is not a Pod (made
    empty where missing)."""
    kind = obj.get("kind")
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return []
    if kind in ("PyTorchJob", "MPIJob"):
        field = "pytorchReplicaSpecs" if kind == "PyTorchJob" else "mpiReplicaSpecs"
        replicas = spec.get(field)
        return [
            (f"spec.{field}.{role}.template", r.setdefault("template", {}))
            for role, r in (replicas if isinstance(replicas, dict) else {}).items()
            if isinstance(r, dict)
        ]
    if kind in ("RayCluster", "RayJob"):
        prefix = "spec.rayClusterSpec" if kind == "RayJob" else "spec"
        cluster = spec.get("rayClusterSpec") if kind == "RayJob" else spec
        cluster = cluster if isinstance(cluster, dict) else {}
        groups = [(f"{prefix}.headGroupSpec", cluster.get("headGroupSpec"))]
        workers = cluster.get("workerGroupSpecs")
        groups += [
            (f"{prefix}.workerGroupSpecs[{i}]", g)
            for i, g in enumerate(workers if isinstance(workers, list) else [])
        ]
        templates = [
            (f"{path}.template", g.setdefault("template", {}))
            for path, g in groups
            if isinstance(g, dict)
        ]
        if kind == "RayJob" and isinstance(spec.get("submitterPodTemplate"), dict):
            templates.append(("spec.submitterPodTemplate", spec["submitterPodTemplate"]))
        return templates
    return [("spec.template", spec.setdefault("template", {}))]


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def refusal_message(principal: Principal, obj: Obj, writer: ObjectWriter, error: ApiError) -> str:
    """Why a tenant's write was refused (its RBAC in the namespace, or Pod Security there)."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    who = f"tenant {principal.tenant!r}"
    if writer.identity is not None:
        who += f" (as user {writer.identity.user!r})"
    return (
        f"{obj.get('kind')} {namespace}/{metadata.get('name')}: the Kubernetes API server "
        f"refused {who} in namespace {namespace!r}: {error.message}"
    )


def created_record(obj: Obj, answer: Obj, tenant: str, submission: str) -> CreatedObject:
    """The record of ``obj`` as the API server created it (``answer``, with its UID)."""
    metadata = answer.get("metadata") or {}
    return CreatedObject(
        str(metadata.get("namespace") or (obj.get("metadata") or {}).get("namespace")),
        str(obj["kind"]),
        str(metadata.get("name") or (obj.get("metadata") or {}).get("name")),
        str(obj.get("apiVersion") or answer.get("apiVersion") or ""),
        str(metadata.get("uid") or ""),
        tenant,
        submission,
    )
