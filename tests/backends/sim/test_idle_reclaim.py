"""Idle policies in the batch simulator: an idle notebook is stopped after its grace, window
and steps, so the job waiting behind it starts; training is left alone; a dry run only
reports; the reclaimed GPU-hours are counted."""

from __future__ import annotations

import dataclasses

import pytest

from gpufleet.backends.sim.results import TenancyRun
from gpufleet.backends.sim.run import run_workloads
from gpufleet.model.idle import EXEMPT_LABEL, IdleAction, IdlePolicy, IdleStep
from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.telemetry.profiles import USAGE_PROFILE_ANNOTATION
from gpufleet.testing.builders import make_node, make_workload

HOUR = 3600.0
POLICY = IdlePolicy(
    "idle",
    (IdleStep(IdleAction.NOTIFY), IdleStep(IdleAction.STOP, 600.0)),
    window_s=1800.0,
    grace_s=HOUR,
)


def with_profile(workload: Workload, profile: str) -> Workload:
    pods = tuple(
        dataclasses.replace(p, annotations={**p.annotations, USAGE_PROFILE_ANNOTATION: profile})
        for p in workload.pods
    )
    return dataclasses.replace(workload, pods=pods)


def holder(name: str, profile: str, **labels: str) -> Workload:
    workload = with_profile(make_workload(name, gpus=2, labels=labels), profile)
    return dataclasses.replace(workload, labels=labels)


def world(first: Workload) -> list[TimedWorkload]:
    """``first`` holds both GPUs for 10 h; a job of 2 GPUs arrives at 30 min."""
    waiting = with_profile(make_workload("waiting", gpus=2), "training")
    return [TimedWorkload(first, 0.0, 10 * HOUR), TimedWorkload(waiting, 1800.0, HOUR)]


def waited(result: TenancyRun) -> float:
    return result.tenancy.queues["default"].queueing_delay.max


def test_an_idle_notebook_is_stopped_and_the_waiting_job_starts() -> None:
    result = run_workloads(
        [make_node("n", gpus=2)], world(holder("nb", "idle")), "bestfit", 0, idle_policies=[POLICY]
    )
    report = result.idle
    assert report is not None
    assert [(d.action, d.at) for d in report.decisions] == [
        (IdleAction.NOTIFY, HOUR),
        (IdleAction.STOP, HOUR + 600.0),
    ]
    assert report.stopped == ["default/nb"]
    assert report.stopped_training == []
    # It would have held 2 GPUs for the 10 h less the 70 min it ran.
    assert report.gpu_hours_reclaimed == pytest.approx(2 * (10 - 70 / 60))
    # The job waited from 30 min until the Stop at 70 min.
    assert waited(result) == pytest.approx(40 * 60.0)
    assert report.decisions[-1].mean_util_pct < 10


def test_without_a_policy_the_job_waits_for_the_notebook() -> None:
    result = run_workloads([make_node("n", gpus=2)], world(holder("nb", "idle")), "bestfit", 0)
    assert result.idle is None
    assert waited(result) == pytest.approx(10 * HOUR - 1800.0)


@pytest.mark.parametrize(
    "first",
    [
        holder("train", "training"),
        holder("nb", "idle", **{EXEMPT_LABEL: "true"}),
    ],
    ids=["busy-training", "exempt"],
)
def test_busy_or_exempt_holders_are_left_alone(first: Workload) -> None:
    result = run_workloads(
        [make_node("n", gpus=2)], world(first), "bestfit", 0, idle_policies=[POLICY]
    )
    assert result.idle is not None
    assert result.idle.decisions == []


def test_a_dry_run_reports_and_stops_nothing() -> None:
    result = run_workloads(
        [make_node("n", gpus=2)],
        world(holder("nb", "idle")),
        "bestfit",
        0,
        idle_policies=[POLICY],
        idle_dry_run=True,
    )
    assert result.idle is not None
    assert [d.action for d in result.idle.decisions] == [IdleAction.NOTIFY, IdleAction.STOP]
    assert all(d.dry_run for d in result.idle.decisions)
    assert result.idle.stopped == []
    assert result.idle.gpu_hours_reclaimed == 0
    assert waited(result) == pytest.approx(10 * HOUR - 1800.0)


def test_a_preemptible_step_lets_the_waiting_job_preempt_the_notebook() -> None:
    """Lowered at 1 h, the notebook (priority 100, above the job's 0) is preempted by the job
    waiting behind it at once; it waits again and runs once the job is done."""
    policy = IdlePolicy("lower", (IdleStep(IdleAction.PREEMPTIBLE),), window_s=1800.0, grace_s=HOUR)
    notebook = dataclasses.replace(holder("nb", "idle"), priority=100)
    result = run_workloads(
        [make_node("n", gpus=2)], world(notebook), "bestfit", 0, idle_policies=[policy]
    )
    report = result.idle
    assert report is not None
    # (Back at 2 h once the job is done, it is judged again from its grace: lowered already.)
    first = report.decisions[0]
    assert (first.action, first.at) == (IdleAction.PREEMPTIBLE, HOUR)
    assert report.demoted == ["default/nb"]
    assert report.stopped == []
    # The job waited from 30 min until the notebook was lowered and preempted at 1 h.
    assert waited(result) == pytest.approx(30 * 60.0)
