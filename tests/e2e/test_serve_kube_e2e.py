"""``gpufleet serve --kubeconfig`` end to end against a real API server (GPUFLEET_E2E_KUBECONFIG):
a tenant submits through the HTTP API, the pod is written with our scheduler's name, bound with
its devices, described, and cancelled; another tenant's queue is refused. The tenant's writes
impersonate it (the server's RBAC mode must include RBAC): without a RoleBinding in its
namespace it can create nothing there, with one to ``edit`` it can, and Pod Security Admission
refuses its privileged pod where the namespace enforces ``baseline``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from gpufleet.service.base import create_token
from gpufleet.service.store import Store
from gpufleet.service.tenant_identity import TenantIdentity
from gpufleet.testing.server_process import wait_until_ready
from gpufleet.testing.service import as_yaml, pod_doc
from tests.e2e.kube_cluster import KUBECONFIG_ENV, RUN_LABEL, Cluster, stop, wait_for

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(
        not os.environ.get(KUBECONFIG_ENV), reason=f"set {KUBECONFIG_ENV} to run against a cluster"
    ),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    found = Cluster(os.environ[KUBECONFIG_ENV])
    try:
        found.install_crds()
        found.create_namespace(gpus=8)
        yield found
    finally:
        found.cleanup()


YAML = {"Content-Type": "application/yaml"}


def bind_tenant_to_edit(cluster: Cluster, tenant: str) -> None:
    """The operator's part: a RoleBinding of the tenant's impersonated user to ``edit`` in its
    namespace (deploy/examples/tenant-rbac.yaml)."""
    binding = {
        "metadata": {"name": "gpufleet-tenant", "namespace": cluster.namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": TenantIdentity().user_of(tenant)}],
    }  # fmt: skip
    rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.client)
    rbac.create_namespaced_role_binding(cluster.namespace, binding)


def start_serve(
    cluster: Cluster, tmp_path: Path, tenant: str
) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    """``gpufleet serve`` on the cluster, ready, and a client with a token of ``tenant``."""
    store = Store(tmp_path / "gpufleet.db")
    token = create_token(store, tenant, "tenant")
    store.close()
    port = free_port()
    command = [
        str(Path(sys.executable).parent / "gpufleet"), "serve",
        "--kubeconfig", cluster.kubeconfig, "--scheduler-name", cluster.scheduler_name,
        "--policy", "bestfit", "--db", str(tmp_path / "gpufleet.db"), "--port", str(port),
        "--log-level", "warning", "--binding-key-file", str(cluster.binding_key_file),
    ]  # fmt: skip
    log = (tmp_path / "serve.log").open("ab")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    try:
        wait_until_ready(base, server, tmp_path / "serve.log")
    except BaseException:
        client.close()
        stop(server)
        raise
    return server, client


def test_serve_on_kubernetes(cluster: Cluster, tmp_path: Path) -> None:
    cluster.add_gpu_node("serve", gpus=4)
    tenant = cluster.namespace
    bind_tenant_to_edit(cluster, tenant)
    server, client = start_serve(cluster, tmp_path, tenant)
    try:
        doc = pod_doc("served", 2)
        doc["spec"]["nodeSelector"] = {RUN_LABEL: cluster.run_id}
        response = client.post(
            "/api/v1/workloads", content=as_yaml(doc), headers={"Content-Type": "application/yaml"}
        )
        assert response.status_code == 201, response.text
        written = cluster.pod("served")
        assert written["spec"]["schedulerName"] == cluster.scheduler_name

        def running() -> bool:
            state: str = client.get(f"/api/v1/workloads/{tenant}/served").json()["state"]
            return state == "Running"

        wait_for(running, 60, "the pod to be bound")
        [pod] = client.get(f"/api/v1/workloads/{tenant}/served").json()["pod_views"]
        assert pod["node"] == f"serve-{cluster.run_id}"
        assert len(pod["gpu_indices"]) == 2
        assert cluster.pod("served")["spec"]["nodeName"] == pod["node"]
        other = pod_doc("elsewhere", 1, queue="not-mine")
        refused = client.post(
            "/api/v1/workloads",
            content=as_yaml(other),
            headers={"Content-Type": "application/yaml"},
        )
        assert refused.status_code in (403, 422)
        assert client.delete(f"/api/v1/workloads/{tenant}/served").json()["state"] == "Cancelled"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
            p["metadata"]["name"] == "served" for p in cluster.pods()
        ):
            time.sleep(0.2)
        names = [p["metadata"]["name"] for p in cluster.pods()]
        assert "served" not in names or cluster.pod("served")["metadata"].get("deletionTimestamp")
    finally:
        client.close()
        stop(server)


def _pod_exists(cluster: Cluster, name: str) -> bool:
    try:
        cluster.pod(name)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def test_a_tenants_writes_are_judged_by_its_own_rights(cluster: Cluster, tmp_path: Path) -> None:
    tenant = cluster.namespace
    server, client = start_serve(cluster, tmp_path, tenant)
    try:
        # No RoleBinding yet: the API server refuses the tenant's identity, whatever the
        # server's own credentials (here an admin's) could do.
        refused = client.post("/api/v1/workloads", content=as_yaml(pod_doc("early")), headers=YAML)
        assert refused.status_code == 403, refused.text
        assert f"in namespace '{tenant}'" in refused.json()["message"]
        assert TenantIdentity().user_of(tenant) in refused.json()["message"]
        assert not _pod_exists(cluster, "early")

        bind_tenant_to_edit(cluster, tenant)

        def accepted() -> bool:  # RBAC's cache takes a moment to see the binding
            answer = client.post(
                "/api/v1/workloads", content=as_yaml(pod_doc("granted")), headers=YAML
            )
            return answer.status_code == 201

        wait_for(accepted, 30, "the tenant's pod accepted once bound to edit")
        assert cluster.pod("granted")["spec"]["schedulerName"] == cluster.scheduler_name

        cluster.core.patch_namespace(
            cluster.namespace,
            {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}},
        )
        privileged = pod_doc("privileged")
        privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        answer = client.post("/api/v1/workloads", content=as_yaml(privileged), headers=YAML)
        assert answer.status_code == 403, answer.text
        assert "PodSecurity" in answer.json()["message"]
        assert not _pod_exists(cluster, "privileged")

        pinned = pod_doc("pinned")
        pinned["spec"]["nodeName"] = "anywhere"
        answer = client.post("/api/v1/workloads", content=as_yaml(pinned), headers=YAML)
        assert answer.status_code == 422, answer.text
        assert answer.json()["field"] == "spec.nodeName"
        assert not _pod_exists(cluster, "pinned")
    finally:
        client.close()
        stop(server)
