"""Gangs (all or nothing, ready timeout, pods beyond minMember), backfill with a reservation,
topology domains, and what ``explain_pending`` tells about waiting workloads."""

from __future__ import annotations

import re

import pytest

from gpufleet.model.actions import Action, Bind, MarkUnschedulable
from gpufleet.model.queues import Queue
from gpufleet.model.workload import TopologyMode, TopologyRequest, Workload
from gpufleet.scheduling.core import PendingExplanation, SchedulerCore
from gpufleet.testing.builders import make_cluster, make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

NVLINK = "gpufleet.dev/nvlink-domain"


def bound(actions: list[Action]) -> list[str]:
    return [a.pod.name for a in actions if isinstance(a, Bind)]


def nodes_of(cluster: EchoCluster, workload: Workload) -> set[str]:
    return {cluster.running[p.key].node for p in workload.pods if p.key in cluster.running}


def explanation(core: SchedulerCore, workload: Workload) -> PendingExplanation:
    (found,) = [e for e in core.explain_pending() if e.workload == workload.key]
    return found


# ----------------------------------------------------------------------------- gangs
def test_gang_is_bound_all_or_nothing() -> None:
    core = make_core(make_cluster(2, gpus=4))
    cluster = EchoCluster(core)
    fillers = [make_workload(f"fill{i}") for i in range(6)]
    cluster.submit(*fillers, now=0)
    gang = make_workload("gang", pods=3, gpus=1)
    actions = cluster.submit(gang, now=1)
    assert bound(actions) == []  # 2 GPUs free: no pod of the gang of 3 is bound
    told = [a for a in actions if isinstance(a, MarkUnschedulable)]
    assert {a.pod.name for a in told} == {"gang-0", "gang-1", "gang-2"}
    assert "gang of 3: 2 placed" in told[0].message
    actions = cluster.finish_workload(fillers[0], now=2)
    assert sorted(bound(actions)) == ["gang-0", "gang-1", "gang-2"]


def test_a_gang_preempted_after_one_pod_ended_comes_back_without_it() -> None:
    # A Job's pod that finished (or failed and was replaced) is no longer part of its gang:
    # when the rest is preempted and admitted again, the ended pod must not be bound again.
    core = make_core(make_cluster(1, gpus=2), [make_queue("q", 2)], min_runtime=0.0)
    cluster = EchoCluster(core)
    gang = make_workload("gang", "q", pods=2, gpus=1)
    cluster.submit(gang, now=0)
    cluster.finish("default/gang-0", now=10)
    urgent = make_workload("urgent", "q", gpus=2, priority=10)
    cluster.submit(urgent, now=20)
    assert cluster.evicted == ["default/gang-1"]
    actions = cluster.finish_workload(urgent, now=30)
    assert bound(actions) == ["gang-1"]


def test_gang_not_ready_in_time_is_evicted_and_retried_with_growing_backoff() -> None:
    core = make_core(make_cluster(1, gpus=4), gang_ready_timeout=600.0, backoff_base=30.0)
    cluster = EchoCluster(core, ready=False)  # pods are bound but never report ready
    gang = make_workload("gang", pods=2, gpus=1)
    assert sorted(bound(cluster.submit(gang, now=0))) == ["gang-0", "gang-1"]
    assert core.next_timer() == 600.0
    cluster.settle(now=599)
    assert len(cluster.running) == 2
    cluster.settle(now=600)
    assert cluster.running == {}
    assert sorted(cluster.evicted) == ["default/gang-0", "default/gang-1"]
    waiting = explanation(core, gang)
    assert (waiting.waiting_for, waiting.estimated_start) == ("backoff", 630.0)
    assert core.next_timer() == 630.0
    assert bound(cluster.settle(now=629)) == []
    assert sorted(bound(cluster.settle(now=630))) == ["gang-0", "gang-1"]
    cluster.settle(now=1230)  # not ready again: the second backoff is twice the first
    assert cluster.running == {}
    assert core.next_timer() == 1290.0
    assert sorted(bound(cluster.settle(now=1290))) == ["gang-0", "gang-1"]


def test_ready_gang_is_not_evicted_at_its_deadline() -> None:
    core = make_core(make_cluster(1, gpus=4))
    cluster = EchoCluster(core)
    gang = make_workload("gang", pods=2, gpus=1)
    cluster.submit(gang, now=0)
    cluster.settle(now=10_000)
    assert len(cluster.running) == 2
    assert cluster.evicted == []


def test_pods_beyond_min_member_start_as_lone_pods_after_the_gang() -> None:
    core = make_core(make_cluster(1, gpus=3))
    cluster = EchoCluster(core)
    job = make_workload("job", pods=4, gpus=1, min_member=2)
    actions = cluster.submit(job, now=0)
    assert bound(actions) == ["job-0", "job-1", "job-2"]  # the gang first, then extras
    waiting = explanation(core, make_workload("job-3"))
    assert waiting.waiting_for == "capacity"
    cluster.finish("default/job-2", now=1)
    assert "default/job-3" in cluster.running


def test_pods_beyond_min_member_wait_while_the_gang_cannot_start() -> None:
    core = make_core(make_cluster(1, gpus=1))
    cluster = EchoCluster(core)
    job = make_workload("job", pods=3, gpus=1, min_member=2)
    assert bound(cluster.submit(job, now=0)) == []  # one GPU would take an extra pod: no


# ----------------------------------------------------------------------------- backfill
def backfill_cluster(spare: bool) -> tuple[SchedulerCore, EchoCluster, Workload]:
    """Two 4-GPU nodes running two 2-GPU jobs (ending at 1000 and 2000) packed on node-0, and
    a gang of two 4-GPU pods that is blocked: it gets both nodes from t=2000."""
    nodes = make_cluster(2, gpus=4)
    if spare:
        nodes.append(make_node("spare", gpus=1))
    core = make_core(nodes)
    cluster = EchoCluster(core)
    cluster.submit(
        make_workload("ends-1000", gpus=2, runtime=1_000),
        make_workload("ends-2000", gpus=2, runtime=2_000),
        now=0,
    )
    big = make_workload("big", pods=2, gpus=4)
    cluster.submit(big, now=5)
    assert core.reservation is not None
    assert core.reservation.owner == big.key
    assert core.reservation.start == 2_000.0
    return core, cluster, big


def test_short_jobs_backfill_reserved_nodes_long_ones_wait() -> None:
    core, cluster, big = backfill_cluster(spare=False)
    long = make_workload("long", runtime=5_000)
    short = make_workload("short", runtime=500)  # ends at 510, before the reservation
    cluster.submit(long, short, now=10)  # the same shape; the long one came first
    assert nodes_of(cluster, short) == {"node-1"}
    assert nodes_of(cluster, long) == set()
    assert explanation(core, big).estimated_start == 2_000.0


def test_long_jobs_go_around_the_reservation() -> None:
    _, cluster, big = backfill_cluster(spare=True)
    long, long2 = make_workload("long", runtime=5_000), make_workload("long2", runtime=5_000)
    cluster.submit(long, long2, now=10)
    assert nodes_of(cluster, long) == {"spare"}
    assert nodes_of(cluster, long2) == set()
    cluster.finish("default/ends-1000", now=1_000)
    assert nodes_of(cluster, long2) == set()  # node-0 has room now, but it is reserved
    cluster.finish("default/ends-2000", now=2_000)
    assert nodes_of(cluster, big) == {"node-0", "node-1"}


def test_estimated_start_of_the_reservation_owner() -> None:
    core, _, big = backfill_cluster(spare=False)
    waiting = explanation(core, big)
    assert waiting.waiting_for == "capacity"
    assert waiting.estimated_start == 2_000.0
    assert "Capacity reserved for it from t=33m20s." in waiting.message


@pytest.mark.parametrize(
    ("queues", "reserved"),
    [
        # A quota larger than the machine: the gang is owed the GPUs, the job holds them.
        pytest.param([make_queue("q", 16)], True, id="owed-but-taken"),
        # Owed 4 of them, it would borrow 4 of the other queue's idle ones: not owed those.
        pytest.param([make_queue("q", 4), make_queue("other", 4)], False, id="would-borrow"),
        # Its queue's quota is the machine, half used by itself: over its nominal quota.
        pytest.param([make_queue("q", 8)], False, id="over-its-nominal-quota"),
    ],
)
def test_a_gang_refused_by_quota_though_owed_the_gpus_gets_a_reservation(
    queues: list[Queue], reserved: bool
) -> None:
    # One 8-GPU machine, whose capacity is the top of the quota tree: a gang that waits for
    # busy GPUs is refused by quota, not by placement; when its queue's nominal quota owes it
    # the GPUs, it gets a reservation as it would had the nodes had no room.
    core = make_core([make_node("box", gpus=8)], queues)
    cluster = EchoCluster(core)
    cluster.submit(make_workload("running", "q", gpus=4, runtime=1_000), now=0)
    gang = make_workload("gang", "q", pods=2, gpus=4)
    cluster.submit(gang, now=5)
    assert nodes_of(cluster, gang) == set()
    assert (core.reservation is not None and core.reservation.owner == gang.key) is reserved
    if reserved:
        assert core.reservation is not None
        assert core.reservation.start == 1_000.0


def test_short_jobs_backfill_a_gang_refused_by_quota_long_ones_wait() -> None:
    core = make_core([make_node("box", gpus=8)], [make_queue("q", 16)])
    cluster = EchoCluster(core)
    cluster.submit(make_workload("running", "q", gpus=4, runtime=1_000), now=0)
    gang = make_workload("gang", "q", pods=2, gpus=4)
    cluster.submit(gang, now=5)
    long = make_workload("long", "q", gpus=2, runtime=5_000)
    short = make_workload("short", "q", gpus=2, runtime=500)  # ends at 510, before 1000
    cluster.submit(long, short, now=10)
    assert (nodes_of(cluster, short), nodes_of(cluster, long)) == ({"box"}, set())
    cluster.finish("default/running", now=1_000)
    cluster.finish("default/short", now=1_000)
    assert nodes_of(cluster, gang) == {"box"}


# ----------------------------------------------------------------------------- topology
def test_required_topology_takes_the_tightest_domain_that_fits() -> None:
    nodes = [
        make_node("big-1", gpus=8, labels={NVLINK: "big"}),
        make_node("big-2", gpus=8, labels={NVLINK: "big"}),
        make_node("small-1", gpus=4, labels={NVLINK: "small"}),
        make_node("small-2", gpus=4, labels={NVLINK: "small"}),
    ]
    cluster = EchoCluster(make_core(nodes))
    gang = make_workload(
        "gang", pods=2, gpus=4, topology=TopologyRequest(TopologyMode.REQUIRED, NVLINK)
    )
    cluster.submit(gang, now=0)
    assert nodes_of(cluster, gang) == {"small-1", "small-2"}


def split_domains() -> tuple[SchedulerCore, EchoCluster]:
    """Two domains of one 4-GPU node each, each with one GPU free."""
    nodes = [
        make_node("d1-node", gpus=4, labels={NVLINK: "d1"}),
        make_node("d2-node", gpus=4, labels={NVLINK: "d2"}),
    ]
    core = make_core(nodes)
    cluster = EchoCluster(core)
    cluster.submit(make_workload("fill1", gpus=3), make_workload("fill2", gpus=3), now=0)
    assert nodes_of(cluster, make_workload("fill1", gpus=3)) != nodes_of(
        cluster, make_workload("fill2", gpus=3)
    )
    return core, cluster


def test_required_topology_keeps_a_gang_in_one_domain_or_waits() -> None:
    core, cluster = split_domains()
    gang = make_workload(
        "gang", pods=2, gpus=1, topology=TopologyRequest(TopologyMode.REQUIRED, NVLINK)
    )
    cluster.submit(gang, now=1)
    assert nodes_of(cluster, gang) == set()  # two free GPUs, but in two domains
    waiting = explanation(core, gang)
    assert waiting.waiting_for == "capacity"
    assert f"one {NVLINK} domain" in waiting.message


def test_preferred_topology_falls_back_to_anywhere() -> None:
    _, cluster = split_domains()
    gang = make_workload(
        "gang", pods=2, gpus=1, topology=TopologyRequest(TopologyMode.PREFERRED, NVLINK)
    )
    cluster.submit(gang, now=1)
    assert nodes_of(cluster, gang) == {"d1-node", "d2-node"}


# ----------------------------------------------------------------------------- explain
def test_explain_quota_names_the_queue_and_the_resource() -> None:
    core = make_core(make_cluster(2, gpus=4), [make_queue("team", 2, borrow=0)])
    cluster = EchoCluster(core)
    jobs = [make_workload(f"j{i}", "team") for i in range(3)]
    cluster.submit(*jobs, now=0)
    waiting = explanation(core, jobs[2])
    assert waiting.waiting_for == "quota"
    assert waiting.queue == "team"
    assert "queue team: nvidia.com/gpu would be 3 of at most 2" in waiting.message
    assert cluster.told["default/j2"] == waiting.message


def test_explain_capacity_counts_nodes_per_reason() -> None:
    nodes = [*make_cluster(3, gpus=2), make_node("cpu-only", gpus=0)]
    core = make_core(nodes)
    cluster = EchoCluster(core)
    cluster.submit(*(make_workload(f"fill{i}", gpus=2) for i in range(3)), now=0)
    waiting_job = make_workload("waits")
    cluster.submit(waiting_job, now=1)
    waiting = explanation(core, waiting_job)
    assert waiting.waiting_for == "capacity"
    match = re.fullmatch(r"0/(\d+) nodes are available: (.*)\.", waiting.message)
    assert match is not None, waiting.message
    assert match.group(1) == "4"
    counts = [int(part.split(" ", 1)[0]) for part in match.group(2).split(", ")]
    assert sum(counts) == 4
    assert "Insufficient nvidia.com/gpu" in match.group(2)


def test_explain_positions_follow_queue_order() -> None:
    core = make_core(make_cluster(1, gpus=1), [make_queue("q")])
    cluster = EchoCluster(core)
    cluster.submit(make_workload("running", "q"), now=0)
    first, second = make_workload("first", "q"), make_workload("second", "q")
    urgent = make_workload("urgent", "q", priority=5)
    last = make_workload("last", "q", gpus=2)
    cluster.submit(first, now=1)
    cluster.submit(second, urgent, last, now=2)
    order = {e.workload: e.position for e in core.explain_pending() if e.queue == "q"}
    assert order == {urgent.key: 1, first.key: 2, second.key: 3, last.key: 4}
