"""``serve --local`` and time limits: a Pod's or Job's ``activeDeadlineSeconds`` stops its
processes when it passes and fails the workload with ``DeadlineExceeded`` (in describe's job
row and events); one that ends in time succeeds. The machine's clock is stepped by hand."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.testing.local_service import LocalHarness
from tests.backends.local.test_deadlines import SteppedClock
from tests.service.local.test_local_plane import events, job, pod, printed, report, tenant_dir


def with_deadline(document: dict[str, Any], seconds: int) -> dict[str, Any]:
    spec = document["spec"]
    spec["activeDeadlineSeconds"] = seconds
    return document


@pytest.mark.parametrize("kind", ["Pod", "Job"])
@pytest.mark.parametrize(
    ("finishes", "expected"),
    [
        pytest.param(False, "Failed", id="sleeps-past-its-deadline"),
        pytest.param(True, "Succeeded", id="ends-before-its-deadline"),
    ],
)
def test_a_workload_past_its_deadline_is_stopped_and_failed(
    harness: LocalHarness, kind: str, finishes: bool, expected: str
) -> None:
    clock = SteppedClock()
    harness.machine.clock = clock
    release = tenant_dir(harness) / "never"
    command = report(harness, "0") if finishes else report(harness, "0", str(release))
    document = pod("limited", command) if kind == "Pod" else job("limited", 1, command)
    assert harness.submit(with_deadline(document, 1))["status"] == 201
    if finishes:
        harness.run_until(harness.state_is("limited", "Succeeded"))
    harness.run_until(printed(harness, "limited"))
    clock.advance(1.5)
    harness.run_until(harness.state_is("limited", expected))

    detail = harness.workload("limited")
    reasons = dict(events(harness, "limited"))
    if finishes:
        assert "DeadlineExceeded" not in reasons
        assert detail["jobs"] == []
        return
    assert reasons["DeadlineExceeded"] == (
        "active longer than its time limit (activeDeadlineSeconds)"
    )
    [row] = detail["jobs"]
    assert (row["kind"], row["state"], row["reason"]) == (kind, "Failed", "DeadlineExceeded")
    assert "killed by signal 15 (SIGTERM)" in reasons["Exited"]
    assert not harness.machine.supervisor.running


def test_a_deadline_below_one_second_is_a_422_naming_the_field(harness: LocalHarness) -> None:
    answer = harness.submit(with_deadline(pod("x", ["python3"]), 0))
    assert answer["status"] == 422, answer
    assert answer["field"] == "spec.activeDeadlineSeconds"
    assert "expected a whole number >= 1, got 0" in answer["message"]
    assert harness.store.workloads() == []
