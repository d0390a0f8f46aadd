"""Packing pods on the nodes a pool would add: the arithmetic agrees with the scheduling core's
placement, a unit of a gang is kept whole, and its topology on the new nodes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.elastic.node_columns import NodeColumns, capacity, commit, few_fits, take_few
from gpufleet.elastic.packing import Item, Kept, PoolPacker, kept
from gpufleet.elastic.pool_shapes import PoolCatalog
from gpufleet.model import GpuSharing, Pod, SharingStrategy
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.nodepools import NodePool
from gpufleet.model.workload import TopologyMode, TopologyRequest
from gpufleet.scheduling.engine import PlacementEngine, Unschedulable
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies.bestfit import bestfit_policy
from gpufleet.testing.builders import (
    GPU_TAINT,
    GPU_TOLERATION,
    make_node_pool,
    make_pod,
    make_workload,
)

MIG_LAYOUT = ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")


@st.composite
def pools(draw: st.DrawFn) -> NodePool:
    gpus = draw(st.integers(1, 8))
    mig = draw(st.sampled_from([None, {0: MIG_LAYOUT}]))
    replicas = draw(st.sampled_from([1, 1, 2, 4]))
    sharing = GpuSharing(SharingStrategy.TIME_SLICING, replicas) if replicas > 1 else GpuSharing()
    return make_node_pool(
        "p",
        gpus=gpus,
        model="H100",
        gpu_memory=80 * 1024,
        cpu=draw(st.integers(4, 64)) * 1000,
        memory=draw(st.integers(8, 512)) * 1024,
        mig=mig,
        sharing=sharing,
        taints=[GPU_TAINT],
    )


@st.composite
def pods(draw: st.DrawFn) -> Pod:
    kind = draw(st.sampled_from(["whole", "share", "memory", "mig", "cpu"]))
    options: dict[str, object] = {
        "cpu": draw(st.integers(0, 16)) * 500,
        "memory": draw(st.integers(0, 64)) * 1024,
        "tolerations": [GPU_TOLERATION],
    }
    if kind == "whole":
        options["gpus"] = draw(st.integers(1, 4))
    elif kind == "share":
        options["milli"] = draw(st.integers(1, 999))
    elif kind == "memory":
        options["gpu_memory"] = draw(st.integers(1, 80)) * 1024
    elif kind == "mig":
        options["mig"] = draw(st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb"]))
    return make_pod(**options)  # type: ignore[arg-type]


def engine_count(pool: NodePool, pod: Pod, limit: int = 2000) -> int:
    """How many pods like ``pod`` the core places on one empty node of ``pool``."""
    engine = PlacementEngine(NodeTable([pool.node("n")]), bestfit_policy())
    for count in range(limit):
        if isinstance(engine.place(pod.renamed(f"p{count}"), explain=False), Unschedulable):
            return count
    return limit


@settings(max_examples=150, deadline=None)
@given(pool=pools(), pod=pods())
def test_what_fits_on_an_empty_node_is_what_the_core_places_there(pool: NodePool, pod: Pod) -> None:
    catalog = PoolCatalog([pool])
    on_pool = catalog.on_pool(catalog.shape(pod), 0)
    expected = engine_count(pool, pod)
    if expected >= 2000:  # the core placed as many as it was asked: at least that many fit
        assert on_pool is not None
        assert on_pool.per_empty_node >= 2000
        return
    assert (0 if on_pool is None else on_pool.per_empty_node) == expected


@settings(max_examples=150, deadline=None)
@given(
    pool=pools(),
    shapes=st.lists(pods(), min_size=1, max_size=4),
    counts=st.lists(st.integers(0, 6), min_size=4, max_size=4),
)
def test_taking_what_fits_leaves_no_column_negative_and_no_room_for_another(
    pool: NodePool, shapes: list[Pod], counts: list[int]
) -> None:
    catalog = PoolCatalog([pool])
    columns = NodeColumns.of_empty(catalog.empty_node(0), 3)
    rows = np.arange(3, dtype=np.int64)
    for pod, count in zip(shapes, counts, strict=False):
        on_pool = catalog.on_pool(catalog.shape(pod), 0)
        if on_pool is None or on_pool.per_empty_node > 1000:
            continue
        fit = capacity(columns, on_pool)
        taken = np.minimum(fit, count)
        commit(columns, on_pool, rows, taken)
        for column in (columns.cpu, columns.memory, columns.units, columns.devices,
                       columns.mig, columns.extended):  # fmt: skip
            assert (column[:3] >= 0).all()
        np.testing.assert_array_equal(capacity(columns, on_pool), fit - taken)


def test_a_gang_unit_is_all_or_nothing_within_the_pools_maximum() -> None:
    pool = make_node_pool("p", max_nodes=2, gpus=8, taints=[GPU_TAINT])
    catalog = PoolCatalog([pool])
    gang = make_workload("g", pods=3, gpus=4, tolerations=[GPU_TOLERATION])
    item = Item(((catalog.shape(gang.pods[0]), 3),), None, False, [gang, gang])
    packer = PoolPacker(catalog, 0, pool.max_nodes, [0])
    # Two nodes hold four 4-GPU pods: one gang of three, not a gang and a third.
    assert packer.place(item) == 1
    assert packer.added_count() == 2
    assert packer.waste()[0] == 4000


@pytest.mark.parametrize(
    ("level", "mode", "zones", "expected"),
    [
        (GFD_LABELS.NVLINK_DOMAIN, TopologyMode.REQUIRED, (), Kept.ONE_NODE),
        (GFD_LABELS.HOSTNAME, TopologyMode.REQUIRED, (), Kept.ONE_NODE),
        (GFD_LABELS.ZONE, TopologyMode.REQUIRED, ("a", "b"), Kept.ONE_ZONE),
        (GFD_LABELS.ZONE, TopologyMode.REQUIRED, (), None),
        (GFD_LABELS.ZONE, TopologyMode.PREFERRED, (), Kept.ANYWHERE),
        (GFD_LABELS.RACK, TopologyMode.REQUIRED, (), None),
        ("team", TopologyMode.REQUIRED, (), Kept.ANYWHERE),  # every node of the pool has it
    ],
    ids=["nvlink", "hostname", "zone", "zone-without-zones", "preferred-zone", "rack-unlabelled",
         "pool-wide-label"],
)  # fmt: skip
def test_a_gangs_topology_is_kept_on_new_nodes(
    level: str, mode: TopologyMode, zones: tuple[str, ...], expected: Kept | None
) -> None:
    pool = make_node_pool("p", zones=zones, labels={"team": "vision"})
    catalog = PoolCatalog([pool])
    gang = make_workload("g", pods=2, gpus=1)
    item = Item(((catalog.shape(gang.pods[0]), 2),), TopologyRequest(mode, level), False, [gang])
    labels = tuple(catalog.table.nodes[0].labels)
    assert kept(item, labels) is expected


def test_a_gang_on_one_node_and_a_gang_in_one_zone() -> None:
    pool = make_node_pool("p", max_nodes=10, zones=("a", "b"), gpus=8, taints=[GPU_TAINT])
    catalog = PoolCatalog([pool])
    pod = make_pod(gpus=2, tolerations=[GPU_TOLERATION])
    shape = catalog.shape(pod)
    nvlink = TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.NVLINK_DOMAIN)
    one_node = Item(((shape, 3),), nvlink, False, [make_workload() for _ in range(5)])
    packer = PoolPacker(catalog, 0, pool.max_nodes, [0, 0])
    # Three 2-GPU pods on one 8-GPU node: one gang a node, five nodes.
    assert packer.place(one_node) == 5
    assert packer.added_count() == 5
    zone = TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.ZONE)
    one_zone = Item(((shape, 8),), zone, False, [make_workload()])
    assert packer.place(one_zone) == 1
    new_rows = packer.columns.zone[5 : packer.columns.size]
    assert len(set(new_rows.tolist())) == 1  # its new nodes are all in one zone


def engine_room(engine: PlacementEngine, pod: Pod, limit: int = 300) -> int:
    """How many more pods like ``pod`` the core would place on its table now (a trial)."""
    mark = engine.table.begin_trial()
    count = 0
    while count < limit and not isinstance(
        engine.place(pod.renamed(f"probe-{count}"), explain=False), Unschedulable
    ):
        count += 1
    engine.table.rollback(mark)
    return count


@settings(max_examples=120, deadline=None)
@given(
    pool=pools(),
    steps=st.lists(st.tuples(pods(), st.integers(1, 5)), min_size=1, max_size=6),
)
def test_room_left_agrees_with_the_core_as_a_node_fills_up(
    pool: NodePool, steps: list[tuple[Pod, int]]
) -> None:
    """Pods of several shapes, one batch after another, on one node: after each batch the
    packer's room for the next shape is the core's (its devices chosen as the engine chooses
    them)."""
    catalog = PoolCatalog([pool])
    columns = NodeColumns.of_empty(catalog.empty_node(0), 1)
    engine = PlacementEngine(NodeTable([pool.node("n")]), bestfit_policy())
    row = np.zeros(1, np.int64)
    for step, (pod, count) in enumerate(steps):
        on_pool = catalog.on_pool(catalog.shape(pod), 0)
        room = engine_room(engine, pod)
        if on_pool is None:
            assert room == 0
            continue
        if room >= 300:
            continue
        assert int(capacity(columns, on_pool)[0]) == room
        taken = min(room, count)
        commit(columns, on_pool, row, np.array([taken]))
        for i in range(taken):
            assert not isinstance(engine.place(pod.renamed(f"s{step}-{i}")), Unschedulable)


def test_replicas_of_a_time_sliced_node_are_counted_as_the_engine_takes_them() -> None:
    """Regression: 2-GPU pods on 3 usable devices of 4 replicas each: the engine puts each on
    the fullest devices, so 4 fit, not the 6 that an even spread would hold."""
    pool = make_node_pool(
        "p",
        gpus=4,
        mig={0: MIG_LAYOUT},
        sharing=GpuSharing(SharingStrategy.TIME_SLICING, 4),
        taints=[GPU_TAINT],
    )
    pod = make_pod(gpus=2, tolerations=[GPU_TOLERATION])
    catalog = PoolCatalog([pool])
    on_pool = catalog.on_pool(catalog.shape(pod), 0)
    assert on_pool is not None
    assert on_pool.per_empty_node == engine_count(pool, pod) == 4


@settings(max_examples=150, deadline=None)
@given(
    pool=pools(),
    steps=st.lists(st.tuples(pods(), st.integers(1, 9)), min_size=1, max_size=6),
)
def test_the_few_rows_path_takes_what_the_column_path_takes(
    pool: NodePool, steps: list[tuple[Pod, int]]
) -> None:
    """Pods fitted on a few nodes in plain integers (``few_fits``/``take_few``) leave the
    nodes exactly as the column-wise ``capacity``/``commit`` do."""
    catalog = PoolCatalog([pool])
    by_columns = NodeColumns.of_empty(catalog.empty_node(0), 3)
    by_rows = by_columns.copy()
    rows = np.arange(3, dtype=np.int64)
    for pod, count in steps:
        on_pool = catalog.on_pool(catalog.shape(pod), 0)
        if on_pool is None:
            continue
        fit = capacity(by_columns, on_pool, rows)
        fits = few_fits(by_rows, on_pool, rows)
        assert [f for _, _, f in fits] == fit.tolist()
        taken = np.minimum(fit, np.maximum(0, count - (np.cumsum(fit) - fit)))
        commit(by_columns, on_pool, rows, taken)
        assert take_few(by_rows, on_pool, fits, count) == int(taken.sum())
        np.testing.assert_array_equal(by_rows.data[:3], by_columns.data[:3])


@settings(max_examples=150, deadline=None)
@given(pool=pools(), pod=pods(), count=st.integers(1, 12))
def test_a_new_node_written_whole_is_the_node_that_took_the_pods(
    pool: NodePool, pod: Pod, count: int
) -> None:
    """The row a new node is written with (``row_after``, plain integers) is the empty node
    after ``commit`` of the same pods, and writing it keeps the node's zone."""
    catalog = PoolCatalog([pool])
    on_pool = catalog.on_pool(catalog.shape(pod), 0)
    if on_pool is None:
        return
    taken = min(count, on_pool.per_empty_node)
    by_columns = NodeColumns.of_empty(catalog.empty_node(0), 1, zone=1)
    commit(by_columns, on_pool, np.zeros(1, np.int64), np.array([taken], np.int64))
    written = NodeColumns.of_empty(catalog.empty_node(0), 1, zone=1)
    written.set_rows(slice(0, 1), written.row_after(on_pool, taken))
    np.testing.assert_array_equal(written.data[:1], by_columns.data[:1])
    assert written.any_closed == by_columns.any_closed


def test_a_share_goes_to_the_fullest_device_that_fits_in_both_paths() -> None:
    """600, then 700, then 300 milli on two devices: the 300 goes to the device with 300 left
    (the fullest that fits, as the engine's best fit puts it), not to the first one."""
    pool = make_node_pool("p", gpus=2, taints=[GPU_TAINT])
    catalog = PoolCatalog([pool])
    by_columns = NodeColumns.of_empty(catalog.empty_node(0), 1)
    by_rows = by_columns.copy()
    row = np.zeros(1, np.int64)
    for milli in (600, 700, 300):
        pod = make_pod(milli=milli, tolerations=[GPU_TOLERATION])
        on_pool = catalog.on_pool(catalog.shape(pod), 0)
        assert on_pool is not None
        commit(by_columns, on_pool, row, np.ones(1, np.int64))
        assert take_few(by_rows, on_pool, few_fits(by_rows, on_pool, row), 1) == 1
    assert by_columns.devices[0, :2].tolist() == by_rows.devices[0, :2].tolist() == [400, 0]
