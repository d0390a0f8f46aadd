"""The local machine after a restart, where the runs of a workload do not agree: a retry whose
GPUs are gone waits to be placed again; a gang with a member failed for good (as the server
recorded it) or with no run at all is not left part running. The server is played by hand:
:meth:`LocalMachine.recover`, then :meth:`LocalMachine.resume` as the plane calls them."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpufleet.backends.local.machine import LocalMachine
from gpufleet.backends.local.node import machine_node
from gpufleet.backends.local.run_state import EXIT_FILE, SHIM_FILE, read_process
from gpufleet.backends.local.supervisor import RunHandle, Supervisor
from gpufleet.control.loop import ControlLoop, sync
from gpufleet.model import Pod, Workload
from gpufleet.model.actions import Evict
from gpufleet.model.events import PodDeleted, PodEnd, PodRestarted, WorkloadAdded
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.processes import ProcessSpec
from gpufleet.testing.builders import make_queue, make_workload
from gpufleet.testing.fakes import make_core
from gpufleet.testing.waiting import wait_until
from tests.backends.local.scripts import STUBBORN, log_has, python_spec, write_script
from tests.backends.local.test_machine import Recorder, World, report_specs


def reopen(
    first: World,
    inventory: NodeInventory,
    resumed: Sequence[tuple[Workload, Mapping[str, ProcessSpec]]],
    waiting: Mapping[str, Sequence[Pod]] | None = None,
    failed: Mapping[str, Sequence[str]] | None = None,
) -> World:
    """A new machine and core on ``first``'s state directory, as a restarted server makes
    them: every pod recovered, each workload resumed, then the core synchronised."""
    first.machine.stop()
    first.machine.close()
    world = World.__new__(World)
    node = machine_node(inventory, "box", 64_000, 262_144)
    world.machine = LocalMachine(
        inventory, first.machine.state_dir, node=node, allow_root=True, grace_s=5
    )
    ended = {key for keys in (failed or {}).values() for key in keys}
    world.machine.recover(
        {p.key: p for workload, _ in resumed for p in workload.pods if p.key not in ended}
    )
    for workload, specs in resumed:
        world.machine.resume(
            workload,
            specs,
            (waiting or {}).get(workload.key, ()),
            failed=(failed or {}).get(workload.key, ()),
        )
    world.core = make_core([node], [make_queue("default", gpus=8)], min_runtime=0.0)
    world.recorder = Recorder()
    world.loop = ControlLoop(world.machine, lambda: world.core, [world.recorder])
    sync(world.core, world.machine.list_state())
    return world


def without_gpu(inventory: NodeInventory, index: int) -> NodeInventory:
    """The machine come back with one GPU fewer (fallen off the bus at the reboot)."""
    devices = tuple(d for d in inventory.devices if d.index != index)
    return dataclasses.replace(inventory, devices=devices)


def gpu_index(world: World, inventory: NodeInventory, pod_key: str) -> int:
    [uuid] = world.seen(pod_key)["CUDA_VISIBLE_DEVICES"].split(",")
    return next(d.index for d in inventory.devices if d.uuid == uuid)


def test_a_retry_whose_gpu_is_gone_after_a_restart_waits_to_be_placed_again(
    eight_gpus: NodeInventory, state_root: Path
) -> None:
    first = World(eight_gpus, state_root / "state")
    root = first.machine.tenant_root("default")
    blocker = make_workload("blocker", gpus=7)
    blocker_specs = report_specs(first, blocker, "0", str(root / "blocker-go"))
    first.machine.submit(blocker, blocker_specs)
    first.run_until(first.printed("default/blocker"))
    flaky = make_workload("flaky", gpus=1)
    flaky_specs = {
        key: dataclasses.replace(spec, backoff_limit=1)
        for key, spec in report_specs(first, flaky, "3", str(root / "go")).items()
    }
    first.machine.submit(flaky, flaky_specs)
    first.run_until(first.printed("default/flaky"))
    lost_gpu = gpu_index(first, eight_gpus, "default/flaky")
    first_run = first.machine.run_of("default/flaky")
    assert first_run is not None
    (root / "go").touch()  # it fails while no server runs
    wait_until(lambda: (first.machine.supervisor.run_dir(first_run) / EXIT_FILE).exists())

    smaller = without_gpu(eight_gpus, lost_gpu)
    second = reopen(first, smaller, [(blocker, blocker_specs), (flaky, flaky_specs)])
    try:
        second.loop.turn()
        events = second.recorder.events
        restarted = [e for e in events if isinstance(e, PodRestarted)]
        assert [e.key for e in restarted] == ["default/flaky"]
        assert "failure 1 of backoffLimit 1" in restarted[0].message
        replaced = [e for e in events if isinstance(e, PodDeleted)]
        assert [(e.key, e.end) for e in replaced] == [("default/flaky", PodEnd.REPLACED)]
        added = [e.workload.key for e in events if isinstance(e, WorkloadAdded)]
        assert added == [flaky.key]
        assert second.machine.run_of("default/flaky") is None  # waits: the 7 GPUs are taken

        (root / "blocker-go").touch()
        second.run_until(second.printed("default/flaky"))
        assert second.machine.runs_of("default/flaky") == ["default_flaky_1", "default_flaky_2"]
        assert gpu_index(second, smaller, "default/flaky") != lost_gpu
        second.run_until(lambda: second.recorder.deleted()["default/flaky"].end is PodEnd.FAILED)
        assert second.machine.runs_of("default/flaky") == ["default_flaky_1", "default_flaky_2"]
    finally:
        second.shut_down()


def test_a_gang_member_the_server_recorded_failed_stops_the_rest_after_a_restart(
    eight_gpus: NodeInventory, state_root: Path
) -> None:
    first = World(eight_gpus, state_root / "state")
    gang = make_workload("g", pods=2, gpus=1)
    specs = report_specs(first, gang, "0", str(first.machine.tenant_root("default") / "never"))
    first.machine.submit(gang, specs)
    first.run_until(first.printed("default/g-0", "default/g-1"))
    # Its rank 1 failed and was recorded so; the server died before it stopped rank 0.
    kill_run(first, "default/g-1")

    second = reopen(first, eight_gpus, [(gang, specs)], failed={gang.key: ["default/g-1"]})
    try:
        second.run_until(second.ended("default/g-0"))
        gone = second.recorder.deleted()["default/g-0"]
        assert gone.end is PodEnd.FAILED
        assert gone.message.startswith("default/g-1 of its gang failed")
        assert not second.machine.supervisor.running
        assert second.machine.runs_of("default/g-0") == ["default_g-0_1"]
    finally:
        second.shut_down()


def test_a_gang_member_with_no_run_after_a_restart_has_its_gang_placed_again_whole(
    eight_gpus: NodeInventory, state_root: Path
) -> None:
    first = World(eight_gpus, state_root / "state")
    gang = make_workload("g", pods=2, gpus=1)
    specs = report_specs(first, gang, "0", str(first.machine.tenant_root("default") / "go"))
    first.machine.submit(gang, specs)
    first.run_until(first.printed("default/g-0", "default/g-1"))
    before = first.seen("default/g-0")["pid"]
    kill_run(first, "default/g-1")
    shutil.rmtree(first.machine.supervisor.runs_dir / "default_g-1_1")  # its run is gone

    [_, second_pod] = gang.pods
    second = reopen(first, eight_gpus, [(gang, specs)], waiting={gang.key: [second_pod]})
    try:
        second.run_until(second.printed("default/g-0", "default/g-1"))
        assert second.machine.runs_of("default/g-0") == ["default_g-0_1", "default_g-0_2"]
        assert second.seen("default/g-0")["pid"] != before  # stopped, started with its peer
        ports = {second.seen(k)["MASTER_PORT"] for k in ("default/g-0", "default/g-1")}
        assert len(ports) == 1
        replaced = [e.key for e in second.recorder.events if isinstance(e, PodDeleted)]
        assert replaced == ["default/g-0"]
        (first.machine.tenant_root("default") / "go").touch()

        def both_succeeded() -> bool:
            ends = {k: e.end for k, e in second.recorder.deleted().items()}
            return ends == {"default/g-0": PodEnd.SUCCEEDED, "default/g-1": PodEnd.SUCCEEDED}

        second.run_until(both_succeeded)
    finally:
        second.shut_down()


def kill_run(world: World, pod_key: str) -> None:
    """Kill a run's shim and process (SIGKILL), as a crash would, and wait for both."""
    run = world.machine.run_of(pod_key)
    assert run is not None
    run_dir = world.machine.supervisor.run_dir(run)
    child = world.machine.supervisor.child(run)
    shim = read_process(run_dir / SHIM_FILE)
    assert child is not None
    assert shim is not None
    for pid in (child.pid, shim.pid):
        os.kill(pid, signal.SIGKILL)
    world.machine.supervisor.poll()  # reaps the shim


def test_a_run_being_evicted_at_a_restart_waits_again_once_it_has_ended(
    eight_gpus: NodeInventory, state_root: Path
) -> None:
    """The scheduler that evicted it is gone: the machine tells its workload again."""
    first = World(eight_gpus, state_root / "state")
    first.machine.grace_s = 0.3
    root = first.machine.tenant_root("default")
    script = write_script(root, "stubborn.py", STUBBORN)
    job = make_workload("stubborn", gpus=1)
    spec = python_spec(root, script)
    first.machine.submit(job, {"default/stubborn": spec})
    first.run_until(lambda: first.machine.run_of("default/stubborn") is not None)
    run = first.machine.run_of("default/stubborn")
    assert run is not None
    wait_until(log_has(first.machine.supervisor, run, "ready"))
    first.machine.apply([Evict(job.pods[0], "made room")])  # SIGTERM ignored: in its grace

    second = reopen(first, eight_gpus, [(job, {"default/stubborn": spec})])
    try:
        second.run_until(lambda: len(second.machine.runs_of("default/stubborn")) == 2)
        evicted = [e for e in second.recorder.events if isinstance(e, PodDeleted)]
        assert [(e.key, e.end) for e in evicted] == [("default/stubborn", PodEnd.EVICTED)]
        assert evicted[0].message.startswith("made room; killed by signal 9")
        assert second.machine.run_of("default/stubborn") == "default_stubborn_2"
    finally:
        second.shut_down()


class Killed(BaseException):
    """The server dies here, as with SIGKILL: nothing of it runs after this (no cleanup)."""


class DyingSupervisor(Supervisor):
    """A supervisor whose server dies just as it is to start the run ``dies_at``."""

    def __init__(self, state_dir: Path, dies_at: str) -> None:
        super().__init__(state_dir, allow_root=True)
        self.dies_at = dies_at

    def start(self, run_id: str, *args: Any, **kwargs: Any) -> RunHandle:
        if run_id == self.dies_at:
            raise Killed(run_id)
        return super().start(run_id, *args, **kwargs)


def reopen_as_the_plane(
    first: World, inventory: NodeInventory, workload: Workload, specs: Mapping[str, ProcessSpec]
) -> World:
    """:func:`reopen`, the pods that have no run after :meth:`LocalMachine.recover` waiting
    again, as the plane has them (``_take_back``)."""
    first.machine.stop()
    first.machine.close()
    world = World.__new__(World)
    node = machine_node(inventory, "box", 64_000, 262_144)
    world.machine = LocalMachine(
        inventory, first.machine.state_dir, node=node, allow_root=True, grace_s=5
    )
    world.machine.recover({p.key: p for p in workload.pods})
    running = {pod.key for pod, _ in world.machine.list_state().running}
    world.machine.resume(workload, specs, [p for p in workload.pods if p.key not in running])
    world.core = make_core([node], [make_queue("default", gpus=8)], min_runtime=0.0)
    world.recorder = Recorder()
    world.loop = ControlLoop(world.machine, lambda: world.core, [world.recorder])
    sync(world.core, world.machine.list_state())
    return world


@pytest.mark.parametrize(
    "dies_at",
    [
        pytest.param("default_g-1_1", id="between-rank-0-and-rank-1"),
        pytest.param("default_g-0_1", id="before-rank-0"),
    ],
)
def test_a_server_killed_while_a_gang_starts_finds_it_whole_and_runs_each_rank_once(
    eight_gpus: NodeInventory, state_root: Path, dies_at: str
) -> None:
    first = World(eight_gpus, state_root / "state")
    first.machine.supervisor.close()
    first.machine.supervisor = DyingSupervisor(first.machine.state_dir, dies_at)
    gang = make_workload("g", pods=2, gpus=1)
    go = first.machine.tenant_root("default") / "go"
    specs = report_specs(first, gang, "0", str(go))
    first.machine.submit(gang, specs)
    with pytest.raises(Killed):
        first.run_until(lambda: False)
    assert first.machine.runs_of("default/g-1") == []  # the server died before it started
    before = first.machine.runs_of("default/g-0")

    second = reopen_as_the_plane(first, eight_gpus, gang, specs)
    try:
        second.run_until(second.printed("default/g-0", "default/g-1"))
        if before:  # rank 0 ran before the restart: the same run, not started again
            assert second.machine.run_of("default/g-0") == before[0]
        assert second.machine.runs_of("default/g-0") == ["default_g-0_1"]
        assert second.machine.runs_of("default/g-1") == ["default_g-1_1"]
        ports = {second.seen(k)["MASTER_PORT"] for k in ("default/g-0", "default/g-1")}
        ranks = {second.seen(k)["RANK"] for k in ("default/g-0", "default/g-1")}
        assert (len(ports), ranks) == (1, {"0", "1"})
        assert not [e for e in second.recorder.events if isinstance(e, PodDeleted)]
        go.touch()

        def both_succeeded() -> bool:
            ends = {k: e.end for k, e in second.recorder.deleted().items()}
            return ends == {"default/g-0": PodEnd.SUCCEEDED, "default/g-1": PodEnd.SUCCEEDED}

        second.run_until(both_succeeded)
    finally:
        second.shut_down()
