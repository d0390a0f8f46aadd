"""The Kubernetes backend against the fake API server: pod anti-affinity (the seed example),
running pods' rules, and extended resources, read from the API server's Pod and Node objects."""

from __future__ import annotations

from typing import Any

from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import Harness, harness

WEB = {"app": "web"}
ANTI_WEB: dict[str, Any] = {
    "affinity": {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": WEB}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
}


def scheduled_condition(h: Harness, name: str) -> dict[str, Any] | None:
    conditions = h.pod(name).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


def unschedulable(h: Harness, name: str) -> str:
    """Turn until ``name`` is told it is unschedulable; the message."""
    h.until(
        lambda: (scheduled_condition(h, name) or {}).get("status") == "False",
        what=f"{name} unschedulable",
    )
    condition = scheduled_condition(h, name)
    assert condition is not None
    return str(condition["message"])


def test_seed_replicas_with_required_anti_affinity_are_bound_to_different_nodes() -> None:
    replicas = [ko.gpu_pod(f"web-{i}", labels=WEB, spec_fields=ANTI_WEB) for i in range(2)]
    with harness(ko.gpu_node("n1"), ko.gpu_node("n2"), *replicas) as h:
        h.until(lambda: all(h.node_of(f"web-{i}") for i in range(2)), what="replicas bound")
        assert {h.node_of("web-0"), h.node_of("web-1")} == {"n1", "n2"}
        h.server.create(ko.gpu_pod("web-2", labels=WEB, spec_fields=ANTI_WEB))
        assert unschedulable(h, "web-2") == (
            "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
        )
        assert h.node_of("web-2") is None


def test_another_schedulers_pod_with_anti_affinity_keeps_ours_away() -> None:
    theirs = ko.gpu_pod("guard", node="n1", scheduler="default-scheduler", spec_fields=ANTI_WEB)
    with harness(ko.gpu_node("n1"), ko.gpu_node("n2"), theirs) as h:
        h.server.create(ko.gpu_pod("web", labels=WEB))
        h.until(lambda: h.node_of("web") is not None, what="web bound")
        assert h.node_of("web") == "n2"


def test_extended_resources_count_against_node_allocatable() -> None:
    ib = ko.gpu_node("ib", extra_resources={"rdma/hca": "2"})
    theirs = ko.gpu_pod(
        "theirs", node="ib", scheduler="default-scheduler", extra_limits={"rdma/hca": "1"}
    )
    with harness(ib, ko.gpu_node("plain"), theirs) as h:
        h.server.create(ko.gpu_pod("ours", extra_limits={"rdma/hca": "1"}))
        h.until(lambda: h.node_of("ours") is not None, what="ours bound")
        assert h.node_of("ours") == "ib"
        h.server.create(ko.gpu_pod("more", extra_limits={"rdma/hca": "1"}))
        assert unschedulable(h, "more") == "0/2 nodes are available: 2 Insufficient rdma/hca."


def test_a_bound_pod_whose_rules_gpufleet_cannot_read_still_holds_its_gpus() -> None:
    unreadable = {
        "affinity": {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {},
                        "topologyKey": "kubernetes.io/hostname",
                        "namespaceSelector": {"matchLabels": {"team": "ml"}},
                    }
                ]
            }
        }
    }
    theirs = ko.gpu_pod(
        "theirs", gpus=6, node="n1", scheduler="default-scheduler", spec_fields=unreadable
    )
    with harness(ko.gpu_node("n1", gpus=8), ko.gpu_node("n2", gpus=8), theirs) as h:
        h.server.create(ko.gpu_pod("ours", gpus=4))
        h.until(lambda: h.node_of("ours") is not None, what="ours bound")
        assert h.node_of("ours") == "n2"
        h.settle()
        invalid = h.events("InvalidSpec")
        assert [e["involvedObject"]["name"] for e in invalid] == ["theirs"]
        assert "namespaceSelector" in invalid[0]["message"]


def test_a_gpu_model_no_node_has_is_named_and_cpu_nodes_are_not_counted_as_wrong_models() -> None:
    """Issue 11 item 20, on Kubernetes: the pod's condition names the model, by annotation or
    by a node selector on GFD's product label."""
    nodes = (ko.gpu_node("gpu-0", gpus=2), ko.gpu_node("gpu-1", gpus=2), ko.gpu_node("cpu-0", 0))
    with harness(*nodes) as h:
        h.server.create(
            ko.gpu_pod("by-annotation", annotations={"gpufleet.dev/gpu-models": "B200"})
        )
        selector = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"}}
        h.server.create(ko.gpu_pod("by-selector", spec_fields=selector))
        assert unschedulable(h, "by-annotation") == (
            "default/by-annotation can never fit on this cluster: no node has GPU model B200. "
            "0/3 nodes are available: 2 GPU model not allowed, 1 Insufficient nvidia.com/gpu."
        )
        assert unschedulable(h, "by-selector") == (
            "default/by-selector can never fit on this cluster: no node has GPU model "
            "NVIDIA-B200. 0/3 nodes are available: 3 node(s) didn't match Pod's node "
            "affinity/selector."
        )
