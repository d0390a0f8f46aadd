"""Shared GPUs on Kubernetes against the fake API server: gpufleet binds no more units of a
node's GPU resource than it advertises, and a time-sliced node takes a pod per replica."""

from __future__ import annotations

from collections import Counter

from gpufleet.io.kube.annotations import GPU_INDEX_ANNOTATION, GPU_SHARE_ANNOTATION
from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import harness

SHARE = {"gpufleet.dev/gpu-milli": "250"}


def _scheduled_false(h: object, name: str) -> str | None:
    pod = h.pod(name)  # type: ignore[attr-defined]
    for condition in pod.get("status", {}).get("conditions", []):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition["message"])
    return None


def test_shares_asking_a_unit_bind_only_as_many_as_the_node_advertises() -> None:
    """Issue 11 item 8: four 250 milli-GPU pods asking nvidia.com/gpu: 1 were all bound to a
    node advertising nvidia.com/gpu: 1, where the kubelet admits one."""
    pods = [ko.gpu_pod(f"s{i}", gpus=1, annotations=SHARE) for i in range(4)]
    with harness(ko.gpu_node("n1", gpus=1), *pods) as h:
        h.until(lambda: len(h.bound()) == 1, what="one share bound")
        h.until(
            lambda: all(
                _scheduled_false(h, f"s{i}") for i in range(4) if h.node_of(f"s{i}") is None
            ),
            what="the others told why",
        )
        h.settle()
        assert len(h.bound()) == 1
        (key,) = h.bound()
        annotations = h.pod(key.split("/")[1])["metadata"]["annotations"]
        assert annotations[GPU_INDEX_ANNOTATION] == "0"
        assert GPU_SHARE_ANNOTATION not in annotations  # it holds the whole device
        waiting = next(f"s{i}" for i in range(4) if f"default/s{i}" not in h.bound())
        assert "Insufficient nvidia.com/gpu" in (_scheduled_false(h, waiting) or "")


def test_a_time_sliced_node_takes_a_plain_pod_per_replica() -> None:
    """Issue 11 item 8: 8 GPUs x 4 replicas (32 nvidia.com/gpu) took only 8 one-GPU pods."""
    pods = [ko.gpu_pod(f"p{i}", gpus=1) for i in range(33)]
    # As GFD labels it (spelled out rather than ko.gpu_node(replicas=4)).
    gfd = {
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.product": "Tesla-T4-SHARED",
    }
    node = ko.gpu_node("ts", gpus=8, labels=gfd, extra_resources={"nvidia.com/gpu": "32"})
    with harness(node, *pods) as h:
        h.until(lambda: len(h.bound()) == 32, what="32 replicas bound")
        h.settle()
        assert len(h.bound()) == 32
        devices = Counter(
            h.pod(key.split("/")[1])["metadata"]["annotations"][GPU_INDEX_ANNOTATION]
            for key in h.bound()
        )
        assert devices == {str(i): 4 for i in range(8)}
        shares = {
            h.pod(key.split("/")[1])["metadata"]["annotations"][GPU_SHARE_ANNOTATION]
            for key in h.bound()
        }
        assert shares == {"250"}


def test_renamed_replicas_take_pods_asking_for_the_shared_resource() -> None:
    plain = ko.gpu_pod("plain", gpus=1)
    shared = ko.gpu_pod("shared", gpus=0, extra_limits={"nvidia.com/gpu.shared": "1"})
    with harness(ko.gpu_node("ts", gpus=1, replicas=4, rename=True), plain, shared) as h:
        h.until(lambda: h.node_of("shared") == "ts", what="shared bound")
        h.until(lambda: _scheduled_false(h, "plain") is not None, what="plain told why")
        assert "Insufficient nvidia.com/gpu" in (_scheduled_false(h, "plain") or "")


def test_pods_bound_by_others_hold_a_replica_each() -> None:
    theirs = [
        ko.gpu_pod(f"theirs-{i}", gpus=1, node="ts", scheduler="default-scheduler")
        for i in range(3)
    ]
    ours = [ko.gpu_pod(f"ours-{i}", gpus=1) for i in range(2)]
    with harness(ko.gpu_node("ts", gpus=1, replicas=4), *theirs, *ours) as h:
        h.until(lambda: len(h.bound()) == 4, what="the last replica bound")
        h.settle()
        assert sum(key.startswith("default/ours") for key in h.bound()) == 1


def test_queue_status_charges_what_a_placed_share_holds() -> None:
    """Issue 11 item 9 on Kubernetes: 250 milli-GPU and 10Gi of a 15Gi T4 hold 0.667 of it;
    the Queue status shows that, as every view of the control plane does."""
    team = ko.queue("team-a", {"nvidia.com/gpu": 8}, namespaces=["default"])
    annotations = {"gpufleet.dev/gpu-milli": "250", "gpufleet.dev/gpu-memory": "10Gi"}
    share = ko.gpu_pod("infer", gpus=1, annotations=annotations)
    node = ko.gpu_node("t4", gpus=1, model=("Tesla-T4", 15360), replicas=4)
    with harness(node, team, share) as h:
        h.until(lambda: h.node_of("infer") == "t4", what="infer bound")

        def usage() -> object:
            found = h.server.get("gpufleet.dev/v1alpha1", "Queue", "team-a") or {}
            return found.get("status", {}).get("usage", {}).get("nvidia.com/gpu")

        h.until(lambda: usage() is not None, what="Queue status written")
        assert usage() == "0.667"
        annotations = h.pod("infer")["metadata"]["annotations"]
        assert annotations[GPU_SHARE_ANNOTATION] == "667"
