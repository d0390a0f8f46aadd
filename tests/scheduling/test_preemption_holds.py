"""A preemptor whose victims are leaving keeps what its preemption freed (quota and rows)
until it is admitted: nothing else may take it in between, else the preemption was for nothing
and the preemptor waits while its victims are gone (found by the invariant properties)."""

from __future__ import annotations

from gpufleet.model.actions import Action, Bind, Evict
from gpufleet.model.events import PodDeleted, WorkloadAdded
from gpufleet.model.tenancy import GPU
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core


def names(actions: list[Action], kind: type) -> list[str]:
    return [a.pod.name for a in actions if isinstance(a, kind)]


def gpu_usage(core: SchedulerCore, queue: str) -> int:
    tree = core.quotas.tree
    return int(tree.usage[tree.index[queue], tree.key_index[GPU]])


def test_borrowing_work_cannot_take_back_what_a_nominal_preemptor_freed() -> None:
    # One queue of 1 GPU nominal on a cluster of 3 GPUs: its preemptible work borrows the
    # rest. A non-preemptible gang (which must stay within nominal) evicts borrowed work of
    # its own queue to get there; the borrowed work comes back only after it.
    core = make_core(
        [make_node("n0", gpus=1), make_node("n1", gpus=2)],
        [make_queue("q", 1)],
        min_runtime=120.0,
    )
    cluster = EchoCluster(core)
    small = make_workload("small", "q", gpus=0, milli=250)
    whole = make_workload("whole", "q")
    cluster.submit(small, now=0)
    cluster.submit(whole, now=0)
    pinned = make_workload(
        "pinned", "q", pods=2, min_member=1, gpus=0, milli=500, priority=1, preemptible=False
    )
    actions = cluster.submit(pinned, now=130)
    assert sorted(names(actions, Evict)) == ["small", "whole"]
    assert {"pinned-0", "pinned-1"} <= set(names(actions, Bind))
    assert all(p.key in cluster.running for p in pinned.pods)
    assert all(preemptor in core.running for _, preemptor, _ in core.preemptions)
    assert {small.key, whole.key} <= set(core.running)  # they borrow again, after it


def test_a_hold_is_given_back_when_the_preemptor_is_deleted() -> None:
    core = make_core([make_node("n0", gpus=1)], [make_queue("q", 1)], min_runtime=0.0)
    cluster = EchoCluster(core)
    low = make_workload("low", "q")
    cluster.submit(low, now=0)
    high = make_workload("high", "q", priority=5)
    core.handle(WorkloadAdded(high))
    actions = core.run_until_idle(10)
    assert names(actions, Evict) == ["low"]
    assert gpu_usage(core, "q") == 2000  # the victim, still there, and the hold
    core.handle_all([PodDeleted(p.key) for p in high.pods])  # gone before its victim left
    assert high.key not in core.nominated
    assert gpu_usage(core, "q") == 1000
    core.handle_all(cluster.apply(actions))  # the victim leaves, waits again, finds room
    cluster.settle(now=11)
    assert low.key in core.running
    assert gpu_usage(core, "q") == 1000
