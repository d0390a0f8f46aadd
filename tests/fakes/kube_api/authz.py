"""Who sent a request, and a minimal RBAC: which impersonated users may write where.

Each request's caller is recorded (:class:`Caller`: the ``Impersonate-User`` and
``Impersonate-Group`` headers it carried, None for the kubeconfig's own identity). Once a test
grants anything (:meth:`Authorizer.grant`), the writes (create, update, patch, delete) of an
impersonated user are authorized: allowed in the namespaces granted to that user, refused
elsewhere and at the cluster scope with the 403 the API server answers when RBAC denies.
Reads are not checked, nor the kubeconfig's own identity (the fake's token is an admin's), nor
whether that identity may impersonate.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from tests.fakes.kube_api import errors
from tests.fakes.kube_api.routes import Route

WRITE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Caller:
    """One request and who sent it: ``user`` and ``groups`` impersonated (None and (): the
    kubeconfig's own identity)."""

    method: str
    path: str
    user: str | None
    groups: tuple[str, ...]


class Authorizer:
    """The grants; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._grants: dict[str, set[str]] | None = None

    def grant(self, user: str, namespace: str) -> None:
        """Let ``user`` write in ``namespace``; from the first grant on, writes are checked."""
        with self._lock:
            if self._grants is None:
                self._grants = {}
            self._grants.setdefault(user, set()).add(namespace)

    def check(self, caller: Caller, route: Route) -> None:
        """Raise the API server's 403 if ``caller`` may not make this write."""
        verb = WRITE_VERBS.get(caller.method)
        if caller.user is None or verb is None:
            return
        with self._lock:
            if self._grants is None:
                return
            allowed = route.rt.namespaced and route.namespace in self._grants.get(caller.user, ())
        if not allowed:
            raise forbidden(caller.user, verb, route)


def forbidden(user: str, verb: str, route: Route) -> errors.ApiError:
    """RBAC's refusal, worded as the API server words it."""
    resource = route.rt.plural + (f"/{route.subresource}" if route.subresource else "")
    subject = errors.qualified(route.rt.plural, route.rt.group)
    if route.name and verb != "create":
        subject += f' "{route.name}"'
    scope = (
        f'in the namespace "{route.namespace}"'
        if route.namespace is not None
        else "at the cluster scope"
    )
    message = (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API '
        f'group "{route.rt.group}" {scope}'
    )
    details = {"kind": route.rt.plural, **({"group": route.rt.group} if route.rt.group else {})}
    if route.name and verb != "create":
        details["name"] = route.name
    return errors.ApiError(403, message, "Forbidden", details)
