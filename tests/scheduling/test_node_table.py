"""The node table: allocation bookkeeping, exact release, trials, growth."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import Pod
from gpufleet.scheduling.engine import Bound, PlacementEngine
from gpufleet.scheduling.node_table import Claim, NodeTable
from gpufleet.scheduling.policies.bestfit import bestfit_policy
from gpufleet.testing.builders import make_cluster, make_node, make_pod


def snapshot(table: NodeTable) -> tuple[object, ...]:
    n = table.size
    return (
        table.cpu_free[:n].copy(),
        table.mem_free[:n].copy(),
        table.gpu_free[:n].copy(),
        table.mig_free[:n].copy(),
        table.tag_count[:n].copy(),
        table.full_free[:n].copy(),
        table.max_free[:n].copy(),
    )


def assert_same(a: tuple[object, ...], b: tuple[object, ...]) -> None:
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


pod_specs = st.one_of(
    st.builds(lambda c: make_pod(cpu=c), st.integers(0, 40_000)),
    st.builds(lambda c, g: make_pod(cpu=c, gpus=g), st.integers(0, 20_000), st.integers(1, 4)),
    st.builds(lambda c, m: make_pod(cpu=c, milli=m), st.integers(0, 8_000), st.integers(1, 999)),
    st.builds(lambda m: make_pod(gpu_memory=m), st.integers(1, 40 * 1024)),
    st.builds(lambda k: make_pod(mig="1g.10gb", mig_count=k), st.integers(1, 3)),
)


@settings(max_examples=80, deadline=None)
@given(pods=st.lists(pod_specs, min_size=1, max_size=40), order=st.randoms())
def test_never_over_allocated_and_release_restores_exactly(
    pods: list[Pod], order: random.Random
) -> None:
    nodes = [
        make_node(f"n{i}", cpu=48_000, gpus=4, mig={3: ["3g.40gb", "1g.10gb", "1g.10gb"]})
        for i in range(3)
    ]
    table = NodeTable(nodes)
    engine = PlacementEngine(table, bestfit_policy())
    empty = snapshot(table)
    bound: list[Bound] = []
    for pod in pods:
        result = engine.place(pod, explain=False)
        if isinstance(result, Bound):
            bound.append(result)
        n = table.size
        assert (table.cpu_free[:n] >= 0).all()
        assert (table.mem_free[:n] >= 0).all()
        assert (table.gpu_free[:n] >= 0).all()
        assert (table.gpu_free[:n] <= 1000).all()
        assert (table.mig_free[:n] >= 0).all()
    # Every device holds at most 1000 milli, summed over the pods that were placed on it.
    held: dict[tuple[str, int], int] = {}
    for b in bound:
        for index in b.placement.gpu_indices:
            key = (b.placement.node, index)
            held[key] = held.get(key, 0) + b.placement.gpu_milli_per_device
    assert all(v <= 1000 for v in held.values())
    order.shuffle(bound)
    for b in bound:
        engine.release(b.allocation)
    assert_same(snapshot(table), empty)


def test_trial_rollback_restores_rows_and_bumps_versions() -> None:
    table = NodeTable(make_cluster(2, gpus=2))
    engine = PlacementEngine(table, bestfit_policy())
    before = snapshot(table)
    versions = table.version[:2].copy()
    mark = table.begin_trial()
    engine.place(make_pod(gpus=2))
    engine.place(make_pod(milli=300))
    table.rollback(mark)
    assert_same(snapshot(table), before)
    assert (table.version[:2] >= versions).all()
    assert not table.in_trial


def test_nested_trials_commit_inner_then_roll_back_outer() -> None:
    table = NodeTable(make_cluster(1, gpus=2))
    engine = PlacementEngine(table, bestfit_policy())
    before = snapshot(table)
    outer = table.begin_trial()
    inner = table.begin_trial()
    engine.place(make_pod(gpus=1))
    table.commit(inner)
    assert table.full_free[0] == 1
    table.rollback(outer)
    assert_same(snapshot(table), before)


def test_grows_when_nodes_with_more_gpus_join() -> None:
    table = NodeTable([make_node("small", gpus=2)], max_gpus=2)
    engine = PlacementEngine(table, bestfit_policy())
    engine.place(make_pod(milli=400))
    for i in range(40):
        table.add_node(make_node(f"big-{i}", gpus=16))
    assert table.gpu_free.shape[1] >= 16
    assert table.gpu_free[0, :2].tolist() in ([600, 1000], [1000, 600])
    result = engine.place(make_pod(gpus=16))
    assert isinstance(result, Bound)
    assert result.placement.node.startswith("big-")


def test_allocate_refuses_what_is_not_free() -> None:
    table = NodeTable([make_node("n", gpus=1, cpu=1000)])
    with pytest.raises(ValueError, match="not enough CPU"):
        table.allocate(Claim(0, 2000, 0))
    table.allocate(Claim(0, 0, 0, (0,), 700))
    with pytest.raises(ValueError, match="300 milli free, 400 asked"):
        table.allocate(Claim(0, 0, 0, (0,), 400))


def test_removed_node_is_not_schedulable_and_leaves_capacity() -> None:
    table = NodeTable(make_cluster(2, gpus=4))
    assert table.total_gpu_milli() == 8000
    table.remove_node("node-1")
    assert table.total_gpu_milli() == 4000
    engine = PlacementEngine(table, bestfit_policy())
    assert engine.place(make_pod(gpus=4)).placement.node == "node-0"  # type: ignore[union-attr]


@settings(max_examples=60, deadline=None)
@given(
    joins=st.lists(
        st.tuples(st.sampled_from(["A100", "H100", "T4"]), st.integers(0, 4), st.booleans()),
        min_size=1,
        max_size=20,
    )
)
def test_row_models_are_each_nodes_gpu_model_through_joins_and_removals(
    joins: list[tuple[str, int, bool]],
) -> None:
    table = NodeTable()
    for i, (model, gpus, leaves) in enumerate(joins):
        table.add_node(make_node(f"n{i}", gpus=gpus, model=model))
        if leaves:
            table.remove_node(f"n{i}")
    assert table.row_models == [node.gpu_model for node in table.nodes]
    assert [m for m in table.row_models if m] == [
        table.model_names[i] for i in table.model_id[: table.size] if i >= 0
    ]
