"""The FGD fragmentation measure: the protocol's check vectors, hand-computed cases, and the
incremental after-placement formula against recomputation from scratch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.scheduling.engine import PlacementEngine
from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies.bestfit import bestfit_policy
from gpufleet.scheduling.target import PodShape, TargetWorkload, typical_shapes
from gpufleet.testing.builders import make_node, make_pod

# The artifact's 31-type test list with CPU-only pods (frag_test.go), used by the protocol's
# check vectors: (milli-CPU, milli-GPU per device, GPU count, percent).
ARTIFACT_TYPES = [
    (15700, 1000, 1, 28.69),
    (11900, 1000, 1, 18.93),
    (11400, 1000, 1, 12.27),
    (1000, 0, 0, 7.36),
    (18710, 1000, 1, 4.85),
    (8200, 1000, 1, 3.79),
    (16400, 1000, 1, 3.31),
    (9810, 1000, 1, 1.97),
    (15200, 1000, 1, 1.87),
    (11200, 1000, 1, 1.81),
    (14200, 1000, 1, 1.76),
    (12000, 0, 0, 1.65),
    (14900, 1000, 1, 1.39),
    (60200, 1000, 4, 1.23),
    (64200, 1000, 8, 1.07),
    (32200, 1000, 4, 1.01),
    (17400, 1000, 2, 0.91),
    (30200, 1000, 2, 0.69),
    (16000, 1000, 1, 0.64),
    (15000, 1000, 1, 0.59),
    (64000, 1000, 8, 0.53),
    (15000, 0, 0, 0.53),
    (11910, 1000, 1, 0.53),
    (120200, 1000, 8, 0.48),
    (11300, 1000, 1, 0.37),
    (30000, 1000, 2, 0.32),
    (9800, 1000, 1, 0.32),
    (8000, 1000, 1, 0.32),
    (2000, 1000, 1, 0.27),
    (2000, 80, 1, 0.27),
    (1000, 1000, 1, 0.27),
]


def artifact_target() -> TargetWorkload:
    shapes = tuple(PodShape(cpu, milli, count) for cpu, milli, count, _ in ARTIFACT_TYPES)
    # The artifact's percentages sum to 99.99; it does not renormalise them.
    total = sum(p for *_, p in ARTIFACT_TYPES)
    return TargetWorkload(shapes, tuple(p / total for *_, p in ARTIFACT_TYPES))


def frag_of(
    cpu_free: int,
    gpu_free: list[int],
    target: TargetWorkload,
    model: str = "P100",
    cpu: int = 64_000,
) -> float:
    table = NodeTable([make_node("n", cpu=cpu, gpus=len(gpu_free), model=model)])
    table.cpu_free[0] = cpu_free
    table.gpu_free[0, : len(gpu_free)] = gpu_free
    table.version[0] += 1
    return float(FragmentationModel(table, target).node_frag(np.array([0]))[0])


SCALE = sum(p for *_, p in ARTIFACT_TYPES) / 100  # undo our renormalisation for the check


@pytest.mark.parametrize(
    ("cpu_free", "gpu_free", "expected"),
    [
        pytest.param(64_000, [1000] * 8, 887.2, id="empty-8xP100"),
        pytest.param(32_000, [1000] * 4 + [0] * 4, 554.4, id="half-cpu-4-free"),
        pytest.param(0, [1000] * 4 + [0] * 4, 4000.0, id="no-cpu-4-free"),
    ],
)
def test_protocol_check_vectors(cpu_free: int, gpu_free: list[int], expected: float) -> None:
    assert frag_of(cpu_free, gpu_free, artifact_target()) * SCALE == pytest.approx(
        expected, abs=0.01
    )


def test_hand_computed_two_types() -> None:
    # Type a: 1 GPU x 500 milli, 1 CPU (p=0.5): fits on the free device; devices with less than
    # 500 left are fragments: 300. Type b: CPU-only (p=0.5): all idle GPU counts: 1300.
    target = TargetWorkload((PodShape(1000, 500, 1), PodShape(2000, 0, 0)), (0.5, 0.5))
    assert frag_of(4000, [1000, 300], target) == pytest.approx(0.5 * 300 + 0.5 * 1300)


def test_hand_computed_lack_of_cpu_makes_everything_fragment() -> None:
    target = TargetWorkload((PodShape(8000, 500, 1),), (1.0,))
    assert frag_of(7999, [1000, 300], target) == pytest.approx(1300)
    assert frag_of(8000, [1000, 300], target) == pytest.approx(300)


def test_model_not_allowed_makes_everything_fragment() -> None:
    target = TargetWorkload((PodShape(1000, 1000, 1, ("V100",)),), (1.0,))
    assert frag_of(8000, [1000, 1000], target, model="T4") == pytest.approx(2000)
    assert frag_of(8000, [1000, 1000], target, model="V100") == pytest.approx(0)


def test_typical_shapes_cut_and_renormalise() -> None:
    pods = (
        [make_pod(cpu=1000, milli=500)] * 6
        + [make_pod(cpu=2000, gpus=1)] * 3
        + [make_pod(cpu=3000)]
    )
    target = typical_shapes(pods, coverage=0.85)
    assert target.shapes == (PodShape(1000, 500, 1), PodShape(2000, 1000, 1))
    assert target.probabilities == pytest.approx((6 / 9, 3 / 9))
    assert target.coverage == pytest.approx(0.9)


shares = st.integers(min_value=1, max_value=1000)


@settings(max_examples=150, deadline=None)
@given(
    frees=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=8),
    cpu_free=st.integers(min_value=0, max_value=64_000),
    pod_cpu=st.integers(min_value=0, max_value=16_000),
    pod_milli=shares,
    pod_gpus=st.integers(min_value=0, max_value=3),
)
def test_frag_after_matches_recomputation(
    frees: list[int], cpu_free: int, pod_cpu: int, pod_milli: int, pod_gpus: int
) -> None:
    target = artifact_target()
    table = NodeTable([make_node("n", cpu=64_000, gpus=len(frees), model="P100")])
    table.cpu_free[0] = cpu_free
    table.gpu_free[0, : len(frees)] = frees
    table.version[0] += 1
    model = FragmentationModel(table, target)
    engine = PlacementEngine(table, bestfit_policy())
    if pod_gpus == 1 and pod_milli < 1000:
        pod = make_pod(cpu=pod_cpu, milli=pod_milli)
    else:
        pod = make_pod(cpu=pod_cpu, gpus=pod_gpus)
    demand = engine.demand(pod)
    after = model.frag_after(np.array([0]), demand)[0]
    if demand.shared:
        for position, free in enumerate(frees):
            if free < pod_milli:
                assert np.isnan(after[position])
                continue
            expected = frag_of(
                cpu_free - pod_cpu,
                [f - pod_milli if i == position else f for i, f in enumerate(frees)],
                target,
            )
            assert after[position] == pytest.approx(expected)
    elif sum(f == 1000 for f in frees) >= pod_gpus:
        remaining = list(frees)
        taken = 0
        for i, f in enumerate(remaining):
            if f == 1000 and taken < pod_gpus:
                remaining[i] = 0
                taken += 1
        assert after == pytest.approx(frag_of(cpu_free - pod_cpu, remaining, target))


def test_cluster_total_follows_changes_exactly() -> None:
    target = artifact_target()
    table = NodeTable([make_node(f"n{i}", cpu=64_000, gpus=8, model="P100") for i in range(5)])
    model = FragmentationModel(table, target)
    engine = PlacementEngine(table, bestfit_policy())
    placed = []
    for i in range(30):
        result = engine.place(make_pod(cpu=1000 * (i % 7), milli=100 + 37 * i % 900))
        placed.append(result)
        if i % 4 == 0:
            first = placed.pop(0)
            if hasattr(first, "allocation"):
                engine.release(first.allocation)
        table.remove_node("n4") if i == 20 else None
        rows = np.flatnonzero(table.alive[: table.size])
        assert model.cluster_frag() == pytest.approx(float(model.node_frag(rows).sum()))
