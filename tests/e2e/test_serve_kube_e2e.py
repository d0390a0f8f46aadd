"""``gpufleet serve --kubeconfig`` end to end against a real API server (GPUFLEET_E2E_KUBECONFIG):
a tenant submits through the HTTP API, the pod is written with our scheduler's name, bound with
its devices, described, and cancelled; another tenant's queue is refused. The tenant's writes
impersonate it (the server's RBAC mode must include RBAC): without a RoleBinding in its
namespace it can create nothing there, with one to ``edit`` it can, and Pod Security Admission
refuses its privileged pod where the namespace enforces ``baseline``. A pod another tenant
makes with gpufleet's annotations naming a workload of another namespace (a tenant's, or a
Deployment in kube-system gpufleet never made) neither lists nor deletes it (issue 26, item 1).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from gpufleet.service.plane_book import create_token
from gpufleet.service.store import Store
from gpufleet.service.tenant_identity import TenantIdentity
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.server_process import wait_until_ready
from gpufleet.testing.service import alias_bomb, as_yaml, pod_doc
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


def serve(cluster: Cluster, tmp_path: Path, *options: str) -> tuple[subprocess.Popen[bytes], str]:
    """``gpufleet serve --kubeconfig`` as a child process, ready; and its address."""
    port = free_port()
    command = [
        str(Path(sys.executable).parent / "gpufleet"), "serve",
        "--kubeconfig", cluster.kubeconfig, "--scheduler-name", cluster.scheduler_name,
        "--policy", "bestfit", "--db", str(tmp_path / "gpufleet.db"), "--port", str(port),
        "--log-level", "warning", "--binding-key-file", str(cluster.binding_key_file), *options,
    ]  # fmt: skip
    log = (tmp_path / "serve.log").open("ab")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_until_ready(base, server, tmp_path / "serve.log")
    return server, base


def forged_pod(cluster: Cluster, namespace: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A pod made with kubectl for gpufleet's scheduler, carrying gpufleet's marks."""
    doc = pod_doc("forged", 1, queue=namespace, namespace=namespace)
    doc["metadata"]["labels"]["gpufleet.dev/tenant"] = namespace
    doc["metadata"]["annotations"].update(annotations)
    doc["spec"]["schedulerName"] = cluster.scheduler_name
    doc["spec"]["nodeSelector"] = {RUN_LABEL: cluster.run_id}
    return doc


def test_annotations_naming_other_namespaces_delete_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The two deletions of issue 26, item 1, on a real API server: another tenant's
    Deployment, and a Deployment in kube-system that gpufleet never made."""
    victim, attacker = cluster.namespace, f"{cluster.namespace}-b"
    apps = kubernetes.client.AppsV1Api(cluster.client)
    cluster.core.create_namespace({"metadata": {"name": attacker}})
    try:  # a kube-controller-manager makes it too (409): as good
        cluster.core.create_namespaced_service_account(
            attacker, {"metadata": {"name": "default", "namespace": attacker}}
        )
    except ApiException as error:
        if error.status != 409:
            raise
    cluster.custom.create_cluster_custom_object(
        "gpufleet.dev", "v1alpha1", "queues", ko.queue(attacker, {}, namespaces=[attacker])
    )
    system = f"coredns-{cluster.run_id}"
    apps.create_namespaced_deployment("kube-system", deployment(system, "kube-system", 0))
    rules = {
        "apiVersion": "gpufleet.dev/v1alpha1", "kind": "AdmissionPolicy",
        "metadata": {"name": "e2e"},
        "spec": {"tenants": {victim: {"namespaces": [victim]},
                             attacker: {"namespaces": [attacker]}}},
    }  # fmt: skip
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    store = Store(tmp_path / "gpufleet.db")
    tokens = {who: create_token(store, who, "tenant") for who in (victim, attacker)}
    admin = create_token(store, "admin", "admin")
    store.close()
    bind_tenant_to_edit(cluster, victim)  # its writes impersonate it
    server, base = serve(cluster, tmp_path, "--rules", str(tmp_path / "rules.yaml"))

    def client(token: str) -> httpx.Client:
        return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=10)

    yaml_body = {"Content-Type": "application/yaml"}
    try:
        with client(tokens[victim]) as owner:
            submitted = owner.post(
                "/api/v1/workloads", content=as_yaml(deployment("web")), headers=yaml_body
            )
            assert submitted.status_code == 201, submitted.text
        assert apps.read_namespaced_deployment("web", victim) is not None
        marks = {
            "gpufleet.dev/workload": f"{victim}/Deployment/web",
            "gpufleet.dev/owner": "Deployment/web",
            "gpufleet.dev/kind": "Deployment",
        }
        cluster.core.create_namespaced_pod(attacker, forged_pod(cluster, attacker, marks))
        with client(tokens[attacker]) as thief:
            wait_for(lambda: listed(thief, attacker, victim), 60, "the forged pod listed")
            assert thief.get(f"/api/v1/workloads/{victim}/web?kind=Deployment").status_code == 404
            stolen = thief.delete(f"/api/v1/workloads/{victim}/web?kind=Deployment")
            assert stolen.status_code == 404
            assert thief.delete(f"/api/v1/workloads/{attacker}/forged").status_code == 403
        cluster.core.delete_namespaced_pod("forged", attacker, grace_period_seconds=0)
        marks = {
            "gpufleet.dev/workload": f"kube-system/Deployment/{system}",
            "gpufleet.dev/owner": f"Deployment/{system}",
            "gpufleet.dev/kind": "Deployment",
        }
        wait_for(lambda: not _exists(cluster, attacker, "forged"), 30, "the first pod gone")
        cluster.core.create_namespaced_pod(attacker, forged_pod(cluster, attacker, marks))
        for token in (tokens[attacker], admin):
            with client(token) as caller:
                wait_for(
                    lambda: listed(caller, attacker, "kube-system"), 60, "the forged pod listed"
                )
                gone = caller.delete(f"/api/v1/workloads/kube-system/{system}?kind=Deployment")
                assert gone.status_code == 404
                assert caller.delete(f"/api/v1/workloads/{attacker}/forged").status_code == 403
        time.sleep(2)  # a deletion would have been answered by now
        assert apps.read_namespaced_deployment("web", victim) is not None
        assert apps.read_namespaced_deployment(system, "kube-system") is not None
    finally:
        stop(server)
        with contextlib.suppress(ApiException):
            apps.delete_namespaced_deployment(system, "kube-system")
        with contextlib.suppress(ApiException):
            cluster.core.delete_namespace(attacker)
        with contextlib.suppress(ApiException):
            cluster.custom.delete_cluster_custom_object(
                "gpufleet.dev", "v1alpha1", "queues", attacker
            )


def deployment(name: str, namespace: str | None = None, replicas: int = 1) -> dict[str, Any]:
    """A Deployment of one CPU pod (no controller need run: its pods are not waited for)."""
    template = {"metadata": {"labels": {"app": name}}, "spec": pod_doc(name, 0)["spec"]}
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }


def listed(client: httpx.Client, *namespaces: str) -> bool:
    """Whether the caller is shown a workload of one of ``namespaces``: the forged pod's own
    (as it is now), or the one its annotations name (as it was)."""
    return any(w["namespace"] in namespaces for w in client.get("/api/v1/workloads").json())


def _exists(cluster: Cluster, namespace: str, name: str) -> bool:
    try:
        cluster.core.read_namespaced_pod(name, namespace)
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

        # A sub-kilobyte YAML alias bomb is refused before anything is built or written, and
        # the server still answers (issue 26, item 5, on the real API server).
        bomb = client.post("/api/v1/workloads", content=alias_bomb(), headers=YAML)
        assert bomb.status_code == 422, bomb.text
        assert "YAML aliases are not accepted" in bomb.json()["message"]
        assert client.get("/api/v1/workloads").status_code == 200
        assert not _pod_exists(cluster, "bomb")
    finally:
        client.close()
        stop(server)
