"""``serve --local`` and the owner's changes of a waiting workload: a gated Job's processes
start only once its gates are removed, a suspended Job's once it is resumed, and a Job
suspended while it waits starts nothing until resumed; each is explained while it waits."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from gpufleet.testing.local_service import LocalHarness
from tests.service.local.test_local_plane import job

TRUE = [sys.executable, "-c", "pass"]


def waiting_for(harness: LocalHarness, name: str) -> str | None:
    found: str | None = harness.workload(name).get("waiting_for")
    return found


def post(harness: LocalHarness, name: str, action: str) -> int:
    status: int = harness.client().post(f"/api/v1/workloads/research/{name}/{action}").status_code
    return status


def held(gates: bool, suspend: bool) -> dict[str, Any]:
    document = job("j", 1, TRUE)
    if gates:
        document["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "example.com/q"}]
    if suspend:
        document["spec"]["suspend"] = True
    return document


@pytest.mark.parametrize(
    ("gates", "suspend", "reason", "action"),
    [(True, False, "SchedulingGated", "ungate"), (False, True, "Suspended", "resume")],
    ids=["gated", "suspended"],
)
def test_a_held_job_runs_only_once_released(
    harness: LocalHarness, gates: bool, suspend: bool, reason: str, action: str
) -> None:
    assert harness.submit(held(gates, suspend))["status"] == 201
    harness.run_until(lambda: waiting_for(harness, "j") == reason)
    assert harness.machine.runs_of("research/j-0") == []
    assert post(harness, "j", action) == 200
    harness.run_until(harness.state_is("j", "Succeeded"))


def test_a_waiting_job_suspended_starts_nothing_until_resumed(harness: LocalHarness) -> None:
    assert harness.submit(held(True, False))["status"] == 201
    harness.run_until(lambda: waiting_for(harness, "j") == "SchedulingGated")
    assert post(harness, "j", "suspend") == 200
    assert post(harness, "j", "ungate") == 200
    harness.run_until(lambda: waiting_for(harness, "j") == "Suspended")
    assert harness.machine.runs_of("research/j-0") == []
    assert post(harness, "j", "resume") == 200
    harness.run_until(harness.state_is("j", "Succeeded"))
