"""Bound pods from the Kubernetes adapter's pod views; Events through its recorder."""

from __future__ import annotations

from typing import Any

from gpufleet.agent.bound_pods import BoundContainer, InMemoryBoundPods
from gpufleet.agent.events import AgentEvent
from gpufleet.agent.kube.node_events import ObjectRef
from gpufleet.agent.kube.node_pods import pod_view
from gpufleet.agent.kube_bridge import KubeEventSink, bound_pod, feed


def pod_object(name: str, phase: str = "Pending", scheduled: str = "2026-01-02T03:04:05Z") -> Any:
    return {
        "metadata": {
            "namespace": "ml",
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-02T03:00:00Z",
            "annotations": {"gpufleet.dev/gpu-index": "1"},
        },
        "spec": {
            "initContainers": [
                {"name": "fetch", "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1"}}}
            ],
            "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}}},
                {"name": "sidecar"},
            ],
        },
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}
            ],
        },
    }


def test_a_pod_view_as_a_bound_pod() -> None:
    pod = bound_pod(pod_view(pod_object("train"), seen=7))
    assert (pod.namespace, pod.name, pod.uid, pod.seen) == ("ml", "train", "uid-train", 7)
    assert pod.containers == (
        BoundContainer("fetch", {"nvidia.com/gpu": 1}, init=True),
        BoundContainer("main", {"nvidia.com/gpu": 1}),
        BoundContainer("sidecar", {}),
    )
    assert pod.annotations == {"gpufleet.dev/gpu-index": "1"}
    assert pod.bind_order == 1767323045.0
    assert pod.units("nvidia.com/gpu") == 1


def test_the_feed_keeps_pods_that_may_hold_devices() -> None:
    pods = InMemoryBoundPods()
    on_change = feed(pods)
    on_change("ADDED", pod_view(pod_object("a"), 1))
    on_change("ADDED", pod_view(pod_object("b"), 2))
    assert {p.name for p in pods.pods()} == {"a", "b"}
    on_change("MODIFIED", pod_view(pod_object("a", phase="Succeeded"), 1))
    on_change("DELETED", pod_view(pod_object("b", phase="Running"), 2))
    assert pods.pods() == ()


class Recorder:
    def __init__(self) -> None:
        self.told: list[tuple[ObjectRef, str, str, str]] = []

    def event(self, involved: ObjectRef, type: str, reason: str, message: str) -> None:
        self.told.append((involved, type, reason, message))


def test_events_go_through_the_recorder() -> None:
    recorder = Recorder()
    sink = KubeEventSink(recorder)
    sink.emit(AgentEvent("Pod", "ml", "train", "uid-1", "GpuAllocationMismatch", "bad"))
    sink.emit(AgentEvent("Node", "", "gpu-1", "gpu-1", "GpuAllocationMismatch", "none"))
    assert recorder.told == [
        (ObjectRef.pod("ml", "train", "uid-1"), "Warning", "GpuAllocationMismatch", "bad"),
        (ObjectRef.node("gpu-1"), "Warning", "GpuAllocationMismatch", "none"),
    ]
