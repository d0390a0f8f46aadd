"""The node table's pod index and extended-resource columns: exact through allocate, release,
nested trials and rollback, and through columns added at any moment."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.affinity import PlacementRules
from gpufleet.model.selectors import LabelSelector, PodSelector
from gpufleet.scheduling.node_table import Allocation, Claim, NodeTable
from gpufleet.scheduling.pod_index import PodIndex
from gpufleet.testing.builders import label_selector, make_cluster, make_pod, pod_term, weighted

PODS = [
    make_pod("a", labels={"app": "a"}),
    make_pod("b", labels={"app": "b"}, namespace="x"),
    make_pod("bare"),
    make_pod("guard", labels={"app": "a"}, rules=PlacementRules(pod_anti_affinity=(pod_term(),))),
    make_pod(
        "fan",
        labels={"tier": "t"},
        rules=PlacementRules(preferred_pod_affinity=(weighted(3, pod_term({"app": "a"})),)),
    ),
]
SELECTORS = [
    (PodSelector(label_selector({"app": "a"}), frozenset({"default"})),),
    (PodSelector(LabelSelector(), None),),
    (PodSelector(label_selector(expressions=[("app", "NotIn", ["a"])]), frozenset({"x"})),),
    (
        PodSelector(label_selector(expressions=[("app", "Exists", [])]), None),
        PodSelector(label_selector({"app": "a"}), None),
    ),
]
RDMA = 0  # the only extended resource's id

operation = st.one_of(
    st.tuples(st.just("place"), st.integers(0, len(PODS) - 1), st.integers(0, 2)),
    st.tuples(st.just("release"), st.integers(0, 1_000), st.just(0)),
    st.tuples(st.just("begin"), st.just(0), st.just(0)),
    st.tuples(st.just("rollback"), st.just(0), st.just(0)),
    st.tuples(st.just("commit"), st.just(0), st.just(0)),
    st.tuples(st.just("select"), st.integers(0, len(SELECTORS) - 1), st.just(0)),
    # A preemption search: a victim released on a trial, and put back later in it.
    st.tuples(st.just("evict"), st.integers(0, 1_000), st.just(0)),
    st.tuples(st.just("restore"), st.just(0), st.just(0)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(operation, max_size=40))
def test_counts_equal_a_recount_after_any_sequence(ops: list[tuple[str, int, int]]) -> None:
    table = NodeTable(make_cluster(3, gpus=0, extended={"rdma/hca": 4}))
    index = table.pod_index = PodIndex(sweep_at=2)  # forgets pod-less identities often
    index.grow(table.capacity)
    held: list[tuple[int, Allocation]] = []  # (pod kind, what it holds)
    evicted: list[tuple[int, Allocation]] = []  # released on the current trial
    saved: list[tuple[int, list[tuple[int, Allocation]], list[tuple[int, Allocation]]]] = []
    for op, a, b in ops:
        if op == "place":
            pod = PODS[a]
            rdma = ((RDMA, 1),) if table.ext_free[b, RDMA] else ()
            taken = table.allocate(Claim(b, 0, 0, extended=rdma, identity=index.identity(pod)))
            held.append((a, taken))
        elif op == "release" and held:
            table.release(held.pop(a % len(held))[1])
        elif op == "evict" and held and saved:
            gone = held.pop(a % len(held))
            table.release(gone[1])
            evicted.append(gone)
        elif op == "restore" and evicted:
            kind, back = evicted.pop()
            held.append((kind, table.reallocate(back)))
        elif op == "begin":
            saved.append((table.begin_trial(), list(held), list(evicted)))
        elif op in ("rollback", "commit") and saved:
            mark, before, out = saved.pop()
            if op == "rollback":
                table.rollback(mark)
                held, evicted = before, out
            else:
                table.commit(mark)
            if not saved:
                evicted = []  # victims not put back by the end of the search are gone
        elif op == "select":
            index.selector(SELECTORS[a])
        assert [k.tolist() for k in index.kept(3)] == [k.tolist() for k in index.recount(3)]
        taken_rdma = np.zeros(3, np.int64)
        for _, allocation in held:
            for _, units in allocation.extended:
                taken_rdma[allocation.row] += units
        assert (table.ext_free[:3, RDMA] == 4 - taken_rdma).all()
        assert index.repelling == sum(1 for kind, _ in held if kind == 3)


def test_a_released_victim_put_back_is_counted_again() -> None:
    table = NodeTable(make_cluster(2, gpus=0, extended={"rdma/hca": 1}))
    column = table.pod_index.selector(SELECTORS[0])
    pod = PODS[0]
    taken = table.allocate(
        Claim(1, 0, 0, extended=((RDMA, 1),), identity=table.pod_index.identity(pod))
    )
    mark = table.begin_trial()
    table.release(taken)
    assert table.pod_index.matching(column)[:2].tolist() == [0, 0]
    table.reallocate(taken)
    assert table.pod_index.matching(column)[:2].tolist() == [0, 1]
    assert table.ext_free[:2, RDMA].tolist() == [1, 0]
    table.rollback(mark)
    assert table.pod_index.matching(column)[:2].tolist() == [0, 1]


def test_identities_without_pods_are_forgotten_and_counts_stay_exact() -> None:
    table = NodeTable(make_cluster(2, gpus=0))
    index = table.pod_index = PodIndex(sweep_at=8)
    index.grow(table.capacity)
    column = index.selector((PodSelector(LabelSelector(), None),))
    kept = table.allocate(
        Claim(0, 0, 0, identity=index.identity(make_pod("keep", labels={"k": "v"})))
    )
    for i in range(100):
        pod = make_pod(f"p{i}", labels={"run": str(i)})
        table.release(table.allocate(Claim(1, 0, 0, identity=index.identity(pod))))
    assert index.known() <= 16
    assert index.matching(column)[:2].tolist() == [1, 0]
    table.release(kept)
    assert index.matching(column)[:2].tolist() == [0, 0]


def test_a_victim_released_on_a_trial_keeps_its_identity_until_it_is_put_back() -> None:
    table = NodeTable(make_cluster(2, gpus=0))
    index = table.pod_index = PodIndex(sweep_at=1)
    index.grow(table.capacity)
    victim = table.allocate(Claim(0, 0, 0, identity=index.identity(PODS[0])))
    mark = table.begin_trial()
    table.release(victim)
    table.allocate(Claim(1, 0, 0, identity=index.identity(PODS[1])))  # a new identity: may sweep
    table.reallocate(victim)
    table.rollback(mark)
    assert [k.tolist() for k in index.kept(2)] == [k.tolist() for k in index.recount(2)]
