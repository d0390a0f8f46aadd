"""The node table's pod index and extended-resource columns: exact through allocate, release,
nested trials and rollback, and through columns added at any moment."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.affinity import PlacementRules
from gpufleet.model.selectors import LabelSelector, PodSelector
from gpufleet.scheduling.node_table import Allocation, NodeTable
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
)


@settings(max_examples=300, deadline=None)
@given(st.lists(operation, max_size=40))
def test_counts_equal_a_recount_after_any_sequence(ops: list[tuple[str, int, int]]) -> None:
    table = NodeTable(make_cluster(3, gpus=0, extended={"rdma/hca": 4}))
    index = table.pod_index
    held: list[Allocation] = []
    saved: list[tuple[int, list[Allocation]]] = []
    for op, a, b in ops:
        if op == "place":
            pod = PODS[a]
            rdma = ((RDMA, 1),) if table.ext_free[b, RDMA] else ()
            held.append(table.allocate(b, 0, 0, extended=rdma, identity=index.identity(pod)))
        elif op == "release" and held:
            table.release(held.pop(a % len(held)))
        elif op == "begin":
            saved.append((table.begin_trial(), list(held)))
        elif op in ("rollback", "commit") and saved:
            mark, before = saved.pop()
            if op == "rollback":
                table.rollback(mark)
                held = before
            else:
                table.commit(mark)
        elif op == "select":
            index.selector(SELECTORS[a])
        assert [k.tolist() for k in index.kept(3)] == [k.tolist() for k in index.recount(3)]
        taken = np.zeros(3, np.int64)
        for allocation in held:
            for _, units in allocation.extended:
                taken[allocation.row] += units
        assert (table.ext_free[:3, RDMA] == 4 - taken).all()
        assert index.repelling == sum(1 for h in held if h.identity == index.identity(PODS[3]))


def test_a_released_victim_put_back_is_counted_again() -> None:
    table = NodeTable(make_cluster(2, gpus=0, extended={"rdma/hca": 1}))
    column = table.pod_index.selector(SELECTORS[0])
    pod = PODS[0]
    taken = table.allocate(1, 0, 0, extended=((RDMA, 1),), identity=table.pod_index.identity(pod))
    mark = table.begin_trial()
    table.release(taken)
    assert table.pod_index.matching(column)[:2].tolist() == [0, 0]
    table.reallocate(taken)
    assert table.pod_index.matching(column)[:2].tolist() == [0, 1]
    assert table.ext_free[:2, RDMA].tolist() == [1, 0]
    table.rollback(mark)
    assert table.pod_index.matching(column)[:2].tolist() == [0, 1]
