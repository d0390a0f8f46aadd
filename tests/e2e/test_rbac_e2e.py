"""The shipped roles on a real API server (GPUFLEET_E2E_KUBECONFIG): its RBAC authorizer allows
each component's ServiceAccount every access the component made in tests/deploy/
rbac_workloads.py (recorded by the fake API server), and refuses what was taken away (issue 26:
``patch`` on pods).

The roles of deploy/*.yaml are created under names of this run, bound to ServiceAccount users of
the run's namespace (which need not exist: RBAC matches the user name), and asked through
SubjectAccessReviews, as ``kubectl auth can-i --as`` does."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from tests.deploy.rbac_evidence import (
    AGENT,
    COMPONENTS,
    SCHEDULER,
    Component,
    deploy_objects,
    service_account_user,
)
from tests.deploy.rbac_workloads import WORKLOADS
from tests.deploy.support import SCHEDULER_NAMESPACE
from tests.e2e.kube_cluster import KUBECONFIG_ENV, Cluster
from tests.fakes.kube_api import FakeApiServer
from tests.fakes.kube_api.access import Access

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(
        not os.environ.get(KUBECONFIG_ENV), reason=f"set {KUBECONFIG_ENV} to run against a cluster"
    ),
]
Obj = dict[str, Any]
RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")


def _renamed(obj: Obj, run: str, namespace: str) -> Obj:
    """``obj`` under this run's names, its namespace (and its subjects') the run's."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] += f"-{run}"
    if "namespace" in obj["metadata"]:
        obj["metadata"]["namespace"] = namespace
    if "roleRef" in obj:
        obj["roleRef"]["name"] += f"-{run}"
    for subject in obj.get("subjects", []):
        subject["name"] += f"-{run}"
        subject["namespace"] = namespace
    return obj


@pytest.fixture
def roles(cluster: Cluster) -> Iterator[dict[str, Component]]:
    """The shipped roles in the cluster; each component's ServiceAccount of this run."""
    rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.client)
    created: list[Obj] = []
    try:
        for obj in deploy_objects():
            if obj["kind"] not in RBAC_KINDS:
                continue
            mine = _renamed(obj, cluster.run_id, cluster.namespace)
            if obj["kind"] == "Role":
                rbac.create_namespaced_role(cluster.namespace, mine)
            elif obj["kind"] == "RoleBinding":
                rbac.create_namespaced_role_binding(cluster.namespace, mine)
            elif obj["kind"] == "ClusterRole":
                rbac.create_cluster_role(mine)
            else:
                rbac.create_cluster_role_binding(mine)
            created.append(mine)
        yield {
            c.client: Component(
                c.client, f"{c.service_account}-{cluster.run_id}", cluster.namespace
            )
            for c in COMPONENTS
        }
    finally:
        for obj in created:
            if obj["kind"] == "ClusterRole":
                rbac.delete_cluster_role(obj["metadata"]["name"])
            elif obj["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(obj["metadata"]["name"])


def _allowed(cluster: Cluster, component: Component, access: Access, namespace: str) -> bool:
    resource, _, subresource = access.resource.partition("/")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": service_account_user(component),
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{component.namespace}"],
            "resourceAttributes": {
                "verb": access.verb,
                "group": access.group,
                "resource": resource,
                "subresource": subresource,
                "namespace": namespace,
                "name": access.name,
            },
        },
    }
    answer = kubernetes.client.AuthorizationV1Api(cluster.client).create_subject_access_review(
        review
    )
    return bool(answer.status.allowed)


def _in_run(access: Access, cluster: Cluster) -> str:
    """The namespace to ask about: the scheduler's own (its Lease) becomes the run's."""
    return cluster.namespace if access.namespace == SCHEDULER_NAMESPACE else access.namespace


@pytest.mark.parametrize("component", COMPONENTS, ids=[c.client for c in COMPONENTS])
def test_the_api_server_allows_every_access_the_workload_made(
    cluster: Cluster, roles: dict[str, Component], component: Component, tmp_path: Path
) -> None:
    with FakeApiServer() as server:
        WORKLOADS[component.client](server, tmp_path)
        used = server.accesses(component.client)
    assert used
    refused = sorted(
        access
        for access in used
        if not _allowed(cluster, roles[component.client], access, _in_run(access, cluster))
    )
    assert refused == []


DENIED = [
    (SCHEDULER, Access("", "patch", "", "pods", "default", "p")),
    (SCHEDULER, Access("", "get", "", "pods", "default", "p")),
    (SCHEDULER, Access("", "delete", "", "pods", "default", "p")),
    (SCHEDULER, Access("", "get", "", "secrets", "default", "s")),
    (SCHEDULER, Access("", "update", "coordination.k8s.io", "leases", SCHEDULER_NAMESPACE, "x")),
    (SCHEDULER, Access("", "create", "events.k8s.io", "events", "default", "")),
    (AGENT, Access("", "create", "", "pods", "default", "")),
    (AGENT, Access("", "delete", "", "nodes", "", "gpu-1")),
]


@pytest.mark.parametrize(
    ("component", "access"),
    DENIED,
    ids=[f"{c.client}-{a.verb}-{a.group or 'core'}-{a.resource}" for c, a in DENIED],
)
def test_the_api_server_refuses_what_the_roles_do_not_grant(
    cluster: Cluster, roles: dict[str, Component], component: Component, access: Access
) -> None:
    assert not _allowed(cluster, roles[component.client], access, _in_run(access, cluster))
