"""Create, replace and delete the objects users submit through the control plane.

The scheduler only reads and binds; the control plane on Kubernetes also writes what tenants
submit (Pods, Jobs, Deployments, StatefulSets, ReplicaSets, PyTorchJobs, MPIJobs, RayClusters,
RayJobs, PodGroups) and what admins set (Queues, PriorityClasses). :class:`ObjectWriter` does
that through :meth:`KubeApi.request <gpufleet.kube_client.api.KubeApi.request>` (one path per
kind, below), under the same client-side rate limit as the scheduler's calls, as the client's
own identity or, for a tenant's objects, impersonating the tenant (:meth:`acting_as`), and
reads or merge-patches one of them (the idle reclaimer's pod annotations and labels, and the
``scale`` subresource of a Deployment or StatefulSet). It decides nothing about what is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gpufleet.kube_client.api import ApiError, Impersonation, KubeApi

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Kind:
    prefix: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str
    namespaced: bool


KINDS: dict[str, Kind] = {
    "Pod": Kind("/api/v1", "pods", True),
    "Job": Kind("/apis/batch/v1", "jobs", True),
    "Deployment": Kind("/apis/apps/v1", "deployments", True),
    "StatefulSet": Kind("/apis/apps/v1", "statefulsets", True),
    "ReplicaSet": Kind("/apis/apps/v1", "replicasets", True),
    "PyTorchJob": Kind("/apis/kubeflow.org/v1", "pytorchjobs", True),
    "MPIJob": Kind("/apis/kubeflow.org/v2beta1", "mpijobs", True),
    "RayCluster": Kind("/apis/ray.io/v1", "rayclusters", True),
    "RayJob": Kind("/apis/ray.io/v1", "rayjobs", True),
    "PodGroup": Kind("/apis/gpufleet.dev/v1alpha1", "podgroups", True),
    "Queue": Kind("/apis/gpufleet.dev/v1alpha1", "queues", False),
    "PriorityClass": Kind("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
}


def path_of(
    kind: str, namespace: str | None, name: str | None = None, api_version: str | None = None
) -> str:
    """The API path of a kind (at ``api_version``, when given: an MPIJob may be v1 too)."""
    found = KINDS.get(kind)
    if found is None:
        raise ValueError(f"cannot write a {kind}: expected one of {', '.join(KINDS)}")
    path = found.prefix
    if api_version:
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if found.namespaced:
        path += f"/namespaces/{quote(namespace or 'default', safe='')}"
    path += f"/{found.plural}"
    return path + (f"/{quote(name, safe='')}" if name else "")


class ObjectWriter:
    """See the module docstring. ``identity``: every request of this writer impersonates it
    (a tenant's writes); None: the client's own (the plane's)."""

    def __init__(self, api: KubeApi, identity: Impersonation | None = None) -> None:
        self.api = api
        self.identity = identity

    def acting_as(self, identity: Impersonation | None) -> ObjectWriter:
        """A writer on the same client whose requests impersonate ``identity`` (None: the
        client's own identity)."""
        return ObjectWriter(self.api, identity)

    def _request(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        content_type: str = "application/json",
    ) -> Obj | None:
        return self.api.request(method, path, body, content_type, self.identity)

    def create(self, obj: Obj) -> Obj:
        metadata = obj.get("metadata") or {}
        path = path_of(str(obj["kind"]), metadata.get("namespace"), None, obj.get("apiVersion"))
        found = self._request("POST", path, obj)
        return found or {}

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """The object, or None when there is none."""
        try:
            return self._request("GET", path_of(kind, namespace, name)) or {}
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def patch(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Obj,
        subresource: str | None = None,
    ) -> Obj:
        """A JSON merge patch of the object (or of its ``subresource``: ``scale``)."""
        path = path_of(kind, namespace, name) + (f"/{subresource}" if subresource else "")
        return self._request("PATCH", path, patch, "application/merge-patch+json") or {}

    def apply(self, obj: Obj) -> Obj:
        """Create ``obj``, or replace the object of its name (for Queues, PriorityClasses)."""
        metadata = obj.get("metadata") or {}
        kind, name = str(obj["kind"]), str(metadata.get("name"))
        path = path_of(kind, metadata.get("namespace"), name)
        try:
            current = self._request("GET", path)
        except ApiError as error:
            if error.status != 404:
                raise
            return self.create(obj)
        version = ((current or {}).get("metadata") or {}).get("resourceVersion")
        body = {**obj, "metadata": {**metadata, "resourceVersion": version}}
        return self._request("PUT", path, body) or {}

    def delete(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        api_version: str | None = None,
        uid: str | None = None,
    ) -> bool:
        """Delete (its dependents in the background); False when it was not there. With
        ``uid``, only the object of that UID: another of the same name (the one meant was
        deleted and the name reused) is left alone, an ApiError 409 from the API server."""
        options: Obj = {
            "kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"
        }  # fmt: skip
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            self._request("DELETE", path_of(kind, namespace, name, api_version), options)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True
