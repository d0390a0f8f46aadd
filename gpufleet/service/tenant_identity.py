"""Who a tenant is to the Kubernetes API server when ``serve --kubeconfig`` writes for it.

Owns the templates of the impersonated user and groups (``{tenant}`` stands for the tenant's
name) and their check. The plane writes each tenant's objects as that user (the
``Impersonate-User`` and ``Impersonate-Group`` headers), so that the API server's RBAC and Pod
Security Admission judge them as the tenant's own, never with the plane's rights: the confused
deputy that a front-end writing with its own credentials is. By default tenant ``team-a`` is
user ``gpufleet:tenant:team-a`` in groups ``gpufleet:tenants`` and ``gpufleet:tenant:team-a``;
the operator grants each such user what it may do (a RoleBinding in its namespaces).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

PLACEHOLDER = "tenant"
DEFAULT_USER = "gpufleet:tenant:{tenant}"
DEFAULT_GROUPS = ("gpufleet:tenants", "gpufleet:tenant:{tenant}")


@dataclass(frozen=True, slots=True)
class TenantIdentity:
    """The user and group templates; each may hold ``{tenant}`` and no other field. The user
    must hold it: one user for every tenant would give each the others' rights."""

    user: str = DEFAULT_USER
    groups: tuple[str, ...] = DEFAULT_GROUPS

    def __post_init__(self) -> None:
        for template in (self.user, *self.groups):
            _check(template)
        if PLACEHOLDER not in _fields(self.user):
            raise ValueError(
                f"the impersonated user {self.user!r} must hold {{{PLACEHOLDER}}}: a user shared "
                "by all tenants would give each tenant the others' rights"
            )

    def user_of(self, tenant: str) -> str:
        return self.user.format(tenant=tenant)

    def groups_of(self, tenant: str) -> tuple[str, ...]:
        return tuple(group.format(tenant=tenant) for group in self.groups)


def _fields(template: str) -> list[str]:
    return [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]


def _check(template: str) -> None:
    if not template.strip():
        raise ValueError("an impersonated user or group must not be empty")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise ValueError(f"{template!r}: {error} (write a brace as {{{{ or }}}})") from None
    for _, field, spec, conversion in parsed:
        if field is not None and (field != PLACEHOLDER or spec or conversion):
            raise ValueError(
                f"{template!r}: the only field a template may hold is {{{PLACEHOLDER}}}"
            )
