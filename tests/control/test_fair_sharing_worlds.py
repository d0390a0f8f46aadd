"""Fair sharing over time is off in every world unless its profile turns it on: the simulated
cluster (``simulate``, the benchmarks), ``serve``, ``serve --local`` and the Kubernetes
scheduler each build their core from a profile whose default has no ``fairSharing``, and a
core built from it keeps no usage history (so that it decides exactly as before)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.backends.kube.scheduler import SchedulerOptions
from gpufleet.backends.sim.run import run_workloads
from gpufleet.control.factory import build_core
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.times import simulated_time
from gpufleet.scheduling.profile import Profile
from gpufleet.service.plane_book import ServeOptions
from gpufleet.testing.builders import make_node, make_queue
from gpufleet.testing.local_service import LocalHarness
from tests.backends.local.conftest import eight_gpus, state_root

__all__ = ["eight_gpus", "state_root"]


def _simulated() -> Profile:
    default = inspect.signature(run_workloads).parameters["profile"].default
    assert isinstance(default, Profile)
    return default


WORLDS: list[object] = [
    pytest.param(_simulated, id="simulated-cluster"),
    pytest.param(lambda: ServeOptions().profile, id="serve-and-serve-local"),
    pytest.param(lambda: SchedulerOptions().profile, id="kubernetes-scheduler"),
]


@pytest.mark.parametrize("default_profile", WORLDS)
def test_each_worlds_default_profile_keeps_no_usage_history(
    default_profile: Callable[[], Profile],
) -> None:
    profile = default_profile()
    assert profile.fair_sharing is None
    core = build_core(
        [make_node("n")], "default", queues={"q": make_queue("q")},
        time_format=simulated_time, profile=profile,
    )  # fmt: skip
    assert core.state.usage_history is None
    assert all(type(w).__name__ != "UsageHistory" for w in core.state.running.watchers)


def test_serve_local_keeps_no_usage_history_by_default(
    eight_gpus: NodeInventory, state_root: Path
) -> None:
    harness = LocalHarness.start(eight_gpus, state_root)
    try:
        assert harness.plane.core.state.usage_history is None
        queue = harness.client("admin").get("/api/v1/queues").json()[0]
        assert queue["fair_share"] is None
    finally:
        harness.shut_down()
