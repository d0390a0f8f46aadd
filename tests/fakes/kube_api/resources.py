"""Resource types: the built-in ones the fake serves and those that CRDs register.

A resource is identified by ``(group, plural)``; the version is a view on it (objects of a
multi-version CRD are stored once and answered with the version the request asked for, as
the ``None`` conversion strategy does). Custom objects are not validated against the CRD's
OpenAPI schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ResourceKey = tuple[str, str]
"""``(group, plural)``; the core group is ``""``."""


@dataclass(frozen=True)
class ResourceType:
    """One served resource at one version."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = False
    custom: bool = False

    @property
    def key(self) -> ResourceKey:
        return (self.group, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


BUILTIN: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "nodes", "Node", False, status_subresource=True),
    ResourceType("", "v1", "namespaces", "Namespace", False, status_subresource=True),
    ResourceType("", "v1", "pods", "Pod", True, status_subresource=True),
    ResourceType("", "v1", "events", "Event", True),
    ResourceType("", "v1", "resourcequotas", "ResourceQuota", True, status_subresource=True),
    ResourceType("", "v1", "configmaps", "ConfigMap", True),
    ResourceType("events.k8s.io", "v1", "events", "Event", True),
    ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False),
    ResourceType(
        "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, status_subresource=True
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType("apps", "v1", "deployments", "Deployment", True, status_subresource=True),
    ResourceType("apps", "v1", "statefulsets", "StatefulSet", True, status_subresource=True),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, status_subresource=True),
    ResourceType(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        True,
        status_subresource=True,
    ),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        status_subresource=True,
    ),
)

CRD_KEY: ResourceKey = ("apiextensions.k8s.io", "customresourcedefinitions")


def split_api_version(api_version: str) -> tuple[str, str]:
    """``"apps/v1"`` → ``("apps", "v1")``; ``"v1"`` → ``("", "v1")``."""
    group, _, version = api_version.rpartition("/")
    return group, version


def from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The resource types a CustomResourceDefinition serves (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        out.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                status_subresource="status" in subresources,
                custom=True,
            )
        )
    return out


class Registry:
    """The served resource types; not thread-safe by itself (the store guards it)."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for rt in BUILTIN:
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt

    def remove_custom(self, key: ResourceKey) -> None:
        for k, rt in list(self._types.items()):
            if rt.custom and rt.key == key:
                del self._types[k]

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, version = split_api_version(api_version)
        for rt in self._types.values():
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        return None

    def has_version(self, group: str, version: str) -> bool:
        return any(rt.group == group and rt.version == version for rt in self._types.values())
