"""The ``scale`` subresource of Deployments, StatefulSets and ReplicaSets (autoscaling/v1
``Scale``), as the real API server serves it: GET reads ``spec.replicas`` (1 when unset) and
``status.replicas`` of the object, PUT and PATCH (any patch type) of the Scale set the object's
``spec.replicas``. A negative or non-integer count is a 422. No controller acts on the change."""

from __future__ import annotations

from typing import Any

from tests.fakes.kube_api import errors
from tests.fakes.kube_api.patch import apply_patch
from tests.fakes.kube_api.resources import ResourceType
from tests.fakes.kube_api.store import Obj, Store

SCALED = frozenset({("apps", "deployments"), ("apps", "statefulsets"), ("apps", "replicasets")})


def _selector(obj: Obj) -> str:
    labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def scale_of(obj: Obj) -> Obj:
    metadata = obj.get("metadata") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: metadata[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in metadata
        },
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
        "status": {
            "replicas": (obj.get("status") or {}).get("replicas", 0),
            "selector": _selector(obj),
        },
    }


def get_scale(store: Store, rt: ResourceType, namespace: str | None, name: str) -> Obj:
    return scale_of(store.get(rt, namespace, name))


def write_scale(
    store: Store,
    rt: ResourceType,
    namespace: str | None,
    name: str,
    body: Any,
    content_type: str | None,
) -> Obj:
    """PUT (``content_type`` None: ``body`` is the new Scale) or PATCH of the Scale."""

    def change(obj: Obj) -> Obj:
        scale = (
            body if content_type is None else apply_patch(scale_of(obj), body, content_type, False)
        )
        replicas = ((scale or {}).get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise errors.ApiError(
                422, f"Scale.autoscaling {name!r} is invalid: spec.replicas: {replicas!r}",
                "Invalid",
            )  # fmt: skip
        obj.setdefault("spec", {})["replicas"] = replicas
        return obj

    return scale_of(store.mutate(rt, namespace, name, change))
