"""``gpufleet serve --kubeconfig`` end to end against a real API server (GPUFLEET_E2E_KUBECONFIG):
a tenant submits through the HTTP API, the pod is written with our scheduler's name, bound with
its devices, described, and cancelled; another tenant's queue is refused."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpufleet.service.base import create_token
from gpufleet.service.store import Store
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


def test_serve_on_kubernetes(cluster: Cluster, tmp_path: Path) -> None:
    cluster.add_gpu_node("serve", gpus=4)
    store = Store(tmp_path / "gpufleet.db")
    tenant = cluster.namespace
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
