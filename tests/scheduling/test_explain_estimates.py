"""Explain's estimates: a preemption that waits for its victims' minimum run time starts then,
naming them; a workload that can never fit is "never", with no estimate (issue 29, item 14)."""

from __future__ import annotations

import pytest

from gpufleet.model.events import DeviceHealthChanged
from gpufleet.model.workload import Workload
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.view import PendingExplanation
from gpufleet.testing.builders import make_cluster, make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

MIN_RUNTIME = 600.0
DAY = 86_400.0


def explained(core: SchedulerCore, key: str) -> PendingExplanation:
    (found,) = [e for e in core.explain_pending() if e.workload == key]
    return found


def waiting_after(
    running: list[Workload], arriving: Workload, at: float = 120.0
) -> tuple[SchedulerCore, PendingExplanation]:
    """A 4-GPU node where ``running`` start at 0 (expected to run a day) and ``arriving``
    comes at ``at``, under a minimum run time of 10 minutes."""
    core = make_core(
        make_cluster(1, gpus=4),
        [make_queue("research", 4, borrow=0)],
        min_runtime=MIN_RUNTIME,
    )
    cluster = EchoCluster(core)
    cluster.submit(*running, now=0.0)
    cluster.settle(at)
    cluster.submit(arriving, now=at)
    return core, explained(core, arriving.key)


@pytest.mark.parametrize(
    ("running", "arriving", "start", "victims"),
    [
        pytest.param(
            [make_workload("lowpri", "research", gpus=4, runtime=DAY, namespace="research")],
            make_workload("urgent", "research", gpus=4, priority=100, namespace="research"),
            MIN_RUNTIME,
            "research/lowpri",
            id="one-victim-ripens",
        ),
        pytest.param(
            [
                make_workload("low-a", "research", gpus=2, runtime=DAY, namespace="research"),
                make_workload("low-b", "research", gpus=2, runtime=DAY, namespace="research"),
            ],
            make_workload("urgent", "research", gpus=2, priority=100, namespace="research"),
            MIN_RUNTIME,
            "research/low-a",
            id="the-first-victim-is-enough",
        ),
        pytest.param(
            [make_workload("keep", "research", gpus=4, runtime=DAY, namespace="research",
                           preemptible=False)],
            make_workload("urgent", "research", gpus=4, priority=100, namespace="research"),
            DAY,
            None,
            id="no-victim-waits-for-the-end",
        ),
        pytest.param(
            [make_workload("peer", "research", gpus=4, runtime=DAY, namespace="research",
                           priority=100)],
            make_workload("urgent", "research", gpus=4, priority=100, namespace="research"),
            DAY,
            None,
            id="same-priority-is-no-victim",
        ),
    ],
)  # fmt: skip
def test_a_preemption_waiting_on_minimum_run_time_is_estimated_then(
    running: list[Workload], arriving: Workload, start: float, victims: str | None
) -> None:
    _, why = waiting_after(running, arriving)
    assert why.estimated_start == start
    assert not why.never
    if victims is None:
        assert "Will preempt" not in why.message
    else:
        assert why.message.endswith(f"Will preempt {victims} at t=10m00s."), why.message


@pytest.mark.parametrize(
    ("arriving", "never"),
    [
        pytest.param(make_workload("huge", gpus=8), True, id="a-pod-larger-than-any-node"),
        pytest.param(make_workload("gang", pods=3, gpus=4), True, id="gang-past-the-cluster"),
        pytest.param(make_workload("models", gpus=1, models=["T4"]), True, id="model-none-has"),
        pytest.param(make_workload("waits", gpus=4), False, id="fits-once-the-node-is-free"),
    ],
)  # fmt: skip
def test_a_workload_that_can_never_fit_is_never(arriving: Workload, never: bool) -> None:
    core = make_core(make_cluster(2, gpus=4))
    cluster = EchoCluster(core)
    cluster.submit(make_workload("busy", gpus=4, runtime=DAY, preemptible=False), now=0.0)
    cluster.submit(make_workload("other", gpus=4, runtime=DAY, preemptible=False), now=0.0)
    cluster.submit(arriving, now=60.0)
    why = explained(core, arriving.key)
    assert why.never is never
    assert (why.estimated_start is None) if never else (why.estimated_start == DAY)


def test_never_is_not_said_while_a_gpu_is_out() -> None:
    """A withdrawn GPU may come back: the workload may fit then."""
    core = make_core([make_node("n", gpus=4)])
    cluster = EchoCluster(core)
    core.handle(DeviceHealthChanged("n", (3,)))
    cluster.submit(make_workload("four", gpus=4), now=0.0)
    assert not explained(core, "default/four").never
