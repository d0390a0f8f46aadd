"""The node agent end to end against a real API server (GPUFLEET_E2E_KUBECONFIG): the agent (on
a fake NVML) publishes its labels and inventory and serves a gRPC fake kubelet, which keeps the
Node's capacity; ``gpufleet scheduler`` reads the inventory; each bound pod's Allocate returns
the UUID of the device it was bound to; an injected XID withdraws that one device, and the next
pods go to the other devices (and none to it) until it recovers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.io.kube.annotations import (
    GPU_INDEX_ANNOTATION,
    INVENTORY_ANNOTATION,
    inventory_from_json,
)
from gpufleet.io.kube.binding_signature import BINDING_SIGNATURE_ANNOTATION
from gpufleet.testing import kube_objects as ko
from tests.e2e.agent_node import AgentNode
from tests.e2e.kube_cluster import KUBECONFIG_ENV, Cluster, stop, wait_for

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(
        not os.environ.get(KUBECONFIG_ENV), reason=f"set {KUBECONFIG_ENV} to run against a cluster"
    ),
]


@pytest.fixture
def gpu_node(cluster: Cluster) -> Iterator[AgentNode]:
    node = AgentNode(cluster, f"agent-{cluster.run_id}", gpus=4).start()
    try:
        yield node
    finally:
        node.stop()


def _index_of(cluster: Cluster, name: str) -> int | None:
    pod = cluster.pod(name)
    text = (pod["metadata"].get("annotations") or {}).get(GPU_INDEX_ANNOTATION)
    return int(text) if pod["spec"].get("nodeName") and text else None


def test_agent_end_to_end(cluster: Cluster, gpu_node: AgentNode, tmp_path: Path) -> None:
    # Labels, inventory and capacity on the Node.
    def node() -> dict[str, dict[str, dict[str, str]]]:
        found: dict[str, dict[str, dict[str, str]]] = cluster.core.read_node(
            gpu_node.name, _preload_content=False
        ).json()
        return found

    wait_for(
        lambda: node()["status"]["allocatable"].get("nvidia.com/gpu") == "4",
        timeout=30,
        what="the kubelet's allocatable nvidia.com/gpu",
    )
    labels = node()["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert node()["status"]["allocatable"]["gpufleet.dev/gpu-share"] == "40"
    inventory = inventory_from_json(node()["metadata"]["annotations"][INVENTORY_ANNOTATION])
    assert len(inventory.devices) == 4

    scheduler = cluster.start_scheduler(tmp_path / "scheduler.log")
    try:
        # A pod is bound to a device, and Allocate gives it exactly that device's UUID.
        cluster.submit(ko.gpu_pod("first", gpus=1))
        wait_for(lambda: _index_of(cluster, "first") is not None, what="first bound")
        first = _index_of(cluster, "first")
        assert first is not None
        key = f"{cluster.namespace}/first"
        wait_for(lambda: key in gpu_node.admitted, timeout=30, what="first admitted")
        grant = gpu_node.admitted[key].allocations[0].grant
        assert grant.envs["NVIDIA_VISIBLE_DEVICES"] == gpu_node.uuid(first)

        # An XID on another device withdraws it: the next pods take the two others, and the
        # last one waits rather than land on the failed GPU.
        failed = (first + 1) % 4
        gpu_node.nvml.inject_xid(failed, 79)
        wait_for(
            lambda: node()["status"]["allocatable"].get("nvidia.com/gpu") == "3",
            timeout=10,
            what="the failed GPU withdrawn from allocatable",
        )
        wait_for(
            lambda: (
                inventory_from_json(
                    node()["metadata"]["annotations"][INVENTORY_ANNOTATION]
                ).unhealthy
                == (failed,)
            ),
            timeout=10,
            what="the inventory naming the failed GPU",
        )
        # Names in the order they are made: pods that arrive in one poll are taken in by
        # name, so a "fourth" made after "third" went first once (second, fourth bound).
        for name in ("second", "third", "waiting"):
            cluster.submit(ko.gpu_pod(name, gpus=1))
        wait_for(
            lambda: all(_index_of(cluster, n) is not None for n in ("second", "third")),
            what="two more pods bound",
        )
        taken = {first, *(_index_of(cluster, n) for n in ("second", "third"))}
        assert failed not in taken
        assert len(taken) == 3
        for name in ("second", "third"):
            pod_key = f"{cluster.namespace}/{name}"
            wait_for(lambda k=pod_key: k in gpu_node.admitted, what=f"{name} admitted")  # type: ignore[misc]
            index = _index_of(cluster, name)
            assert index is not None
            envs = gpu_node.admitted[f"{cluster.namespace}/{name}"].allocations[0].grant.envs
            assert envs["NVIDIA_VISIBLE_DEVICES"] == gpu_node.uuid(index)
        assert _index_of(cluster, "waiting") is None
        status: dict[str, list[dict[str, str]]] = node()["status"]  # type: ignore[assignment]
        health = next(c for c in status["conditions"] if c["type"] == "GpuDevicesHealthy")
        assert health["status"] == "False"

        # It recovers: the waiting pod takes it.
        gpu_node.nvml.recover(failed)
        wait_for(
            lambda: _index_of(cluster, "waiting") == failed, what="waiting on the recovered GPU"
        )
    finally:
        stop(scheduler)


@pytest.mark.parametrize("signature_copied", [False, True], ids=["unsigned", "copied-signature"])
def test_a_pod_placed_without_gpufleet_gets_no_gpu_by_forged_annotations(
    cluster: Cluster, gpu_node: AgentNode, tmp_path: Path, signature_copied: bool
) -> None:
    """The review's attack on a real API server: team-a's pod holds a GPU whole; a pod placed
    by spec.nodeName asks one gpu-share slot and names that GPU in gpufleet.dev/gpu-index (and
    carries team-a's signature, copied). The agent refuses its Allocate and raises an Event."""
    wait_for(
        lambda: bool(gpu_node.kubelet.devices("gpufleet.dev/gpu-share")),
        timeout=30,
        what="the share slots served",
    )
    scheduler = cluster.start_scheduler(tmp_path / "scheduler.log")
    try:
        cluster.submit(ko.gpu_pod("holder", gpus=1))
        wait_for(lambda: _index_of(cluster, "holder") is not None, what="holder bound")
        held = _index_of(cluster, "holder")
        holder_key = f"{cluster.namespace}/holder"
        wait_for(lambda: holder_key in gpu_node.admitted, timeout=30, what="holder admitted")
        assert gpu_node.admitted[holder_key].error is None
    finally:
        stop(scheduler)
    annotations = {GPU_INDEX_ANNOTATION: str(held), "gpufleet.dev/visible-devices": str(held)}
    if signature_copied:
        signature = cluster.pod("holder")["metadata"]["annotations"][BINDING_SIGNATURE_ANNOTATION]
        annotations[BINDING_SIGNATURE_ANNOTATION] = signature
    thief = ko.gpu_pod(
        "thief",
        cluster.namespace,
        gpus=0,
        scheduler=cluster.scheduler_name if signature_copied else "default-scheduler",
        node=gpu_node.name,
        annotations=annotations,
        extra_limits={"gpufleet.dev/gpu-share": "1"},
    )
    cluster.core.create_namespaced_pod(cluster.namespace, thief)
    thief_key = f"{cluster.namespace}/thief"
    wait_for(lambda: thief_key in gpu_node.admitted, timeout=30, what="the forged pod's Allocate")
    result = gpu_node.admitted[thief_key]
    assert result.error is not None, "a forged binding was honoured"
    assert "FAILED_PRECONDITION" in result.error.message
    wait_for(
        lambda: any(
            e["involvedObject"]["name"] == "thief" for e in cluster.events("UntrustedGpuBinding")
        ),
        timeout=30,
        what="an UntrustedGpuBinding Event on the forged pod",
    )
