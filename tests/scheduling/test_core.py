"""The scheduling core with lone pods: events in, actions out; parking and waking."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpufleet.model import Node, Placement
from gpufleet.model.actions import Action, Bind, MarkUnschedulable
from gpufleet.model.events import BindFailed, NodeAdded, PodAdded, PodBound, PodDeleted
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import make_cluster, make_node, make_pod


def core_for(nodes: list[Node], policy: str = "bestfit") -> SchedulerCore:
    table = NodeTable(nodes)
    return SchedulerCore(table, make_policy(policy, table, PolicyContext(TargetWorkload((), ()))))


def binds(actions: list[Action]) -> list[str]:
    return [a.pod.name for a in actions if isinstance(a, Bind)]


def test_places_in_priority_then_arrival_order() -> None:
    core = core_for(make_cluster(1, gpus=2))
    for name, priority in [("low", 0), ("high", 10), ("low2", 0)]:
        core.handle(PodAdded(make_pod(name=name, gpus=1, priority=priority)))
    actions = core.run_until_idle()
    assert binds(actions) == ["high", "low"]
    waiting = [a for a in actions if isinstance(a, MarkUnschedulable)]
    assert [a.pod.name for a in waiting] == ["low2"]
    assert waiting[0].message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_waiting_pods_are_told_once_and_wake_when_capacity_frees() -> None:
    core = core_for(make_cluster(1, gpus=1))
    core.handle(PodAdded(make_pod(name="a", gpus=1)))
    core.handle(PodAdded(make_pod(name="b", gpus=1)))
    first = core.run_until_idle()
    assert binds(first) == ["a"]
    assert [a.pod.name for a in first if isinstance(a, MarkUnschedulable)] == ["b"]
    assert core.run_until_idle() == []  # parked: not retried, not told again
    core.handle(PodDeleted("default/a"))
    assert binds(core.run_until_idle()) == ["b"]


def _refill(core: SchedulerCore) -> None:
    """The GPU that frees is taken again by a pod bound by someone else before the next
    cycle: the waiting group is woken for that row and parked again as it was told."""
    core.handle(PodDeleted("default/running"))
    core.handle(PodBound(make_pod(name="elsewhere", gpus=1), Placement("node-0", (0,))))


@pytest.mark.parametrize("meanwhile", [None, _refill], ids=["parked", "woken-then-refilled"])
def test_a_workload_joining_a_parked_group_is_told_why_in_the_next_cycle(
    meanwhile: Callable[[SchedulerCore], None] | None,
) -> None:
    """Issue 27 item 7: interchangeable pods that arrive after the first one parked wait
    untried in its group; each is told the group's reason at once, not when the group is
    next attempted (in a quiet cluster, never)."""
    core = core_for(make_cluster(1, gpus=1))
    core.handle(PodAdded(make_pod(name="running", gpus=1)))
    assert binds(core.run_until_idle()) == ["running"]
    core.handle(PodAdded(make_pod(name="wait-0", gpus=1)))
    (first,) = [a for a in core.run_until_idle() if isinstance(a, MarkUnschedulable)]
    for name in ("wait-1", "wait-2"):
        core.handle(PodAdded(make_pod(name=name, gpus=1)))
    if meanwhile is not None:
        meanwhile(core)
    actions = core.cycle()
    told = {a.pod.name: a.message for a in actions if isinstance(a, MarkUnschedulable)}
    assert told == {"wait-1": first.message, "wait-2": first.message}
    assert binds(actions) == []
    assert core.run_until_idle() == [], "told once"


def test_freed_capacity_wakes_only_groups_that_could_use_it() -> None:
    core = core_for([make_node("small", gpus=1), make_node("big", gpus=4)])
    core.handle(PodAdded(make_pod(name="fill-big", gpus=4)))
    core.handle(PodAdded(make_pod(name="fill-small", gpus=1)))
    core.run_until_idle()
    core.handle(PodAdded(make_pod(name="needs-4", gpus=4)))
    core.handle(PodAdded(make_pod(name="needs-1", gpus=1)))
    core.run_until_idle()
    core.handle(PodDeleted("default/fill-small"))
    groups = {g.head.workload.name: g.parked for g in core.pending.groups()}
    assert groups == {"needs-4": "capacity", "needs-1": None}
    assert binds(core.run_until_idle()) == ["needs-1"]


def test_pod_bound_elsewhere_takes_exactly_its_devices() -> None:
    core = core_for([make_node("n", gpus=2)])
    pod = make_pod(name="running", milli=700)
    core.handle(PodBound(pod, Placement("n", (1,), 700)))
    assert core.table.gpu_free[0, :2].tolist() == [1000, 300]
    core.handle(PodAdded(make_pod(name="new", milli=400)))
    actions = core.run_until_idle()
    assert [a.placement.gpu_indices for a in actions if isinstance(a, Bind)] == [(0,)]
    core.handle(PodDeleted("default/running"))
    assert core.table.gpu_free[0, 1] == 1000


def test_failed_bind_gives_devices_back_and_retries_after_backoff() -> None:
    core = core_for(make_cluster(1, gpus=1))
    core.handle(PodAdded(make_pod(name="a", gpus=1)))
    core.run_until_idle(now=0)
    core.handle(BindFailed("default/a", "node went away"))
    assert core.table.full_free[0] == 1
    assert core.next_timer() == 30.0  # the first backoff
    assert binds(core.run_until_idle(now=29)) == []
    assert binds(core.run_until_idle(now=30)) == ["a"]


def test_a_new_node_wakes_pending_pods() -> None:
    core = core_for([make_node("cpu-only", gpus=0)])
    core.handle(PodAdded(make_pod(name="gpu-pod", gpus=1)))
    assert binds(core.run_until_idle()) == []
    core.handle(NodeAdded(make_node("gpu-node", gpus=1)))
    assert binds(core.run_until_idle()) == ["gpu-pod"]


def test_duplicate_pod_added_is_ignored() -> None:
    core = core_for(make_cluster(1))
    pod = make_pod(name="a")
    core.handle(PodAdded(pod))
    core.handle(PodAdded(pod))
    assert binds(core.run_until_idle()) == ["a"]
    core.handle(PodAdded(pod))
    assert core.run_until_idle() == []


def test_placement_hint_lists_the_devices_a_pod_holds() -> None:
    assert Placement("n", (3, 1)).visible_devices == "1,3"
    assert Placement("n", mig_slices=((6, 0), (6, 2))).visible_devices == "6"
