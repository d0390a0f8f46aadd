"""Nodes going away and the node autoscalers, against the fake API server: no pod placed on a
node being removed or not ready (whatever it tolerates), busy nodes changed at once, gangs
evicted whole from ending nodes and placed elsewhere, do-not-disrupt pods never preempted, the
gang guard written at bind, a gang never scattered across a scale-up, and a queue's quota
growing with the nodes a scale-up adds."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.io.kube.disruption import DO_NOT_DISRUPT, GUARD_ANNOTATION, SAFE_TO_EVICT
from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import Harness, harness, make_scheduler

Obj = dict[str, Any]
HIGH = ko.priority_class("inference-critical", 100_000)
LOW = ko.priority_class("training-batch", 1_000)
GROUP = "gpufleet.dev/pod-group"
TOLERATE_ALL = {"operator": "Exists"}
REMOVED_BY_CA = "node(s) are being removed by the cluster autoscaler"


def taint(key: str, effect: str = "NoSchedule", added: float | None = None) -> Obj:
    found: Obj = {"key": key, "effect": effect}
    if added is not None:
        found["timeAdded"] = datetime.fromtimestamp(added, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return found


def set_taints(h: Harness, name: str, *taints: Obj, cordon: bool = False) -> None:
    node = h.server.get("v1", "Node", name)
    assert node is not None
    node["spec"]["taints"] = list(taints)
    node["spec"]["unschedulable"] = cordon
    h.server.update(node)


def waiting_message(h: Harness, name: str) -> str:
    conditions = h.pod(name)["status"].get("conditions") or []
    scheduled = [c for c in conditions if c.get("type") == "PodScheduled"]
    assert scheduled, f"{name} was told nothing"
    assert (scheduled[0]["status"], scheduled[0]["reason"]) == ("False", "Unschedulable")
    return str(scheduled[0]["message"])


def terminating(h: Harness, name: str) -> bool:
    return h.pod(name)["metadata"].get("deletionTimestamp") is not None


def gang(name: str, size: int, gpus: int, **options: Any) -> list[Obj]:
    return [
        ko.gpu_pod(f"{name}-{i}", gpus=gpus, labels={GROUP: name}, **options) for i in range(size)
    ]


def evictions(h: Harness) -> set[str]:
    return {
        path.split("/")[-2]
        for method, path in h.server.requests
        if method == "POST" and path.endswith("/eviction")
    }


# ------------------------------------------------------------------ no placement on ending nodes
@pytest.mark.parametrize(
    ("taints", "cordon", "reason"),
    [
        ([taint("ToBeDeletedByClusterAutoscaler")], False, REMOVED_BY_CA),
        ([taint("karpenter.sh/disrupted")], False, "node(s) are being disrupted by Karpenter"),
        ([taint("cloud.google.com/impending-node-termination")], False,
         "node(s) are about to be terminated (GKE)"),
        ([taint("aws-node-termination-handler/spot-itn")], False,
         "node(s) are about to be terminated (AWS spot interruption)"),
        ([taint("node.kubernetes.io/not-ready")], False, "node(s) were not ready"),
        ([], True, "node(s) were unschedulable"),
    ],
    ids=["cluster-autoscaler", "karpenter", "gke", "aws-spot", "not-ready", "cordoned"],
)  # fmt: skip
def test_a_node_going_away_takes_no_pod_even_one_that_tolerates_everything(
    taints: list[Obj], cordon: bool, reason: str
) -> None:
    with harness(ko.gpu_node("n1", gpus=8)) as h:
        set_taints(h, "n1", *taints, cordon=cordon)
        h.server.create(ko.gpu_pod("any", gpus=1, spec_fields={"tolerations": [TOLERATE_ALL]}))
        h.settle()
        assert h.node_of("any") is None
        assert waiting_message(h, "any") == f"0/1 nodes are available: 1 {reason}."
        set_taints(h, "n1")
        h.until(lambda: h.node_of("any") == "n1", what="placed once the node is back")


def test_a_busy_node_being_removed_stops_taking_pods_at_once() -> None:
    """Used to be taken in only once the node was empty: pods went on landing there."""
    with harness(ko.gpu_node("n1", gpus=8)) as h:
        h.server.create(ko.gpu_pod("first", gpus=4))
        h.until(lambda: h.node_of("first") == "n1", what="first bound")
        h.kubelet_runs("first")
        set_taints(h, "n1", taint("ToBeDeletedByClusterAutoscaler"))
        h.server.create(ko.gpu_pod("second", gpus=4))
        h.settle()
        assert h.node_of("second") is None
        assert REMOVED_BY_CA in waiting_message(h, "second")


def test_a_new_node_held_by_a_daemonset_pod_takes_pods_once_its_not_ready_taint_is_lifted() -> None:
    """Every new node comes up tainted not-ready, and DaemonSet pods (which tolerate it) land
    at once: the lifted taint used to wait for the node to be empty, for ever."""
    node = ko.gpu_node("n1", gpus=8, taints=[taint("node.kubernetes.io/not-ready")])
    daemon = ko.gpu_pod("agent", gpus=0, scheduler="default-scheduler", node="n1")
    with harness(node, daemon) as h:
        h.server.create(ko.gpu_pod("train", gpus=8))
        h.settle()
        assert "node(s) were not ready" in waiting_message(h, "train")
        set_taints(h, "n1")
        h.until(lambda: h.node_of("train") == "n1", what="train bound on the ready node")


# ------------------------------------------------------------ gangs sent away from ending nodes
def _running_gang(h: Harness, *nodes: str) -> None:
    """The gang ``ddp`` (one 8-GPU pod per node named) bound and running, and a lone CPU pod
    ``solo`` bound beside its last pod."""
    h.server.create(ko.pod_group("ddp", min_member=len(nodes)))
    for pod in gang("ddp", len(nodes), gpus=8):
        h.server.create(pod)
    h.until(lambda: all(h.node_of(f"ddp-{i}") for i in range(len(nodes))), what="gang bound")
    assert sorted(str(h.node_of(f"ddp-{i}")) for i in range(len(nodes))) == sorted(nodes)
    selector = {"nodeSelector": {"kubernetes.io/hostname": str(h.node_of("ddp-1"))}}
    h.server.create(ko.gpu_pod("solo", gpus=0, spec_fields=selector))
    h.until(lambda: h.node_of("solo") is not None, what="solo bound")
    for name in ("ddp-0", "ddp-1", "solo"):
        h.kubelet_runs(name)


def test_a_gang_on_a_node_karpenter_disrupts_is_evicted_whole_and_placed_elsewhere() -> None:
    with harness(ko.gpu_node("n1", gpus=8), ko.gpu_node("n2", gpus=8)) as h:
        _running_gang(h, "n1", "n2")
        h.server.create(ko.gpu_node("n3", gpus=8))  # the replacement Karpenter made first
        doomed = str(h.node_of("ddp-1"))
        set_taints(h, doomed, taint("karpenter.sh/disrupted"))
        h.until(lambda: terminating(h, "ddp-0") and terminating(h, "ddp-1"), what="gang evicted")
        h.settle()
        assert evictions(h) == {"ddp-0", "ddp-1"}, "the lone pod is left to Karpenter"
        told = {e["involvedObject"]["name"]: e["message"] for e in h.events("GangEvicted")}
        assert sorted(told) == ["ddp-0", "ddp-1"]
        assert told["ddp-0"] == (
            f"node {doomed} is being disrupted by Karpenter (karpenter.sh/disrupted:NoSchedule): "
            "gang default/ddp evicted whole, to be placed again elsewhere"
        )
        # Its operator makes it again, under the same names, as soon as its pods are gone
        # (before the scheduler saw them go: a pod of the same name, new).
        for i in range(2):
            h.kubelet_removes(f"ddp-{i}")
        for pod in gang("ddp", 2, gpus=8):
            h.server.create(pod)
        h.until(lambda: bool(h.node_of("ddp-0") and h.node_of("ddp-1")), what="gang placed again")
        assert doomed not in {h.node_of("ddp-0"), h.node_of("ddp-1")}


NOT_READY = "node.kubernetes.io/not-ready"


@pytest.mark.parametrize(
    ("toleration", "added_ago", "evicted"),
    [
        (None, 0.0, True),
        ({"key": NOT_READY, "operator": "Exists", "effect": "NoExecute",
          "tolerationSeconds": 300}, 3600.0, True),
        ({"key": NOT_READY, "operator": "Exists", "effect": "NoExecute",
          "tolerationSeconds": 3600}, 0.0, False),
        ({"key": NOT_READY, "operator": "Exists", "effect": "NoExecute"}, 0.0, False),
    ],
    ids=["untolerated", "toleration-expired", "toleration-running", "tolerated-for-ever"],
)  # fmt: skip
def test_a_gang_on_a_node_not_ready_leaves_when_taint_based_eviction_would_take_a_pod(
    toleration: Obj | None, added_ago: float, evicted: bool
) -> None:
    tolerations = [dict(ko.GPU_TOLERATION), *([toleration] if toleration else [])]
    with harness(ko.gpu_node("n1", gpus=8), ko.gpu_node("n2", gpus=8)) as h:
        h.server.create(ko.pod_group("ddp", min_member=2))
        for pod in gang("ddp", 2, gpus=8, spec_fields={"tolerations": tolerations}):
            h.server.create(pod)
        h.until(lambda: bool(h.node_of("ddp-0") and h.node_of("ddp-1")), what="gang bound")
        since = time.time() - added_ago
        set_taints(h, "n2", taint(NOT_READY), taint(NOT_READY, "NoExecute", added=since))
        h.settle()
        assert (terminating(h, "ddp-0"), terminating(h, "ddp-1")) == (evicted, evicted)


def test_gangs_are_not_sent_away_from_a_node_only_at_risk() -> None:
    with harness(ko.gpu_node("n1", gpus=8), ko.gpu_node("n2", gpus=8)) as h:
        _running_gang(h, "n1", "n2")
        set_taints(h, "n2", taint("aws-node-termination-handler/rebalance-recommendation"))
        h.server.create(ko.gpu_pod("late", gpus=0))
        h.settle()
        assert not evictions(h)
        assert h.node_of("late") != "n2"


# ------------------------------------------------------------------- do-not-disrupt and guards
@pytest.mark.parametrize(
    ("annotations", "preempted"),
    [
        ({}, True),
        ({SAFE_TO_EVICT: "false"}, False),
        ({DO_NOT_DISRUPT: "true"}, False),
        ({SAFE_TO_EVICT: "false", "gpufleet.dev/preemptible": "true"}, True),
    ],
    ids=["plain", "safe-to-evict-false", "do-not-disrupt", "preemptible-says-otherwise"],
)
def test_a_pod_the_autoscalers_must_leave_running_is_never_a_preemption_victim(
    annotations: dict[str, str], preempted: bool
) -> None:
    with harness(ko.gpu_node("n1", gpus=8), HIGH, LOW, min_runtime=0.0) as h:
        batch = ko.gpu_pod("batch", gpus=8, priority_class="training-batch",
                           annotations=annotations)  # fmt: skip
        h.server.create(batch)
        h.until(lambda: h.node_of("batch") == "n1", what="batch bound")
        h.kubelet_runs("batch")
        h.server.create(ko.gpu_pod("serve", gpus=4, priority_class="inference-critical"))
        h.settle()
        assert terminating(h, "batch") is preempted
        # ...and so after a restart, when bound pods are read back.
        h.close()
        fresh = make_scheduler(h.server, identity="replica-b", min_runtime=0.0)
        fresh.backend.start()
        assert fresh.backend.wait_synced(10)
        h.scheduler = fresh
        h.settle()
        assert terminating(h, "batch") is preempted


def test_a_gangs_pods_are_bound_with_the_autoscalers_do_not_disrupt_annotations() -> None:
    with harness(ko.gpu_node("n1", gpus=8), ko.gpu_node("n2", gpus=8)) as h:
        h.server.create(ko.pod_group("ddp", min_member=2))
        own = {SAFE_TO_EVICT: "true"}
        h.server.create(ko.gpu_pod("ddp-0", gpus=4, labels={GROUP: "ddp"}))
        h.server.create(ko.gpu_pod("ddp-1", gpus=4, labels={GROUP: "ddp"}, annotations=own))
        h.server.create(ko.gpu_pod("solo", gpus=1))
        h.until(lambda: len(h.bound()) == 3, what="all bound")
        notes = {n: h.pod(n)["metadata"].get("annotations") or {} for n in ("ddp-0", "ddp-1")}
        assert (notes["ddp-0"][SAFE_TO_EVICT], notes["ddp-0"][DO_NOT_DISRUPT]) == ("false", "true")
        assert notes["ddp-0"][GUARD_ANNOTATION] == f"{SAFE_TO_EVICT},{DO_NOT_DISRUPT}"
        assert notes["ddp-1"][SAFE_TO_EVICT] == "true", "the pod's own word stands"
        assert notes["ddp-1"][GUARD_ANNOTATION] == DO_NOT_DISRUPT
        solo = h.pod("solo")["metadata"].get("annotations") or {}
        assert not {SAFE_TO_EVICT, DO_NOT_DISRUPT, GUARD_ANNOTATION} & set(solo)


def test_the_gang_guard_can_be_turned_off() -> None:
    with harness(ko.gpu_node("n1", gpus=8), ko.pod_group("ddp", min_member=2)) as h:
        h.backend.guard_gangs = False
        for pod in gang("ddp", 2, gpus=4):
            h.server.create(pod)
        h.until(lambda: len(h.bound()) == 2, what="gang bound")
        annotations = h.pod("ddp-0")["metadata"].get("annotations") or {}
        assert SAFE_TO_EVICT not in annotations


def test_gpufleet_still_preempts_a_gang_it_guarded_itself() -> None:
    with harness(ko.gpu_node("n1", gpus=8), HIGH, LOW, min_runtime=0.0) as h:
        h.server.create(ko.pod_group("ddp", min_member=2))
        for pod in gang("ddp", 2, gpus=4, priority_class="training-batch"):
            h.server.create(pod)
        h.until(lambda: len(h.bound()) == 2, what="gang bound")
        assert h.pod("ddp-0")["metadata"]["annotations"][SAFE_TO_EVICT] == "false"
        for i in range(2):
            h.kubelet_runs(f"ddp-{i}")
        h.server.create(ko.gpu_pod("serve", gpus=8, priority_class="inference-critical"))
        h.until(lambda: terminating(h, "ddp-0") and terminating(h, "ddp-1"), what="preempted")


# ------------------------------------------------------------------------ scale-up, not scatter
def test_a_waiting_gang_is_not_scattered_over_nodes_that_arrive_one_by_one() -> None:
    """As a cluster autoscaler adds nodes for a waiting gang, one by one and each first not
    ready: no pod is bound until all fit, then all are bound in one turn."""
    with harness(ko.pod_group("ddp", min_member=3)) as h:
        for pod in gang("ddp", 3, gpus=8):
            h.server.create(pod)
        h.settle()
        assert waiting_message(h, "ddp-0") == (
            "0/0 nodes are available. default/ddp can never fit on this cluster as a whole."
        ) or "0/0 nodes are available" in waiting_message(h, "ddp-0")
        for i in range(3):
            name = f"new-{i}"
            h.server.create(ko.gpu_node(name, gpus=8, taints=[taint(NOT_READY)]))
            h.settle()
            assert h.bound() == {}, f"nothing bound while {name} is not ready"
            set_taints(h, name)
            if i < 2:
                h.settle()
                assert h.bound() == {}, f"no pod bound on {i + 1} of the 3 nodes the gang needs"
                message = waiting_message(h, "ddp-0")
                assert f"0/{i + 1} nodes are available" in message
        h.until(lambda: len(h.bound()) == 3, what="the whole gang bound")
        assert sorted(h.bound().values()) == ["new-0", "new-1", "new-2"]
        binds = [p for m, p in h.server.requests if m == "POST" and p.endswith("/binding")]
        assert len(binds) == 3


def test_a_queue_with_a_gpu_quota_gets_the_nodes_a_scale_up_adds() -> None:
    """The root of quotas is the cluster's capacity as it is now: a node that joins after the
    scheduler started counts, or a queue within its quota would wait for good."""
    team = ko.queue("team", {"nvidia.com/gpu": 8}, namespaces=["default"])
    with harness(team) as h:
        h.server.create(ko.gpu_pod("train", gpus=8))
        h.settle()
        assert "waiting for quota" in waiting_message(h, "train"), "no GPU in the cluster yet"
        h.server.create(ko.gpu_node("new", gpus=8))
        h.until(lambda: h.node_of("train") == "new", what="bound on the new node")
