"""The Kubernetes scheduler over the fake API server (issue 26, items 3 and 9): a pod that
names another team's queue from a namespace that queue does not admit, or a priority class
its queue does not allow, stays pending, told why (condition and Event), while the team's own
pods bind. Pods reach the scheduler without serve: the core is what refuses them."""

from __future__ import annotations

from typing import Any

from gpufleet.model.queues import KUEUE_QUEUE_LABEL, QUEUE_LABEL
from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import Harness, harness

GPUS = {"nvidia.com/gpu": 4}


def unschedulable(h: Harness, name: str, namespace: str) -> str:
    """Turn until ``namespace/name`` is told it is unschedulable; the message."""

    def condition() -> dict[str, Any]:
        conditions = h.pod(name, namespace).get("status", {}).get("conditions", [])
        return next((c for c in conditions if c.get("type") == "PodScheduled"), {})

    h.until(lambda: condition().get("status") == "False", what=f"{name} unschedulable")
    return str(condition()["message"])


def test_a_pod_from_a_namespace_the_queue_does_not_admit_waits_with_an_event() -> None:
    queues = (ko.queue("team-a", GPUS), ko.queue("team-b", GPUS))
    grab = ko.gpu_pod("grab", namespace="team-b", gpus=2, labels={QUEUE_LABEL: "team-a"})
    with harness(ko.gpu_node("n1"), *queues, grab) as h:
        message = unschedulable(h, "grab", "team-b")
        assert message == "namespace team-b is not admitted by queue team-a (it admits team-a)"
        assert any(message in str(e.get("message")) for e in h.events("FailedScheduling"))
        h.server.create(ko.gpu_pod("own", namespace="team-a", labels={QUEUE_LABEL: "team-a"}))
        h.until(lambda: h.node_of("own", "team-a") is not None, what="team-a's pod bound")
        assert h.node_of("grab", "team-b") is None


def test_kueues_queue_label_names_the_queue_on_kubernetes() -> None:
    """A Kueue user's pod names its queue with Kueue's label: the same queue, the same rules."""
    queues = (ko.queue("team-a", GPUS), ko.queue("team-b", GPUS))
    grab = ko.gpu_pod("grab", namespace="team-b", gpus=2, labels={KUEUE_QUEUE_LABEL: "team-a"})
    with harness(ko.gpu_node("n1"), *queues, grab) as h:
        message = unschedulable(h, "grab", "team-b")
        assert message == "namespace team-b is not admitted by queue team-a (it admits team-a)"


def test_a_pod_naming_a_class_its_queue_does_not_allow_waits() -> None:
    queue = ko.queue("team-a", GPUS, priorityClasses=["batch"])
    classes = (ko.priority_class("batch", 100), ko.priority_class("high", 1000))
    pod = ko.gpu_pod(
        "urgent", namespace="team-a", labels={QUEUE_LABEL: "team-a"}, priority_class="high"
    )
    with harness(ko.gpu_node("n1"), queue, *classes, pod) as h:
        assert unschedulable(h, "urgent", "team-a") == (
            "priority class high is not allowed by queue team-a (it allows batch)"
        )
