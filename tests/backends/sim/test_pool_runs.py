"""A run whose GPUs all come from node pools, as `simulate --scenario` makes one: quotas count
the cluster the pools may grow to, pods on nodes that joined are costed by those nodes, and the
GPU allocation is of the GPUs there at each moment."""

from __future__ import annotations

import pytest

from gpufleet.backends.sim.costs import CostSettings
from gpufleet.backends.sim.node_pools import PoolSettings
from gpufleet.backends.sim.results import TenancyRun
from gpufleet.backends.sim.run import run_workloads
from gpufleet.model.workload import TimedWorkload
from gpufleet.testing.builders import make_node, make_node_pool, make_queue, make_workload
from gpufleet.testing.economics_builders import price_list

HOUR = 3600.0


def _run(quota_gpus: float, cost: CostSettings | None = None, later: bool = False) -> TenancyRun:
    """A CPU node, a pool of up to 3 H100 nodes of 8 (none at the start, each joining 5
    minutes after it is asked for), and a gang of 2 x 8 GPUs for an hour in a queue of
    ``quota_gpus`` GPUs; ``later``: and a pod of 8 GPUs for an hour at 30 minutes."""
    cpu_only = make_node("cpu-0", gpus=0)
    pool = make_node_pool("h100", price=20.0, max_nodes=3, gpus=8, model="H100", delay=300.0)
    gang = make_workload("train", queue="team", pods=2, gpus=8)
    workloads = [TimedWorkload(gang, created=0.0, duration=HOUR)]
    if later:
        single = make_workload("eval", queue="team", gpus=8)
        workloads.append(TimedWorkload(single, created=HOUR / 2, duration=HOUR))
    return run_workloads(
        [cpu_only],
        workloads,
        "default",
        1,
        queues={"team": make_queue("team", gpus=quota_gpus, borrow=0)},
        cost=cost,
        node_pools=PoolSettings((pool,)),
    )


def test_work_within_quota_gets_nodes_when_the_cluster_starts_without_gpus() -> None:
    result = _run(quota_gpus=16)
    assert result.waiting_at_end == []
    assert result.replay.never_ran == 0
    assert result.tenancy.queues["team"].gpu_hours_used == pytest.approx(16.0)
    # Entitled to its quota while it waited for the nodes too, not to the GPUs there at first.
    assert result.tenancy.queues["team"].gpu_hours_entitled >= 16.0
    assert result.pools is not None
    (usage,) = result.pools.pools
    assert (usage.added, usage.nodes_peak) == (2, 2)


def test_work_over_its_quota_still_waits_for_quota_not_for_nodes() -> None:
    result = _run(quota_gpus=8)
    (waiting,) = result.waiting_at_end
    assert waiting.waiting_for == "quota"
    assert result.pools is not None
    assert result.pools.pools[0].added == 0


def test_pods_on_nodes_that_joined_are_costed_by_their_model_and_capacity_type() -> None:
    result = _run(quota_gpus=16, cost=CostSettings(price_list(), sample_every_s=None))
    (report,) = result.cost
    team = next(g for g in report.groups if g.name == "team")
    assert team.gpu_hours == pytest.approx(16.0)
    # The test's list: an H100 GPU-hour on demand at 10.
    assert team.gpu_cost == pytest.approx(160.0)


def test_the_allocation_is_of_the_gpus_there_at_each_moment() -> None:
    # From 0 to the last arrival (30m): no GPU until the gang's two nodes join at 5m, then
    # all 16 held; at the run's end one node is left, which must not be the denominator.
    result = _run(quota_gpus=24, later=True)
    assert result.allocation_busy_pct == pytest.approx(100.0)
