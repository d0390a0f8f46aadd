"""deploy/serve-rbac.yaml: the identity of ``gpufleet serve --kubeconfig`` grants exactly the
table below: the scheduler's reads and writes, the admin's Queues and PriorityClasses, and
``impersonate`` on the tenants' users and groups by name; no create or delete of any kind a
tenant submits (those are written as the tenant); the example tenants' RoleBindings name the
users serve may impersonate, as gpufleet names them."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube_client.writer import KINDS
from gpufleet.service.tenant_identity import TenantIdentity
from tests.deploy.support import (
    DEPLOY,
    DEPLOY_EXAMPLES,
    SCHEDULER_NAMESPACE,
    SERVE_RBAC,
    Grant,
    load_objects,
    rule_grants,
)

NAME = "gpufleet-serve"
PODGROUPS_EDIT = "gpufleet-podgroups-edit"
TENANTS = ("ml-research", "ml-serving")
IDENTITY = TenantIdentity()

SCHEDULER_GRANTS: set[Grant] = {
    *{("", resource, verb, "") for resource in ("nodes", "pods", "resourcequotas")
      for verb in ("get", "list", "watch")},
    ("", "pods/binding", "create", ""),
    ("", "pods/eviction", "create", ""),
    *{("", "pods/status", verb, "") for verb in ("patch", "update")},
    *{(group, "events", verb, "") for group in ("", "events.k8s.io")
      for verb in ("create", "patch", "update")},
    *{("gpufleet.dev", resource, verb, "") for resource in ("queues", "podgroups")
      for verb in ("get", "list", "watch")},
    *{("gpufleet.dev", resource, verb, "") for resource in ("queues/status", "podgroups/status")
      for verb in ("get", "patch", "update")},
    *{(group, "podgroups", verb, "") for group in ("scheduling.x-k8s.io", "scheduling.volcano.sh")
      for verb in ("get", "list", "watch")},
    *{("scheduling.k8s.io", "priorityclasses", verb, "") for verb in ("get", "list", "watch")},
}  # fmt: skip
ADMIN_GRANTS: set[Grant] = {
    *{("gpufleet.dev", "queues", verb, "") for verb in ("create", "update", "delete")},
    *{
        ("scheduling.k8s.io", "priorityclasses", verb, "")
        for verb in ("create", "update", "delete")
    },
}
IMPERSONATE_GRANTS: set[Grant] = {
    *{("", "users", "impersonate", IDENTITY.user_of(t)) for t in TENANTS},
    *{("", "groups", "impersonate", group) for t in TENANTS for group in IDENTITY.groups_of(t)},
}
RECLAIM_GRANTS: set[Grant] = {
    *{("apps", resource, verb, "") for resource in ("deployments", "statefulsets", "replicasets")
      for verb in ("get", "list", "watch")},
    *{("apps", resource, verb, "") for resource in ("deployments/scale", "statefulsets/scale")
      for verb in ("get", "patch")},
    *{("autoscaling", "horizontalpodautoscalers", verb, "") for verb in ("get", "list", "watch")},
    *{("keda.sh", "scaledobjects", verb, "") for verb in ("get", "list", "watch")},
    ("", "pods", "patch", ""),
}  # fmt: skip

OBJECTS = {(item.kind, item.name): item.obj for item in load_objects(SERVE_RBAC)}
GRANTED = rule_grants(OBJECTS[("ClusterRole", NAME)]["rules"])


def test_serve_rbac_objects() -> None:
    assert sorted(OBJECTS) == sorted(
        [
            ("ServiceAccount", NAME),
            ("ClusterRole", NAME),
            ("ClusterRoleBinding", NAME),
            ("ClusterRole", PODGROUPS_EDIT),
        ]
    )


def test_the_role_grants_exactly_the_table() -> None:
    expected = SCHEDULER_GRANTS | ADMIN_GRANTS | IMPERSONATE_GRANTS | RECLAIM_GRANTS
    assert GRANTED - expected == set(), "granted beyond the table"
    assert expected - GRANTED == set(), "missing from the role"


def test_it_holds_what_the_scheduler_is_granted() -> None:
    (role,) = [
        item.obj
        for item in load_objects(DEPLOY / "rbac.yaml")
        if (item.kind, item.name) == ("ClusterRole", "gpufleet-scheduler")
    ]
    assert rule_grants(role["rules"]) <= GRANTED


TENANT_KINDS = sorted(set(KINDS) - {"Queue", "PriorityClass"})


@pytest.mark.parametrize("kind", TENANT_KINDS)
def test_no_create_or_delete_of_what_tenants_submit(kind: str) -> None:
    """Written as the tenant: the plane's own identity may neither create nor delete them."""
    plural = KINDS[kind].plural
    assert not {g for g in GRANTED if g[1] == plural and g[2] in ("create", "delete", "update")}


def test_impersonation_is_by_name_and_of_users_and_groups_only() -> None:
    impersonating = {g for g in GRANTED if g[2] == "impersonate"}
    assert impersonating == IMPERSONATE_GRANTS
    assert all(name for _, _, _, name in impersonating), "impersonate must name who"


@pytest.mark.parametrize("name", [NAME, PODGROUPS_EDIT])
def test_nothing_broader(name: str) -> None:
    role: dict[str, Any] = OBJECTS[("ClusterRole", name)]
    assert "aggregationRule" not in role
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
        for key in ("apiGroups", "resources", "verbs", "resourceNames"):
            for value in rule.get(key, []):
                assert "*" not in value, f"wildcard in {key}: {rule}"
        assert not {"escalate", "bind", "deletecollection"} & set(rule["verbs"])
    found = rule_grants(role["rules"])
    assert not {g for g in found if g[1] in ("secrets", "configmaps", "serviceaccounts")}


def test_podgroups_are_in_the_edit_role_by_aggregation() -> None:
    role = OBJECTS[("ClusterRole", PODGROUPS_EDIT)]
    assert role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert rule_grants(role["rules"]) >= {
        ("gpufleet.dev", "podgroups", verb, "") for verb in ("create", "delete")
    }


def test_binding_names_the_role_and_service_account() -> None:
    binding = OBJECTS[("ClusterRoleBinding", NAME)]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": NAME,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": NAME, "namespace": SCHEDULER_NAMESPACE}
    ]


def test_the_example_tenants_are_bound_to_edit_as_gpufleet_names_them() -> None:
    bindings = load_objects(DEPLOY_EXAMPLES / "tenant-rbac.yaml")
    assert sorted((b.namespace, b.obj["roleRef"]["name"]) for b in bindings) == [
        (tenant, "edit") for tenant in TENANTS
    ]
    for binding in bindings:
        assert binding.obj["subjects"] == [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "User",
                "name": IDENTITY.user_of(str(binding.namespace)),
            }
        ]


def test_the_example_namespaces_enforce_pod_security() -> None:
    for namespace in load_objects(DEPLOY_EXAMPLES / "namespaces.yaml"):
        labels = namespace.obj["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] in ("baseline", "restricted")
