"""The fast paths a busy cycle takes agree with the slow ones they stand for.

A cycle with thousands of waiting workloads answers most of them without the work the answer
would take the plain way: quota checks in scalar reads along a queue's path, a preemptor's quota
asked on a view of the usage instead of charging and refunding, victims ordered from numpy
columns, placements known to succeed without placing. Each is checked here against the plain
computation, over random trees, clusters and loads.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import Node
from gpufleet.model.actions import Evict
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.queues import Queue
from gpufleet.model.resources import GPU, gpu_model_key
from gpufleet.model.workload import TopologyMode, TopologyRequest, Workload
from gpufleet.scheduling.engine import Unschedulable
from gpufleet.scheduling.preemption.victims import (
    VictimColumns,
    cheapest_victims,
    node_first,
    victim_facts,
    victim_order,
)
from gpufleet.scheduling.quota import QuotaTree, UsageView
from gpufleet.scheduling.running import RunningWorkload
from gpufleet.scheduling.topology import place_workload
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

G = 1000
H100 = gpu_model_key("H100")


# ----------------------------------------------------------------------------- quota trees
@st.composite
def trees(draw: st.DrawFn) -> tuple[QuotaTree, list[str]]:
    """Two orgs of 1-3 teams each, GPU quotas and some H100 quotas, limits, random usage."""
    queues: list[Queue] = []
    leaves: list[str] = []
    limit = st.none() | st.integers(0, 6)
    for o in range(2):
        org = f"org{o}"
        teams = draw(st.integers(1, 3))
        team_gpus = [draw(st.integers(0, 8)) for _ in range(teams)]
        queues.append(make_queue(org, sum(team_gpus), lend=draw(limit)))
        for t, gpus in enumerate(team_gpus):
            name = f"{org}-t{t}"
            queue = make_queue(name, gpus, parent=org, borrow=draw(limit), lend=draw(limit))
            if draw(st.booleans()):  # a per-model quota too
                nominal = dict(queue.nominal)
                nominal[H100] = draw(st.integers(0, 4)) * G
                queue = Queue(
                    queue.name,
                    queue.parent,
                    nominal,
                    queue.borrowing_limit,
                    queue.lending_limit,
                    queue.weight,
                    admitted_namespaces=queue.admitted_namespaces,
                )
            queues.append(queue)
            leaves.append(name)
    total = sum(int(q.nominal.get(GPU, 0)) for q in queues if q.parent is None)
    tree = QuotaTree({q.name: q for q in queues}, {GPU: total + G, H100: total // 2})
    for name in leaves:
        tree.add(name, tree.vector(draw(amounts())))
    return tree, leaves


@st.composite
def amounts(draw: st.DrawFn) -> dict[str, int]:
    gpus = draw(st.integers(0, 8)) * G
    return {GPU: gpus, H100: draw(st.integers(0, gpus // G)) * G, "cpu": 5}


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_scalar_checks_agree_with_the_array_checks(data: st.DataObject) -> None:
    tree, leaves = data.draw(trees())
    queue = data.draw(st.sampled_from(leaves))
    ask = data.draw(amounts())
    vector = tree.vector(ask)
    assert tree.check_amounts(queue, tree.limited(ask)) == tree.check(queue, vector)
    assert tree.nominal_excess_amounts(queue, tree.limited(ask)) == tree.nominal_excess(
        queue, vector
    )
    base = tree.usage // 2
    assert tree.nominal_excess_amounts(queue, tree.limited(ask), base) == tree.nominal_excess(
        queue, vector, base
    )


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_usage_view_answers_as_if_the_usage_were_charged(data: st.DataObject) -> None:
    tree, leaves = data.draw(trees())
    queue = data.draw(st.sampled_from(leaves))
    other = data.draw(st.sampled_from(leaves))
    request, added = tree.limited(data.draw(amounts())), tree.limited(data.draw(amounts()))
    view = UsageView(tree, tree.usage.tolist())
    before = tree.usage.copy()
    tree.add(other, np.array(added, np.int64))
    assert (
        view.admits(queue, request, other, added)
        == tree.check(queue, np.array(request, np.int64)).admits
    )
    within = tree.nominal_excess(queue, np.array(request, np.int64)) is None
    assert view.within_nominal(queue, request, other, added) == within
    tree.remove(other, np.array(added, np.int64))
    assert (tree.usage == before).all()


def test_a_restored_snapshot_gets_its_version_back_and_memos_stay_true() -> None:
    core = make_core(
        [make_node("n0", gpus=8)], [make_queue("org", 8), make_queue("a", 4, parent="org")]
    )
    quotas = core.quotas
    workload = make_workload("w", "a", gpus=2)
    ask = {GPU: 2 * G}
    first = quotas.check(workload, ask)
    version = quotas.tree.version
    mark = quotas.snapshot()
    quotas.charge(workload, {GPU: 7 * G})
    assert quotas.tree.version != version
    assert not quotas.check(workload, ask).admits  # a new version: no stale answer
    quotas.restore(mark)
    assert quotas.tree.version == version
    assert quotas.check(workload, ask) == first
    quotas.charge(workload, {GPU: 7 * G})
    # A version never reused: the one the trial had is not taken to mean this usage.
    assert not quotas.check(workload, ask).admits


# ----------------------------------------------------------------------------- victims
@st.composite
def busy_cores(draw: st.DrawFn) -> EchoCluster:
    """A small cluster filled with mixed work of three queues at t=0."""
    nodes = [make_node(f"n{i}", gpus=draw(st.sampled_from([2, 4, 8]))) for i in range(6)]
    queues = [make_queue(name, 8) for name in ("a", "b", "c")]
    core = make_core(nodes, queues)
    cluster = EchoCluster(core)
    loads = []
    for i in range(draw(st.integers(4, 20))):
        share = draw(st.sampled_from([None, None, 500]))
        loads.append(
            make_workload(
                f"w{i}",
                draw(st.sampled_from(["a", "b", "c"])),
                pods=draw(st.integers(1, 3)),
                gpus=1 if share else draw(st.integers(0, 4)),
                priority=draw(st.integers(0, 3)),
                checkpoint=draw(st.sampled_from([None, 100.0, 700.0])),
                milli=share,
            )
        )
    for i, workload in enumerate(loads):
        cluster.submit(workload, now=float(draw(st.integers(0, 50)) + i))
    return cluster


@settings(max_examples=150, deadline=None)
@given(cluster=busy_cores(), data=st.data())
def test_cheapest_victims_are_victim_order_then_node_first(
    cluster: EchoCluster, data: st.DataObject
) -> None:
    core = cluster.core
    by_queue: dict[str, list[RunningWorkload]] = {}
    for running in core.running.values():
        by_queue.setdefault(running.workload.queue, []).append(running)
    now = 1_000.0 + data.draw(st.integers(0, 900))
    rank = {queue: data.draw(st.integers(0, 2)) for queue in ("a", "b", "c")}
    parts = []
    candidates = []
    for queue, members in sorted(by_queue.items()):
        columns = VictimColumns.of([victim_facts(r) for r in members])
        chosen = None
        if data.draw(st.booleans()):
            chosen = np.array([data.draw(st.booleans()) for _ in members], np.bool_)
        parts.append((columns, chosen, rank[queue]))
        candidates += [r for k, r in enumerate(members) if chosen is None or chosen[k]]
    limit = data.draw(st.integers(-2, 12))
    need = data.draw(st.sampled_from([1, 2, 4, 8])) * G
    ordered = victim_order(candidates, rank, now)
    assert cheapest_victims(parts, now, limit) == ordered[:limit]
    expected = node_first(ordered, core.table, need)[:limit]
    assert cheapest_victims(parts, now, limit, core.table, need) == expected


# ----------------------------------------------------------------------------- placement
def rack_nodes(sizes: list[int], models: list[str] | None = None) -> list[Node]:
    return [
        make_node(
            f"n{i}",
            gpus=g,
            model=models[i] if models else "A100",
            labels={GFD_LABELS.RACK: f"rack-{i // 3}", GFD_LABELS.ZONE: f"zone-{i // 6}"},
        )
        for i, g in enumerate(sizes)
    ]


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_placement_called_sure_succeeds(data: st.DataObject) -> None:
    sizes = data.draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=2, max_size=9))
    # Racks of mixed GPU models too: a gang must fit on one model of a domain.
    models = [data.draw(st.sampled_from(["A100", "H100"])) for _ in sizes]
    core = make_core(rack_nodes(sizes, models), [make_queue("a")])
    cluster = EchoCluster(core)
    for i in range(data.draw(st.integers(0, 8))):
        cluster.submit(make_workload(f"r{i}", "a", gpus=data.draw(st.integers(1, 4))), now=0.0)
    share = data.draw(st.sampled_from([None, None, 250]))
    topology = data.draw(
        st.sampled_from(
            [
                None,
                TopologyRequest(TopologyMode.PREFERRED, GFD_LABELS.RACK),
                TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.RACK),
                TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.ZONE),
            ]
        )
    )
    workload: Workload = make_workload(
        "w",
        "a",
        pods=data.draw(st.integers(1, 6)),
        gpus=1 if share else data.draw(st.integers(0, 8)),
        topology=topology,
        milli=share,
        cpu=data.draw(st.sampled_from([1_000, 20_000])),
    )
    restrict = None
    if data.draw(st.booleans()):
        restrict = np.array([data.draw(st.booleans()) for _ in sizes], np.bool_)
    sure = core.state.fits.surely_places(workload, restrict)
    table = core.table
    mark = table.begin_trial()
    placed = place_workload(core.engine, workload, restrict)
    table.rollback(mark)
    if sure:
        assert not isinstance(placed, Unschedulable)


# ----------------------------------------------------------------------------- holds
@settings(max_examples=100, deadline=None)
@given(
    wanted=st.integers(1, 2),
    asks=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 8), st.booleans()),
        min_size=1,
        max_size=8,
    ),
)
def test_preemptor_holds_judged_on_views_as_by_trial(
    wanted: int, asks: list[tuple[str, int, bool]]
) -> None:
    """With a preemptor waiting for its victims (evictions not yet carried out), whether a
    workload would leave every preemptor its quota is the same on the views as by charging."""
    queues = [
        make_queue("org0", 4),
        make_queue("a", 2, parent="org0"),
        make_queue("b", 2, parent="org0"),
        make_queue("org1", 4),
        make_queue("c", 4, parent="org1"),
    ]
    core = make_core([make_node(f"n{i}", gpus=4) for i in range(2)], queues)
    cluster = EchoCluster(core)
    # Queue c borrows what org0 does not use; b takes some of it back.
    cluster.submit(*(make_workload(f"c{i}", "c", gpus=1) for i in range(6)), now=0.0)
    cluster.submit(*(make_workload(f"a{i}", "a", gpus=1) for i in range(2)), now=0.0)
    core.add(make_workload("p", "b", pods=wanted, gpus=1, priority=5))
    actions = core.cycle(1_000.0)
    assert any(isinstance(a, Evict) for a in actions)
    assert core.state.holds.any
    for queue, gpus, preemptible in asks:
        workload = make_workload(f"{queue}-{gpus}", queue, gpus=gpus, preemptible=preemptible)
        usage = {GPU: gpus * G, "cpu": 1_000}
        by_trial = core.state.holds.survive_by_trial(workload, usage)
        assert core.state.holds.survive_now(workload, usage) == by_trial
        assert core.state.holds.survive(workload, usage) == by_trial
