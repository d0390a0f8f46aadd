"""A simulated run may start with no node at all, its pools at zero: the first workloads (a gang
of multi-GPU pods too) arrive on an empty cluster, wait for the pool's nodes and run."""

from __future__ import annotations

import pytest

from gpufleet.backends.sim.node_pools import PoolSettings
from gpufleet.backends.sim.run import run_workloads
from gpufleet.model.workload import TimedWorkload
from gpufleet.testing.builders import make_node_pool, make_workload


@pytest.mark.parametrize("policy", ["default", "bestfit"])
@pytest.mark.parametrize(("pods", "gpus"), [(1, 1), (1, 4), (2, 2)], ids=["one", "multi", "gang"])
def test_work_arriving_on_an_empty_cluster_waits_for_the_pools_nodes(
    policy: str, pods: int, gpus: int
) -> None:
    pool = make_node_pool("gpus", gpus=8, max_nodes=2, delay=60.0)
    workload = make_workload("job", pods=pods, gpus=gpus)
    run = run_workloads(
        [], [TimedWorkload(workload, 0.0, 600.0)], policy, 0, node_pools=PoolSettings((pool,))
    )
    assert run.replay.never_ran == 0
    assert run.pools is not None
    assert run.pools.pools[0].added >= 1
    assert run.replay.queueing_delay.max == pytest.approx(60.0, abs=15.0)
