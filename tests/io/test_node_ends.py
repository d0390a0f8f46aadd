"""The taints that announce a node's end: nodes read as unschedulable with their reason, and
when a pod on such a node must leave (the taint-based eviction rules)."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.io.kube.node_ends import (
    SIGNAL_KEYS,
    SIGNALS,
    NodeFate,
    going_away,
    leave_at,
    node_ends,
    pod_tolerations,
)
from gpufleet.io.kube.nodes import node_from_object
from gpufleet.model import Taint, TaintEffect, Toleration

T0 = 1_700_000_000.0
T0_TEXT = "2023-11-14T22:13:20Z"  # T0 in RFC 3339


def node(taints: list[dict[str, Any]], unschedulable: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"taints": taints}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1"},
        "spec": spec,
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
    }


def taint(key: str, effect: str = "NoSchedule", **extra: str) -> dict[str, Any]:
    return {"key": key, "effect": effect, **extra}


@pytest.mark.parametrize(
    ("taints", "reason"),
    [
        ([taint("ToBeDeletedByClusterAutoscaler", value="1700000000")],
         "node(s) are being removed by the cluster autoscaler"),
        ([taint("karpenter.sh/disrupted")], "node(s) are being disrupted by Karpenter"),
        ([taint("karpenter.sh/disruption", value="disrupting")],
         "node(s) are being disrupted by Karpenter"),
        ([taint("cloud.google.com/impending-node-termination")],
         "node(s) are about to be terminated (GKE)"),
        ([taint("aws-node-termination-handler/spot-itn", value="i-0abc")],
         "node(s) are about to be terminated (AWS spot interruption)"),
        ([taint("aws-node-termination-handler/spot-itn", "PreferNoSchedule")],
         "node(s) are about to be terminated (AWS spot interruption)"),
        ([taint("aws-node-termination-handler/rebalance-recommendation")],
         "node(s) are at risk of interruption (AWS rebalance recommendation)"),
        ([taint("node.kubernetes.io/out-of-service", "NoExecute", value="nodeshutdown")],
         "node(s) were out of service"),
        ([taint("node.kubernetes.io/not-ready")], "node(s) were not ready"),
        ([taint("node.kubernetes.io/unreachable", "NoExecute")], "node(s) were unreachable"),
        # The first signal in order of precedence names the node.
        ([taint("node.kubernetes.io/not-ready"), taint("ToBeDeletedByClusterAutoscaler")],
         "node(s) are being removed by the cluster autoscaler"),
    ],
    ids=[
        "cluster-autoscaler", "karpenter", "karpenter-before-v1", "gke", "aws-spot",
        "aws-spot-prefer", "aws-rebalance", "out-of-service", "not-ready", "unreachable",
        "precedence",
    ],
)  # fmt: skip
def test_a_node_that_announces_its_end_is_read_unschedulable_with_its_reason(
    taints: list[dict[str, Any]], reason: str
) -> None:
    read = node_from_object(node(taints), "nodes.yaml")
    assert read.unschedulable
    assert read.unschedulable_reason == reason
    assert len(read.taints) == len(taints), "the taints are kept as they are"


@pytest.mark.parametrize(
    ("taints", "unschedulable", "expected"),
    [
        ([], False, (False, "")),
        ([], True, (True, "")),
        ([taint("DeletionCandidateOfClusterAutoscaler", "PreferNoSchedule")], False, (False, "")),
        ([taint("nvidia.com/gpu", value="present")], False, (False, "")),
        ([taint("karpenter.sh/disrupted")], True,
         (True, "node(s) are being disrupted by Karpenter")),
    ],
    ids=["plain", "cordoned", "deletion-candidate", "other-taint", "cordoned-and-disrupted"],
)  # fmt: skip
def test_nodes_without_an_end_keep_their_cordon(
    taints: list[dict[str, Any]], unschedulable: bool, expected: tuple[bool, str]
) -> None:
    read = node_from_object(node(taints, unschedulable), "nodes.yaml")
    assert (read.unschedulable, read.unschedulable_reason) == expected


def test_every_signal_has_a_reason_and_a_fate() -> None:
    assert len(SIGNAL_KEYS) == len(SIGNALS)
    for signal in SIGNALS:
        assert signal.reason.startswith("node(s) ")
        assert going_away([Taint(signal.key, "", TaintEffect.NO_SCHEDULE)]) == signal


def test_node_ends_are_removals_of_any_effect_and_health_with_no_execute() -> None:
    ends = node_ends(
        node(
            [
                taint("node.kubernetes.io/not-ready"),  # by condition: nobody is sent away
                taint("node.kubernetes.io/unreachable", "NoExecute", timeAdded=T0_TEXT),
                taint("karpenter.sh/disrupted"),
                taint("aws-node-termination-handler/rebalance-recommendation"),
                taint("nvidia.com/gpu", value="present"),
                taint("node.kubernetes.io/unschedulable"),
            ]
        )
    )
    assert [(e.signal.key, e.taint.effect, e.added) for e in ends] == [
        ("karpenter.sh/disrupted", TaintEffect.NO_SCHEDULE, None),
        ("node.kubernetes.io/unreachable", TaintEffect.NO_EXECUTE, T0),
    ]
    assert [e.signal.fate for e in ends] == [NodeFate.REMOVED, NodeFate.UNHEALTHY]


def test_node_ends_read_leniently() -> None:
    """A taint the node reader would refuse is left out here, never an error."""
    junk: Any = "junk"
    obj = node([{"key": "karpenter.sh/disrupted"}, junk, taint("ToBeDeletedByClusterAutoscaler",
                timeAdded="yesterday")])  # fmt: skip
    assert [(e.signal.key, e.added) for e in node_ends(obj)] == [
        ("ToBeDeletedByClusterAutoscaler", None)
    ]


def pod(*tolerations: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"tolerations": list(tolerations)}}


EVERYTHING = {"operator": "Exists"}
NOT_READY_300 = {
    "key": "node.kubernetes.io/not-ready",
    "operator": "Exists",
    "effect": "NoExecute",
    "tolerationSeconds": 300,
}


@pytest.mark.parametrize(
    ("taints", "tolerations", "due"),
    [
        # Being removed: at once, whatever it tolerates.
        ([taint("karpenter.sh/disrupted", timeAdded=T0_TEXT)], [], T0),
        ([taint("ToBeDeletedByClusterAutoscaler")], [EVERYTHING], T0 - 5),
        # Not ready: the taint-based eviction controller's rules.
        ([taint("node.kubernetes.io/not-ready", "NoExecute", timeAdded=T0_TEXT)], [], T0),
        ([taint("node.kubernetes.io/not-ready", "NoExecute", timeAdded=T0_TEXT)],
         [NOT_READY_300], T0 + 300),
        ([taint("node.kubernetes.io/not-ready", "NoExecute", timeAdded=T0_TEXT)],
         [EVERYTHING], None),
        ([taint("node.kubernetes.io/not-ready", "NoExecute", timeAdded=T0_TEXT)],
         [{**NOT_READY_300, "tolerationSeconds": -4}], T0),
        # The first toleration that matches counts: here one without a limit.
        ([taint("node.kubernetes.io/not-ready", "NoExecute", timeAdded=T0_TEXT)],
         [EVERYTHING, NOT_READY_300], None),
        ([taint("node.kubernetes.io/not-ready", "NoExecute", timeAdded=T0_TEXT)],
         [NOT_READY_300, EVERYTHING], T0 + 300),
        # One of two taints not tolerated: at once.
        ([taint("node.kubernetes.io/not-ready", "NoExecute", timeAdded=T0_TEXT),
          taint("node.kubernetes.io/unreachable", "NoExecute", timeAdded=T0_TEXT)],
         [NOT_READY_300], T0),
        # Without timeAdded: from when it was first seen.
        ([taint("node.kubernetes.io/unreachable", "NoExecute")],
         [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
           "tolerationSeconds": 60}], T0 - 5 + 60),
        # Not ready by condition only (NoSchedule), or at risk: nobody is sent away.
        ([taint("node.kubernetes.io/not-ready")], [], None),
        ([taint("aws-node-termination-handler/rebalance-recommendation")], [], None),
    ],
    ids=[
        "removed", "removed-tolerated", "not-ready-untolerated", "not-ready-300s",
        "not-ready-forever", "negative-seconds", "first-match-forever", "first-match-300s",
        "one-untolerated", "no-time-added", "condition-only", "at-risk",
    ],
)  # fmt: skip
def test_when_a_pod_must_leave(
    taints: list[dict[str, Any]], tolerations: list[dict[str, Any]], due: float | None
) -> None:
    assert leave_at(node_ends(node(taints)), pod_tolerations(pod(*tolerations)), T0 - 5) == due


def test_pod_tolerations_are_read_with_their_seconds_and_leniently() -> None:
    read = pod_tolerations(
        pod(
            NOT_READY_300,
            EVERYTHING,
            {"key": "a", "operator": "Sometimes"},  # refused by the pod reader: left out
            {"key": "b", "value": "x", "effect": "NoSchedule"},
        )
    )
    assert read == (
        (Toleration("node.kubernetes.io/not-ready", "Exists", "", TaintEffect.NO_EXECUTE), 300.0),
        (Toleration(None, "Exists"), None),
        (Toleration("b", "Equal", "x", TaintEffect.NO_SCHEDULE), None),
    )
