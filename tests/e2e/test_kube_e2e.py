"""End to end against a real API server (GPUFLEET_E2E_KUBECONFIG): CRDs applied, fake GPU nodes,
``gpufleet scheduler`` as a process; single pods, a gang, a GPU share, a preemption, a pod that
never fits; then the scheduler is killed mid-burst and its successor must bind nothing twice.
Without kubelets, the tests play the kubelet (pod status, deletion with grace 0)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from gpufleet.io.kube.annotations import GPU_INDEX_ANNOTATION
from gpufleet.testing import kube_objects as ko
from tests.e2e.kube_cluster import KUBECONFIG_ENV, Cluster, stop, wait_for

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(
        not os.environ.get(KUBECONFIG_ENV), reason=f"set {KUBECONFIG_ENV} to run against a cluster"
    ),
]


def _node_of(cluster: Cluster, name: str) -> str | None:
    node: str | None = cluster.pod(name)["spec"].get("nodeName")
    return node


def _devices_taken(cluster: Cluster) -> Counter[tuple[str, str]]:
    taken: Counter[tuple[str, str]] = Counter()
    for pod in cluster.pods():
        node = pod["spec"].get("nodeName")
        indices = (pod["metadata"].get("annotations") or {}).get(GPU_INDEX_ANNOTATION, "")
        for index in filter(None, indices.split(",")):
            if node:
                taken[(node, index)] += 1
    return taken


def test_scheduler_end_to_end(cluster: Cluster, tmp_path: Path) -> None:
    for i in range(2):
        cluster.add_gpu_node(f"gpu-{i}", gpus=8)
    high = cluster.add_priority_class("inference-critical", 100_000)
    low = cluster.add_priority_class("training-batch", 1_000)
    log = tmp_path / "scheduler.log"
    scheduler = cluster.start_scheduler(log)
    try:
        # A single pod, a GPU share, and a pod that can never fit.
        cluster.submit(ko.gpu_pod("single", gpus=1))
        cluster.submit(ko.gpu_pod("share", gpus=0, annotations={"gpufleet.dev/gpu-milli": "500"}))
        cluster.submit(ko.gpu_pod("never", gpus=9))  # more than any node has, not the cluster
        wait_for(lambda: _node_of(cluster, "single") is not None, what="single bound")
        wait_for(lambda: _node_of(cluster, "share") is not None, what="share bound")
        share = cluster.pod("share")["metadata"]["annotations"]
        assert share["gpufleet.dev/gpu-milli-per-device"] == "500"
        wait_for(lambda: bool(cluster.events("FailedScheduling")), what="FailedScheduling")
        never = cluster.pod("never")
        condition = next(c for c in never["status"]["conditions"] if c["type"] == "PodScheduled")
        assert condition["reason"] == "Unschedulable"
        assert "Insufficient nvidia.com/gpu" in condition["message"]
        wait_for(lambda: bool(cluster.events("Scheduled")), what="Scheduled events")

        # A gang of four, all or nothing.
        cluster.custom.create_namespaced_custom_object(
            "gpufleet.dev", "v1alpha1", cluster.namespace, "podgroups",
            {**ko.pod_group("ddp", 4), "metadata": {"name": "ddp"}},
        )  # fmt: skip
        for i in range(4):
            cluster.submit(
                ko.gpu_pod(
                    f"ddp-{i}", gpus=2, priority_class=low, labels={"gpufleet.dev/pod-group": "ddp"}
                )
            )
        wait_for(lambda: all(_node_of(cluster, f"ddp-{i}") for i in range(4)), what="gang bound")
        for i in range(4):
            cluster.kubelet_runs(f"ddp-{i}")

        # Fill the rest with low priority, then a high-priority pod must preempt.
        cluster.submit(ko.gpu_pod("filler", gpus=6, priority_class=low))
        wait_for(lambda: _node_of(cluster, "filler") is not None, what="filler bound")
        cluster.kubelet_runs("filler")
        cluster.submit(ko.gpu_pod("urgent", gpus=6, priority_class=high))
        wait_for(
            lambda: any(
                p["metadata"].get("deletionTimestamp")
                for p in cluster.pods()
                if p["spec"].get("nodeName")
            ),
            timeout=60,
            what="a victim evicted",
        )
        for pod in cluster.pods():
            if pod["metadata"].get("deletionTimestamp"):
                assert _node_of(cluster, "urgent") is None, "bound before its victim was gone"
                cluster.kubelet_removes(pod["metadata"]["name"])
        wait_for(lambda: _node_of(cluster, "urgent") is not None, timeout=60, what="urgent bound")
        # Sent by the reporter's worker, not with the eviction: wait for it rather than race it.
        wait_for(lambda: bool(cluster.events("Preempted")), what="the Preempted Event")

        # The gang finishes; then kill the scheduler in the middle of a burst: its successor
        # (after the lease of the dead one expires) binds nothing twice.
        for i in range(4):
            cluster.kubelet_removes(f"ddp-{i}")
        for i in range(12):
            cluster.submit(
                ko.gpu_pod(f"burst-{i}", gpus=0, annotations={"gpufleet.dev/gpu-milli": "250"})
            )
        stop(scheduler, kill=True)
        scheduler = cluster.start_scheduler(log)
        wait_for(
            lambda: all(_node_of(cluster, f"burst-{i}") for i in range(12)),
            timeout=90,
            what="the burst bound by the restarted scheduler",
        )
        taken = _devices_taken(cluster)
        shares = Counter(
            (p["spec"]["nodeName"], p["metadata"]["annotations"].get(GPU_INDEX_ANNOTATION))
            for p in cluster.pods()
            if p["metadata"]["name"].startswith(("burst", "share")) and p["spec"].get("nodeName")
        )
        whole = {k: v for k, v in taken.items() if k not in {(n, i) for n, i in shares}}
        assert all(count == 1 for count in whole.values()), f"a whole GPU given twice: {whole}"
        assert all(count <= 4 for count in shares.values()), "a GPU shared beyond its capacity"
    finally:
        stop(scheduler)
        print(log.read_text()[-4000:])
