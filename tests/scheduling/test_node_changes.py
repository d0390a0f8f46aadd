"""Nodes that change under running pods: a node deleted and re-created under its name while
its pods still run, a node whose allocatable shrinks, and a pod holding devices its node no
longer lists. What runs there stays counted (beyond what the node offers now), nothing new
goes there until usage fits, and nothing crashes (node table, lifecycle, core)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpufleet.model import Node, Placement
from gpufleet.model.actions import Action, Bind, Evict
from gpufleet.model.events import NodeAdded, NodeRemoved, PodBound, PodDeleted
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.node_table import Claim, NodeTable
from gpufleet.testing.builders import make_node, make_pod, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core


def gpus_held(core: SchedulerCore, node: str) -> int:
    """Whole GPUs the core counts as held on ``node`` by running and evicting pods."""
    return sum(
        len(b.placement.gpu_indices)
        for group in (core.running, core.evicting)
        for r in group.values()
        for b in r.bound.values()
        if b.placement.node == node
    )


def binds(actions: Sequence[Action]) -> list[Bind]:
    return [a for a in actions if isinstance(a, Bind)]


def end(cluster: EchoCluster, key: str) -> None:
    """A pod bound by someone else (told ``PodBound``) ends; the core settles."""
    cluster.core.handle(PodDeleted(key))
    cluster.settle()


def renew(core: SchedulerCore, node: Node) -> None:
    """The node leaves and joins again (deleted and re-created, or changed)."""
    core.handle(NodeRemoved(node.name))
    core.handle(NodeAdded(node))


@pytest.mark.parametrize("gpus_after", [8, 4], ids=["same-size", "four-gpus"])
def test_a_node_recreated_under_running_pods_keeps_them_counted(gpus_after: int) -> None:
    core = make_core([make_node("n", gpus=8)])
    cluster = EchoCluster(core)
    cluster.submit(make_workload("big", gpus=8))
    assert cluster.running["default/big"].gpu_indices == tuple(range(8))
    renew(core, make_node("n", gpus=gpus_after))
    assert core.table.row_of["n"] == 0
    assert core.table.size == 1
    assert not binds(cluster.submit(make_workload("next", gpus=gpus_after)))
    assert not binds(cluster.submit(make_workload("one", gpus=1)))
    cluster.finish("default/big")
    assert {b.pod.name for b in binds(cluster.actions)} >= {"next"}
    assert gpus_held(core, "n") <= gpus_after


def test_a_node_that_shrinks_under_a_pod_takes_nothing_new_until_usage_fits() -> None:
    core = make_core([make_node("n", gpus=8)])
    cluster = EchoCluster(core)
    # Two pods of 4 GPUs; the device plugin withdraws half the devices.
    core.handle(PodBound(make_pod("low", gpus=4), Placement("n", (0, 1, 2, 3))))
    core.handle(PodBound(make_pod("high", gpus=4), Placement("n", (4, 5, 6, 7))))
    core.handle(PodDeleted("default/low"))
    renew(core, make_node("n", gpus=4))
    # Devices 0-3 are free by index, but the node advertises 4 and 4 are held (4-7).
    assert int(core.table.units_free[0]) == 0
    assert not binds(cluster.submit(make_workload("one", gpus=1)))
    end(cluster, "default/high")
    assert [b.pod.name for b in binds(cluster.actions)] == ["one"]


def test_a_pod_on_a_device_the_node_no_longer_lists_is_kept_and_counted_in_a_new_core() -> None:
    """What a rebuilt core (a Queue change, a restart, a leader change) is told: the node
    advertises 7 GPUs (one unhealthy, withdrawn), a pod holds GPUs 0-7."""
    core = make_core([make_node("n", gpus=7)])
    core.handle(PodBound(make_pod("p", gpus=8), Placement("n", tuple(range(8)))))
    assert core.placement_of("default/p") == Placement("n", tuple(range(8)))
    assert gpus_held(core, "n") == 8
    assert int(core.table.units_free[0]) == -1
    cluster = EchoCluster(core)
    assert not binds(cluster.submit(make_workload("one", gpus=1)))
    end(cluster, "default/p")
    assert [b.pod.name for b in binds(cluster.actions)] == ["one"]
    assert int(core.table.units_free[0]) == 6
    assert core.table.gpu_free[0, :7].tolist() == [0] + [1000] * 6


def test_a_victim_on_devices_the_node_no_longer_lists_can_be_preempted() -> None:
    core = make_core([make_node("n", gpus=7)], min_runtime=0.0)
    core.handle(PodBound(make_pod("low", gpus=8, priority=0), Placement("n", tuple(range(8)))))
    cluster = EchoCluster(core)
    actions = cluster.submit(make_workload("urgent", gpus=7, priority=100))
    assert [a.pod.name for a in actions if isinstance(a, Evict)] == ["low"]
    end(cluster, "default/low")
    assert [b.pod.name for b in binds(cluster.actions)] == ["urgent"]


def test_a_node_recreated_empty_gets_a_new_row_as_before() -> None:
    core = make_core([make_node("n", gpus=8)])
    renew(core, make_node("n", gpus=8))
    assert core.table.row_of["n"] == 1
    assert core.table.size == 2


def test_a_recreated_node_counts_the_pods_being_evicted_there_too() -> None:
    core = make_core([make_node("n", gpus=2)], min_runtime=0.0)
    core.handle(PodBound(make_pod("low", gpus=2, priority=0), Placement("n", (0, 1))))
    actions = core.run_until_idle()
    core.add(make_workload("urgent", gpus=2, priority=100))
    actions = core.run_until_idle()
    assert [a.pod.name for a in actions if isinstance(a, Evict)] == ["low"]
    renew(core, make_node("n", gpus=2))
    assert "default/low" in core.evicting
    row = core.table.row_of["n"]
    assert core.table.gpu_free[row, :2].tolist() == [0, 0]
    assert not binds(core.run_until_idle())
    core.handle(PodDeleted("default/low"))
    assert [b.pod.name for b in binds(core.run_until_idle())] == ["urgent"]


def test_the_table_keeps_devices_a_node_no_longer_lists_in_the_allocation() -> None:
    table = NodeTable([make_node("n", gpus=2)])
    allocation = table.allocate(
        Claim(0, 1000, 1024, (0, 1), 1000, units=3, existing=True, missing=(2,))
    )
    assert allocation.gpu_indices == (0, 1, 2)
    assert int(table.units_free[0]) == -1
    assert table.replicated  # the units filter runs: devices may be free while units are not
    mark = table.begin_trial()
    table.release(allocation)
    table.reallocate(allocation)
    table.rollback(mark)
    assert int(table.units_free[0]) == -1
    table.release(allocation)
    assert int(table.units_free[0]) == 2
    assert table.gpu_free[0, :2].tolist() == [1000, 1000]


def test_a_renewed_row_counts_cpu_beyond_what_the_node_offers_now() -> None:
    core = make_core([make_node("n", cpu=8_000, gpus=0)])
    core.handle(PodBound(make_pod("p", cpu=6_000), Placement("n")))
    renew(core, make_node("n", cpu=4_000, gpus=0))
    assert int(core.table.cpu_free[0]) == -2_000
    assert not binds(EchoCluster(core).submit(make_workload("small", cpu=1_000)))
