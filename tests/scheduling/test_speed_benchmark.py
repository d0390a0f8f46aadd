"""benchmarks/speed.py measured small: both rates count what they placed (no timing asserted)."""

from __future__ import annotations

import pytest

from benchmarks.speed import core_rate, engine_rate
from gpufleet.testing.builders import make_cluster, make_pod


@pytest.mark.parametrize("policy", ["bestfit", "default"])
def test_the_core_rate_counts_every_pod_the_core_binds_until_idle(policy: str) -> None:
    nodes = make_cluster(3, gpus=4)
    pods = [make_pod(f"p{i}", gpus=1 + i % 2) for i in range(8)]  # 12 GPUs asked, 12 there
    rate, core_placed = core_rate(nodes, pods, policy)
    _, engine_placed = engine_rate(nodes, pods, policy)
    assert core_placed == engine_placed == 8  # one cycle alone would bind one
    assert rate > 0
