"""The root of quotas follows the cluster: nodes that join after the core was built (an
autoscaler's scale-up) are counted, and nodes that leave no longer are."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import MILLI_PER_GPU, Node
from gpufleet.model.actions import Action, Bind, MarkUnschedulable
from gpufleet.model.events import NodeAdded, NodeRemoved, PodAdded
from gpufleet.model.resources import GPU
from gpufleet.scheduling.admission import cluster_capacity
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.quota import QuotaTree
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import make_node, make_pod, make_queue

TEAM = make_queue("team", gpus=16, namespaces=["team"])


def core_for(nodes: list[Node]) -> SchedulerCore:
    table = NodeTable(nodes)
    policy = make_policy("bestfit", table, PolicyContext(TargetWorkload((), ())))
    return SchedulerCore(table, policy, queues={"team": TEAM})


def binds(actions: list[Action]) -> list[str]:
    return [a.pod.name for a in actions if isinstance(a, Bind)]


def told(actions: list[Action]) -> list[str]:
    return [a.message for a in actions if isinstance(a, MarkUnschedulable)]


@pytest.mark.parametrize(
    ("start", "joins", "bound"),
    [
        ([], [make_node("new", gpus=8)], ["train"]),
        ([make_node("old", gpus=4)], [make_node("new", gpus=8)], ["train"]),
        ([], [make_node("small", gpus=4)], []),
        ([], [make_node("a", gpus=4), make_node("b", gpus=8)], ["train"]),
    ],
    ids=["scale-up-from-zero", "scale-up-from-one", "too-small-a-node", "small-then-big"],
)
def test_a_queue_within_its_quota_gets_the_nodes_that_join(
    start: list[Node], joins: list[Node], bound: list[str]
) -> None:
    core = core_for(start)
    core.handle(PodAdded(make_pod(name="train", gpus=8, namespace="team")))
    assert binds(core.run_until_idle()) == []
    core.handle_all(NodeAdded(node) for node in joins)
    assert binds(core.run_until_idle()) == bound


def test_a_node_that_leaves_no_longer_counts_in_quota() -> None:
    core = core_for([make_node("a", gpus=8), make_node("b", gpus=8)])
    core.handle(NodeRemoved("b"))
    core.handle(NodeRemoved("b"))  # told again (a drain, then the node gone): counted once
    assert core.quotas.capacity[GPU] == 8 * MILLI_PER_GPU
    core.handle(PodAdded(make_pod(name="big", gpus=12, namespace="team")))
    assert told(core.run_until_idle()) == [
        "waiting for quota: queue team: nvidia.com/gpu would be 12 of at most 8 (uses 0, asks 12)"
    ]


def test_the_tree_forgets_limits_of_the_old_capacity() -> None:
    tree = QuotaTree({"team": TEAM}, {GPU: 0})
    asks = tree.vector({GPU: 8 * MILLI_PER_GPU})
    assert not tree.check("team", asks).admits
    version = tree.version
    assert tree.set_capacity({GPU: 8 * MILLI_PER_GPU})
    assert tree.version != version
    assert tree.check("team", asks).admits
    assert not tree.set_capacity({GPU: 8 * MILLI_PER_GPU}), "unchanged"


NAMES = ["n0", "n1", "n2"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(NAMES), st.booleans(), st.integers(0, 8)), max_size=12))
def test_the_root_of_quotas_is_always_what_the_live_nodes_hold(
    steps: list[tuple[str, bool, int]],
) -> None:
    core = core_for([make_node("n0", gpus=2)])
    for name, joins, gpus in steps:
        row = core.table.row_of.get(name)
        alive = row is not None and bool(core.table.alive[row])
        if joins and not alive:
            core.handle(NodeAdded(make_node(name, gpus=gpus)))
        elif not joins and row is not None:
            core.handle(NodeRemoved(name))
    live = [n for row, n in enumerate(core.table.nodes) if core.table.alive[row]]
    expected = cluster_capacity(live)
    assert {k: v for k, v in core.quotas.capacity.items() if v} == {
        k: v for k, v in expected.items() if v
    }
    fresh = QuotaTree({"team": TEAM}, expected)
    assert core.quotas.tree.capacity.tolist() == fresh.capacity.tolist()


def test_a_root_the_caller_fixed_does_not_follow_the_nodes() -> None:
    """Node pools: the quotas count what the pools may grow to, whatever joins or leaves."""
    table = NodeTable([make_node("start", gpus=8)])
    policy = make_policy("bestfit", table, PolicyContext(TargetWorkload((), ())))
    fixed = {GPU: 64}
    core = SchedulerCore(table, policy, queues={"team": TEAM}, quota_capacity=fixed)
    before = dict(core.quotas.capacity)
    core.handle(NodeAdded(make_node("joined", gpus=8)))
    core.handle(NodeRemoved("joined"))
    assert core.quotas.capacity == before
