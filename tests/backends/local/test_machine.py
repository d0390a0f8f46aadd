"""The local machine driven by a real scheduling core through the control loop."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpufleet.backends.local.machine import LocalMachine, SubmitRefusedError
from gpufleet.backends.local.node import machine_node
from gpufleet.backends.local.ports import PortBook
from gpufleet.control.loop import ControlLoop, Turn, sync
from gpufleet.io.errors import InputError
from gpufleet.io.kube.process_specs import process_spec_from_object
from gpufleet.model import Workload
from gpufleet.model.events import ClusterEvent, PodDeleted, PodEnd, PodReady
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.processes import ProcessSpec
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.testing.builders import make_queue, make_workload
from gpufleet.testing.fakes import make_core
from gpufleet.testing.waiting import wait_until
from tests.backends.local.scripts import CHECKPOINTING, REPORT, write_script

BASE_ENV = {"PATH": "/usr/bin:/bin"}


class Recorder:
    """Every event the loop took in."""

    def __init__(self) -> None:
        self.events: list[ClusterEvent] = []

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        self.events.extend(events)

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        pass

    def deleted(self) -> dict[str, PodDeleted]:
        return {e.key: e for e in self.events if isinstance(e, PodDeleted)}


class World:
    """A machine, a core over its one node, and the loop that joins them."""

    def __init__(self, inventory: NodeInventory, state: Path) -> None:
        node = machine_node(inventory, "box", 64_000, 262_144)
        self.machine = LocalMachine(inventory, state, node=node, allow_root=True, grace_s=5)
        self.core = make_core([node], [make_queue("default", gpus=8)], min_runtime=0.0)
        self.recorder = Recorder()
        self.loop = ControlLoop(self.machine, lambda: self.core, [self.recorder])
        sync(self.core, self.machine.list_state())

    def run_until(self, condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {condition}")
            timer = self.loop.turn()
            self.machine.wait(min(timer, self.machine.clock.now() + 0.05))

    def shut_down(self) -> None:
        """Stop what still runs (no grace) and wait for it to end: a test leaves nothing."""
        machine = self.machine
        machine.grace_s = 0.0
        machine.cancel(list(machine.state.bound))
        self.run_until(lambda: not machine.supervisor.running)
        machine.close()

    def seen(self, pod_key: str) -> dict[str, Any]:
        run = self.machine.run_of(pod_key)
        assert run is not None, f"{pod_key} does not run"
        text = self.machine.supervisor.log_path(run).read_text()
        line = next(line for line in text.splitlines() if line.startswith("SEEN "))
        found: dict[str, Any] = json.loads(line.removeprefix("SEEN "))
        return found

    def printed(self, *pod_keys: str) -> Callable[[], bool]:
        def check() -> bool:
            for key in pod_keys:
                run = self.machine.run_of(key)
                if run is None:
                    return False
                path = self.machine.supervisor.log_path(run)
                if not path.exists() or "SEEN " not in path.read_text():
                    return False
            return True

        return check

    def ended(self, *pod_keys: str) -> Callable[[], bool]:
        return lambda: set(pod_keys) <= set(self.recorder.deleted())


@pytest.fixture
def world(eight_gpus: NodeInventory, state_root: Path) -> Iterator[World]:
    made = World(eight_gpus, state_root / "state")
    yield made
    made.shut_down()


def report_specs(world: World, workload: Workload, *args: str) -> dict[str, ProcessSpec]:
    root = world.machine.tenant_root(workload.namespace)
    script = write_script(root, "report.py", REPORT)
    spec = ProcessSpec((sys.executable, str(script), *args), sys.executable, BASE_ENV, str(root))
    return {pod.key: spec for pod in workload.pods}


def test_three_jobs_on_eight_gpus_each_see_only_their_own(world: World) -> None:
    release = world.machine.tenant_root("default") / "release"
    a = make_workload("a", gpus=3)
    b = make_workload("b", gpus=2)
    gang = make_workload("c", pods=2, gpus=1)
    for workload in (a, b, gang):
        world.machine.submit(workload, report_specs(world, workload, "0", str(release)))
    keys = ["default/a", "default/b", "default/c-0", "default/c-1"]
    world.run_until(world.printed(*keys))

    seen = {key: world.seen(key) for key in keys}
    devices = {key: seen[key]["CUDA_VISIBLE_DEVICES"].split(",") for key in keys}
    assert [len(devices[k]) for k in keys] == [3, 2, 1, 1]
    every = [uuid for uuids in devices.values() for uuid in uuids]
    assert len(every) == len(set(every)), f"a GPU is shared: {devices}"
    machine_uuids = {d.uuid for d in world.machine.inventory.devices}
    assert set(every) <= machine_uuids
    assert all(seen[k]["NVIDIA_VISIBLE_DEVICES"] == seen[k]["CUDA_VISIBLE_DEVICES"] for k in keys)

    ranks = [seen["default/c-0"], seen["default/c-1"]]
    assert [r["RANK"] for r in ranks] == ["0", "1"]
    assert {r["WORLD_SIZE"] for r in ranks} == {"2"}
    assert {r["MASTER_ADDR"] for r in ranks} == {"127.0.0.1"}
    assert ranks[0]["MASTER_PORT"] == ranks[1]["MASTER_PORT"] is not None
    assert seen["default/a"]["WORLD_SIZE"] is None  # not a gang: no rendezvous
    assert {e.key for e in world.recorder.events if isinstance(e, PodReady)} >= set(keys[2:])

    release.touch()
    world.run_until(world.ended(*keys))
    assert {k: e.end for k, e in world.recorder.deleted().items()} == dict.fromkeys(
        keys, PodEnd.SUCCEEDED
    )
    assert world.core.running == {}


def test_a_failing_process_is_failed_with_its_exit_code(world: World) -> None:
    job = make_workload("bad", gpus=1)
    world.machine.submit(job, report_specs(world, job, "3"))
    world.run_until(world.ended("default/bad"))
    deleted = world.recorder.deleted()["default/bad"]
    assert (deleted.end, deleted.message) == (PodEnd.FAILED, "exit code 3")


def test_a_gang_member_failing_takes_the_gang_down(world: World) -> None:
    gang = make_workload("g", pods=2, gpus=1)
    root = world.machine.tenant_root("default")
    script = write_script(root, "report.py", REPORT)
    specs = {
        "default/g-0": ProcessSpec(
            (sys.executable, str(script), "5"), sys.executable, BASE_ENV, str(root)
        ),
        "default/g-1": ProcessSpec(
            (sys.executable, str(script), "0", str(root / "never")),
            sys.executable,
            BASE_ENV,
            str(root),
        ),
    }
    world.machine.submit(gang, specs)
    world.run_until(world.ended("default/g-0", "default/g-1"))
    deleted = world.recorder.deleted()
    assert deleted["default/g-0"].end is PodEnd.FAILED
    assert deleted["default/g-1"].end is PodEnd.FAILED
    assert "default/g-0 of its gang failed (exit code 5)" in deleted["default/g-1"].message
    assert world.core.running == {}


def test_preemption_stops_with_a_checkpoint_and_the_job_resumes(world: World) -> None:
    root = world.machine.tenant_root("default")
    script = write_script(root, "train.py", CHECKPOINTING)
    checkpoint = root / "step.txt"
    low = make_workload("low", gpus=8, priority=0)
    spec = ProcessSpec(
        (sys.executable, str(script), str(checkpoint), "100000"),
        sys.executable,
        BASE_ENV,
        str(root),
    )
    world.machine.submit(low, {"default/low": spec})
    first_log: list[Path] = []

    def training() -> bool:
        run = world.machine.run_of("default/low")
        if run is None:
            return False
        path = world.machine.supervisor.log_path(run)
        first_log[:] = [path]
        return path.exists() and "step 3\n" in path.read_text()

    world.run_until(training)
    high = make_workload("high", gpus=8, priority=100)
    world.machine.submit(high, report_specs(world, high, "0"))
    world.run_until(world.ended("default/high"))

    evicted = next(
        e for e in world.recorder.events if isinstance(e, PodDeleted) and e.key == "default/low"
    )
    assert evicted.end is PodEnd.EVICTED
    assert "checkpoint at" in first_log[0].read_text()
    saved = int(checkpoint.read_text())
    world.run_until(lambda: world.machine.run_of("default/low") is not None)
    run = world.machine.run_of("default/low")
    assert run is not None
    assert run != first_log[0].parent.name  # a new run, resuming
    wait_until(
        lambda: f"resumed from {saved}" in world.machine.supervisor.log_path(run).read_text()
    )
    world.machine.cancel(["default/low"])
    world.run_until(lambda: world.core.running == {})


def test_runs_survive_a_restart_and_are_not_started_twice(
    eight_gpus: NodeInventory, state_root: Path
) -> None:
    state = state_root / "state"
    first = World(eight_gpus, state)
    release = first.machine.tenant_root("default") / "release"
    job = make_workload("long", gpus=2)
    first.machine.submit(job, report_specs(first, job, "0", str(release)))
    first.run_until(first.printed("default/long"))
    before = first.seen("default/long")
    first.machine.stop()
    first.machine.close()

    second = World.__new__(World)
    node = machine_node(eight_gpus, "box", 64_000, 262_144)
    second.machine = LocalMachine(eight_gpus, state, node=node, allow_root=True, grace_s=5)
    second.machine.recover({pod.key: pod for pod in job.pods})
    second.core = make_core([node], [make_queue("default", gpus=8)], min_runtime=0.0)
    second.recorder = Recorder()
    second.loop = ControlLoop(second.machine, lambda: second.core, [second.recorder])
    try:
        sync(second.core, second.machine.list_state())
        assert set(second.core.owner) == {"default/long"}
        assert second.seen("default/long")["pid"] == before["pid"]
        release.touch()
        second.run_until(second.ended("default/long"))
        assert second.recorder.deleted()["default/long"].end is PodEnd.SUCCEEDED
        runs = list(second.machine.supervisor.runs_dir.iterdir())
        assert [r.name for r in runs] == ["default_long_1"]
    finally:
        second.machine.close()


def test_gpu_needs_larger_than_the_machine_are_refused(world: World) -> None:
    job = make_workload("huge", gpus=9)
    with pytest.raises(SubmitRefusedError, match="asks for 9 GPUs; this machine has 8"):
        world.machine.submit(job, report_specs(world, job, "0"))
    world.run_until(lambda: True)
    assert list(world.machine.supervisor.runs_dir.iterdir()) == []
    assert world.core.pending.group_of("default/huge") is None


@pytest.mark.parametrize(
    ("container", "field"),
    [
        pytest.param({"command": ["no-such-command-xyz"]}, "command[0]", id="command-not-found"),
        pytest.param(
            {"command": ["python3"], "workingDir": "/etc"}, "workingDir", id="cwd-outside-tenant"
        ),
    ],
)
def test_bad_input_errors_with_nothing_started(
    world: World, container: dict[str, Any], field: str
) -> None:
    manifest = {"kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": [container]}}
    with pytest.raises(InputError) as caught:
        process_spec_from_object(manifest, "x.yaml", world.machine.tenant_root("default"), BASE_ENV)
    assert caught.value.field == f"spec.containers[0].{field}"
    world.run_until(lambda: True)
    assert list(world.machine.supervisor.runs_dir.iterdir()) == []


def test_live_gangs_never_share_a_port_even_across_a_restart(
    eight_gpus: NodeInventory, state_root: Path
) -> None:
    state = state_root / "state"
    first = World(eight_gpus, state)
    kernel = iter([5000, 5000, 5001])  # the kernel hands out 5000 twice
    first.machine.ports = PortBook(lambda: next(kernel))
    release = first.machine.tenant_root("default") / "release"
    gangs = [make_workload(name, pods=2, gpus=1) for name in ("g", "h")]
    for gang in gangs:
        first.machine.submit(gang, report_specs(first, gang, "0", str(release)))
    keys = ["default/g-0", "default/g-1", "default/h-0", "default/h-1"]
    first.run_until(first.printed(*keys))
    ports = {key: first.seen(key)["MASTER_PORT"] for key in keys}
    assert ports == {"default/g-0": "5000", "default/g-1": "5000",
                     "default/h-0": "5001", "default/h-1": "5001"}  # fmt: skip
    first.machine.stop()
    first.machine.close()

    node = machine_node(eight_gpus, "box", 64_000, 262_144)
    second = LocalMachine(eight_gpus, state, node=node, allow_root=True, grace_s=0)
    try:
        second.recover({pod.key: pod for gang in gangs for pod in gang.pods})
        assert second.ports.held == {5000, 5001}  # held again while the gangs run
        for gang in gangs:
            second.resume(gang, report_specs(first, gang, "0", str(release)))
        release.touch()
        ended: set[str] = set()

        def all_ended() -> bool:
            second.wait(second.clock.now() + 0.05)
            ended.update(e.key for e in second.poll_events() if isinstance(e, PodDeleted))
            return ended == set(keys)

        wait_until(all_ended)
        assert second.ports.held == frozenset()  # the gangs ended: their ports are free
    finally:
        second.close()
