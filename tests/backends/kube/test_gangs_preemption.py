"""Gangs, preemption through the Eviction API, and PodDisruptionBudgets, against the fake."""

from __future__ import annotations

import re

import pytest

from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import harness

HIGH = ko.priority_class("inference-critical", 100_000)
LOW = ko.priority_class("training-batch", 1_000)


def _gang(name: str, size: int, gpus: int = 1) -> list[dict[str, object]]:
    labels = {"gpufleet.dev/pod-group": name}
    return [ko.gpu_pod(f"{name}-{i}", gpus=gpus, labels=labels) for i in range(size)]


def test_a_gang_waits_for_its_pod_group_and_all_members_then_binds_all_at_once() -> None:
    with harness(ko.gpu_node("n1", gpus=4), ko.gpu_node("n2", gpus=4)) as h:
        pods = _gang("ddp", 4, gpus=2)
        for pod in pods[:3]:
            h.server.create(pod)
        h.settle()
        assert h.bound() == {}
        h.server.create(ko.pod_group("ddp", min_member=4))
        h.settle()
        assert h.bound() == {}, "3 of 4 members must not start"
        waiting = h.pod("ddp-0")["status"]["conditions"][0]["message"]
        assert "3/4 pods exist" in waiting
        h.server.create(pods[3])
        h.until(lambda: len(h.bound()) == 4, what="the whole gang bound")
        h.settle()
        group = h.server.get("gpufleet.dev/v1alpha1", "PodGroup", "ddp", "default")
        assert group is not None
        assert group["status"]["placed"] == 4
        assert group["status"]["phase"] == "Scheduled"


def test_a_gang_that_cannot_fit_whole_holds_nothing() -> None:
    with harness(ko.gpu_node("n1", gpus=4), ko.pod_group("big", min_member=3)) as h:
        for pod in _gang("big", 3, gpus=2):
            h.server.create(pod)
        h.settle()
        assert h.bound() == {}
        h.server.create(ko.gpu_pod("small", gpus=4))
        h.until(lambda: h.node_of("small") == "n1", what="small bound past the stuck gang")


def test_higher_priority_preempts_through_eviction_and_binds_only_after_the_victim_is_gone() -> (
    None
):
    with harness(ko.gpu_node("n1", gpus=8), HIGH, LOW, min_runtime=0.0) as h:
        h.server.create(ko.gpu_pod("batch", gpus=8, priority_class="training-batch"))
        h.until(lambda: h.node_of("batch") == "n1", what="batch bound")
        h.kubelet_runs("batch")
        h.server.create(ko.gpu_pod("serve", gpus=4, priority_class="inference-critical"))
        h.until(
            lambda: h.pod("batch")["metadata"].get("deletionTimestamp") is not None,
            what="batch evicted (terminating)",
        )
        assert ("POST", "/api/v1/namespaces/default/pods/batch/eviction") in h.server.requests
        h.settle()
        assert h.node_of("serve") is None, "the preemptor must wait for its victim to be gone"
        h.kubelet_removes("batch")
        h.until(lambda: h.node_of("serve") == "n1", what="preemptor bound")
        h.settle()
        preempted = h.events("Preempted")
        assert [e["involvedObject"]["name"] for e in preempted] == ["batch"]
        assert "default/serve" in preempted[0]["message"]


@pytest.mark.parametrize(
    ("preemptor_namespace", "told"),
    [
        ("default", "default/serve"),
        ("team-b", "a workload of another namespace"),
    ],
    ids=["same-namespace-named", "other-namespace-not-named"],
)
def test_a_victim_is_told_its_preemptor_only_within_its_own_namespace(
    preemptor_namespace: str, told: str
) -> None:
    """As kube-scheduler, which names no other namespace's pod to a victim: the Event in the
    victim's namespace (readable by its tenant) does not say whose work took its GPUs."""
    with harness(ko.gpu_node("n1", gpus=8), HIGH, LOW, min_runtime=0.0) as h:
        h.server.create(ko.gpu_pod("batch", gpus=8, priority_class="training-batch"))
        h.until(lambda: h.node_of("batch") == "n1", what="batch bound")
        h.kubelet_runs("batch")
        preemptor = ko.gpu_pod(
            "serve", preemptor_namespace, gpus=4, priority_class="inference-critical"
        )
        h.server.create(preemptor)
        h.until(lambda: bool(h.events("Preempted")), what="the victim told")
        message = h.events("Preempted")[0]["message"]
        assert told in message
        if preemptor_namespace != "default":
            assert preemptor_namespace not in message


@pytest.mark.slow  # the retry comes EVICTION_RETRY_S later, in real time
def test_an_eviction_a_disruption_budget_forbids_is_retried_not_forced() -> None:
    budget = ko.disruption_budget("keep-batch", {"app": "batch"}, min_available=1)
    with harness(ko.gpu_node("n1", gpus=8), HIGH, LOW, budget, min_runtime=0.0) as h:
        batch = ko.gpu_pod(
            "batch", gpus=8, priority_class="training-batch", labels={"app": "batch"}
        )
        h.server.create(batch)
        h.until(lambda: h.node_of("batch") == "n1", what="batch bound")
        h.kubelet_runs("batch")
        h.server.create(ko.gpu_pod("serve", gpus=4, priority_class="inference-critical"))
        h.until(lambda: bool(h.events("EvictionBlocked")), what="EvictionBlocked event")
        assert h.pod("batch")["metadata"].get("deletionTimestamp") is None
        assert h.node_of("serve") is None
        h.server.delete("policy/v1", "PodDisruptionBudget", "keep-batch", "default")
        h.until(
            lambda: h.pod("batch")["metadata"].get("deletionTimestamp") is not None,
            timeout=20,
            what="the retried eviction",
        )


def test_a_blocked_gang_is_told_its_reservation_in_wall_clock_time() -> None:
    """On Kubernetes the core's clock is Unix time: messages give a UTC date, not t=<seconds>."""
    with harness(ko.gpu_node("n1", gpus=4), ko.pod_group("big", min_member=2)) as h:
        h.server.create(ko.gpu_pod("a", gpus=2))
        h.until(lambda: h.node_of("a") == "n1", what="a bound")
        h.kubelet_runs("a")
        for pod in _gang("big", 2, gpus=2):
            h.server.create(pod)

        def told() -> str:
            conditions = h.pod("big-0")["status"].get("conditions") or [{}]
            return str(conditions[0].get("message", ""))

        h.until(lambda: "Capacity reserved" in told(), what="the gang told of its reservation")
        message = told()
        when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
        assert re.search(rf"Capacity reserved for it from {when}\.", message), message
        assert "t=" not in message


def test_a_pod_labelled_preemptible_is_lowered_and_what_waits_preempts_it() -> None:
    """An idle policy's Preemptible labels a running pod ``gpufleet.dev/preemptible: "true"``:
    the scheduler lowers its workload to the lowest priority, so a lower-priority pod that
    could not preempt it before does now."""
    with harness(ko.gpu_node("n1", gpus=8), HIGH, LOW, min_runtime=0.0) as h:
        h.server.create(ko.gpu_pod("notebook", gpus=8, priority_class="inference-critical"))
        h.until(lambda: h.node_of("notebook") == "n1", what="notebook bound")
        h.kubelet_runs("notebook")
        h.server.create(ko.gpu_pod("train", gpus=8, priority_class="training-batch"))
        h.settle()
        assert h.pod("notebook")["metadata"].get("deletionTimestamp") is None
        assert h.node_of("train") is None, "a lower priority may not preempt it yet"

        notebook = h.pod("notebook")
        notebook["metadata"].setdefault("labels", {})["gpufleet.dev/preemptible"] = "true"
        h.server.update(notebook)
        h.until(
            lambda: h.pod("notebook")["metadata"].get("deletionTimestamp") is not None,
            what="the lowered notebook evicted",
        )
        h.kubelet_removes("notebook")
        h.until(lambda: h.node_of("train") == "n1", what="train bound on the freed GPUs")
        preempted = h.events("Preempted")
        assert [e["involvedObject"]["name"] for e in preempted] == ["notebook"]
