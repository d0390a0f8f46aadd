"""Nodes that change under running pods, against a real API server (GPUFLEET_E2E_KUBECONFIG)
with ``gpufleet scheduler`` as a process: a Node deleted and re-created under its name while
its pod still exists (a kubelet re-registering), and a Node whose allocatable GPUs drop while
pods run there (the device plugin withdrawing GPUs). In both, nothing is bound onto GPUs still
held and no node holds more GPUs than it advertises once the pods that were there end."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

from gpufleet.io.kube.annotations import GPU_INDEX_ANNOTATION
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.fake_nodes import register_fake_node
from tests.e2e.kube_cluster import KUBECONFIG_ENV, RUN_LABEL, Cluster, stop, wait_for

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(
        not os.environ.get(KUBECONFIG_ENV), reason=f"set {KUBECONFIG_ENV} to run against a cluster"
    ),
]


def node_of(cluster: Cluster, name: str) -> str | None:
    node: str | None = cluster.pod(name)["spec"].get("nodeName")
    return node


def gpus_held(cluster: Cluster) -> Counter[str]:
    """GPUs held per node by the run's pods that still exist."""
    held: Counter[str] = Counter()
    for pod in cluster.pods():
        node = pod["spec"].get("nodeName")
        indices = (pod["metadata"].get("annotations") or {}).get(GPU_INDEX_ANNOTATION, "")
        if node:
            held[node] += len([i for i in indices.split(",") if i])
    return held


def advertised(cluster: Cluster, node: str) -> int:
    return int(cluster.core.read_node(node).status.allocatable["nvidia.com/gpu"])


def told_why(cluster: Cluster, pod: str) -> bool:
    """The scheduler looked at ``pod`` and told why it waits."""
    return any(e["involvedObject"]["name"] == pod for e in cluster.events("FailedScheduling"))


def node_gone(cluster: Cluster, node: str) -> bool:
    try:
        cluster.core.read_node(node)
    except ApiException as error:
        return bool(error.status == 404)
    return False


def set_gpus(cluster: Cluster, node: str, gpus: int) -> None:
    """The device plugin advertises ``gpus`` now (GFD's count label follows)."""
    count = str(gpus)
    status = {"capacity": {"nvidia.com/gpu": count}, "allocatable": {"nvidia.com/gpu": count}}
    cluster.core.patch_node_status(node, {"status": status})
    cluster.core.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.count": count}}})


@pytest.mark.parametrize("gpus_after", [8, 4], ids=["same-size", "four-gpus"])
def test_a_node_recreated_under_its_running_pod(
    cluster: Cluster, tmp_path: Path, gpus_after: int
) -> None:
    cluster.add_gpu_node("gpu", gpus=8)
    (node,) = cluster.nodes
    scheduler = cluster.start_scheduler(tmp_path / "scheduler.log")
    try:
        cluster.submit(ko.gpu_pod("big", gpus=8))
        wait_for(lambda: node_of(cluster, "big") == node, what="big bound")
        cluster.kubelet_runs("big")
        cluster.core.delete_node(node)
        wait_for(lambda: node_gone(cluster, node), what="node deleted")
        register_fake_node(
            cluster.core,
            ko.gpu_node(node, gpus=gpus_after, labels={RUN_LABEL: cluster.run_id}),
        )
        cluster.submit(ko.gpu_pod("next", gpus=gpus_after))
        cluster.submit(ko.gpu_pod("one", gpus=1))
        wait_for(lambda: told_why(cluster, "one"), what="one told why it waits")
        assert node_of(cluster, "next") is None
        assert node_of(cluster, "one") is None
        assert gpus_held(cluster)[node] == 8  # big only
        cluster.kubelet_removes("big")
        wait_for(lambda: node_of(cluster, "next") == node, what="next bound once big ended")
        assert gpus_held(cluster)[node] <= advertised(cluster, node)
    finally:
        stop(scheduler)


def test_allocatable_shrunk_under_running_pods(cluster: Cluster, tmp_path: Path) -> None:
    cluster.add_gpu_node("gpu", gpus=8)
    (node,) = cluster.nodes
    scheduler = cluster.start_scheduler(tmp_path / "scheduler.log")
    try:
        for i in range(2):
            cluster.submit(ko.gpu_pod(f"p{i}", gpus=2))
        wait_for(lambda: all(node_of(cluster, f"p{i}") for i in range(2)), what="two bound")
        for i in range(2):
            cluster.kubelet_runs(f"p{i}")
        set_gpus(cluster, node, 4)  # 4 held: nothing new fits
        cluster.submit(ko.gpu_pod("late", gpus=1))
        wait_for(lambda: told_why(cluster, "late"), what="late told why it waits")
        assert node_of(cluster, "late") is None
        assert gpus_held(cluster)[node] == 4
        cluster.kubelet_removes("p0")
        wait_for(lambda: node_of(cluster, "late") == node, what="late bound once usage fits")
        assert gpus_held(cluster)[node] <= advertised(cluster, node)
    finally:
        stop(scheduler)
