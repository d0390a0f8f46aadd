"""The shipped roles grant each component exactly what it was seen using: every access its
workload (tests/deploy/rbac_workloads.py) made against the fake API server is granted (nothing
missing: the real API server would answer 403), and every grant was used (nothing extra: least
privilege), in deploy/*.yaml and in the Helm chart alike.

A grant the fake API server cannot show being used, because only the real API server's path
needs it, belongs in ``REAL_SERVER_ONLY`` with the reason; there is none today. The real
cluster's side of the same check: docs/security/supply-chain.md ("RBAC from an audit log").
"""

from __future__ import annotations

import json

import pytest

from tests.deploy.rbac_evidence import (
    COMPONENTS,
    SCHEDULER,
    Component,
    Grant,
    account_grants,
    audit_accesses,
    chart_objects,
    deploy_objects,
    missing,
    unused,
)
from tests.deploy.rbac_workloads import WORKLOADS
from tests.fakes.kube_api import FakeApiServer
from tests.fakes.kube_api.access import Access, request_access

#: Grants no workload here can show being used, each with why it is needed all the same.
REAL_SERVER_ONLY: dict[str, set[Grant]] = {component.client: set() for component in COMPONENTS}

SOURCES = {"deploy": deploy_objects, "chart": chart_objects}
IDS = [component.client for component in COMPONENTS]


@pytest.fixture(scope="module")
def used(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[Access]]:
    """Each component's accesses over its workload, each on a server of its own."""
    found: dict[str, set[Access]] = {}
    for component in COMPONENTS:
        with FakeApiServer() as server:
            WORKLOADS[component.client](server, tmp_path_factory.mktemp(component.client))
            found[component.client] = server.accesses(component.client)
            assert server.accesses() == found[component.client], "only the component asked"
    return found


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("component", COMPONENTS, ids=IDS)
def test_every_access_is_granted(
    used: dict[str, set[Access]], component: Component, source: str
) -> None:
    grants = account_grants(SOURCES[source](), component)
    assert grants, f"no role is bound to {component.service_account}"
    refused = sorted(missing(grants, used[component.client]))
    assert not refused, "not granted:\n" + "\n".join(map(str, refused))


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("component", COMPONENTS, ids=IDS)
def test_every_grant_is_used(
    used: dict[str, set[Access]], component: Component, source: str
) -> None:
    grants = account_grants(SOURCES[source](), component) - REAL_SERVER_ONLY[component.client]
    extra = unused(grants, used[component.client])
    assert not extra, "granted, never used:\n" + "\n".join(sorted(g.describe() for g in extra))


# ------------------------------------------------------------- the checks themselves can fail
def _access(method: str, path: str, watch: bool = False) -> Access:
    access = request_access("c", method, path, {"watch": "true"} if watch else {})
    assert access is not None
    return access


VERB_CASES = [
    ("GET", "/api/v1/nodes/n1", False, ("get", "", "nodes", "", "n1")),
    ("GET", "/api/v1/pods", False, ("list", "", "pods", "", "")),
    ("GET", "/api/v1/pods", True, ("watch", "", "pods", "", "")),
    ("GET", "/api/v1/watch/namespaces/a/pods", False, ("watch", "", "pods", "a", "")),
    ("POST", "/api/v1/namespaces/a/pods/p/binding", False,
     ("create", "", "pods/binding", "a", "p")),
    ("POST", "/api/v1/namespaces/a/bindings", False, ("create", "", "bindings", "a", "")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/s/leases/l", False,
     ("update", "coordination.k8s.io", "leases", "s", "l")),
    ("PATCH", "/apis/gpufleet.dev/v1alpha1/queues/q/status", False,
     ("patch", "gpufleet.dev", "queues/status", "", "q")),
    ("DELETE", "/api/v1/namespaces/a/pods/p", False, ("delete", "", "pods", "a", "p")),
    ("DELETE", "/api/v1/namespaces/a/pods", False, ("deletecollection", "", "pods", "a", "")),
    ("GET", "/api/v1/namespaces/a", False, ("get", "", "namespaces", "a", "a")),
    ("PUT", "/api/v1/namespaces/a/finalize", False,
     ("update", "", "namespaces/finalize", "a", "a")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "watch", "expected"), VERB_CASES, ids=[f"{c[0]} {c[1]}" for c in VERB_CASES]
)
def test_requests_become_the_api_servers_rbac_attributes(
    method: str, path: str, watch: bool, expected: tuple[str, str, str, str, str]
) -> None:
    access = _access(method, path, watch)
    assert (access.verb, access.group, access.resource, access.namespace, access.name) == expected


def test_non_resource_urls_are_not_recorded() -> None:
    assert request_access("c", "GET", "/version", {}) is None
    assert request_access("c", "GET", "/apis", {}) is None


LEASE_ROLE = {
    "kind": "Role",
    "metadata": {"name": "lease", "namespace": "s"},
    "rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["l"],
            "verbs": ["update"],
        },
    ],
}
ACCOUNT = Component("c", "sa", "s")
BINDING = {
    "kind": "RoleBinding",
    "metadata": {"name": "lease", "namespace": "s"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
    "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "s"}],
}
GRANT_CASES = [
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/s/leases/l", True),
    ("POST", "/apis/coordination.k8s.io/v1/namespaces/s/leases", True),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/s/leases/other", False),  # resourceNames
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/t/leases/l", False),  # another namespace
    ("PATCH", "/apis/coordination.k8s.io/v1/namespaces/s/leases/l", False),  # another verb
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/s/leases/l/status", False),  # subresource
]


@pytest.mark.parametrize(("method", "path", "granted"), GRANT_CASES, ids=[str(i) for i in range(6)])
def test_grants_match_as_rbac_does(method: str, path: str, granted: bool) -> None:
    grants = account_grants([LEASE_ROLE, BINDING], ACCOUNT)
    access = _access(method, path)
    assert missing(grants, [access]) == (set() if granted else {access})


def test_an_unbound_account_has_nothing_and_a_grant_unused_is_reported() -> None:
    assert account_grants([LEASE_ROLE, BINDING], Component("c", "other", "s")) == set()
    grants = account_grants([LEASE_ROLE, BINDING], ACCOUNT)
    used = [_access("POST", "/apis/coordination.k8s.io/v1/namespaces/s/leases")]
    assert unused(grants, used) == {Grant("coordination.k8s.io", "leases", "update", "l", "s")}


AUDIT_LOG = [
    {  # the scheduler's binding, as its ServiceAccount
        "kind": "Event", "stage": "ResponseComplete", "verb": "create",
        "user": {"username": "system:serviceaccount:gpufleet-system:gpufleet-scheduler"},
        "objectRef": {"resource": "pods", "subresource": "binding", "namespace": "ml",
                      "name": "p", "apiVersion": "v1"},
    },
    {  # the same request's first stage: not counted again
        "kind": "Event", "stage": "RequestReceived", "verb": "create",
        "user": {"username": "system:serviceaccount:gpufleet-system:gpufleet-scheduler"},
        "objectRef": {"resource": "pods", "subresource": "binding", "namespace": "ml",
                      "name": "p", "apiVersion": "v1"},
    },
    {  # an admin impersonating the agent
        "kind": "Event", "stage": "ResponseComplete", "verb": "patch",
        "user": {"username": "kube-e2e-admin"},
        "impersonatedUser": {"username": "system:serviceaccount:gpufleet-system:gpufleet-agent"},
        "objectRef": {"resource": "nodes", "name": "gpu-1", "apiVersion": "v1"},
    },
    {  # someone else
        "kind": "Event", "stage": "ResponseComplete", "verb": "delete",
        "user": {"username": "kube-e2e-admin"},
        "objectRef": {"resource": "pods", "namespace": "ml", "name": "p", "apiVersion": "v1"},
    },
    {  # a non-resource request
        "kind": "Event", "stage": "ResponseComplete", "verb": "get",
        "user": {"username": "system:serviceaccount:gpufleet-system:gpufleet-scheduler"},
        "requestURI": "/version",
    },
]  # fmt: skip


def test_an_audit_log_gives_each_components_accesses() -> None:
    found = audit_accesses(json.dumps(event) for event in AUDIT_LOG)
    assert found == [
        Access("gpufleet-scheduler", "create", "", "pods/binding", "ml", "p"),
        Access("gpufleet-agent", "patch", "", "nodes", "", "gpu-1"),
    ]
    assert missing(account_grants(deploy_objects(), SCHEDULER), found[:1]) == set()


def test_the_workloads_cover_every_component() -> None:
    assert set(WORKLOADS) == {component.client for component in COMPONENTS}
