"""Placement that knows capacity types: what a workload needs (fault-tolerant, critical or
neither), reserved nodes first, spot for fault-tolerant work, on-demand for critical work, and
nothing changed on a cluster without capacity labels."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import Taint, TaintEffect, Toleration
from gpufleet.model.capacity import CAPACITY_TYPE_LABEL, SPOT_TAINT, CapacityNeed
from gpufleet.model.node import Node
from gpufleet.model.workload import Workload
from gpufleet.scheduling.capacity import INFERENCE_CRITICAL_PRIORITY, capacity_need
from gpufleet.scheduling.profile import DEFAULT_PROFILE, Profile
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

SPOT_TOLERATION = Toleration(CAPACITY_TYPE_LABEL, "Equal", "spot", TaintEffect.NO_SCHEDULE)


@pytest.mark.parametrize(
    ("workload", "need"),
    [
        (make_workload("plain"), CapacityNeed.ANY),
        (make_workload("tolerates", tolerations=[SPOT_TOLERATION]), CapacityNeed.FAULT_TOLERANT),
        (make_workload("karpenter", tolerations=[Toleration("karpenter.sh/capacity-type",
                                                             "Exists")]),
         CapacityNeed.FAULT_TOLERANT),
        (make_workload("aks", tolerations=[Toleration("kubernetes.azure.com/scalesetpriority",
                                                       "Equal", "spot")]),
         CapacityNeed.FAULT_TOLERANT),
        (make_workload("blanket", tolerations=[Toleration(None, "Exists")]), CapacityNeed.ANY),
        (make_workload("gpu-taint", tolerations=[Toleration("nvidia.com/gpu", "Exists")]),
         CapacityNeed.ANY),
        (make_workload("selects", selector={"cloud.google.com/gke-preemptible": "true"}),
         CapacityNeed.FAULT_TOLERANT),
        (make_workload("checkpoints", checkpoint=1800.0), CapacityNeed.FAULT_TOLERANT),
        (make_workload("np", preemptible=False), CapacityNeed.CRITICAL),
        (make_workload("np-spot", preemptible=False, tolerations=[SPOT_TOLERATION]),
         CapacityNeed.CRITICAL),
        (make_workload("serving", priority=INFERENCE_CRITICAL_PRIORITY), CapacityNeed.CRITICAL),
        (make_workload("high", priority=INFERENCE_CRITICAL_PRIORITY - 1), CapacityNeed.ANY),
    ],
    ids=["plain", "spot-toleration", "karpenter-exists", "aks-spot", "blanket-toleration",
         "other-toleration", "gke-preemptible-selector", "checkpoint-interval",
         "non-preemptible", "non-preemptible-beats-spot", "inference-critical",
         "just-below-inference-critical"],
)  # fmt: skip
def test_what_a_workload_needs_of_capacity(workload: Workload, need: CapacityNeed) -> None:
    assert capacity_need(workload, workload.pods[0]) is need


def node(name: str, labels: dict[str, str] | None = None, **options: object) -> Node:
    return make_node(name, gpus=8, labels=labels or {}, **options)  # type: ignore[arg-type]


ON_DEMAND = node("on-demand")
SPOT = node("spot", {CAPACITY_TYPE_LABEL: "spot"})
RESERVED = node("reserved", {CAPACITY_TYPE_LABEL: "reserved"})


def placed_on(nodes: list[Node], workload: Workload, profile: Profile = DEFAULT_PROFILE) -> str:
    core = make_core(nodes, [make_queue("default")], profile=profile)
    cluster = EchoCluster(core)
    cluster.submit(workload, now=0.0)
    return cluster.running[workload.pods[0].key].node


@pytest.mark.parametrize(
    ("nodes", "workload", "expected"),
    [
        ([ON_DEMAND, SPOT, RESERVED], make_workload("any"), "reserved"),
        ([ON_DEMAND, SPOT, RESERVED], make_workload("ft", checkpoint=60.0), "reserved"),
        ([ON_DEMAND, SPOT, RESERVED], make_workload("crit", preemptible=False), "reserved"),
        ([ON_DEMAND, SPOT], make_workload("ft", checkpoint=60.0), "spot"),
        ([SPOT, ON_DEMAND], make_workload("crit", preemptible=False), "on-demand"),
        ([SPOT, ON_DEMAND], make_workload("serve", priority=INFERENCE_CRITICAL_PRIORITY),
         "on-demand"),
        ([ON_DEMAND, node("k-spot", {"karpenter.sh/capacity-type": "spot"})],
         make_workload("ft", tolerations=[SPOT_TOLERATION]), "k-spot"),
        ([ON_DEMAND, node("eks-block", {"eks.amazonaws.com/capacityType": "CAPACITY_BLOCK"})],
         make_workload("any"), "eks-block"),
        # A tainted spot node takes only pods that tolerate the taint, whatever the scores.
        ([ON_DEMAND, node("tainted", {CAPACITY_TYPE_LABEL: "spot"}, taints=[SPOT_TAINT])],
         make_workload("ft", checkpoint=60.0), "on-demand"),
        ([ON_DEMAND, node("tainted", {CAPACITY_TYPE_LABEL: "spot"}, taints=[SPOT_TAINT])],
         make_workload("ft", checkpoint=60.0, tolerations=[SPOT_TOLERATION]), "tainted"),
    ],
    ids=["reserved-first-any", "reserved-first-fault-tolerant", "reserved-first-critical",
         "fault-tolerant-on-spot", "critical-on-on-demand", "inference-critical-on-on-demand",
         "karpenter-label", "eks-capacity-block", "spot-taint-not-tolerated",
         "spot-taint-tolerated"],
)  # fmt: skip
def test_placement_prefers_the_capacity_type_a_workload_needs(
    nodes: list[Node], workload: Workload, expected: str
) -> None:
    assert placed_on(nodes, workload) == expected


def test_without_the_plugin_the_policy_alone_decides() -> None:
    """The same choice is the policy's own when the profile leaves capacity-type out: the
    fault-tolerant workload goes to the first node in the tie order, the on-demand one."""
    no_capacity = Profile.from_mapping({"scores": []})
    workload = make_workload("ft", checkpoint=60.0)
    assert placed_on([ON_DEMAND, SPOT], workload, no_capacity) == "on-demand"
    assert placed_on([ON_DEMAND, SPOT], workload) == "spot"


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], list[Workload]]:
    nodes = [
        make_node(
            f"n{i}",
            gpus=draw(st.sampled_from([1, 2, 4, 8])),
            cpu=draw(st.integers(8, 64)) * 1000,
            labels={"team": "a"} if draw(st.booleans()) else {},
            taints=[Taint("dedicated", "x")] if draw(st.integers(0, 5)) == 0 else [],
        )
        for i in range(draw(st.integers(1, 6)))
    ]
    workloads = [
        make_workload(
            f"w{i}",
            pods=draw(st.integers(1, 3)),
            gpus=draw(st.integers(0, 4)),
            priority=draw(st.sampled_from([0, 10, INFERENCE_CRITICAL_PRIORITY])),
            preemptible=draw(st.booleans()),
            checkpoint=draw(st.sampled_from([None, 600.0])),
            tolerations=[SPOT_TOLERATION] if draw(st.booleans()) else [],
        )
        for i in range(draw(st.integers(1, 8)))
    ]
    return nodes, workloads


@settings(max_examples=80, deadline=None)
@given(scenario=clusters(), policy=st.sampled_from(["bestfit", "default", "gpu-packing"]))
def test_a_cluster_without_capacity_labels_places_as_without_the_plugin(
    scenario: tuple[list[Node], list[Workload]], policy: str
) -> None:
    nodes, workloads = scenario
    placements = []
    for profile in (DEFAULT_PROFILE, Profile.from_mapping({"scores": []})):
        core = make_core(nodes, [make_queue("default")], policy=policy, profile=profile)
        cluster = EchoCluster(core)
        cluster.submit(*workloads, now=0.0)
        placements.append(dict(cluster.running))
    assert placements[0] == placements[1]
