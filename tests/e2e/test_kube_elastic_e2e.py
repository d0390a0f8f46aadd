"""End to end against a real API server (GPUFLEET_E2E_KUBECONFIG): gpufleet beside Cluster
Autoscaler and Karpenter. The tests play the autoscalers (their taints on the fake nodes, nodes
added one by one) and the kubelet; the same scenarios run on the fake API server in
``tests/backends/kube/test_node_ends.py``."""

from __future__ import annotations

import os
import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gpufleet.io.kube.disruption import DO_NOT_DISRUPT, SAFE_TO_EVICT
from gpufleet.testing import kube_objects as ko
from tests.e2e.kube_cluster import KUBECONFIG_ENV, Cluster, stop, wait_for

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(
        not os.environ.get(KUBECONFIG_ENV), reason=f"set {KUBECONFIG_ENV} to run against a cluster"
    ),
]

Obj = dict[str, Any]
GROUP = "gpufleet.dev/pod-group"


def _node_of(cluster: Cluster, name: str) -> str | None:
    node: str | None = cluster.pod(name)["spec"].get("nodeName")
    return node


def _terminating(cluster: Cluster, name: str) -> bool:
    return cluster.pod(name)["metadata"].get("deletionTimestamp") is not None


def _taint(cluster: Cluster, node: str, *taints: Obj) -> None:
    cluster.core.patch_node(node, {"spec": {"taints": list(taints) or None}})


def _scheduled_message(cluster: Cluster, name: str) -> str:
    conditions = cluster.pod(name)["status"].get("conditions") or []
    found = [c for c in conditions if c.get("type") == "PodScheduled"]
    return str(found[0].get("message", "")) if found else ""


def _nodes_counted(cluster: Cluster, name: str) -> int | None:
    """N of "0/N nodes are available" in the pod's PodScheduled message, if told."""
    found = re.search(r"0/(\d+) nodes are available", _scheduled_message(cluster, name))
    return None if found is None else int(found.group(1))


def _counts(cluster: Cluster, name: str, nodes: int) -> bool:
    return _nodes_counted(cluster, name) == nodes


def _pod_group(cluster: Cluster, name: str, min_member: int) -> None:
    cluster.custom.create_namespaced_custom_object(
        "gpufleet.dev", "v1alpha1", cluster.namespace, "podgroups",
        {**ko.pod_group(name, min_member), "metadata": {"name": name}},
    )  # fmt: skip


def _gang(cluster: Cluster, name: str, size: int, gpus: int, **options: Any) -> None:
    for i in range(size):
        cluster.submit(ko.gpu_pod(f"{name}-{i}", gpus=gpus, labels={GROUP: name}, **options))


def test_no_pod_goes_to_a_node_the_cluster_autoscaler_removes(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.add_gpu_node("gpu-0", gpus=8)
    (node,) = cluster.nodes
    _taint(cluster, node, {"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000",
                           "effect": "NoSchedule"})  # fmt: skip
    log = tmp_path / "scheduler.log"
    scheduler = cluster.start_scheduler(log)
    try:
        anything = {"tolerations": [{"operator": "Exists"}]}
        cluster.submit(ko.gpu_pod("any", gpus=1, spec_fields=anything))
        wait_for(
            lambda: "being removed by the cluster autoscaler" in _scheduled_message(cluster, "any"),
            what="the pod told why it waits",
        )
        assert _node_of(cluster, "any") is None
        _taint(cluster, node)  # the scale-down was cancelled
        wait_for(lambda: _node_of(cluster, "any") == node, what="bound once the taint is gone")
    finally:
        stop(scheduler)
        print(log.read_text()[-4000:])


def test_a_gang_on_a_node_karpenter_disrupts_is_evicted_whole_and_placed_elsewhere(
    cluster: Cluster, tmp_path: Path
) -> None:
    for i in range(2):
        cluster.add_gpu_node(f"gpu-{i}", gpus=8)
    log = tmp_path / "scheduler.log"
    scheduler = cluster.start_scheduler(log)
    try:
        _pod_group(cluster, "ddp", 2)
        _gang(cluster, "ddp", 2, gpus=8)
        wait_for(lambda: all(_node_of(cluster, f"ddp-{i}") for i in range(2)), what="gang bound")
        for i in range(2):
            annotations = cluster.pod(f"ddp-{i}")["metadata"]["annotations"]
            assert (annotations[SAFE_TO_EVICT], annotations[DO_NOT_DISRUPT]) == ("false", "true")
            cluster.kubelet_runs(f"ddp-{i}")
        doomed = _node_of(cluster, "ddp-1")
        assert doomed is not None
        cluster.add_gpu_node("gpu-2", gpus=8)  # Karpenter's replacement comes first
        _taint(cluster, doomed, {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"})
        wait_for(
            lambda: _terminating(cluster, "ddp-0") and _terminating(cluster, "ddp-1"),
            what="the whole gang evicted",
        )

        def told() -> set[str]:
            return {e["involvedObject"]["name"] for e in cluster.events("GangEvicted")}

        # The Events go through the reporter's worker, after the evictions: they may be
        # written a moment after the pods show terminating (370 ms once, under load).
        wait_for(lambda: told() >= {"ddp-0", "ddp-1"}, what="the gang's pods told GangEvicted")
        assert told() == {"ddp-0", "ddp-1"}
        for i in range(2):
            cluster.kubelet_removes(f"ddp-{i}")
        wait_for(
            lambda: not [p for p in cluster.pods() if p["metadata"]["name"].startswith("ddp-")],
            what="the old pods gone",
        )
        _gang(cluster, "ddp", 2, gpus=8)  # its operator makes it again
        wait_for(lambda: all(_node_of(cluster, f"ddp-{i}") for i in range(2)), what="placed")
        assert doomed not in {_node_of(cluster, f"ddp-{i}") for i in range(2)}
    finally:
        stop(scheduler)
        print(log.read_text()[-4000:])


def test_a_pod_annotated_safe_to_evict_false_is_not_preempted(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.add_gpu_node("gpu-0", gpus=8)
    high = cluster.add_priority_class("inference-critical", 100_000)
    low = cluster.add_priority_class("training-batch", 1_000)
    log = tmp_path / "scheduler.log"
    scheduler = cluster.start_scheduler(log)
    try:
        cluster.submit(ko.gpu_pod("kept", gpus=4, priority_class=low,
                                  annotations={SAFE_TO_EVICT: "false"}))  # fmt: skip
        cluster.submit(ko.gpu_pod("plain", gpus=4, priority_class=low))
        wait_for(lambda: bool(_node_of(cluster, "kept") and _node_of(cluster, "plain")),
                 what="both bound")  # fmt: skip
        cluster.kubelet_runs("kept")
        cluster.kubelet_runs("plain")
        cluster.submit(ko.gpu_pod("urgent", gpus=4, priority_class=high))
        wait_for(lambda: _terminating(cluster, "plain"), what="the plain pod preempted")
        assert not _terminating(cluster, "kept")
    finally:
        stop(scheduler)
        print(log.read_text()[-4000:])


def test_a_waiting_gang_is_not_scattered_over_nodes_added_one_by_one(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "scheduler.log"
    scheduler = cluster.start_scheduler(log)
    try:
        _pod_group(cluster, "ddp", 3)
        _gang(cluster, "ddp", 3, gpus=8)
        wait_for(lambda: _nodes_counted(cluster, "ddp-0") is not None,
                 what="the gang told why it waits (what triggers a scale-up)")  # fmt: skip
        others = _nodes_counted(cluster, "ddp-0")  # the cluster's own nodes
        assert others is not None
        for i in range(2):
            cluster.add_gpu_node(f"gpu-{i}", gpus=8)
            wait_for(
                partial(_counts, cluster, "ddp-0", others + i + 1),
                what=f"the gang told again with {i + 1} new node(s)",
            )
            assert not [p for p in cluster.pods() if p["spec"].get("nodeName")], "scattered"
        cluster.add_gpu_node("gpu-2", gpus=8)
        wait_for(lambda: all(_node_of(cluster, f"ddp-{i}") for i in range(3)), what="all bound")
        assert len({_node_of(cluster, f"ddp-{i}") for i in range(3)}) == 3
    finally:
        stop(scheduler)
        print(log.read_text()[-4000:])


def test_a_queue_with_a_gpu_quota_gets_the_nodes_a_scale_up_adds(
    cluster: Cluster, tmp_path: Path
) -> None:
    # The root of quotas is the cluster's capacity: it must grow with the nodes that join
    # after the scheduler started, or a queue within its quota waits for good.
    cluster.custom.patch_cluster_custom_object(
        "gpufleet.dev", "v1alpha1", "queues", cluster.namespace,
        {"spec": {"quota": {"nvidia.com/gpu": 8}}},
    )  # fmt: skip
    log = tmp_path / "scheduler.log"
    scheduler = cluster.start_scheduler(log)
    try:
        cluster.submit(ko.gpu_pod("train", gpus=8))
        wait_for(lambda: bool(_scheduled_message(cluster, "train")), what="told why it waits")
        cluster.add_gpu_node("gpu-0", gpus=8)  # the autoscaler's new node
        wait_for(lambda: _node_of(cluster, "train") is not None, what="bound on the new node")
    finally:
        stop(scheduler)
        print(log.read_text()[-4000:])
