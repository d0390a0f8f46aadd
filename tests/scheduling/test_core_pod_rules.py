"""Inter-pod rules and extended resources in the scheduling core: admitted in one cycle,
waiting with kube-scheduler's reasons, woken when the pods they count come or go, preempting,
and under quota."""

from __future__ import annotations

from gpufleet.model import GFD_LABELS, Placement
from gpufleet.model.actions import Bind
from gpufleet.model.affinity import PlacementRules
from gpufleet.model.events import PodBound
from gpufleet.model.queues import Queue
from gpufleet.testing.builders import make_cluster, make_node, make_pod, make_workload, pod_term
from gpufleet.testing.fakes import EchoCluster, make_core

ZONE = GFD_LABELS.ZONE
WEB = {"app": "web"}
APART = PlacementRules(pod_anti_affinity=(pod_term(WEB),))
APART_BY_ZONE = PlacementRules(pod_anti_affinity=(pod_term(WEB, key=ZONE),))


def test_seed_replicas_admitted_in_one_cycle_land_apart_and_the_third_is_told_why() -> None:
    cluster = EchoCluster(make_core(make_cluster(2, gpus=8)))
    replicas = [make_workload(f"web-{i}", labels=WEB, rules=APART) for i in range(3)]
    actions = cluster.submit(*replicas, now=0)
    assert len([a for a in actions if isinstance(a, Bind)]) == 2
    assert {p.node for p in cluster.running.values()} == {"node-0", "node-1"}
    (waiting,) = set(cluster.told) - set(cluster.running)
    assert cluster.told[waiting] == (
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
    )


def test_a_pod_leaving_its_domain_wakes_a_replica_whose_node_is_elsewhere_in_it() -> None:
    # a and b are in z1, c in z2. web-0 (1 GPU) takes a, web-1 takes c; web-2 needs 2 GPUs
    # and waits for z1. When web-0 ends, its node (a, 1 GPU) cannot hold web-2, but b can.
    nodes = [
        make_node("a", gpus=1, labels={ZONE: "z1"}),
        make_node("b", gpus=2, labels={ZONE: "z1"}),
        make_node("c", gpus=1, labels={ZONE: "z2"}),
    ]
    cluster = EchoCluster(make_core(nodes))
    first = [make_workload(f"web-{i}", gpus=1, labels=WEB, rules=APART_BY_ZONE) for i in range(2)]
    cluster.submit(*first, now=0)
    assert {k: p.node for k, p in cluster.running.items()} == {
        "default/web-0": "a",
        "default/web-1": "c",
    }
    big = make_workload("web-2", gpus=2, labels=WEB, rules=APART_BY_ZONE)
    cluster.submit(big, now=1)
    assert "default/web-2" not in cluster.running
    cluster.finish("default/web-0", now=2)
    assert cluster.running["default/web-2"].node == "b"


def test_a_pod_waiting_for_its_affinity_target_starts_when_the_target_does() -> None:
    cluster = EchoCluster(make_core(make_cluster(2, gpus=8)))
    follower = make_workload("app", rules=PlacementRules(pod_affinity=(pod_term({"app": "db"}),)))
    cluster.submit(follower, now=0)
    assert cluster.told["default/app"] == (
        "0/2 nodes are available: 2 node(s) didn't match pod affinity rules."
    )
    cluster.submit(make_workload("db", gpus=0, labels={"app": "db"}), now=1)
    assert cluster.running["default/app"].node == cluster.running["default/db"].node


def test_pods_bound_by_someone_else_count_with_their_labels_and_terms() -> None:
    core = make_core(make_cluster(2, gpus=8))
    cluster = EchoCluster(core)
    core.handle(PodBound(make_pod("guard", gpus=1, rules=APART), Placement("node-0", (0,))))
    core.handle(PodBound(make_pod("theirs", gpus=1, labels=WEB), Placement("node-1", (0,))))
    cluster.submit(make_workload("web", labels=WEB), now=0)
    assert cluster.running["default/web"].node == "node-1"  # the guard repels it from node-0
    cluster.submit(make_workload("apart", labels=WEB, rules=APART), now=1)
    assert cluster.told["default/apart"] == (
        "0/2 nodes are available: 1 node(s) didn't match pod anti-affinity rules, "
        "1 node(s) didn't satisfy existing pods anti-affinity rules."
    )


def test_preemption_searches_see_victims_stop_counting_and_gangs_that_repel_themselves() -> None:
    # Two low-priority pods fill both nodes; a gang of two that must not share a node needs
    # both evicted: one free node has room for both pods, but not for this gang.
    cluster = EchoCluster(make_core(make_cluster(2, gpus=8)))
    low = [make_workload(f"low-{i}", gpus=8, priority=0) for i in range(2)]
    cluster.submit(*low, now=0)
    gang = make_workload("gang", pods=2, gpus=1, priority=10, labels=WEB, rules=APART)
    cluster.submit(gang, now=1000)
    assert sorted(cluster.evicted) == ["default/low-0", "default/low-1"]
    assert {cluster.running[p.key].node for p in gang.pods} == {"node-0", "node-1"}


def test_preemption_evicts_the_pod_an_anti_affinity_refuses() -> None:
    cluster = EchoCluster(make_core(make_cluster(1, gpus=8)))
    cluster.submit(make_workload("web", gpus=1, labels=WEB), now=0)
    preemptor = make_workload("apart", gpus=1, priority=10, labels=WEB, rules=APART)
    cluster.submit(preemptor, now=1000)
    assert cluster.evicted == ["default/web"]
    assert cluster.running["default/apart"].node == "node-0"


def test_extended_resources_are_placed_and_quota_can_cap_them() -> None:
    nodes = [make_node(f"ib-{i}", extended={"rdma/hca": 1}) for i in range(2)]
    nodes.append(make_node("plain"))
    queue = Queue(
        "ib",
        nominal={"rdma/hca": 1},
        borrowing_limit={"rdma/hca": 0},
        admitted_namespaces=frozenset({"default"}),
    )
    cluster = EchoCluster(make_core(nodes, [queue]))
    jobs = [make_workload(f"j{i}", "ib", extended={"rdma/hca": 1}) for i in range(2)]
    cluster.submit(*jobs, now=0)
    assert list(cluster.running) == ["default/j0"]
    assert cluster.running["default/j0"].node.startswith("ib-")
    assert "rdma/hca" in cluster.told["default/j1"]


def test_preemption_for_a_pod_that_a_running_pod_repels() -> None:
    # node-1 has the cheaper victim, but a high-priority guard there repels web pods: only
    # evicting the pod on node-0 lets the preemptor in.
    cluster = EchoCluster(make_core(make_cluster(2, gpus=8)))
    cluster.submit(make_workload("l0", gpus=8), now=0)
    cluster.submit(make_workload("guard", gpus=1, priority=100, rules=APART), now=0)
    cluster.submit(make_workload("l1", gpus=7), now=0)
    assert cluster.running["default/l1"].node == "node-1"
    cluster.submit(make_workload("web", gpus=1, priority=10, labels=WEB), now=1000)
    assert cluster.evicted == ["default/l0"]
    assert cluster.running["default/web"].node == "node-0"


def test_pods_bound_by_others_beyond_what_a_node_advertises_are_taken_as_facts() -> None:
    core = make_core([make_node("ib", extended={"rdma/hca": 1}), make_node("plain")])
    for name in ("a", "b"):  # the device plugin had more than the Node says now
        pod = make_pod(name, gpus=0, extended={"rdma/hca": 1})
        core.handle(PodBound(pod, Placement("ib", ())))
    cluster = EchoCluster(core)
    cluster.submit(make_workload("c", gpus=0, extended={"rdma/hca": 1}), now=0)
    assert cluster.told["default/c"] == "0/2 nodes are available: 2 Insufficient rdma/hca."
