"""What a node advertises for shared GPUs, and what the core binds there: never more units of
the GPU resource than the node advertises (the kubelet's rule), each pod holding what
:func:`gpufleet.model.sharing.milli_per_device` says."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import (
    GPU_RESOURCE,
    MILLI_PER_GPU,
    SHARED_GPU_RESOURCE,
    GpuSharing,
    Node,
    Pod,
    SharingStrategy,
)
from gpufleet.model.sharing import milli_per_device
from gpufleet.scheduling.engine import Bound, PlacementEngine, Unschedulable
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import make_node, make_pod, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

TIME_SLICED_4 = GpuSharing(SharingStrategy.TIME_SLICING, 4)
RENAMED_4 = GpuSharing(SharingStrategy.TIME_SLICING, 4, SHARED_GPU_RESOURCE)
ONE_REPLICA_PER_POD = GpuSharing(SharingStrategy.TIME_SLICING, 4, one_unit_per_pod=True)
MPS_3 = GpuSharing(SharingStrategy.MPS, 3)
HAMI_10 = GpuSharing(SharingStrategy.SPLIT, 10)


def engine_for(nodes: list[Node], policy: str = "bestfit") -> PlacementEngine:
    table = NodeTable(nodes)
    return PlacementEngine(table, make_policy(policy, table, PolicyContext(TargetWorkload((), ()))))


def place_all(engine: PlacementEngine, pods: list[Pod]) -> list[Bound | Unschedulable]:
    return [engine.place(pod) for pod in pods]


def bound(results: list[Bound | Unschedulable]) -> list[Bound]:
    return [r for r in results if isinstance(r, Bound)]


def test_shares_asking_a_unit_never_outnumber_what_the_node_advertises() -> None:
    """Issue 11 item 8: four 250 milli-GPU pods asking nvidia.com/gpu: 1 were bound to a node
    advertising nvidia.com/gpu: 1; the kubelet admits one. Without sharing the one that binds
    holds the whole device, as the device plugin gives it one."""
    engine = engine_for([make_node("one", gpus=1)])
    results = place_all(engine, [make_pod(f"s{i}", milli=250, units=1) for i in range(4)])
    placed = bound(results)
    assert len(placed) == 1
    assert placed[0].placement.gpu_milli_per_device == MILLI_PER_GPU
    waiting = results[1]
    assert isinstance(waiting, Unschedulable)
    assert waiting.message() == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_gpufleet_own_shares_ask_no_unit_and_pack_by_milli() -> None:
    engine = engine_for([make_node("one", gpus=1)])
    placed = bound(place_all(engine, [make_pod(f"s{i}", milli=250) for i in range(5)]))
    assert [b.placement.gpu_milli_per_device for b in placed] == [250] * 4


def test_a_time_sliced_node_takes_a_plain_pod_per_replica() -> None:
    """Issue 11 item 8: a node advertising 32 time-sliced replicas took only 8 plain pods."""
    engine = engine_for([make_node("ts", gpus=8, sharing=TIME_SLICED_4)])
    results = place_all(engine, [make_pod(f"p{i}", gpus=1) for i in range(33)])
    placed = bound(results)
    assert len(placed) == 32
    per_device: dict[int, int] = {}
    for b in placed:
        (index,) = b.placement.gpu_indices
        assert b.placement.gpu_milli_per_device == 250
        per_device[index] = per_device.get(index, 0) + 1
    assert per_device == dict.fromkeys(range(8), 4)
    last = results[-1]
    assert isinstance(last, Unschedulable)
    assert "Insufficient nvidia.com/gpu" in last.message()
    assert engine.table.units_free[0] == 0


def test_shares_on_a_time_sliced_node_hold_at_least_a_replica() -> None:
    engine = engine_for([make_node("ts", gpus=1, gpu_memory=15 * 1024, sharing=TIME_SLICED_4)])
    small, big, memory = (
        make_pod("small", milli=100, units=1),
        make_pod("big", milli=500, units=1),
        make_pod("memory", gpu_memory=5 * 1024, units=1),
    )
    placed = bound(place_all(engine, [small, big, memory]))
    assert [b.placement.gpu_milli_per_device for b in placed] == [250, 500]
    assert engine.table.units_free[0] == 2  # the memory share (334) no longer fits by milli


def test_renamed_replicas_take_only_pods_asking_for_the_shared_resource() -> None:
    engine = engine_for([make_node("ts", gpus=2, sharing=RENAMED_4)])
    plain = engine.place(make_pod("plain", gpus=1))
    assert isinstance(plain, Unschedulable)
    assert "can never fit" in plain.message()
    assert plain.message().endswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    shared = engine.place(make_pod("shared", gpus=1, resource=SHARED_GPU_RESOURCE))
    assert isinstance(shared, Bound)
    assert shared.placement.gpu_milli_per_device == 250


def test_several_replicas_come_from_distinct_devices() -> None:
    engine = engine_for([make_node("ts", gpus=4, sharing=TIME_SLICED_4)])
    result = engine.place(make_pod("two", gpus=2))
    assert isinstance(result, Bound)
    assert len(set(result.placement.gpu_indices)) == 2
    assert result.allocation.units == 2


def test_fail_requests_greater_than_one_refuses_several_replicas() -> None:
    engine = engine_for([make_node("ts", gpus=4, sharing=ONE_REPLICA_PER_POD)])
    two = engine.place(make_pod("two", gpus=2))
    assert isinstance(two, Unschedulable)
    assert "1 node(s) give one GPU replica per pod" in two.message()
    assert isinstance(engine.place(make_pod("one", gpus=1)), Bound)


def test_hami_split_hands_out_whole_devices_and_shares_of_at_least_a_split() -> None:
    engine = engine_for([make_node("hami", gpus=2, sharing=HAMI_10)])
    assert engine.table.units_cap[0] == 20
    whole = engine.place(make_pod("whole", gpus=1))
    assert isinstance(whole, Bound)
    assert whole.placement.gpu_milli_per_device == MILLI_PER_GPU
    shares = bound(place_all(engine, [make_pod(f"s{i}", milli=50, units=1) for i in range(11)]))
    assert [b.placement.gpu_milli_per_device for b in shares] == [100] * 10


def test_a_gang_of_replicas_counts_as_one_core_decision() -> None:
    """The core (queues, gangs) binds replicas as the engine does: a gang of 8 one-GPU pods on
    one time-sliced GPU of 4 replicas and one plain GPU waits; a gang of 5 starts."""
    nodes = [make_node("ts", gpus=1, sharing=TIME_SLICED_4), make_node("plain", gpus=1)]
    cluster = EchoCluster(make_core(nodes, []))
    cluster.submit(make_workload("big", gpus=1, pods=8), now=0)
    cluster.submit(make_workload("fits", gpus=1, pods=5), now=1)
    assert sorted(cluster.running) == [f"default/fits-{i}" for i in range(5)]


pod_kinds = st.one_of(
    st.builds(lambda g: make_pod(gpus=g), st.integers(1, 3)),
    st.builds(lambda g: make_pod(gpus=g, resource=SHARED_GPU_RESOURCE), st.integers(1, 2)),
    st.builds(lambda m, u: make_pod(milli=m, units=u), st.integers(1, 999), st.integers(0, 1)),
    st.builds(
        lambda m, u: make_pod(gpu_memory=m, units=u), st.integers(1, 20 * 1024), st.integers(0, 1)
    ),
)
SHARING_KINDS = (
    GpuSharing(),
    TIME_SLICED_4,
    RENAMED_4,
    ONE_REPLICA_PER_POD,
    MPS_3,
    HAMI_10,
    GpuSharing(SharingStrategy.TIME_SLICING, 7),
)


def sharing_nodes() -> list[Node]:
    return [
        make_node(f"n{i}", cpu=400_000, gpus=3, gpu_memory=16 * 1024, sharing=sharing)
        for i, sharing in enumerate(SHARING_KINDS)
    ]


@settings(max_examples=60, deadline=None)
@given(pods=st.lists(pod_kinds, min_size=1, max_size=60), order=st.randoms())
def test_units_never_exceed_what_nodes_advertise_and_pods_hold_what_the_model_says(
    pods: list[Pod], order: random.Random
) -> None:
    nodes = sharing_nodes()
    engine = engine_for(nodes)
    table = engine.table
    empty = (table.units_free.copy(), table.gpu_free.copy())
    placed = bound(place_all(engine, pods))
    units: dict[str, int] = {}
    milli: dict[tuple[str, int], int] = {}
    by_name = {n.name: n for n in nodes}
    for b in placed:
        node = by_name[b.placement.node]
        gpu = b.pod.gpu
        if gpu.units:
            assert gpu.resource == node.gpu_resource
        units[node.name] = units.get(node.name, 0) + gpu.units
        assert b.allocation.units == gpu.units
        expected = milli_per_device(gpu, node.gpu_sharing, node.gpu_memory_mib)
        assert b.placement.gpu_milli_per_device == expected
        assert len(set(b.placement.gpu_indices)) == gpu.count
        for index in b.placement.gpu_indices:
            milli[(node.name, index)] = milli.get((node.name, index), 0) + expected
    for name, taken in units.items():
        assert taken <= by_name[name].gpu_units
    assert all(v <= MILLI_PER_GPU for v in milli.values())
    order.shuffle(placed)
    for b in placed:
        engine.release(b.allocation)
    np.testing.assert_array_equal(table.units_free, empty[0])
    np.testing.assert_array_equal(table.gpu_free, empty[1])


@settings(max_examples=40, deadline=None)
@given(pod=pod_kinds, before=st.lists(pod_kinds, max_size=20))
def test_compiled_demand_holds_what_the_model_says_on_every_row(
    pod: Pod, before: list[Pod]
) -> None:
    nodes = sharing_nodes()
    engine = engine_for(nodes)
    place_all(engine, before)
    demand = engine.demand(pod)
    for row, node in enumerate(nodes):
        expected = milli_per_device(pod.gpu, node.gpu_sharing, node.gpu_memory_mib)
        held = demand.milli_by_row[row] if demand.milli_by_row is not None else demand.gpu_milli
        assert held == expected, node.gpu_sharing
    mask = engine.feasible(demand)
    assert [engine.fits_row(demand, r) for r in range(len(nodes))] == mask.tolist()


@pytest.mark.parametrize(
    ("sharing", "units", "resource"),
    [
        pytest.param(GpuSharing(), 8, GPU_RESOURCE, id="none"),
        pytest.param(TIME_SLICED_4, 32, GPU_RESOURCE, id="time-slicing"),
        pytest.param(RENAMED_4, 32, SHARED_GPU_RESOURCE, id="renamed"),
        pytest.param(HAMI_10, 80, GPU_RESOURCE, id="hami"),
    ],
)
def test_a_node_advertises_replicas_per_device(
    sharing: GpuSharing, units: int, resource: str
) -> None:
    node = make_node("n", gpus=8, sharing=sharing)
    assert (node.gpu_units, node.gpu_resource) == (units, resource)
