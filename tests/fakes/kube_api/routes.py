"""URL paths → :class:`Route` (resource type, namespace, name, subresource).

Understood shapes, for the core group (``/api/v1``) and named groups (``/apis/{g}/{v}``)::

    {prefix}/{plural}[/{name}[/{subresource}]]                     cluster-scoped, or all
                                                                   namespaces for a list/watch
    {prefix}/namespaces/{ns}/{plural}[/{name}[/{subresource}]]     namespaced

A path naming an unknown group, version or resource (e.g. a custom resource before its CRD
exists) does not route and the server answers 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from tests.fakes.kube_api.resources import Registry, ResourceType


@dataclass(frozen=True)
class Route:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def resolve(registry: Registry, path: str) -> Route | None:
    parts = [unquote(p) for p in path.strip("/").split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        inner = registry.lookup(group, version, rest[2])
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    rt = registry.lookup(group, version, rest[0])
    if rt is None or (rt.namespaced and namespace is None and len(rest) > 1):
        return None
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    return Route(rt, namespace, name, subresource)
