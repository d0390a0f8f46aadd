"""Lowering a running workload to preemptible (``WorkloadDemoted``, an idle policy's
``Preemptible``): what waits may take its GPUs, its quota charge moves out of the
non-preemptible usage, it waits lowered if preempted, and nothing else changes."""

from __future__ import annotations

import pytest

from gpufleet.model.actions import Action
from gpufleet.model.events import WorkloadDemoted
from gpufleet.model.priorities import LOWEST_PRIORITY
from gpufleet.model.resources import GPU
from gpufleet.model.workload import Workload
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

MIN_RUNTIME = 60.0
LATER = 10 * MIN_RUNTIME


def core_of(gpus: int = 4) -> tuple[SchedulerCore, EchoCluster]:
    core = make_core(
        [make_node("n1", gpus=gpus)],
        [make_queue("research", gpus=gpus), make_queue("dev", gpus=0, borrow=gpus)],
        min_runtime=MIN_RUNTIME,
    )
    return core, EchoCluster(core)


def pinned_gpus(core: SchedulerCore, queue: str) -> int:
    tree = core.quotas.tree
    return int(core.quotas.pinned_usage[tree.index[queue], tree.key_index[GPU]])


@pytest.mark.parametrize(
    ("holder", "waiting"),
    [
        (
            make_workload("notebook", "research", gpus=4, priority=100, preemptible=False),
            make_workload("train", "research", gpus=4, priority=0),
        ),
        (
            make_workload("notebook", "research", gpus=4, priority=100),
            make_workload("train", "research", gpus=4, priority=50),
        ),
        (
            make_workload("notebook", "research", gpus=4, priority=0),
            make_workload("train", "research", gpus=4, priority=0),
        ),
    ],
    ids=["non-preemptible-above", "preemptible-above", "equal-priority"],
)
def test_waiting_work_takes_the_gpus_of_a_demoted_holder(
    holder: Workload, waiting: Workload
) -> None:
    core, cluster = core_of()
    cluster.submit(holder, now=0.0)
    cluster.submit(waiting, now=LATER)
    assert set(core.running) == {holder.key}, "the holder may not be preempted before"

    core.handle(WorkloadDemoted(holder.key, "idle"))
    cluster.settle(now=LATER + 1)

    assert set(core.running) == {waiting.key}
    assert holder.pods[0].key in cluster.evicted
    assert (LATER + 1, waiting.key, holder.key) in core.preemptions
    again = core.pending.get(holder.key)
    assert again is not None, "the demoted holder waits again"
    assert (again.workload.priority, again.workload.preemptible) == (LOWEST_PRIORITY, True)


def test_a_demoted_workload_younger_than_the_minimum_run_time_is_preempted_when_it_ripens() -> None:
    core, cluster = core_of()
    holder = make_workload("notebook", "research", gpus=4, priority=100)
    waiting = make_workload("train", "research", gpus=4, priority=0)
    cluster.submit(holder, now=0.0)
    cluster.submit(waiting, now=1.0)
    core.handle(WorkloadDemoted(holder.key))
    cluster.settle(now=2.0)
    assert set(core.running) == {holder.key}, "too young to be preempted"
    timer = core.next_timer()
    assert timer == MIN_RUNTIME
    cluster.settle(now=timer)
    assert set(core.running) == {waiting.key}


def test_demotion_moves_the_quota_charge_out_of_the_non_preemptible_usage() -> None:
    core, cluster = core_of()
    holder = make_workload("notebook", "research", gpus=3, preemptible=False)
    cluster.submit(holder, now=0.0)
    assert pinned_gpus(core, "research") == 3000
    core.handle(WorkloadDemoted(holder.key))
    assert pinned_gpus(core, "research") == 0
    tree = core.quotas.tree
    assert tree.usage[tree.index["research"], tree.key_index[GPU]] == 3000
    running = core.running[holder.key]
    assert (running.workload.priority, running.workload.preemptible) == (LOWEST_PRIORITY, True)
    assert core.state.running.lowest_priority("research") == LOWEST_PRIORITY


def test_a_demoted_workload_left_alone_runs_on_and_gives_back_what_it_held() -> None:
    core, cluster = core_of()
    holder = make_workload("notebook", "research", gpus=2, preemptible=False)
    cluster.submit(holder, now=0.0)
    core.handle(WorkloadDemoted(holder.key))
    cluster.settle(now=LATER)
    assert set(core.running) == {holder.key}
    cluster.finish_workload(holder, now=LATER + 1)
    assert not core.running
    tree = core.quotas.tree
    assert not tree.usage.any()
    assert not core.quotas.pinned_usage.any()


@pytest.mark.parametrize("target", ["waiting", "unknown", "twice"])
def test_demoting_what_does_not_run_or_is_demoted_already_changes_nothing(target: str) -> None:
    core, cluster = core_of(gpus=2)
    holder = make_workload("holder", "research", gpus=2, priority=5)
    waiting = make_workload("waiting", "research", gpus=2, priority=1)
    cluster.submit(holder, waiting, now=0.0)
    key = {"waiting": waiting.key, "unknown": "default/nobody", "twice": holder.key}[target]
    if target == "twice":
        assert core.lifecycle.demote(key)
    version = core.state.running.version
    assert not core.lifecycle.demote(key)
    assert core.state.running.version == version
    pending = core.pending.get(waiting.key)
    assert pending is not None
    assert pending.workload.priority == 1


def test_a_workload_being_evicted_is_requeued_demoted() -> None:
    core, cluster = core_of()
    holder = make_workload("notebook", "research", gpus=4, preemptible=False)
    cluster.submit(holder, now=0.0)
    actions: list[Action] = []
    core.lifecycle.evict(core.running[holder.key], "node drained", actions, None)
    assert holder.key in core.evicting
    assert core.lifecycle.demote(holder.key)
    core.handle_all(cluster.apply(actions))
    assert pinned_gpus(core, "research") == 0
    again = core.pending.get(holder.key)
    assert again is not None
    assert (again.workload.priority, again.workload.preemptible) == (LOWEST_PRIORITY, True)


def test_a_bound_pod_names_its_workload() -> None:
    core, cluster = core_of()
    gang = make_workload("ddp", "research", pods=2, gpus=2, preemptible=False)
    cluster.submit(gang, now=0.0)
    core.handle(WorkloadDemoted(gang.pods[1].key))
    assert core.running[gang.key].workload.priority == LOWEST_PRIORITY
    assert pinned_gpus(core, "research") == 0
