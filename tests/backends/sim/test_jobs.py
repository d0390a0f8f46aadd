"""Job semantics in the simulated cluster: completions beyond parallelism, restarts in place and
replacement pods under backoff limits, indexes, deadlines, the training and Ray operators' rules,
and the failure model that exercises them. Times are worked out by hand (seconds)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.backends.sim.results import JobReport
from gpufleet.backends.sim.run import job_reports, run_workloads
from gpufleet.control.loop import Turn
from gpufleet.control.loop import run as run_loop
from gpufleet.io.readers import read_cluster, read_scenario
from gpufleet.model import Node
from gpufleet.model.actions import Bind
from gpufleet.model.events import ClusterEvent, JobEnded, PodDeleted, PodEnd, PodRestarted
from gpufleet.model.jobs import JobKind, JobSpec, ReplicaSet, RestartPolicy, SimFailures
from gpufleet.model.queues import Queue
from gpufleet.model.workload import TimedWorkload
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import make_cluster, make_workload
from gpufleet.testing.fakes import make_core
from gpufleet.testing.job_objects import (
    batch_job,
    mpi_job,
    pod_template,
    pytorch_job,
    ray_job,
    sim_notes,
)
from gpufleet.testing.kube_objects import queue

Obj = dict[str, Any]
Log = list[tuple[float, str, str]]


class Recording:
    """Logs (time, what, pod or job) as a simulated cluster's pods and jobs go, from its events
    and the binds it took (the loop's observer)."""

    ENDS: ClassVar[dict[PodEnd, str]] = {
        PodEnd.SUCCEEDED: "done",
        PodEnd.FAILED: "removed",
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
            elif isinstance(event, PodRestarted):
                what = "restart" if event.completion is None else f"next {event.completion}"
                self.log.append((now, what, event.key.split("/")[1]))
            elif isinstance(event, JobEnded):
                self.log.append((now, f"{event.outcome}: {event.reason}", event.job))

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        for action in turn.actions:
            if isinstance(action, Bind) and action.pod.key in self.sim.running:
                self.log.append((turn.now, "bound", action.pod.name))


def scenario_file(tmp_path: Path, objects: Sequence[Obj]) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump_all(list(objects), sort_keys=False))
    return path


def simulate(
    tmp_path: Path,
    objects: Sequence[Obj],
    nodes: Sequence[Node] | None = None,
    queues: Sequence[Queue] = (),
) -> tuple[Log, list[JobReport], SimulatedCluster]:
    scenario = read_scenario(scenario_file(tmp_path, objects))
    nodes = list(nodes or make_cluster(1, gpus=4))
    core = make_core(nodes, queues or list(scenario.queues.values()))
    sim = SimulatedCluster(
        nodes, (), Mode.REPLAY, TargetWorkload((), ()), workloads=scenario.workloads
    )
    recording = Recording(sim)
    run_loop(sim, core, observers=[recording])
    return recording.log, job_reports(sim.job_runs, sim.holds), sim


def outcome(report: JobReport) -> tuple[str, str, int, int, int, int]:
    return (
        report.state,
        report.reason,
        report.completed,
        report.completions,
        report.failed_pods,
        report.restarts,
    )


# ------------------------------------------------------------------------------- batch/v1 Job
def test_a_job_runs_parallelism_pods_at_a_time_until_completions_succeed(tmp_path: Path) -> None:
    # Regression: completions beyond parallelism were cut to parallelism (2 pods, done at
    # 600 s). Two pods run 5 completions of 600 s: the slot that ends while completions are
    # left runs the next one in place; one with nothing left ends (its quota is given back).
    job = batch_job("j", parallelism=2, completions=5, annotations=sim_notes("10m"))
    path = scenario_file(tmp_path, [job])
    scenario = read_scenario(path)
    run = run_workloads(make_cluster(1, gpus=4), scenario.workloads, "default", 0, scenario.queues)
    assert run.replay.simulated_seconds == 1800.0
    assert run.tenancy.queues["default"].completed == 1
    assert run.tenancy.queues["default"].completion_time.max == 1800.0
    log, (report,), _ = simulate(tmp_path, [job])
    assert log == [
        (0.0, "bound", "j-0"),
        (0.0, "bound", "j-1"),
        (600.0, "next 2", "j-0"),
        (600.0, "next 3", "j-1"),
        (1200.0, "next 4", "j-0"),
        (1200.0, "done", "j-1"),
        (1800.0, "done", "j-0"),
        (1800.0, "Succeeded: Completed", "j"),
    ]
    assert outcome(report) == ("Succeeded", "Completed", 5, 5, 0, 0)


def test_an_indexed_job_gives_each_index_once(tmp_path: Path) -> None:
    job = batch_job("j", parallelism=2, completions=3, indexed=True, annotations=sim_notes("10m"))
    (timed,) = read_scenario(scenario_file(tmp_path, [job])).workloads
    indexes = [
        p.annotations["batch.kubernetes.io/job-completion-index"] for p in timed.workload.pods
    ]
    assert indexes == ["0", "1"]
    log, (report,), _ = simulate(tmp_path, [job])
    assert [entry for entry in log if entry[0] == 600.0] == [
        (600.0, "next 2", "j-0"),
        (600.0, "done", "j-1"),
    ]
    assert outcome(report) == ("Succeeded", "Completed", 3, 3, 0, 0)


@pytest.mark.parametrize(
    ("policy", "limit", "expected_log", "expected"),
    [
        pytest.param(
            "Never",
            1,
            # Each completion's first attempt fails at the end of its 600 s. The failed pod is
            # replaced after the Job controller's 10 s back-off and scheduled again; the second
            # failed pod is one more than backoffLimit 1: the Job fails, its pod is removed.
            [
                (0.0, "bound", "j-0"),
                (600.0, "away", "j-0"),
                (610.0, "bound", "j-0"),
                (1210.0, "next 1", "j-0"),
                (1810.0, "removed", "j-0"),
                (1810.0, "Failed: BackoffLimitExceeded", "j"),
            ],
            ("Failed", "BackoffLimitExceeded", 1, 2, 2, 0),
            id="never-replaces-the-pod-until-more-than-backoffLimit-failed",
        ),
        pytest.param(
            "OnFailure",
            2,
            # The container restarts in place after the kubelet's 10 s back-off; the next
            # completion's pod starts with no restarts, so the Job never reaches 2 at once.
            [
                (0.0, "bound", "j-0"),
                (600.0, "restart", "j-0"),
                (1210.0, "next 1", "j-0"),
                (1810.0, "restart", "j-0"),
                (2420.0, "done", "j-0"),
                (2420.0, "Succeeded: Completed", "j"),
            ],
            ("Succeeded", "Completed", 2, 2, 0, 2),
            id="on-failure-restarts-in-place",
        ),
        pytest.param(
            "OnFailure",
            1,
            [
                (0.0, "bound", "j-0"),
                (600.0, "removed", "j-0"),
                (600.0, "Failed: BackoffLimitExceeded", "j"),
            ],
            ("Failed", "BackoffLimitExceeded", 0, 2, 0, 1),
            id="on-failure-fails-when-restarts-reach-backoffLimit",
        ),
        pytest.param(
            "OnFailure",
            0,
            [
                (0.0, "bound", "j-0"),
                (600.0, "removed", "j-0"),
                (600.0, "Failed: BackoffLimitExceeded", "j"),
            ],
            ("Failed", "BackoffLimitExceeded", 0, 2, 0, 1),
            id="backoffLimit-0-fails-at-the-first-restart",
        ),
    ],
)
def test_backoff_limit_with_each_restart_policy(
    tmp_path: Path,
    policy: str,
    limit: int,
    expected_log: Log,
    expected: tuple[str, str, int, int, int, int],
) -> None:
    job = batch_job(
        "j", 1, 2, restart_policy=policy, backoffLimit=limit, annotations=sim_notes("10m", 1)
    )
    log, (report,), _ = simulate(tmp_path, [job])
    assert log == expected_log
    assert outcome(report) == expected


def test_the_default_backoff_limit_is_six(tmp_path: Path) -> None:
    job = batch_job("j", annotations=sim_notes("1m", failures=10, fail_after="1s"))
    _, (report,), _ = simulate(tmp_path, [job])
    assert (report.state, report.failed_pods) == ("Failed", 7)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param(
            {"backoffLimitPerIndex": 1},
            ("Succeeded", "Completed", 3, 3, 3, 0),
            id="each-index-retried-once",
        ),
        pytest.param(
            {"backoffLimitPerIndex": 0},
            ("Failed", "FailedIndexes", 0, 3, 3, 0),
            id="every-index-failed-the-job-fails-at-the-end",
        ),
        pytest.param(
            {"backoffLimitPerIndex": 0, "maxFailedIndexes": 1},
            ("Failed", "MaxFailedIndexesExceeded", 0, 3, 2, 0),
            id="beyond-maxFailedIndexes-it-fails-at-once",
        ),
    ],
)
def test_backoff_limit_per_index(
    tmp_path: Path, fields: Obj, expected: tuple[str, str, int, int, int, int]
) -> None:
    job = batch_job("j", 3, 3, indexed=True, annotations=sim_notes("10m", 1), **fields)
    _, (report,), sim = simulate(tmp_path, [job])
    assert outcome(report) == expected
    assert not sim.running
    assert not sim.pending


def test_active_deadline_fails_the_job_and_removes_its_pods(tmp_path: Path) -> None:
    job = batch_job("j", 2, annotations=sim_notes("1h"), activeDeadlineSeconds=1800)
    log, (report,), sim = simulate(tmp_path, [job])
    assert log[-3:] == [
        (1800.0, "removed", "j-0"),
        (1800.0, "removed", "j-1"),
        (1800.0, "Failed: DeadlineExceeded", "j"),
    ]
    assert report.state == "Failed"
    assert not sim.running


def test_a_failed_attempt_keeps_the_work_up_to_its_last_checkpoint(tmp_path: Path) -> None:
    notes = sim_notes("30m", 1, "25m", more={"gpufleet.dev/checkpoint-interval": "10m"})
    job = batch_job("j", restart_policy="OnFailure", annotations=notes)
    log, _, _ = simulate(tmp_path, [job])
    # Fails at 1500 s with 2 checkpoints (1200 s) kept; restarts at 1510 with 600 s left.
    assert log == [
        (0.0, "bound", "j-0"),
        (1500.0, "restart", "j-0"),
        (2110.0, "done", "j-0"),
        (2110.0, "Succeeded: Completed", "j"),
    ]


def test_a_preempted_job_keeps_its_completions(tmp_path: Path) -> None:
    # One GPU. The Job (3 completions of 600 s) is preempted at 900 s, in its second
    # completion; the urgent pod runs 600 s; the Job resumes its second completion from the
    # start and runs its third: 1500 + 600 + 600.
    job = batch_job("j", 1, 3, annotations=sim_notes("10m"))
    urgent = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "urgent",
            "annotations": sim_notes("10m", more={"gpufleet.dev/submit-at": "15m"}),
        },
        "spec": {**pod_template()["spec"], "priority": 100},
    }
    log, (report,), _ = simulate(tmp_path, [job, urgent], make_cluster(1, gpus=1))
    assert log == [
        (0.0, "bound", "j-0"),
        (600.0, "next 1", "j-0"),
        (900.0, "bound", "urgent"),
        (1500.0, "done", "urgent"),
        (1500.0, "bound", "j-0"),
        (2100.0, "next 2", "j-0"),
        (2700.0, "done", "j-0"),
        (2700.0, "Succeeded: Completed", "j"),
    ]
    assert outcome(report) == ("Succeeded", "Completed", 3, 3, 0, 0)


# ------------------------------------------------------------------------------- PyTorchJob
@pytest.mark.parametrize(
    ("policy", "exit_code", "expected"),
    [
        pytest.param("Never", 1, ("Failed", "Failed", 0, 1, 1, 0), id="never-fails-the-job"),
        pytest.param(
            "ExitCode", 137, ("Succeeded", "Completed", 1, 1, 3, 0), id="exit-code-137-retried"
        ),
        pytest.param("ExitCode", 1, ("Failed", "Failed", 0, 1, 1, 0), id="exit-code-1-fails"),
        pytest.param(
            "OnFailure", 1, ("Succeeded", "Completed", 1, 1, 0, 3), id="on-failure-restarts"
        ),
    ],
)
def test_pytorch_job_restart_policies(
    tmp_path: Path, policy: str, exit_code: int, expected: tuple[str, str, int, int, int, int]
) -> None:
    notes = sim_notes("1h", 1, "5m", exit_code)
    job = pytorch_job("pt", 2, restart_policy=policy, annotations=notes)
    _, (report,), sim = simulate(tmp_path, [job])
    assert outcome(report) == expected
    assert not sim.running


def test_pytorch_job_backoff_limit_counts_restarts_of_live_pods(tmp_path: Path) -> None:
    notes = sim_notes("1h", 2, "5m")
    job = pytorch_job("pt", 2, restart_policy="OnFailure", backoff_limit=3, annotations=notes)
    log, (report,), _ = simulate(tmp_path, [job])
    # Three pods each fail at 300 s: the third restart reaches backoffLimit 3; the job's
    # other pods go with it.
    assert log[-4:] == [
        (300.0, "removed", "pt-worker-1"),
        (300.0, "removed", "pt-master-0"),
        (300.0, "removed", "pt-worker-0"),
        (300.0, "Failed: BackoffLimitExceeded", "pt"),
    ]
    assert report.restarts == 3


def test_a_pytorch_job_without_a_master_succeeds_when_all_workers_do(tmp_path: Path) -> None:
    job = pytorch_job("pt", 2, master=False, annotations=sim_notes("1h"))
    _, (report,), _ = simulate(tmp_path, [job])
    assert outcome(report) == ("Succeeded", "Completed", 2, 2, 0, 0)


# ----------------------------------------------------------------------------------- MPIJob
def test_mpi_job_is_one_gang_and_its_workers_end_with_the_launcher(tmp_path: Path) -> None:
    job = mpi_job("mpi", 2, annotations={"gpufleet.dev/expected-runtime": "30m"})
    (timed,) = read_scenario(scenario_file(tmp_path, [job])).workloads
    assert [p.name for p in timed.workload.pods] == ["mpi-launcher", "mpi-worker-0", "mpi-worker-1"]
    assert timed.workload.gang_size == 3  # the launcher counts: workers + 1
    log, (report,), _ = simulate(tmp_path, [job])
    assert log == [
        (0.0, "bound", "mpi-launcher"),
        (0.0, "bound", "mpi-worker-0"),
        (0.0, "bound", "mpi-worker-1"),
        (1800.0, "done", "mpi-launcher"),
        (1800.0, "done", "mpi-worker-0"),
        (1800.0, "done", "mpi-worker-1"),
        (1800.0, "Succeeded: Completed", "mpi"),
    ]
    assert outcome(report) == ("Succeeded", "Completed", 1, 1, 0, 0)


def test_mpi_launcher_is_retried_as_a_job(tmp_path: Path) -> None:
    job = mpi_job("mpi", 1, launcher_restart_policy="Never", annotations=sim_notes("30m", 1))
    log, (report,), _ = simulate(tmp_path, [job])
    assert (1800.0, "away", "mpi-launcher") in log
    assert (1810.0, "bound", "mpi-launcher") in log
    assert log[-1] == (3610.0, "Succeeded: Completed", "mpi")
    assert report.failed_pods == 1


# ------------------------------------------------------------------------------------ Ray
def test_ray_job_submitter_comes_after_the_cluster_gang(tmp_path: Path) -> None:
    job = ray_job("rj", {"gpu": 2}, annotations=sim_notes("20m"))
    (timed,) = read_scenario(scenario_file(tmp_path, [job])).workloads
    names = [p.name for p in timed.workload.pods]
    assert names == ["rj-head", "rj-gpu-worker-0", "rj-gpu-worker-1", "rj-submitter"]
    assert timed.workload.gang_size == 3
    submitter = timed.workload.pods[-1]
    assert (submitter.cpu_milli, submitter.memory_mib) == (500, 200)
    log, _, sim = simulate(tmp_path, [job])
    assert log[-1] == (1200.0, "Succeeded: Completed", "rj")
    assert not sim.running


@pytest.mark.parametrize(
    ("limit", "expected", "ends"),
    [
        pytest.param(1, ("Succeeded", "Completed", 1, 1, 1, 0), 2400.0, id="a-new-cluster"),
        pytest.param(0, ("Failed", "BackoffLimitExceeded", 0, 1, 1, 0), 1200.0, id="no-retry"),
    ],
)
def test_a_failed_ray_job_runs_again_on_a_new_cluster(
    tmp_path: Path, limit: int, expected: tuple[str, str, int, int, int, int], ends: float
) -> None:
    job = ray_job("rj", {"gpu": 1}, backoff_limit=limit, annotations=sim_notes("20m", 1))
    log, (report,), sim = simulate(tmp_path, [job])
    assert outcome(report) == expected
    assert log[-1][0] == ends
    assert not sim.running


def test_a_ray_job_that_keeps_its_cluster(tmp_path: Path) -> None:
    job = ray_job("rj", {"gpu": 1}, shutdown=False, annotations=sim_notes("20m"))
    _, (report,), sim = simulate(tmp_path, [job])
    assert report.state == "Succeeded"
    assert sorted(sim.running) == ["default/rj-gpu-worker-0", "default/rj-head"]


# ------------------------------------------------------------------------------------ pods
@pytest.mark.parametrize(
    ("policy", "state", "restarts"),
    [
        pytest.param(None, "Succeeded", 1, id="default-always-restarts"),
        pytest.param("Never", "Failed", 0, id="never-fails"),
    ],
)
def test_a_bare_pod_that_fails(
    tmp_path: Path, policy: str | None, state: str, restarts: int
) -> None:
    spec = pod_template(restart_policy=policy)["spec"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": sim_notes("10m", 1)},
        "spec": spec,
    }
    _, (report,), _ = simulate(tmp_path, [pod])
    assert (report.state, report.restarts) == (state, restarts)


def test_expected_runtime_ends_a_workload_without_sim_duration(tmp_path: Path) -> None:
    # Regression: only gpufleet.dev/sim-duration ended a scenario's workload, so manifests
    # that carry expected-runtime (the seeds') ran until the end of the replay.
    job = batch_job("j", 2, annotations={"gpufleet.dev/expected-runtime": "15m"})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"gpufleet.dev/expected-runtime": "1h"}},
        "spec": pod_template()["spec"],
    }
    scenario = read_scenario(scenario_file(tmp_path, [job, pod]))
    run = run_workloads(make_cluster(1, gpus=4), scenario.workloads, "default", 0, scenario.queues)
    assert run.tenancy.queues["default"].completed == 2
    assert run.replay.simulated_seconds == 3600.0


def test_failures_per_queue_in_the_report(tmp_path: Path) -> None:
    job = batch_job(
        "j", 1, 1, restart_policy="OnFailure", labels={"gpufleet.dev/queue": "a"},
        annotations=sim_notes("10m", 2),
    )  # fmt: skip
    doomed = batch_job(
        "k", 1, 1, backoffLimit=0, labels={"gpufleet.dev/queue": "a"},
        annotations=sim_notes("10m", 1),
    )  # fmt: skip
    scenario = read_scenario(
        scenario_file(tmp_path, [queue("a", namespaces=["default"]), job, doomed])
    )
    run = run_workloads(make_cluster(1, gpus=4), scenario.workloads, "default", 0, scenario.queues)
    stats = run.tenancy.queues["a"]
    assert (stats.completed, stats.failed, stats.pod_failures, stats.restarts) == (1, 1, 3, 2)
    assert {r.name: r.state for r in run.jobs} == {"j": "Succeeded", "k": "Failed"}


BUDGETED = queue(
    "a", {"nvidia.com/gpu": 4}, namespaces=["default"],
    budget={"gpuHours": 1, "period": "day", "action": "Block"},
)  # fmt: skip
IN_A = {"gpufleet.dev/queue": "a"}
RUNTIME = {"gpufleet.dev/expected-runtime": "2h"}
LATER = {**RUNTIME, "gpufleet.dev/submit-at": "1m"}


@pytest.mark.parametrize(
    ("objects", "states"),
    [
        pytest.param(
            [BUDGETED, batch_job("first", labels=IN_A, annotations=sim_notes("2h", more=RUNTIME)),
             batch_job("second", labels=IN_A, annotations=sim_notes("2h", more=LATER))],
            {"first": ("Succeeded", "Completed"), "second": ("Pending", "budget")},
            id="blocked-by-its-budget",
        ),
        pytest.param(
            [batch_job("huge", gpus=8), batch_job("small")],
            {"huge": ("Pending", "capacity"), "small": ("Running", "")},
            id="fits-no-node-beside-one-that-runs-on",
        ),
    ],
)  # fmt: skip
def test_a_job_that_never_ran_is_pending_never_running(
    tmp_path: Path, objects: list[Obj], states: dict[str, tuple[str, str]]
) -> None:
    """A job that has not ended is Running only while a pod of it runs; one that waits is
    Pending, for what it waits for (issue 29, item 18: the budgets example listed the job
    its budget blocked as Running)."""
    scenario = read_scenario(scenario_file(tmp_path, objects))
    run = run_workloads(make_cluster(1, gpus=4), scenario.workloads, "default", 0, scenario.queues)
    assert {r.name: (r.state, r.reason) for r in run.jobs} == states
    waiting = {e.workload for e in run.waiting_at_end}
    assert {r.workload for r in run.jobs if r.state == "Pending"} == waiting


def test_the_budgets_example_lists_the_job_its_budget_blocks_as_pending() -> None:
    """What examples/budgets says of itself: three sweeps run, the fourth waits on the
    research queue's budget, and is listed so."""
    examples = Path(__file__).parents[3] / "examples"
    scenario = read_scenario(examples / "budgets")
    nodes = read_cluster(examples / "clusters" / "small.yaml")
    run = run_workloads(nodes, scenario.workloads, "default", 42, scenario.queues)
    states = {r.name: (r.state, r.reason) for r in run.jobs}
    assert states == {
        **{f"sweep-{i}": ("Succeeded", "Completed") for i in (1, 2, 3)},
        "sweep-4": ("Pending", "budget"),
    }


# ------------------------------------------------------------------------------- invariants
@settings(max_examples=40, deadline=None)
@given(
    parallelism=st.integers(1, 4),
    extra=st.integers(0, 6),
    failures=st.integers(0, 3),
    fail_after=st.sampled_from([None, 60.0]),
    policy=st.sampled_from([RestartPolicy.NEVER, RestartPolicy.ON_FAILURE]),
    limit=st.sampled_from([None, 0, 2, 6]),
)
def test_a_job_always_ends_and_counts_every_failure(
    parallelism: int,
    extra: int,
    failures: int,
    fail_after: float | None,
    policy: RestartPolicy,
    limit: int | None,
) -> None:
    completions = parallelism + extra
    workload = make_workload("j", pods=parallelism, gpus=1)
    names = tuple(p.name for p in workload.pods)
    spec = JobSpec(
        JobKind.JOB,
        "j",
        (ReplicaSet("Job", names, policy, SimFailures(failures, fail_after)),),
        completions=completions,
        backoff_limit=limit,
    )
    run = run_workloads(
        make_cluster(2, gpus=2),
        [TimedWorkload(workload, 0.0, 600.0, (spec,))],
        "bestfit",
        0,
        {"default": Queue("default")},
    )
    (report,) = run.jobs
    assert run.replay.bind_violations == 0
    assert report.state in ("Succeeded", "Failed")
    assert report.attempt_failures == report.failed_pods + report.restarts
    if report.state == "Succeeded":
        assert report.completed == completions
    else:
        assert report.reason == "BackoffLimitExceeded"
    if not failures:
        waves = -(-completions // parallelism)
        assert (report.state, run.replay.simulated_seconds) == ("Succeeded", waves * 600.0)
