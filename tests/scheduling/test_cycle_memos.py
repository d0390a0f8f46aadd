"""What the cycle keeps between workloads, and the shortcuts that use it, agree with the plain
computation.

The table's state number (a rolled-back trial gives the old one back) keys answers about
placement across victim searches; requests and their quota amounts are kept per waiting
workload; a victim search refunds its candidates in one go and stops re-asking the quota once
it passed; a queue's victims keep their liveness as an array; the waiting groups live on heaps
of their own. Each is checked here against what it stands for, over random inputs.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import Pod
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.queues import (
    BorrowWithinCohortPolicy,
    QueuePreemption,
    ReclaimPolicy,
    ResourceQuota,
    WithinQueuePolicy,
)
from gpufleet.model.resources import GPU
from gpufleet.model.workload import TopologyMode, TopologyRequest, Workload
from gpufleet.scheduling.admission import requested
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.engine import Unschedulable
from gpufleet.scheduling.node_table import Allocation, BoolArray, Claim, NodeTable
from gpufleet.scheduling.pending import Parked, PendingWorkloads
from gpufleet.scheduling.preemption.candidates import QueueVictims
from gpufleet.scheduling.preemption.victims import VictimColumns, find_victims, victim_facts
from gpufleet.scheduling.topology import place_workload
from gpufleet.testing.builders import make_node, make_pod, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

G = 1000


# ----------------------------------------------------------------------------- table state
def free_content(table: NodeTable) -> tuple[object, ...]:
    n = table.size
    return (
        n,
        table.topology_version,
        table.cpu_free[:n].tolist(),
        table.mem_free[:n].tolist(),
        table.gpu_free[:n].tolist(),
        table.mig_free[:n].tolist(),
        table.tag_count[:n].tolist(),
        [
            [sorted(table.free_mig_slices(r, p)) for p in range(len(table.mig_profiles))]
            for r in range(n)
        ],
        table.alive[:n].tolist(),
        table.schedulable[:n].tolist(),
    )


operations = st.lists(
    st.sampled_from(["allocate", "release", "begin", "rollback", "commit", "add", "remove"]),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops=operations, data=st.data())
def test_a_table_state_number_names_one_content(ops: list[str], data: st.DataObject) -> None:
    """Whenever the table shows a state number it showed before, what is free is the same."""
    table = NodeTable([make_node(f"n{i}", cpu=8_000, gpus=2) for i in range(3)])
    seen: dict[int, tuple[object, ...]] = {}
    held: list[Allocation] = []
    trials: list[tuple[int, list[Allocation]]] = []  # (mark, what was held then)
    added = 0
    for op in ops:
        if op == "allocate":
            row = data.draw(st.integers(0, table.size - 1))
            free = [p for p in range(int(table.gpu_count[row])) if table.gpu_free[row, p] > 0]
            if table.alive[row] and free and table.cpu_free[row] >= 1_000:
                held.append(table.allocate(Claim(row, 1_000, 0, (free[0],), 500)))
        elif op == "release" and held:
            table.release(held.pop(data.draw(st.integers(0, len(held) - 1))))
        elif op == "begin":
            trials.append((table.begin_trial(), list(held)))
        elif op in ("rollback", "commit") and trials:
            mark, before = trials.pop()
            if op == "rollback":
                table.rollback(mark)
                held = before
            else:
                table.commit(mark)
        elif op == "add":
            added += 1
            table.add_node(make_node(f"extra{added}", cpu=8_000, gpus=2))
        elif op == "remove" and table.size > 1:
            table.remove_node(table.nodes[data.draw(st.integers(0, table.size - 1))].name)
        content = free_content(table)
        if table.state in seen:
            assert seen[table.state] == content
        seen[table.state] = content


# ----------------------------------------------------------------------------- placement
def rack_cluster(sizes: list[int]) -> SchedulerCore:
    nodes = [
        make_node(
            f"n{i}",
            gpus=g,
            labels={GFD_LABELS.RACK: f"rack-{i // 3}", GFD_LABELS.ZONE: f"zone-{i // 6}"},
        )
        for i, g in enumerate(sizes)
    ]
    return make_core(nodes, [make_queue("a")])


def surely_places_plain(
    core: SchedulerCore, workload: Workload, restrict: BoolArray | None
) -> bool:
    """PlacementChecks.surely_places as it was computed before its memos: feasibility asked of
    the engine every time, domains numbered by np.unique, every sum taken."""
    pods = workload.pods[: workload.gang_size]
    first = pods[0]
    if any(p.signature != first.signature for p in pods[1:]):
        return False
    engine, table = core.engine, core.table
    demand = engine.demand(first)
    mask = engine.feasible(demand)
    if restrict is not None:
        mask &= restrict[: mask.size]
    if len(pods) == 1:
        room = mask.astype(np.int64)
    elif demand.shared or demand.mig_count:
        return False
    else:
        room = np.where(mask, len(pods), 0)
        for free, need in (
            (table.full_free, demand.gpu_count),
            (table.cpu_free, demand.cpu_milli),
            (table.mem_free, demand.memory_mib),
        ):
            if need > 0:
                np.minimum(room, free[: room.size] // need, out=room)
    topology = workload.topology
    if topology is None or topology.mode is TopologyMode.PREFERRED:
        return int(room.sum()) >= len(pods)
    column = table.label_ids.get(topology.level)
    if column is None:
        return False
    n = room.size
    if n != table.size:
        return False
    ids = column[:n]
    allowed = table.schedulable[:n]
    if restrict is not None:
        allowed = allowed & restrict[:n]
    labelled = (ids >= 0) & allowed
    _, inverse = np.unique(ids[labelled], return_inverse=True)
    free_milli = table.gpu_free[:n].sum(axis=1)
    capacity = np.bincount(inverse, weights=free_milli[labelled])
    room_in = np.bincount(inverse, weights=room[labelled])
    need_milli = sum(p.gpu.total_milli for p in pods)
    return bool(((capacity >= need_milli) & (room_in >= len(pods))).any())


topologies = st.sampled_from(
    [
        None,
        TopologyRequest(TopologyMode.PREFERRED, GFD_LABELS.RACK),
        TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.RACK),
        TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.ZONE),
    ]
)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_sure_placements_memoised_by_table_state_answer_as_the_plain_check(
    data: st.DataObject,
) -> None:
    """Asked again after trials that were rolled back, after real changes, for several shapes
    and masks, the memoised answer is the plain computation's on the table as it is."""
    sizes = data.draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=2, max_size=9))
    core = rack_cluster(sizes)
    cluster = EchoCluster(core)
    table = core.table
    shapes = []
    for i in range(3):
        share = data.draw(st.sampled_from([None, None, 250]))
        shapes.append(
            make_workload(
                f"w{i}",
                "a",
                pods=data.draw(st.integers(1, 6)),
                gpus=1 if share else data.draw(st.integers(0, 8)),
                topology=data.draw(topologies),
                milli=share,
                cpu=data.draw(st.sampled_from([1_000, 20_000])),
            )
        )
    masks: list[BoolArray | None] = [None, np.array([i % 2 == 0 for i in range(len(sizes))])]
    for step in range(data.draw(st.integers(1, 8))):
        action = data.draw(st.sampled_from(["ask", "trial", "run"]))
        if action == "trial":
            mark = table.begin_trial()
            place_workload(core.engine, data.draw(st.sampled_from(shapes)))
            table.rollback(mark)
        elif action == "run":
            gpus = data.draw(st.integers(1, 4))
            cluster.submit(make_workload(f"r{step}", "a", gpus=gpus), now=0.0)
        workload = data.draw(st.sampled_from(shapes))
        restrict = data.draw(st.sampled_from(masks))
        assert core.state.fits.surely_places(workload, restrict) == surely_places_plain(
            core, workload, restrict
        )


# ----------------------------------------------------------------------------- requests
pods_drawn = st.lists(
    st.one_of(
        st.builds(lambda c, g: make_pod(cpu=c, gpus=g), st.integers(0, 9_000), st.integers(0, 8)),
        st.builds(lambda m: make_pod(milli=m), st.integers(1, 999)),
        st.builds(lambda m: make_pod(gpu_memory=m), st.integers(1, 9_000)),
    ),
    max_size=9,
)


@given(pods=pods_drawn)
def test_requested_sums_as_the_plain_sums(pods: list[Pod]) -> None:
    assert requested(pods) == {
        "cpu": sum(p.cpu_milli for p in pods),
        "memory": sum(p.memory_mib for p in pods),
        GPU: sum(p.gpu.total_milli for p in pods),
    }


# ----------------------------------------------------------------------------- quotas
def two_org_core(caps: bool) -> SchedulerCore:
    queues = [
        make_queue("org0", 6),
        make_queue("a", 3, parent="org0", namespaces=("ns-a",)),
        make_queue("b", 3, parent="org0", borrow=2),
        make_queue("org1", 4),
        make_queue("c", 4, parent="org1", lend=1),
    ]
    quotas = [ResourceQuota("caps", "ns-a", {GPU: 5 * G})] if caps else []
    nodes = [make_node(f"n{i}", gpus=4) for i in range(4)]
    return make_core(nodes, queues, resource_quotas=quotas)


usages = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 3),
        st.booleans(),
        st.sampled_from(["ns-a", "default"]),
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(caps=st.booleans(), charged=usages, asks=usages)
def test_refund_all_is_each_refund_and_checks_take_given_amounts(
    caps: bool,
    charged: list[tuple[str, int, bool, str]],
    asks: list[tuple[str, int, bool, str]],
) -> None:
    core = two_org_core(caps)
    quotas = core.quotas
    items = []
    for i, (queue, gpus, preemptible, namespace) in enumerate(charged):
        workload = make_workload(
            f"w{i}", queue, gpus=gpus, preemptible=preemptible, namespace=namespace
        )
        usage = {GPU: gpus * G, "cpu": 1_000 * gpus}
        quotas.charge(workload, usage)
        items.append((workload, usage))
    mark = quotas.snapshot()
    for workload, usage in items:
        quotas.refund(workload, usage)
    one_by_one = quotas.snapshot()
    quotas.restore(mark)
    quotas.refund_all(items)
    at_once = quotas.snapshot()
    np.testing.assert_array_equal(at_once[0], one_by_one[0])
    np.testing.assert_array_equal(at_once[1], one_by_one[1])
    assert at_once[2] == one_by_one[2]
    for i, (queue, gpus, preemptible, namespace) in enumerate(asks):
        workload = make_workload(
            f"x{i}", queue, gpus=gpus, preemptible=preemptible, namespace=namespace
        )
        usage = {GPU: gpus * G, "cpu": 1_000 * gpus}
        amounts = quotas.tree.limited(usage)
        assert quotas.check(workload, usage, amounts) == quotas._check(workload, usage, amounts)
        check = quotas.check(workload, usage)
        assert check == quotas.check(workload, usage, amounts)
        assert check.message() == check._message() == check.message()  # kept once made
        plain = quotas.tree.nominal_excess(queue, quotas.tree.vector(usage)) is None
        assert quotas.within_nominal(queue, usage, amounts) == plain
        assert core.state.requests.amounts_of(workload) == quotas.tree.limited(
            core.state.requests.request_of(workload)
        )


# ----------------------------------------------------------------------------- victims
@st.composite
def victim_searches(draw: st.DrawFn) -> tuple[EchoCluster, Workload]:
    """A small cluster filled by queue b (borrowing) and a preemptor of queue a."""
    nodes = [make_node(f"n{i}", gpus=draw(st.sampled_from([2, 4]))) for i in range(4)]
    queues = [make_queue("a", draw(st.integers(1, 8))), make_queue("b", draw(st.integers(0, 4)))]
    core = make_core(nodes, queues)
    cluster = EchoCluster(core)
    for i in range(draw(st.integers(2, 12))):
        workload = make_workload(
            f"v{i}", "b", pods=draw(st.integers(1, 2)), gpus=draw(st.integers(1, 2))
        )
        cluster.submit(workload, now=float(i))
    preemptor = make_workload(
        "p", "a", pods=draw(st.integers(1, 3)), gpus=draw(st.integers(1, 4)), priority=5
    )
    return cluster, preemptor


@settings(max_examples=150, deadline=None)
@given(search=victim_searches(), data=st.data())
def test_a_search_told_what_places_finds_the_victims_of_the_plain_search(
    search: tuple[EchoCluster, Workload], data: st.DataObject
) -> None:
    cluster, workload = search
    core = cluster.core
    candidates = list(core.running.values())
    candidates = data.draw(st.permutations(candidates))
    request = requested(workload.pods[: workload.gang_size])
    asked = {"may_fit": 0, "places": 0}

    def may_fit() -> bool:
        asked["may_fit"] += 1
        return core.quotas.check(workload, request).admits

    def places() -> bool:
        asked["places"] += 1
        mark = core.table.begin_trial()
        try:
            return not isinstance(place_workload(core.engine, workload), Unschedulable)
        finally:
            core.table.rollback(mark)

    def fits() -> bool:
        return may_fit() and places()

    plain = find_victims(core.table, core.quotas, candidates, fits, may_fit)
    usage, table_state = core.quotas.tree.usage.copy(), core.table.state
    told = find_victims(core.table, core.quotas, candidates, fits, may_fit, places=places)
    assert told == plain
    assert (core.quotas.tree.usage == usage).all()
    assert core.table.state == table_state
    keep = find_victims(core.table, core.quotas, candidates, fits, may_fit, lambda v: True)
    assert keep == plain


@st.composite
def cohorts_with_preemptors(draw: st.DrawFn) -> tuple[SchedulerCore, list[Workload]]:
    """Queues a, b, c under one parent, with drawn Kueue preemption policies, filled with
    workloads of drawn priorities and queues (some borrowing), and preemptors of each queue."""
    policies = st.builds(
        QueuePreemption,
        st.sampled_from(list(WithinQueuePolicy)),
        st.sampled_from(list(ReclaimPolicy)),
        st.sampled_from(list(BorrowWithinCohortPolicy)),
    )
    names = ["a", "b", "c"]
    queues = [make_queue("org", 18)] + [
        make_queue(n, draw(st.integers(0, 6)), parent="org", preemption=draw(policies))
        for n in names
    ]
    core = make_core([make_node(f"n{i}", gpus=4) for i in range(3)], queues)
    cluster = EchoCluster(core)
    for i in range(draw(st.integers(1, 10))):
        queue = draw(st.sampled_from(names))
        workload = make_workload(
            f"r{i}", queue, gpus=draw(st.integers(1, 2)), priority=draw(st.integers(0, 3))
        )
        cluster.submit(workload, now=float(i))
    core.state.now = 1_000.0  # every running workload past its minimum run time
    preemptors = [
        make_workload(
            f"p{i}",
            draw(st.sampled_from(names)),
            gpus=draw(st.integers(1, 4)),
            priority=draw(st.integers(0, 4)),
        )
        for i in range(4)
    ]
    return core, preemptors


@settings(max_examples=200, deadline=None)
@given(drawn=cohorts_with_preemptors())
def test_has_candidates_stopping_early_answers_as_the_listed_candidates(
    drawn: tuple[SchedulerCore, list[Workload]],
) -> None:
    core, preemptors = drawn
    candidates = core.post_filter.candidates  # type: ignore[attr-defined]
    for workload in preemptors:
        listed = any(part.chosen.any() for part in candidates.parts(workload))
        assert candidates.has_candidates(workload) == listed
        assert listed == bool(candidates.candidates(workload))


# ----------------------------------------------------------------------------- liveness
@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 80)), max_size=200))
def test_victim_liveness_kept_as_an_array_is_the_list(ops: list[tuple[bool, int]]) -> None:
    core = make_core([make_node("n0", gpus=8)], [make_queue("a")])
    cluster = EchoCluster(core)
    cluster.submit(*(make_workload(f"w{i}", "a", gpus=0, cpu=10) for i in range(81)), now=0.0)
    facts = {r.key: victim_facts(r) for r in core.running.values()}
    victims = QueueVictims()
    for add, i in ops:
        key = f"default/w{i}"
        if add:
            victims.add(facts[key])
        else:
            victims.drop(key)
        if add or i % 3 == 0:  # ask now and then, so the array is kept across changes
            eligible = victims.eligible(1_000.0, 120.0)
            plain = ~(1_000.0 - victims.columns().started < 120.0) & np.array(
                victims.alive, np.bool_
            )
            np.testing.assert_array_equal(eligible, plain)
            assert sorted(victims.where) == sorted(
                f.running.key for f, live in zip(victims.facts, victims.alive, strict=True) if live
            )


# ----------------------------------------------------------------------------- waiting
@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "park", "unpark", "pop", "remove", "wake"]),
            st.integers(0, 30),
            st.integers(0, 2),
        ),
        max_size=60,
    ),
    stop=st.integers(0, 5),
)
def test_ready_groups_come_by_priority_then_arrival(
    ops: list[tuple[str, int, int]], stop: int
) -> None:
    """The ready groups of a queue come best head first ((priority, arrival)), each once,
    none parked; whatever is left when iteration stops comes again next time."""
    pending = PendingWorkloads()
    for op, i, priority in ops:
        groups = pending.groups()
        if op == "add":
            key = f"default/w{i}"
            if key not in pending:
                pending.add(make_workload(f"w{i}", "q", gpus=1 + i % 3, priority=priority), 0.0)
        elif op == "remove":
            pending.remove(f"default/w{i}")
        elif groups:
            group = groups[i % len(groups)]
            if op == "park":
                pending.park(group, Parked.QUOTA)
            elif op == "unpark":
                pending.unpark(group)
            elif op == "pop":
                pending.pop_head(group)
            else:
                pending.wake_all()
        for _ in range(2):  # a partial walk, then a full one: what was left comes again
            ready = [g for g in pending.groups() if g.parked is None]
            expected = sorted(ready, key=lambda g: (-g.head.workload.priority, g.head.seq))
            walked = []
            for group in pending.ready_groups("q"):
                walked.append(group)
                if len(walked) > stop:
                    break
            assert walked == expected[: len(walked)]
            assert len(walked) == min(len(expected), stop + 1)
        assert list(pending.ready_groups("q")) == expected
        parked = {g.number for g in pending.groups() if g.parked is not None}
        assert {g.number for g in pending.parked_groups()} == parked
        assert pending.any_parked == bool(parked)


@settings(max_examples=100, deadline=None)
@given(loads=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 4)), max_size=12))
def test_victim_columns_read_as_the_plain_arrays(loads: list[tuple[int, int]]) -> None:
    nodes = [make_node(f"n{i}", gpus=4) for i in range(6)]
    core = make_core(nodes, [make_queue("a")])
    cluster = EchoCluster(core)
    for i, (pods, gpus) in enumerate(loads):
        workload = make_workload(f"w{i}", "a", pods=pods, gpus=gpus, checkpoint=100.0 * (i % 2))
        cluster.submit(workload, now=float(i))
    facts = [victim_facts(r) for r in core.running.values()]
    columns = VictimColumns.of(facts)
    count = len(facts)
    ints = np.array([(f.priority, f.gpu_milli) for f in facts], np.int64).reshape(count, 2)
    times = np.array([(f.started, f.checkpoint) for f in facts], np.float64).reshape(count, 2)
    pairs = np.array([p for f in facts for p in f.rows], np.int64).reshape(-1, 2)
    for got, plain in (
        (columns.priority, ints[:, 0]),
        (columns.gpu_milli, ints[:, 1]),
        (columns.started, times[:, 0]),
        (columns.checkpoint, times[:, 1]),
        (columns.pair_row, pairs[:, 0]),
        (columns.pair_milli, pairs[:, 1]),
    ):
        assert got.dtype == plain.dtype
        np.testing.assert_array_equal(got, plain)
    assert columns.workloads == [f.running for f in facts]
