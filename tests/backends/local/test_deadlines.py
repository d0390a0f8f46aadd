"""Time limits on the local machine: a gang past its ``deadline_s`` is stopped and failed with
``DeadlineExceeded``; one that ends in time succeeds. The machine's clock is stepped by hand
(no test sleeps for a deadline); the processes are real."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.backends.local.machine import DEADLINE_EXCEEDED, LocalMachine, WallClock
from gpufleet.backends.local.node import machine_node
from gpufleet.model.events import ClusterEvent, JobEnded, PodDeleted, PodEnd
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.processes import ProcessSpec
from gpufleet.testing.builders import make_workload
from gpufleet.testing.waiting import wait_until
from tests.backends.local.test_machine import World, report_specs


class SteppedClock(WallClock):
    """Wall-clock seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.time = time.time()

    def now(self) -> float:
        return self.time

    def advance(self, seconds: float) -> None:
        self.time += seconds


@pytest.fixture
def clock() -> SteppedClock:
    return SteppedClock()


@pytest.fixture
def world(eight_gpus: NodeInventory, state_root: Path, clock: SteppedClock) -> Iterator[World]:
    made = World(eight_gpus, state_root / "state")
    made.machine.clock = clock
    yield made
    made.shut_down()


def limited(specs: dict[str, ProcessSpec], seconds: float | None) -> dict[str, ProcessSpec]:
    return {key: dataclasses.replace(spec, deadline_s=seconds) for key, spec in specs.items()}


@pytest.mark.parametrize(
    ("pods", "limits", "advance", "expected"),
    [
        pytest.param(1, [1.0], 1.5, PodEnd.FAILED, id="sleeps-past-1s-stopped"),
        pytest.param(1, [1.0], 0.9, None, id="before-its-deadline-runs-on"),
        pytest.param(1, [None], 3600.0, None, id="no-limit-runs-on"),
        pytest.param(2, [5.0, 1.0], 1.0, PodEnd.FAILED, id="gang-stopped-at-its-shortest"),
    ],
)
def test_a_run_past_its_time_limit_is_stopped_and_failed(
    world: World,
    clock: SteppedClock,
    pods: int,
    limits: list[float | None],
    advance: float,
    expected: PodEnd | None,
) -> None:
    job = make_workload("slow", pods=pods, gpus=1)
    never = world.machine.tenant_root("default") / "never"
    plain = report_specs(world, job, "0", str(never))
    specs = {
        key: dataclasses.replace(spec, deadline_s=limit)
        for (key, spec), limit in zip(plain.items(), limits, strict=True)
    }
    keys = [pod.key for pod in job.pods]
    world.machine.submit(job, specs)
    world.run_until(world.printed(*keys))

    clock.advance(advance)
    if expected is None:
        world.loop.turn()
        assert all(world.machine.run_of(key) is not None for key in keys)
        assert not [e for e in world.recorder.events if isinstance(e, JobEnded)]
        return
    world.run_until(world.ended(*keys))
    deleted = world.recorder.deleted()
    for key in keys:
        assert deleted[key].end is expected
        assert deleted[key].message.startswith(f"{DEADLINE_EXCEEDED}: ")
        assert "killed by signal 15 (SIGTERM)" in deleted[key].message
    ended = [e for e in world.recorder.events if isinstance(e, JobEnded)]
    assert [(e.job, e.pod_key, e.outcome, e.reason) for e in ended] == [
        ("slow", keys[0], "Failed", DEADLINE_EXCEEDED)
    ]
    assert world.core.running == {}


def test_a_run_that_ends_before_its_deadline_succeeds(world: World, clock: SteppedClock) -> None:
    job = make_workload("quick", gpus=1)
    world.machine.submit(job, limited(report_specs(world, job, "0"), 1.0))
    world.run_until(world.ended("default/quick"))
    clock.advance(5.0)
    world.loop.turn()
    assert world.recorder.deleted()["default/quick"].end is PodEnd.SUCCEEDED
    assert not [e for e in world.recorder.events if isinstance(e, JobEnded)]


def test_the_deadline_holds_across_a_restart(
    eight_gpus: NodeInventory, state_root: Path, clock: SteppedClock
) -> None:
    state = state_root / "state"
    first = World(eight_gpus, state)
    first.machine.clock = clock
    job = make_workload("long", gpus=1)
    never = first.machine.tenant_root("default") / "never"
    first.machine.submit(job, limited(report_specs(first, job, "0", str(never)), 10.0))
    first.run_until(first.printed("default/long"))
    first.machine.stop()
    first.machine.close()

    node = machine_node(eight_gpus, "box", 64_000, 262_144)
    second = LocalMachine(eight_gpus, state, node=node, allow_root=True, grace_s=5)
    second.clock = clock
    events: list[ClusterEvent] = []
    try:
        second.recover({pod.key: pod for pod in job.pods})
        clock.advance(9.0)
        events.extend(second.poll_events())
        assert second.run_of("default/long") is not None
        clock.advance(1.0)

        def gone() -> bool:
            events.extend(second.poll_events())
            return not second.supervisor.running

        wait_until(gone)
        assert [e.reason for e in events if isinstance(e, JobEnded)] == [DEADLINE_EXCEEDED]
        ends = [(e.key, e.end) for e in events if isinstance(e, PodDeleted)]
        assert ends == [("default/long", PodEnd.FAILED)]
    finally:
        second.close()
