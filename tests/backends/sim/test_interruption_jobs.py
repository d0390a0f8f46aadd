"""How jobs count pods lost with their node and pods that crash on a failed GPU, as Kubernetes
counts them: a Job counts a pod failed by its node's loss against backoffLimit (its
restartPolicy OnFailure too) unless its podFailurePolicy ignores DisruptionTarget; FailJob and
exit-code rules; the training operator makes a lost pod again; a pod that restarts in place on
an unhealthy GPU crashes again until the GPU recovers or its limit fails it. Times are worked
out by hand (seconds)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.backends.sim.results import JobReport
from gpufleet.backends.sim.run import job_reports
from gpufleet.control.loop import Turn
from gpufleet.control.loop import run as run_loop
from gpufleet.io.readers import read_scenario
from gpufleet.model import Node
from gpufleet.model.actions import Bind
from gpufleet.model.events import ClusterEvent, JobEnded, PodDeleted, PodEnd, PodRestarted
from gpufleet.model.faults import GpuFault
from gpufleet.model.node_faults import NodeFault, NodeFaultKind, NodeSelection
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import make_node
from gpufleet.testing.fakes import make_core
from gpufleet.testing.job_objects import batch_job, pytorch_job, sim_notes

Obj = dict[str, Any]
Log = list[tuple[float, str, str]]
DISRUPTION = {"onPodConditions": [{"type": "DisruptionTarget"}]}


class Recording:
    """(time, what, pod or job) as the pods and jobs go."""

    ENDS: ClassVar[dict[PodEnd, str]] = {
        PodEnd.SUCCEEDED: "done",
        PodEnd.FAILED: "removed",
        PodEnd.LOST: "lost",
        PodEnd.REPLACED: "away",
    }

    def __init__(self, sim: SimulatedCluster) -> None:
        self.sim = sim
        self.log: Log = []

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        now = self.sim.clock.now()
        for event in events:
            if isinstance(event, PodDeleted) and event.end in self.ENDS:
                self.log.append((now, self.ENDS[event.end], event.key.split("/")[1]))
            elif isinstance(event, PodRestarted) and event.completion is None:
                self.log.append((now, "restart", event.key.split("/")[1]))
            elif isinstance(event, JobEnded):
                self.log.append((now, f"{event.outcome}: {event.reason}", event.job))

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        for action in turn.actions:
            if isinstance(action, Bind) and action.pod.key in self.sim.running:
                self.log.append((turn.now, "bound", action.pod.name))


def simulate(
    tmp_path: Path,
    objects: Sequence[Obj],
    node_faults: Sequence[NodeFault] = (),
    gpu_faults: Sequence[GpuFault] = (),
    nodes: Sequence[Node] | None = None,
) -> tuple[Log, list[JobReport], SimulatedCluster]:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump_all(list(objects), sort_keys=False))
    scenario = read_scenario(path)
    nodes = list(nodes or [make_node("n1", gpus=1)])
    sim = SimulatedCluster(
        nodes, (), Mode.REPLAY, TargetWorkload((), ()), workloads=scenario.workloads,
        faults=gpu_faults, node_faults=node_faults,
    )  # fmt: skip
    recording = Recording(sim)
    run_loop(sim, make_core(nodes), observers=[recording])
    return recording.log, job_reports(sim.job_runs, sim.holds), sim


def node_down(*times: float, back: float = 60.0, node: str = "n1") -> NodeFault:
    return NodeFault(
        NodeFaultKind.NODE_FAILURE, "down", NodeSelection(names=(node,)), times, None, 0.0, back
    )


# ------------------------------------------------------------------------------ node loss
@pytest.mark.parametrize(
    ("spec", "failures", "expected"),
    [
        # The node fails at 300 (back at 360): the pod failed by its node's loss counts
        # against backoffLimit (failed pods > backoffLimit fails the Job).
        pytest.param({"backoffLimit": 0}, (300.0,), ("Failed", "BackoffLimitExceeded", 1),
                     id="limit-0-fails-at-the-first-loss"),
        pytest.param({"backoffLimit": 1}, (300.0,), ("Succeeded", "Completed", 1),
                     id="limit-1-survives-one-loss"),
        pytest.param({"backoffLimit": 1}, (300.0, 900.0), ("Failed", "BackoffLimitExceeded", 2),
                     id="limit-1-fails-at-the-second"),
        pytest.param({"backoffLimit": 0, "podFailurePolicy": {"rules": [
                         {"action": "Ignore", **DISRUPTION}]}},
                     (300.0, 900.0), ("Succeeded", "Completed", 0),
                     id="ignore-disruptions-counts-none"),
        pytest.param({"backoffLimit": 6, "podFailurePolicy": {"rules": [
                         {"action": "FailJob", **DISRUPTION}]}},
                     (300.0,), ("Failed", "PodFailurePolicy", 1), id="failjob-on-disruption"),
        pytest.param({"backoffLimit": 6, "podFailurePolicy": {"rules": [
                         {"action": "Count", **DISRUPTION}]}},
                     (300.0,), ("Succeeded", "Completed", 1), id="count-is-the-default"),
    ],
)  # fmt: skip
def test_a_job_counts_a_pod_lost_with_its_node_as_kubernetes_does(
    tmp_path: Path, spec: Obj, failures: tuple[float, ...], expected: tuple[str, str, int]
) -> None:
    job = batch_job("j", annotations=sim_notes("10m"), **spec)
    _, (report,), _ = simulate(tmp_path, [job], [node_down(*failures)])
    assert (report.state, report.reason, report.failed_pods) == expected


def test_a_failjob_rule_says_which_pod_and_rule_failed_the_job(tmp_path: Path) -> None:
    rules = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}},
                       {"action": "FailJob", **DISRUPTION}]}  # fmt: skip
    job = batch_job("j", annotations=sim_notes("10m"), podFailurePolicy=rules)
    log, (report,), _ = simulate(tmp_path, [job], [node_down(300.0)])
    assert report.message == (
        "Pod default/j-0 has condition DisruptionTarget matching FailJob rule at index 1"
    )
    assert log == [
        (0.0, "bound", "j-0"),
        (300.0, "removed", "j-0"),
        (300.0, "Failed: PodFailurePolicy", "j"),
    ]


def test_a_lost_pod_is_replaced_after_the_job_back_off_and_resumes_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    # 10 min of work, checkpoint every 2 min. Lost at 300 (kept 240); the new pod follows
    # after the Job controller's 10 s and waits for the node, back at 360; 360 s left.
    notes = sim_notes("10m", more={"gpufleet.dev/checkpoint-interval": "2m"})
    job = batch_job("j", annotations=notes, backoffLimit=1)
    log, _, sim = simulate(tmp_path, [job], [node_down(300.0)])
    assert log == [
        (0.0, "bound", "j-0"),
        (300.0, "lost", "j-0"),
        (360.0, "bound", "j-0"),
        (720.0, "done", "j-0"),
        (720.0, "Succeeded: Completed", "j"),
    ]
    assert sim.interruption_report(720.0, None).gpu_hours_lost == pytest.approx(60 / 3600, abs=1e-6)


def test_an_on_failure_job_pod_lost_with_its_node_is_a_failed_pod_not_a_restart(
    tmp_path: Path,
) -> None:
    # restartPolicy OnFailure restarts a container in place; a pod whose node is gone is
    # failed, counted in status.failed (failed > backoffLimit: 1 loss of limit 1 is fine).
    job = batch_job("j", annotations=sim_notes("10m"), restart_policy="OnFailure", backoffLimit=1)
    _, (report,), _ = simulate(tmp_path, [job], [node_down(300.0)])
    assert (report.state, report.failed_pods, report.restarts) == ("Succeeded", 1, 0)


def test_a_training_job_makes_a_lost_worker_again_and_its_gang_restarts_whole(
    tmp_path: Path,
) -> None:
    # Master on n1, worker on n2 (1 GPU each). n2 fails at 300 (back at 360): the operator
    # makes the worker again without counting it against runPolicy.backoffLimit 0, and the
    # master stops with it; both start again together when n2 is back.
    job = pytorch_job("pt", workers=1, restart_policy="Never", backoff_limit=0,
                      annotations=sim_notes("10m"))  # fmt: skip
    nodes = [make_node("n1", gpus=1), make_node("n2", gpus=1)]
    log, (report,), _ = simulate(tmp_path, [job], [node_down(300.0, node="n2")], nodes=nodes)
    lost = sorted(entry for entry in log if entry[1] == "lost")
    assert lost == [(300.0, "lost", "pt-master-0"), (300.0, "lost", "pt-worker-0")]
    assert sorted(e for e in log if e[1] == "bound" and e[0] == 360.0) == [
        (360.0, "bound", "pt-master-0"),
        (360.0, "bound", "pt-worker-0"),
    ]
    assert (report.state, report.reason) == ("Succeeded", "Completed")


def test_an_exit_code_rule_decides_a_failed_attempt(tmp_path: Path) -> None:
    rules = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    job = batch_job("j", annotations=sim_notes("10m", failures=1, exit_code=42),
                    backoffLimit=6, podFailurePolicy=rules)  # fmt: skip
    _, (report,), _ = simulate(tmp_path, [job])
    assert (report.state, report.reason) == ("Failed", "PodFailurePolicy")
    assert report.message == (
        "Container of pod default/j-0 failed with exit code 42 matching FailJob rule at index 0"
    )


# ---------------------------------------------------------------------------- GPU crashes
@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        # XID 79 at 100 on the pod's only GPU, healthy again at 400. The container restarts
        # in place on it (the kubelet keeps its devices) after 10, 20, 40, 80, 160 s: at 110,
        # 130, 170 and 250 the GPU is still down and it crashes again (each restart counted);
        # at 410 it runs, from its start (no checkpoint), and ends at 1010.
        pytest.param(6, ("Succeeded", "Completed", 5, 1010.0), id="the-gpu-recovers-first"),
        # restarts of live pods reaching backoffLimit 3 (at 130) fail the Job.
        pytest.param(3, ("Failed", "BackoffLimitExceeded", 3, 130.0), id="the-limit-comes-first"),
    ],
)
def test_a_pod_restarting_in_place_on_a_failed_gpu_crash_loops(
    tmp_path: Path, limit: int, expected: tuple[str, str, int, float]
) -> None:
    job = batch_job("j", annotations=sim_notes("10m"), restart_policy="OnFailure",
                    backoffLimit=limit)  # fmt: skip
    fault = GpuFault(at=100, node="n1", gpu=0, xid=79, recover_after=300)
    log, (report,), _ = simulate(tmp_path, [job], gpu_faults=[fault])
    ended = next(at for at, what, _ in log if what.startswith(report.state))
    assert (report.state, report.reason, report.restarts, ended) == expected
    assert report.attempt_failures == expected[2]


def test_a_pod_crash_looping_on_a_gpu_that_never_recovers_does_not_hold_the_world(
    tmp_path: Path,
) -> None:
    # A Pod restarts in place without limit; its GPU never recovers: it crash-loops until the
    # run ends, when nothing else is left to do: the end of its first run (3600 s; its
    # failing attempt was to fail only after 10 h) is the last thing on the world's queue.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": sim_notes("1h", failures=1, fail_after="10h")},
        "spec": {
            "restartPolicy": "Always",
            "containers": [{"name": "main", "image": "x",
                            "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        },
    }  # fmt: skip
    _, _, sim = simulate(tmp_path, [pod], gpu_faults=[GpuFault(at=100, node="n1", gpu=0, xid=79)])
    assert sim.clock.now() == 3600.0
    assert "default/p" in sim.running
    (run,) = [run for _, run in sim.job_runs]
    assert run.restarts > 10  # back-offs of 10 s doubling to 5 min over an hour
