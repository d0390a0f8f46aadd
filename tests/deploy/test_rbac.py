"""deploy/rbac.yaml grants exactly what the scheduler needs: every (apiGroup, resource, verb)
of the ClusterRole and the leader-election Role is in the table below, and the table is all
granted; no wildcard, no non-resource URLs, no aggregation; the bindings name the service
account the Deployment runs as."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.support import DEPLOY, SCHEDULER_NAMESPACE, load_objects

NAME = "gpufleet-scheduler"
LEASE_ROLE = f"{NAME}-leader-election"

# (apiGroup, resource, verb, resourceName or "" for any)
Grant = tuple[str, str, str, str]

CLUSTER_GRANTS: set[Grant] = {
    *{
        ("", resource, verb, "")
        for resource in ("nodes", "pods", "resourcequotas")
        for verb in ("list", "watch")
    },
    ("", "pods/binding", "create", ""),
    ("", "pods/eviction", "create", ""),
    ("", "pods/status", "patch", ""),
    *{("", "events", verb, "") for verb in ("create", "patch")},
    *{
        ("gpufleet.dev", resource, verb, "")
        for resource in ("queues", "podgroups")
        for verb in ("list", "watch")
    },
    *{
        ("gpufleet.dev", resource, "patch", "")
        for resource in ("queues/status", "podgroups/status")
    },
    *{
        (group, "podgroups", verb, "")
        for group in ("scheduling.x-k8s.io", "scheduling.volcano.sh")
        for verb in ("list", "watch")
    },
    *{("scheduling.k8s.io", "priorityclasses", verb, "") for verb in ("list", "watch")},
}
LEASE_GRANTS: set[Grant] = {
    ("coordination.k8s.io", "leases", "create", ""),
    ("coordination.k8s.io", "leases", "get", NAME),
    ("coordination.k8s.io", "leases", "update", NAME),
}

OBJECTS = {(item.kind, item.name): item.obj for item in load_objects(DEPLOY / "rbac.yaml")}


def grants(rules: list[dict[str, Any]]) -> set[Grant]:
    """Every (apiGroup, resource, verb, resourceName) a list of PolicyRules grants."""
    found: set[Grant] = set()
    for rule in rules:
        names = rule.get("resourceNames") or [""]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    found.update((group, resource, verb, name) for name in names)
    return found


def test_rbac_objects() -> None:
    assert sorted(OBJECTS) == sorted(
        [
            ("ServiceAccount", NAME),
            ("ClusterRole", NAME),
            ("ClusterRoleBinding", NAME),
            ("Role", LEASE_ROLE),
            ("RoleBinding", LEASE_ROLE),
        ]
    )


ROLE_CASES = [("ClusterRole", NAME, CLUSTER_GRANTS), ("Role", LEASE_ROLE, LEASE_GRANTS)]


@pytest.mark.parametrize(("kind", "name", "expected"), ROLE_CASES, ids=["cluster", "lease"])
def test_role_grants_exactly(kind: str, name: str, expected: set[Grant]) -> None:
    found = grants(OBJECTS[(kind, name)]["rules"])
    assert found - expected == set(), "granted beyond the table"
    assert expected - found == set(), "missing from the role"


@pytest.mark.parametrize(
    ("kind", "name"), [(k, n) for k, n, _ in ROLE_CASES], ids=["cluster", "lease"]
)
def test_nothing_broader(kind: str, name: str) -> None:
    role = OBJECTS[(kind, name)]
    assert "aggregationRule" not in role
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
        assert "nonResourceURLs" not in rule
        for key in ("apiGroups", "resources", "verbs", "resourceNames"):
            for value in rule.get(key, []):
                assert "*" not in value, f"wildcard in {key}: {rule}"
        for verb in rule["verbs"]:
            assert verb not in ("escalate", "bind", "impersonate", "deletecollection", "delete")


def test_no_secrets_or_node_writes() -> None:
    everything = grants(OBJECTS[("ClusterRole", NAME)]["rules"])
    assert not {grant for grant in everything if grant[1] in ("secrets", "configmaps")}
    assert {grant[2] for grant in everything if grant[1] == "nodes"} == {"list", "watch"}


def test_pods_are_never_patched_or_written() -> None:
    """Issue 26: ``patch`` on pods was granted and never used; the scheduler binds through
    pods/binding and writes conditions through pods/status only."""
    everything = grants(OBJECTS[("ClusterRole", NAME)]["rules"])
    assert {grant[2] for grant in everything if grant[1] == "pods"} == {"list", "watch"}


def test_lease_role_lives_in_the_scheduler_namespace() -> None:
    for kind in ("Role", "RoleBinding"):
        assert OBJECTS[(kind, LEASE_ROLE)]["metadata"]["namespace"] == SCHEDULER_NAMESPACE


BINDINGS = [("ClusterRoleBinding", NAME, "ClusterRole"), ("RoleBinding", LEASE_ROLE, "Role")]


@pytest.mark.parametrize(("kind", "name", "role_kind"), BINDINGS, ids=["cluster", "lease"])
def test_binding_names_the_role_and_service_account(kind: str, name: str, role_kind: str) -> None:
    binding = OBJECTS[(kind, name)]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": role_kind,
        "name": name,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": NAME, "namespace": SCHEDULER_NAMESPACE}
    ]


def test_service_account_is_the_deployments() -> None:
    account = OBJECTS[("ServiceAccount", NAME)]
    assert account["metadata"]["namespace"] == SCHEDULER_NAMESPACE
    (deployment,) = [
        item.obj for item in load_objects(DEPLOY / "scheduler.yaml") if item.kind == "Deployment"
    ]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == NAME
