"""Nodes that change under running pods, against the fake API server: a node deleted and
re-created under its name while its pods still exist (a kubelet re-registering), a node whose
allocatable GPUs drop while pods run there (the device plugin withdrawing GPUs), and a new
core (a Queue change) built while a pod holds a device its node no longer lists. In each, no
GPU is given twice and no node ends up holding more than it advertises once pods end."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.io.kube.annotations import GPU_INDEX_ANNOTATION
from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import Harness, harness

Obj = dict[str, Any]


def set_gpus(h: Harness, name: str, gpus: int) -> None:
    """The device plugin advertises ``gpus`` now (GFD's count label follows)."""
    node = h.server.get("v1", "Node", name)
    assert node is not None
    for key in ("capacity", "allocatable"):
        node["status"][key]["nvidia.com/gpu"] = str(gpus)
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = str(gpus)
    h.server.update(node)


def gpus_bound_on(h: Harness, node: str) -> int:
    """GPUs held by the pods bound to ``node`` (from their device annotations)."""
    total = 0
    for key, where in h.bound().items():
        if where != node:
            continue
        namespace, name = key.split("/")
        devices = h.pod(name, namespace)["metadata"]["annotations"][GPU_INDEX_ANNOTATION]
        total += len(str(devices).split(","))
    return total


@pytest.mark.parametrize("gpus_after", [8, 4], ids=["same-size", "four-gpus"])
def test_a_node_recreated_under_its_running_pods_gives_none_of_their_gpus_again(
    gpus_after: int,
) -> None:
    with harness(ko.gpu_node("n1", gpus=8), ko.gpu_pod("big", gpus=8)) as h:
        h.until(lambda: h.node_of("big") == "n1", what="big bound")
        h.kubelet_runs("big")
        h.server.delete("v1", "Node", "n1")
        h.settle()
        h.server.create(ko.gpu_node("n1", gpus=gpus_after))
        h.settle()
        h.server.create(ko.gpu_pod("next", gpus=gpus_after))
        h.server.create(ko.gpu_pod("one", gpus=1))
        h.settle()
        assert h.node_of("next") is None
        assert h.node_of("one") is None
        assert gpus_bound_on(h, "n1") == 8
        h.kubelet_removes("big")
        h.until(lambda: h.node_of("next") == "n1", what="next bound once big ended")
        h.settle()
        assert gpus_bound_on(h, "n1") <= gpus_after


def test_allocatable_lowered_under_running_pods_applies_at_once() -> None:
    pods = [ko.gpu_pod(f"p{i}", gpus=2) for i in range(2)]
    with harness(ko.gpu_node("n1", gpus=8), *pods) as h:
        h.until(lambda: len(h.bound()) == 2, what="two pods bound")
        for i in range(2):
            h.kubelet_runs(f"p{i}")
        set_gpus(h, "n1", 4)  # 4 held: the node is full for anything new
        h.settle()
        h.server.create(ko.gpu_pod("late", gpus=1))
        h.settle()
        assert h.node_of("late") is None
        assert gpus_bound_on(h, "n1") == 4
        h.kubelet_removes("p0")
        h.until(lambda: h.node_of("late") == "n1", what="late bound once usage fits")
        h.settle()
        assert gpus_bound_on(h, "n1") <= 4


def test_a_new_core_with_a_pod_on_a_device_the_node_no_longer_lists_keeps_scheduling() -> None:
    """One GPU withdrawn (allocatable 7) under a pod holding GPUs 0-7, then a PriorityClass change
    makes a new core: it is built (no crash), counts the pod, and binds nothing onto it."""
    with harness(ko.gpu_node("n1", gpus=8), ko.gpu_pod("big", gpus=8)) as h:
        h.until(lambda: h.node_of("big") == "n1", what="big bound")
        h.kubelet_runs("big")
        set_gpus(h, "n1", 7)
        h.settle()
        assert h.backend.on_withdrawn_devices == {"default/big": (7,)}
        h.until(lambda: len(h.events("DevicesWithdrawn")) == 2, what="pod and node told")
        involved = {e["involvedObject"]["kind"] for e in h.events("DevicesWithdrawn")}
        assert involved == {"Pod", "Node"}
        built = h.scheduler.cores_built
        h.server.create(ko.priority_class("urgent", 1000))
        h.server.create(ko.gpu_pod("one", gpus=1))
        h.until(lambda: h.scheduler.cores_built > built, what="a new core")
        h.settle()
        assert h.node_of("one") is None
        assert h.scheduler.metrics.ignored_events == 0
        h.kubelet_removes("big")
        h.until(lambda: h.node_of("one") == "n1", what="one bound once big ended")
        assert h.backend.on_withdrawn_devices == {}
