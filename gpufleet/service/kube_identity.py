"""Whose a pod on the cluster is, for ``gpufleet serve --kubeconfig``: its workload and tenant.

A pod's labels and annotations are written by whoever may create pods in its namespace, so
nothing here trusts them across namespaces, and none of gpufleet's own marks (``gpufleet.dev/
workload``, ``/owner``, ``/kind``, ``/tenant``) is read at all. What is trusted:

* the pod's own ``metadata.namespace``: a workload's namespace is always its pods';
* the record of each object the plane created for a submission (namespace, kind, name, the
  UID of its create response, the tenant that submitted it, the workload it was filed under;
  kept in the plane's store, :class:`~gpufleet.service.store.CreatedObject`);
* the pod's controller ``ownerReference`` (the API server never lets one cross namespaces):
  a pod whose controller's UID is a recorded object's belongs to it, as does one whose
  ReplicaSet is named for a recorded Deployment with the pod's ``pod-template-hash``;
* a pod the plane created itself (its own UID recorded), and a pod whose pod-group label names
  a PodGroup the plane created in the pod's namespace (a gang's pods that an operator makes
  through an object of its own: a RayJob's RayCluster, an MPIJob's launcher Job).

Any other pod is not gpufleet's: it is keyed by its namespace and its name (or its pod group),
its tenant is the one the admin's namespace map names for its namespace
(``tenants.<t>.namespaces`` of the admission rules), else :data:`CLUSTER_TENANT` (seen by
admins only), and nothing of it may be deleted through gpufleet. Pure: the plane keeps the
index (:class:`CreatedIndex`) and the store in step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.backends.kube.pods import pod_group
from gpufleet.model.workload import workload_key
from gpufleet.service.kube_writes import REPLICATED_KINDS
from gpufleet.service.store import CreatedObject

Obj = dict[str, Any]

#: Tenant of pods that were not submitted through the control plane (seen by admins only).
CLUSTER_TENANT = "cluster"
#: The label the ReplicaSet controller puts on its pods: its ReplicaSet's name ends with it.
POD_TEMPLATE_HASH = "pod-template-hash"


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """The workload a pod is listed under, its tenant, and the submission (the workload key the
    plane filed its created objects under) that made it: None for a pod gpufleet did not
    create, which cannot be cancelled through gpufleet."""

    key: str
    tenant: str
    submission: str | None


class CreatedIndex:
    """The objects the plane created, looked up by UID, by name and by submission."""

    def __init__(self, created: Iterable[CreatedObject] = ()) -> None:
        self._by_uid: dict[str, CreatedObject] = {}
        self._by_name: dict[tuple[str, str, str], CreatedObject] = {}
        for obj in created:
            self.add(obj)

    def add(self, obj: CreatedObject) -> None:
        old = self._by_name.get((obj.namespace, obj.kind, obj.name))
        if old is not None:
            self._by_uid.pop(old.uid, None)
        self._by_uid[obj.uid] = obj
        self._by_name[(obj.namespace, obj.kind, obj.name)] = obj

    def forget(self, obj: CreatedObject) -> None:
        if self._by_uid.get(obj.uid) == obj:
            del self._by_uid[obj.uid]
        if self._by_name.get((obj.namespace, obj.kind, obj.name)) == obj:
            del self._by_name[(obj.namespace, obj.kind, obj.name)]

    def of_submission(self, submission: str) -> list[CreatedObject]:
        """The objects created for one submitted workload, PodGroups last."""
        found = [o for o in self._by_name.values() if o.workload == submission]
        return sorted(found, key=lambda o: o.kind == "PodGroup")

    def creator(self, pod: Obj) -> CreatedObject | None:
        """The recorded object that made ``pod`` (or the pod itself), if the plane made it."""
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        owner = _controller(metadata)
        if owner is not None:
            kind, name, uid = owner
            found = self._by_uid.get(uid) if uid else None
            if found is not None and found.namespace == namespace:
                return found
            template_hash = str((metadata.get("labels") or {}).get(POD_TEMPLATE_HASH) or "")
            if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
                deployment = name.removesuffix(f"-{template_hash}")
                found = self._by_name.get((namespace, "Deployment", deployment))
                if found is not None:
                    return found
        own = self._by_uid.get(str(metadata.get("uid") or "")) if metadata.get("uid") else None
        if own is not None and own.kind == "Pod" and own.namespace == namespace:
            return own
        group = pod_group(pod)
        if group:
            return self._by_name.get((namespace, "PodGroup", group))
        return None

    def identify(self, pod: Obj, namespace_tenants: Mapping[str, str]) -> PodIdentity:
        """The workload and tenant of ``pod`` (see the module docstring)."""
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        name = str(metadata.get("name"))
        created = self.creator(pod)
        if created is not None:
            # Each replica of a Deployment, StatefulSet or ReplicaSet is a workload of its own.
            replica = created.kind in REPLICATED_KINDS
            key = workload_key(namespace, name, created.kind) if replica else created.workload
            return PodIdentity(key, created.tenant, created.workload)
        tenant = namespace_tenants.get(namespace, CLUSTER_TENANT)
        group = pod_group(pod)
        if group:
            return PodIdentity(workload_key(namespace, group, "PodGroup"), tenant, None)
        return PodIdentity(workload_key(namespace, name, "Pod"), tenant, None)


def _controller(metadata: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(kind, name, uid) of an object's controller owner reference."""
    for ref in metadata.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name")), str(ref.get("uid") or "")
    return None
