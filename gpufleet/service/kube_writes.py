"""The objects a submission to ``gpufleet serve --kubeconfig`` writes to the cluster.

Owns turning accepted manifests into the objects to create: every pod template (a Pod itself; a
Job's, Deployment's, StatefulSet's or ReplicaSet's template; each replica set's of a PyTorchJob
or MPIJob; the head's, each worker group's and a given submitter template's of a RayCluster or
RayJob) gets this scheduler's name, the tenant label, the queue label and our kind and workload
annotations (the workload annotation is its key, ``namespace/Kind/name``); a gang (a Job with
parallelism above one, an operator's job) also gets the pod-group label and a gpufleet PodGroup
with its minMember, written first, named ``<kind>-<name>`` (:func:`gang_name`); a Job's
templates carry its completions. A pod or template that places itself (``nodeName``, another
``schedulerName``) is refused (:func:`refuse_placement`), never rewritten. It writes nothing
itself (the plane does, through :class:`~gpufleet.backends.kube.writer.ObjectWriter`) and
decides nothing about admission (the plane checks first).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.io.errors import InputError, quoted
from gpufleet.model.jobs import JobSpec
from gpufleet.model.queues import QUEUE_LABEL
from gpufleet.model.workload import POD_GROUP_LABEL, Workload, workload_key
from gpufleet.service.auth import Principal

Obj = dict[str, Any]
LABEL_VALUE_MAX = 63

TENANT_LABEL = "gpufleet.dev/tenant"
WORKLOAD_ANNOTATION = "gpufleet.dev/workload"
KIND_ANNOTATION = "gpufleet.dev/kind"
COMPLETIONS_ANNOTATION = "gpufleet.dev/completions"
#: Kinds whose controller (the Job controller, an operator) makes the pods, as a gang.
CONTROLLED_KINDS = ("Job", "PyTorchJob", "MPIJob", "RayCluster", "RayJob")
#: Kinds whose controller makes replicas, each a workload of its own; each pod names its owner.
REPLICATED_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")
OWNER_ANNOTATION = "gpufleet.dev/owner"


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
        for _, template in templates:
            meta = template.setdefault("metadata", {})
            labels = meta.setdefault("labels", {})
            labels[TENANT_LABEL] = principal.tenant
            if found is not None:
                labels.setdefault(QUEUE_LABEL, found[1].queue)
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
        for path, template in _pod_templates(_deep_copy(manifest)):
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


def _pod_templates(obj: Obj) -> list[tuple[str, Obj]]:
    """The pod (for a Pod: the object itself, at path "") or pod templates of a workload
    object, each with its path in the object (``spec.template``)."""
    kind = obj.get("kind")
    if kind == "Pod":
        return [("", obj)]
    spec = obj.setdefault("spec", {})
    if kind in ("PyTorchJob", "MPIJob"):
        field = "pytorchReplicaSpecs" if kind == "PyTorchJob" else "mpiReplicaSpecs"
        replicas = spec.get(field)
        return [
            (f"spec.{field}.{role}.template", r.setdefault("template", {}))
            for role, r in (replicas or {}).items()
            if isinstance(r, dict)
        ]
    if kind in ("RayCluster", "RayJob"):
        prefix = "spec.rayClusterSpec" if kind == "RayJob" else "spec"
        cluster = spec.get("rayClusterSpec") if kind == "RayJob" else spec
        groups = [(f"{prefix}.headGroupSpec", (cluster or {}).get("headGroupSpec"))]
        groups += [
            (f"{prefix}.workerGroupSpecs[{i}]", g)
            for i, g in enumerate((cluster or {}).get("workerGroupSpecs") or [])
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
