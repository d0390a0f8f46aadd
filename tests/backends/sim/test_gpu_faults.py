"""GPU faults in the simulated cluster: an XID at a time withdraws the device (pods avoid it),
and recovery gives it back (pods use it again); the ground truth refuses a bind on it; the pods
on it crash unless the XID leaves applications running."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.backends.sim.run import run_workloads
from gpufleet.control.loop import run as run_loop
from gpufleet.model import Placement
from gpufleet.model.actions import Action, Bind
from gpufleet.model.events import DeviceHealthChanged
from gpufleet.model.faults import GpuFault
from gpufleet.model.workload import TimedWorkload
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import make_node, make_workload
from gpufleet.testing.fakes import make_core


class RecordingCluster(SimulatedCluster):
    """Records each bind asked for (time, pod name, placement) and every health event."""

    binds: list[tuple[float, str, Placement]]
    health: list[tuple[float, DeviceHealthChanged]]

    def apply(self, actions: Sequence[Action]) -> None:
        for action in actions:
            if isinstance(action, Bind):
                self.binds.append((self.clock.now(), action.pod.name, action.placement))
        super().apply(actions)

    def poll_events(self):  # type: ignore[no-untyped-def]
        events = super().poll_events()
        now = self.clock.now()
        self.health.extend((now, e) for e in events if isinstance(e, DeviceHealthChanged))
        return events


def job(name: str, at: float, runtime: float) -> TimedWorkload:
    return TimedWorkload(make_workload(name, gpus=1), at, runtime)


def play(workloads: list[TimedWorkload], faults: list[GpuFault]) -> RecordingCluster:
    nodes = [make_node("n1", gpus=2)]
    sim = RecordingCluster(
        nodes, (), Mode.REPLAY, TargetWorkload((), ()), workloads=workloads, faults=faults
    )
    sim.binds, sim.health = [], []
    run_loop(sim, make_core(nodes))
    return sim


def test_pods_avoid_a_failed_gpu_and_use_it_after_recovery() -> None:
    fault = GpuFault(at=100, node="n1", gpu=0, xid=79, recover_after=500)
    sim = play(
        [
            job("before", 0, 50),  # GPU 0, before the fault
            job("during", 200, 50),  # GPU 1: GPU 0 is out
            job("long", 200, 1000),  # waits for GPU 1, then holds it
            job("after", 300, 50),  # waits until GPU 0 recovers at 600
        ],
        [fault],
    )
    binds = {name: (at, p.gpu_indices) for at, name, p in sim.binds}
    assert binds["before"] == (0.0, (0,))
    assert binds["during"] == (200.0, (1,))
    assert binds["long"] == (250.0, (1,))
    assert binds["after"] == (600.0, (0,))
    assert [(at, e.unhealthy) for at, e in sim.health] == [(100.0, (0,)), (600.0, ())]
    assert sim.health[0][1].reasons == ((0, "XID 79: GPU has fallen off the bus"),)
    assert sim.xids.of_node("n1") == {0: 79}  # what the device telemetry reports
    assert not sim.recorder.violations


@pytest.mark.parametrize(
    "fault",
    [GpuFault(at=100, node="n1", gpu=0, xid=63), GpuFault(100, "n1", 0, 48, crash_pods=False)],
    ids=["xid-63-leaves-applications-running", "told-not-to-crash"],
)
def test_a_pod_on_a_failing_gpu_that_does_not_crash_it_runs_on_and_the_fault_does_not_hold_the_end(
    fault: GpuFault,
) -> None:
    sim = play([job("on-it", 0, 300)], [fault])
    assert [p.gpu_indices for _, _, p in sim.binds] == [(0,)]
    assert sim.clock.now() == pytest.approx(300.0)


def test_a_pod_on_a_gpu_failing_with_a_crashing_xid_loses_its_work_and_runs_again_elsewhere() -> (
    None
):
    # Regression of the old rule (pods ran on whatever the XID): XID 48 ends the applications
    # on the GPU. The pod, no checkpoint, loses its 100 s and starts again on GPU 1.
    sim = play([job("on-it", 0, 300)], [GpuFault(at=100, node="n1", gpu=0, xid=48)])
    assert [(at, p.gpu_indices) for at, _, p in sim.binds] == [(0.0, (0,)), (100.0, (1,))]
    assert sim.clock.now() == pytest.approx(400.0)
    report = sim.interruption_report(sim.clock.now(), None)
    assert (report.gpu_crashes, report.pods_lost, report.restarts) == (1, 1, 1)
    assert report.gpu_hours_lost == pytest.approx(100 / 3600, abs=1e-6)


def test_the_ground_truth_refuses_a_bind_on_an_unhealthy_gpu() -> None:
    nodes = [make_node("n1", gpus=1)]
    workload = make_workload("w", gpus=1)
    sim = SimulatedCluster(
        nodes,
        (),
        Mode.REPLAY,
        TargetWorkload((), ()),
        workloads=[TimedWorkload(workload, 10, 5)],
        faults=[GpuFault(at=0, node="n1", gpu=0, xid=79)],
    )
    sim.poll_events()
    sim.wait()
    sim.poll_events()
    sim.apply([Bind(workload.pods[0], Placement("n1", (0,)))])
    assert sim.recorder.violations == ["default/w: GPU 0 of 'n1' is unhealthy"]


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (GpuFault(0, "nope", 0, 79, name="f.yaml, GpuFault a"), "spec.node: no node 'nope'"),
        (GpuFault(0, "n1", 7, 79, name="f.yaml, GpuFault a"), "spec.gpu: node 'n1' has no GPU 7"),
    ],
    ids=["unknown-node", "unknown-gpu"],
)
def test_a_fault_on_a_device_the_cluster_lacks_is_an_error(fault: GpuFault, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        play([], [fault])


def test_run_workloads_takes_faults() -> None:
    nodes = [make_node("n1", gpus=1)]
    fault = GpuFault(at=0, node="n1", gpu=0, xid=79, recover_after=100)
    run = run_workloads(nodes, [job("w", 10, 5)], "bestfit", 0, faults=[fault])
    assert run.replay.never_ran == 0
    assert run.replay.bind_violations == 0
    assert run.replay.delays == [100.0]  # it waited for the GPU to recover
