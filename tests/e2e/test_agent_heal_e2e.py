"""The node agent heals its Node on a real API server (issue 27, item 6): the API server (and
its etcd) is stopped, an XID is injected by the fake NVML while it is down, and once it is back
the Node says the GPU is unhealthy (inventory and ``GpuDevicesHealthy=False``) within the
agent's resync period, with the agent's default settings. Before, the one failed write was never
tried again and the Node said all GPUs were healthy until the agent restarted.

Needs GPUFLEET_E2E_KUBECONFIG and GPUFLEET_E2E_APISERVER_CTL (a command that stops and starts
that API server: it stops it for everyone using it for some seconds)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.agent.node_sync import DEFAULT_PERIOD_S
from gpufleet.io.kube.annotations import INVENTORY_ANNOTATION, inventory_from_json
from gpufleet.model.gpu import GPU_RESOURCE
from tests.e2e.agent_node import AgentNode
from tests.e2e.kube_cluster import (
    APISERVER_CTL_ENV,
    KUBECONFIG_ENV,
    Cluster,
    apiserver_ctl,
    wait_for,
)

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(
        not os.environ.get(KUBECONFIG_ENV), reason=f"set {KUBECONFIG_ENV} to run against a cluster"
    ),
    pytest.mark.skipif(
        not os.environ.get(APISERVER_CTL_ENV),
        reason=f"set {APISERVER_CTL_ENV} to restart the API server",
    ),
]

FAILED_GPU = 2


@pytest.fixture
def gpu_node(cluster: Cluster) -> Iterator[AgentNode]:
    node = AgentNode(cluster, f"heal-{cluster.run_id}", gpus=4).start()
    try:
        yield node
    finally:
        node.stop()


def _shows(cluster: Cluster, name: str) -> tuple[tuple[int, ...], str] | None:
    """(the inventory's unhealthy GPUs, GpuDevicesHealthy's status), or None while the API
    server does not answer or the Node lacks them."""
    try:
        node: dict[str, Any] = cluster.core.read_node(name, _preload_content=False).json()
    except Exception:
        return None
    text = (node["metadata"].get("annotations") or {}).get(INVENTORY_ANNOTATION)
    conditions = (node.get("status") or {}).get("conditions") or []
    health = [c["status"] for c in conditions if c["type"] == "GpuDevicesHealthy"]
    if not text or not health:
        return None
    return inventory_from_json(text).unhealthy, health[0]


def test_an_xid_while_the_api_server_is_down_reaches_the_node_once_it_is_back(
    cluster: Cluster, gpu_node: AgentNode
) -> None:
    wait_for(
        lambda: _shows(cluster, gpu_node.name) == ((), "True"),
        timeout=30,
        what="the Node showing 4 healthy GPUs",
    )
    failed_uuid = gpu_node.uuid(FAILED_GPU)
    apiserver_ctl("stop")
    try:
        gpu_node.nvml.inject_xid(FAILED_GPU, 79)
        # The kubelet is told without the API server: no new container gets the GPU.
        gpu_node.kubelet.wait_for(
            lambda: not gpu_node.kubelet.devices(GPU_RESOURCE)[failed_uuid],
            what="the failed GPU withdrawn from the kubelet",
        )
        time.sleep(3)  # the agent tries, and fails, meanwhile
        assert not gpu_node.agent.node_sync.in_sync
    finally:
        apiserver_ctl("start")
    back = time.monotonic()
    wait_for(
        lambda: _shows(cluster, gpu_node.name) == ((FAILED_GPU,), "False"),
        timeout=DEFAULT_PERIOD_S,
        what="the Node saying GPU 2 is unhealthy within the resync period",
    )
    print(f"the Node showed the XID {time.monotonic() - back:.1f} s after the API was ready")
