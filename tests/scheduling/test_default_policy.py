"""gpufleet's default policy: its three waste terms on small clusters, and its caches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import Node, Pod
from gpufleet.scheduling.engine import Bound, PlacementEngine
from gpufleet.scheduling.node_table import Claim, NodeTable
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.policies.default_gaps import gap_waste
from gpufleet.scheduling.target import PodShape, TargetWorkload, typical_shapes
from gpufleet.testing.builders import make_cluster, make_node, make_pod


def engine_for(nodes: list[Node], target: TargetWorkload) -> PlacementEngine:
    table = NodeTable(nodes)
    return PlacementEngine(table, make_policy("default", table, PolicyContext(target)))


def place(engine: PlacementEngine, pod: Pod) -> Bound:
    engine.observe(pod)
    result = engine.place(pod)
    assert isinstance(result, Bound)
    return result


SHARES_600_400 = TargetWorkload((PodShape(1000, 600, 1), PodShape(1000, 400, 1)), (0.5, 0.5))


def test_gap_values_are_bounded_and_zero_at_the_ends() -> None:
    waste = gap_waste(SHARES_600_400, 64)
    assert waste[0] == 0
    assert waste[1000] == 0
    assert (waste >= 0).all()
    assert (waste[:1000] <= np.arange(1000) + 1e-9).all()


def test_gap_values_know_which_leftovers_get_used() -> None:
    # Shares of 600 and 400 only: a 400-gap is filled by the next 400 pod, a 100-gap never.
    waste = gap_waste(SHARES_600_400, 64)
    assert waste[400] < 60
    assert waste[100] == pytest.approx(100)
    assert np.array_equal(waste, gap_waste(SHARES_600_400, 64))  # deterministic


@pytest.mark.parametrize(
    "target",
    [
        TargetWorkload((PodShape(1000, 1000, 1),), (1.0,)),
        TargetWorkload((PodShape(4000, 1000, 8), PodShape(1000, 1000, 1)), (0.3, 0.7)),
        TargetWorkload((PodShape(1000, 1000, 2), PodShape(500, 0, 0)), (0.5, 0.5)),
    ],
    ids=["one-gpu", "gangs-and-singles", "with-cpu-only"],
)
def test_whole_gpus_only_value_leftovers_as_the_simulation_does(target: TargetWorkload) -> None:
    """Whole-GPU pods never leave a device part-used: the simulation (skipped then) would
    count every leftover as wasted in full, as it does for leftovers it never produces."""
    expected = np.arange(1001, dtype=np.float64)
    expected[0] = expected[1000] = 0.0
    assert np.array_equal(gap_waste(target, 16_000), expected)


def test_a_share_avoids_leaving_a_useless_sliver() -> None:
    # Shares of 320 and 470 are expected; devices have 530 and 680 left (after a 470 and a
    # 320). Best fit puts the next 320 on the 530 device, leaving 210 that nothing fits; the
    # gap values put it on the 680 device, leaving 360 for another 320.
    target = TargetWorkload((PodShape(1000, 320, 1), PodShape(1000, 470, 1)), (0.5, 0.5))
    chosen = {}
    for policy in ("default", "bestfit"):
        table = NodeTable([make_node("n", gpus=2)])
        table.allocate(Claim(0, 0, 0, (0,), 470))
        table.allocate(Claim(0, 0, 0, (1,), 320))
        engine = PlacementEngine(table, make_policy(policy, table, PolicyContext(target)))
        chosen[policy] = place(engine, make_pod(milli=320)).placement.gpu_indices
    assert chosen == {"default": (1,), "bestfit": (0,)}


def test_gpu_pods_avoid_stranding_gpus_without_cpu() -> None:
    # GPU pods in the target need 8 CPUs per GPU. Node "tight" has 1 free GPU... both nodes have
    # 4 free GPUs; a CPU-heavy one-GPU pod on "tight" would leave 3 GPUs with 4 CPUs (useless).
    target = TargetWorkload((PodShape(8000, 1000, 1),), (1.0,))
    nodes = [make_node("tight", cpu=28_000, gpus=4), make_node("roomy", cpu=64_000, gpus=4)]
    engine = engine_for(nodes, target)
    assert place(engine, make_pod(cpu=24_000, gpus=1)).placement.node == "roomy"


def test_scarce_multi_gpu_slots_are_kept() -> None:
    # Many 4-GPU pods are expected. Node "four" has exactly 4 free GPUs (one 4-GPU slot), node
    # "five" has 5 (its slot survives giving one away), "other" is full. Consolidation alone
    # would pick "four".
    target = TargetWorkload((PodShape(1000, 1000, 1),), (1.0,))
    nodes = [make_node("four", gpus=8), make_node("five", gpus=8), make_node("other", gpus=4)]
    engine = engine_for(nodes, target)
    table = engine.table
    table.allocate(Claim(0, 0, 0, (0, 1, 2, 3), 1000))
    table.allocate(Claim(1, 0, 0, (0, 1, 2), 1000))
    table.allocate(Claim(2, 0, 0, (0, 1, 2, 3), 1000))
    for _ in range(40):
        engine.observe(make_pod(gpus=4))
    assert place(engine, make_pod(gpus=1)).placement.node == "five"


def test_without_expected_multi_gpu_pods_whole_gpus_consolidate() -> None:
    target = TargetWorkload((PodShape(1000, 1000, 1),), (1.0,))
    nodes = [make_node("four", gpus=8), make_node("five", gpus=8)]
    engine = engine_for(nodes, target)
    engine.table.allocate(Claim(0, 0, 0, (0, 1, 2, 3), 1000))
    engine.table.allocate(Claim(1, 0, 0, (0, 1, 2), 1000))
    assert place(engine, make_pod(gpus=1)).placement.node == "four"


def test_model_restricted_pods_keep_their_nodes() -> None:
    # Pods that may only use T4s are expected; an unrestricted pod should leave the T4s alone.
    target = TargetWorkload((PodShape(1000, 1000, 1),), (1.0,))
    nodes = [make_node("t4", model="T4", gpus=2), make_node("a100", model="A100", gpus=2)]
    engine = engine_for(nodes, target)
    for _ in range(30):
        engine.observe(make_pod(gpus=1, models=["T4"]))
    assert place(engine, make_pod(gpus=1)).placement.node == "a100"


def test_cpu_only_pods_go_where_gpus_are_busy() -> None:
    target = TargetWorkload((PodShape(1000, 1000, 1),), (1.0,))
    nodes = [make_node("idle", gpus=4), make_node("busy", gpus=4)]
    engine = engine_for(nodes, target)
    engine.table.allocate(Claim(1, 0, 0, (0, 1, 2, 3), 1000))
    assert place(engine, make_pod(cpu=4000)).placement.node == "busy"


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(1, 999), st.integers(0, 3)),
        min_size=1,
        max_size=30,
    )
)
def test_caches_never_change_a_decision(ops: list[tuple[int, int, int]]) -> None:
    """Warm engine (cached terms, incremental slot counts) vs. a fresh policy per pod."""

    def pod_of(kind: int, milli: int, memory: int) -> Pod:
        if kind == 0:
            return make_pod(milli=milli, memory=1024 * (1 + memory))
        return make_pod(gpus=kind, memory=1024 * (1 + memory), cpu=1000 * memory)

    pods = [pod_of(*op) for op in ops]
    target = typical_shapes(pods)
    nodes = [
        *make_cluster(3, gpus=4, cpu=16000, memory=3 * 1024),
        make_node("t4", model="T4", gpus=2, cpu=8000),
    ]
    warm = engine_for(nodes, target)
    cold_table = NodeTable(nodes)
    seen: list[Pod] = []
    for pod in pods:
        warm.observe(pod)
        seen.append(pod)
        expected = warm.place(pod, explain=False)
        cold = PlacementEngine(
            cold_table, make_policy("default", cold_table, PolicyContext(target))
        )
        for earlier in seen:
            cold.observe(earlier)
        got = cold.place(pod, explain=False)
        assert type(expected) is type(got)
        if isinstance(expected, Bound) and isinstance(got, Bound):
            assert expected.placement == got.placement


@pytest.mark.parametrize(
    ("cpu_per_gpu_pod", "cpu_only_share", "expected"),
    [
        pytest.param(8_000, 0.2, "DefaultScore", id="gpu-bound: own terms"),
        pytest.param(8_000, 0.9, "FGDScore", id="cpu-bound: fragmentation gradient descent"),
    ],
)
def test_cpu_bound_workloads_use_fgd(
    cpu_per_gpu_pod: int, cpu_only_share: float, expected: str
) -> None:
    # The cluster has 16 CPUs per GPU; CPU-only pods of 32 CPUs push the expected workload's
    # CPU per GPU far beyond that when they are 90% of the pods.
    target = TargetWorkload(
        (PodShape(cpu_per_gpu_pod, 1000, 1), PodShape(32_000, 0, 0)),
        (1 - cpu_only_share, cpu_only_share),
    )
    table = NodeTable(make_cluster(2, cpu=128_000, gpus=8))
    policy = make_policy("default", table, PolicyContext(target))
    assert policy.name == "default"
    assert policy.scorers[0][0].name == expected
