"""Nodes that stop or resume taking new pods while pods run there (cordoned, tainted, being
removed by an autoscaler), workloads evicted whole when their node goes away, and bound pods
that must never be preempted (node table, core, explain)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import Placement, Taint, TaintEffect
from gpufleet.model.actions import Bind, Evict
from gpufleet.model.events import NodeSchedulingChanged, PodBound, WorkloadDisrupted
from gpufleet.model.workload import Workload
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.testing.builders import make_node, make_pod, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

REMOVED = "node(s) are being removed by the cluster autoscaler"
KARPENTER = "node(s) are being disrupted by Karpenter"
DEDICATED = Taint("dedicated", "training", TaintEffect.NO_SCHEDULE)


def one(name: str, gpus: int = 1, priority: int = 0) -> Workload:
    return make_workload(name, gpus=gpus, priority=priority)


def test_a_busy_node_that_stops_taking_pods_takes_none_until_it_is_back() -> None:
    core = make_core([make_node("n1", gpus=8)])
    cluster = EchoCluster(core)
    cluster.submit(one("first", gpus=4))
    assert cluster.running["default/first"].node == "n1"
    core.handle(NodeSchedulingChanged("n1", True, REMOVED))
    cluster.submit(one("second", gpus=4))
    assert "default/second" not in cluster.running
    assert cluster.told["default/second"] == f"0/1 nodes are available: 1 {REMOVED}."
    assert "default/first" in cluster.running, "what runs there stays"
    core.handle(NodeSchedulingChanged("n1", False))
    cluster.settle()
    assert cluster.running["default/second"].node == "n1"


def test_explain_counts_each_node_under_its_own_reason() -> None:
    core = make_core([make_node(f"n{i}", gpus=8) for i in range(4)])
    cluster = EchoCluster(core)
    core.handle(NodeSchedulingChanged("n0", True, REMOVED))
    core.handle(NodeSchedulingChanged("n1", True, KARPENTER))
    core.handle(NodeSchedulingChanged("n2", True, KARPENTER))
    core.handle(NodeSchedulingChanged("n3", True))  # a plain cordon
    cluster.submit(one("p"))
    assert cluster.told["default/p"] == (
        f"0/4 nodes are available: 2 {KARPENTER}, 1 {REMOVED}, 1 node(s) were unschedulable."
    )


def test_a_busy_nodes_taints_change_in_place() -> None:
    core = make_core([make_node("n1", gpus=8, taints=[DEDICATED])])
    cluster = EchoCluster(core)
    core.handle(PodBound(make_pod("daemon", gpus=0), Placement("n1")))
    cluster.submit(one("first"))
    assert "untolerated taint" in cluster.told["default/first"]
    core.handle(NodeSchedulingChanged("n1", False, "", ()))
    cluster.settle()
    assert cluster.running["default/first"].node == "n1"
    core.handle(NodeSchedulingChanged("n1", False, "", (DEDICATED,)))
    cluster.submit(one("second"))
    assert "untolerated taint" in cluster.told["default/second"]
    assert core.table.nodes[0].taints == (DEDICATED,)


def test_a_disrupted_gang_is_evicted_whole_and_placed_again_elsewhere() -> None:
    core = make_core([make_node(f"n{i}", gpus=8) for i in range(3)])
    cluster = EchoCluster(core)
    gang = make_workload("ddp", pods=2, gpus=8)
    cluster.submit(gang)
    before = {key: p.node for key, p in cluster.running.items()}
    assert sorted(before.values()) == ["n0", "n1"]
    doomed = before["default/ddp-1"]
    core.handle(NodeSchedulingChanged(doomed, True, KARPENTER))
    core.handle(WorkloadDisrupted("default/ddp-1", f"node {doomed} is being disrupted"))
    cluster.settle()
    assert sorted(cluster.evicted) == ["default/ddp-0", "default/ddp-1"]
    evictions = [a for a in cluster.actions if isinstance(a, Evict)]
    assert {(e.reason, e.preemptor) for e in evictions} == {
        (f"node {doomed} is being disrupted", None)
    }
    after = sorted(p.node for p in cluster.running.values())
    assert len(after) == 2
    assert doomed not in after, "placed again, elsewhere"


@pytest.mark.parametrize(
    "key",
    ["default/nobody", "default/waiting"],
    ids=["unknown", "not-running"],
)
def test_disrupting_what_does_not_run_does_nothing(key: str) -> None:
    core = make_core([make_node("n1", gpus=8)])
    cluster = EchoCluster(core)
    cluster.submit(one("waiting", gpus=9))
    core.handle(WorkloadDisrupted(key, "gone"))
    assert not [a for a in cluster.settle() if isinstance(a, Evict)]


@pytest.mark.parametrize(
    ("preemptible", "preempted"),
    [(True, True), (False, False)],
    ids=["preemptible", "protected"],
)
def test_a_bound_pod_told_not_preemptible_is_never_a_victim(
    preemptible: bool, preempted: bool
) -> None:
    core = make_core([make_node("n1", gpus=8)], min_runtime=0.0)
    cluster = EchoCluster(core)
    pod = make_pod("held", gpus=8)
    core.handle(PodBound(pod, Placement("n1", (0, 1, 2, 3, 4, 5, 6, 7)), preemptible))
    cluster.running[pod.key] = Placement("n1", (0, 1, 2, 3, 4, 5, 6, 7))
    cluster.submit(one("urgent", gpus=8, priority=1000))
    assert ("default/held" in cluster.evicted) is preempted
    assert ("default/urgent" in cluster.running) is preempted


def test_the_node_table_refuses_scheduling_changes_inside_a_trial_and_on_dead_rows() -> None:
    table = NodeTable([make_node("n1"), make_node("n2")])
    assert not table.set_scheduling(0, True), "nothing changed"
    version = table.topology_version
    assert table.set_scheduling(0, False, REMOVED)
    assert table.topology_version > version, "static masks are rebuilt"
    assert table.unschedulable_reasons == {0: REMOVED}
    assert table.nodes[0].unschedulable_reason == REMOVED
    mark = table.begin_trial()
    with pytest.raises(RuntimeError, match="inside a trial"):
        table.set_scheduling(0, True)
    table.rollback(mark)
    table.remove_node("n2")
    with pytest.raises(ValueError, match="'n2' is not in the cluster"):
        table.set_scheduling(1, False)
    assert table.unschedulable_reasons == {0: REMOVED}


@dataclass(frozen=True)
class Step:
    """A pod of ``gpus`` arrives, the ``pick``-th running pod ends, or node ``node`` is
    cordoned or not and tainted or not."""

    kind: str
    gpus: int = 1
    pick: int = 0
    node: int = 0
    cordoned: bool = False
    tainted: bool = False


@st.composite
def changes(draw: st.DrawFn) -> list[Step]:
    steps: list[Step] = []
    for _ in range(draw(st.integers(5, 30))):
        kind = draw(st.sampled_from(["pod", "pod", "end", "node"]))
        if kind == "pod":
            steps.append(Step(kind, gpus=draw(st.integers(1, 4))))
        elif kind == "end":
            steps.append(Step(kind, pick=draw(st.integers(0, 1000))))
        else:
            steps.append(
                Step(kind, node=draw(st.integers(0, 2)), cordoned=draw(st.booleans()),
                     tainted=draw(st.booleans()))
            )  # fmt: skip
    return steps


@settings(max_examples=60, deadline=None)
@given(steps=changes())
def test_no_pod_is_ever_bound_to_a_node_that_takes_none_or_repels_it(steps: list[Step]) -> None:
    core = make_core([make_node(f"n{i}", gpus=4) for i in range(3)])
    cluster = EchoCluster(core)
    closed: dict[str, tuple[bool, bool]] = {f"n{i}": (False, False) for i in range(3)}
    count = seen = 0
    for step in steps:
        if step.kind == "pod":
            count += 1
            cluster.submit(one(f"p{count}", gpus=step.gpus))
        elif step.kind == "end" and cluster.running:
            cluster.finish(sorted(cluster.running)[step.pick % len(cluster.running)])
        elif step.kind == "node":
            name = f"n{step.node}"
            closed[name] = (step.cordoned, step.tainted)
            taints = (DEDICATED,) if step.tainted else ()
            core.handle(NodeSchedulingChanged(name, step.cordoned, REMOVED, taints))
            cluster.settle()
        for action in cluster.actions[seen:]:
            if isinstance(action, Bind):
                assert closed[action.placement.node] == (False, False), action
        seen = len(cluster.actions)
