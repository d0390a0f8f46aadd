"""Workloads held out of their queues: pods with scheduling gates (a gang waits whole) and
suspended Jobs are never placed, explained as kube-scheduler and Kueue word it, and join their
queue when released."""

from __future__ import annotations

import dataclasses

import pytest

from gpufleet.model.events import PodAdded, PodDeleted, WorkloadReleased
from gpufleet.model.workload import SCHEDULING_GATED, SUSPENDED, Workload
from gpufleet.testing.builders import make_node, make_pod, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core


def cluster() -> EchoCluster:
    return EchoCluster(make_core([make_node("n0", gpus=8)], [make_queue("default")]))


def gated_gang() -> Workload:
    gang = make_workload("gang", pods=3, gpus=1)
    pods = list(gang.pods)
    pods[1] = dataclasses.replace(pods[1], scheduling_gates=("example.com/wait",))
    return dataclasses.replace(gang, pods=tuple(pods))


HELD = [
    pytest.param(make_workload("one", gates=("a/b",)), SCHEDULING_GATED, "a/b", id="gated-pod"),
    pytest.param(gated_gang(), SCHEDULING_GATED, "default/gang-1", id="gang-one-pod-gated"),
    pytest.param(make_workload("job", pods=2, suspended=True), SUSPENDED, "suspend", id="job"),
]


@pytest.mark.parametrize(("workload", "reason", "told"), HELD)
def test_a_held_workload_is_never_placed_and_says_why(
    workload: Workload, reason: str, told: str
) -> None:
    echo = cluster()
    echo.settle(1.0)  # the core's clock reads 1.0 when the workload arrives
    echo.submit(workload, now=1.0)
    echo.settle(100.0)
    assert echo.running == {}
    [explained] = echo.core.explain_pending()
    assert (explained.workload, explained.waiting_for) == (workload.key, reason)
    assert told in explained.message
    [waiting] = echo.core.view().waiting
    assert (waiting.key, waiting.waiting_for, waiting.reason) == (workload.key, reason, reason)
    assert (waiting.pods, waiting.since) == (len(workload.pods), 1.0)


def ungated(workload: Workload) -> Workload:
    pods = tuple(dataclasses.replace(p, scheduling_gates=()) for p in workload.pods)
    return dataclasses.replace(workload, pods=pods, suspended=False)


@pytest.mark.parametrize(("workload", "reason", "told"), HELD)
def test_a_released_workload_joins_its_queue_and_runs(
    workload: Workload, reason: str, told: str
) -> None:
    echo = cluster()
    echo.submit(workload, now=1.0)
    echo.core.handle(WorkloadReleased(ungated(workload)))
    echo.settle(2.0)
    assert set(echo.running) == {p.key for p in workload.pods}
    assert echo.core.explain_pending() == []


def test_a_gang_keeps_waiting_while_any_gate_is_left() -> None:
    echo = cluster()
    gang = make_workload("gang", pods=2, gates=("a", "b"))
    echo.submit(gang, now=1.0)
    half = tuple(dataclasses.replace(p, scheduling_gates=("b",)) for p in gang.pods[:1])
    echo.core.handle(WorkloadReleased(dataclasses.replace(gang, pods=half + gang.pods[1:])))
    echo.settle(2.0)
    assert echo.running == {}
    [explained] = echo.core.explain_pending()
    assert explained.waiting_for == SCHEDULING_GATED
    assert "(b)" in explained.message
    assert "(a, b)" in explained.message


def test_a_held_workload_whose_pod_goes_is_forgotten() -> None:
    echo = cluster()
    workload = make_workload("one", gates=("a",))
    echo.submit(workload, now=1.0)
    echo.core.handle(PodDeleted(workload.pods[0].key))
    echo.core.handle(WorkloadReleased(ungated(workload)))  # too late: nothing held
    echo.settle(2.0)
    assert echo.running == {}
    assert echo.core.explain_pending() == []


def test_held_workloads_stand_behind_what_their_queue_tries() -> None:
    echo = EchoCluster(make_core([make_node("n0", gpus=1)], [make_queue("default")]))
    echo.submit(make_workload("runs", gpus=1), make_workload("waits", gpus=1), now=1.0)
    echo.submit(make_workload("gated", gpus=1, gates=("g",)), now=2.0)
    positions = {e.workload: (e.position, e.waiting_for) for e in echo.core.explain_pending()}
    assert positions == {"default/waits": (1, "capacity"), "default/gated": (2, SCHEDULING_GATED)}


def test_a_lone_pod_of_a_held_workload_is_not_made_a_workload_of_its_own() -> None:
    echo = cluster()
    workload = make_workload("one", gates=("a",))
    echo.submit(workload, now=1.0)
    echo.core.handle(PodAdded(make_pod("one", gpus=1)))
    echo.settle(2.0)
    assert echo.running == {}
