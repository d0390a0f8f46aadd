"""The fill-up experiment: arrival order, the allocation curve, small end-to-end runs."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.backends.sim.fill import allocation_curve, bucket_means, fill_order
from gpufleet.backends.sim.run import run_fill
from gpufleet.testing.builders import make_cluster, make_node, make_pod

TRACE = [make_pod(name=f"p{i:02d}", gpus=1 + i % 2) for i in range(10)]  # 15 GPUs requested


def test_order_is_seeded_originals_then_clones_up_to_the_inflation() -> None:
    order = fill_order(TRACE, node_count=5, capacity_milli=12_000, seed=7)
    again = fill_order(TRACE, node_count=5, capacity_milli=12_000, seed=7)
    other = fill_order(TRACE, node_count=5, capacity_milli=12_000, seed=8)
    assert [p.name for p in order.pods] == [p.name for p in again.pods]
    assert [p.name for p in order.pods] != [p.name for p in other.pods]
    assert sorted(p.name for p in order.pods[: order.originals]) == [p.name for p in TRACE]
    assert all("-clone-" in p.name for p in order.pods[order.originals :])
    total = sum(p.gpu.total_milli for p in order.pods)
    assert total <= 1.3 * 12_000 < total + 2000
    assert sorted(order.node_rank.tolist()) == [0, 1, 2, 3, 4]


def test_bucket_means_average_per_rounded_arrived_percent() -> None:
    arrived = np.array([10, 14, 16, 30], np.int64)  # of 100: buckets 10, 14, 16, 30
    values = np.array([1.0, 2.0, 3.0, 4.0])
    curve = bucket_means(arrived, values, 100, max_pct=32)
    assert curve[10] == 1.0
    assert curve[14] == 2.0
    assert curve[16] == 3.0
    assert curve[15] == pytest.approx(2.5)  # empty: mean of its neighbours 14 and 16
    assert curve[20] == 3.0  # empty with empty neighbours: the last value before it
    assert curve[0] == 1.0  # before the first sample: the first value
    assert curve[32] == 4.0


def test_allocation_curve_is_percent_of_capacity() -> None:
    curve = allocation_curve(np.array([500, 1000]), np.array([500, 500]), 1000, max_pct=100)
    assert curve[50] == 50.0
    assert curve[100] == 50.0


def test_tiny_fill_run_end_to_end() -> None:
    # One node, 2 GPUs: two 1-GPU pods fill it exactly; nothing is unallocated at 100%.
    run = run_fill([make_node("n", gpus=2)], [make_pod(gpus=1), make_pod(gpus=1)], "fgd", 1)
    assert run.unallocated_gpu_pct[50] == 50.0
    assert run.unallocated_gpu_pct[100] == 0.0
    assert run.bind_violations == 0
    assert run.classes["one-gpu"].failed == 0


def test_failures_are_counted_per_class_and_before_100_percent() -> None:
    trace = [
        make_pod(name="big", gpus=4),
        make_pod(name="s1", milli=600),
        make_pod(name="s2", milli=600),
        make_pod(name="cpu", cpu=500),
    ]
    run = run_fill([make_node("n", gpus=2)], trace, "bestfit", 3, inflation=1.0)
    assert run.classes["multi-gpu"].failed == 1
    assert run.impossible_pods == 1
    assert run.classes["cpu-only"].failed == 0


@pytest.mark.parametrize(
    "policy", ["random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd", "default"]
)
def test_every_policy_runs_a_mixed_fill_without_violations(policy: str) -> None:
    trace = (
        [make_pod(name=f"s{i}", cpu=2000, milli=100 * (1 + i % 9)) for i in range(30)]
        + [make_pod(name=f"w{i}", cpu=4000, gpus=1 + i % 3) for i in range(15)]
        + [make_pod(name=f"c{i}", cpu=8000) for i in range(10)]
    )
    run = run_fill(make_cluster(6, gpus=4, cpu=48_000), trace, policy, 42)
    assert run.bind_violations == 0
    assert len(run.unallocated_gpu_pct) == 131
    assert 0 <= run.unallocated_at_100 <= 100
