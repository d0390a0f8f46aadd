"""Job semantics in ``gpufleet serve``'s embedded world: completions, restarts and failures as
the API and ``describe`` show them, and a restart of the server in the middle of a Job."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rich.console import Console

from gpufleet.api.schemas import WorkloadDetail
from gpufleet.cli.remote_render import Clock, describe_workload
from gpufleet.testing.job_objects import batch_job, pytorch_job, sim_notes
from gpufleet.testing.service import ServiceHarness, as_yaml, make_harness

YAML = {"Content-Type": "application/yaml"}
Obj = dict[str, Any]


def submit(harness: ServiceHarness, *objects: Obj) -> None:
    answer = harness.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(*objects), headers=YAML
    )
    assert answer.status_code == 201, answer.text
    harness.advance(0)


def detail(harness: ServiceHarness, name: str) -> dict[str, Any]:
    answer = harness.client("team-a").get(f"/api/v1/workloads/team-a/{name}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def job_status(body: dict[str, Any]) -> tuple[object, ...]:
    (job,) = body["jobs"]
    return (
        body["state"],
        job["state"],
        job["reason"],
        job["completed"],
        job["completions"],
        job["failed_pods"],
        job["restarts"],
    )


def test_a_job_runs_its_completions_and_restarts_failed_containers(tmp_path: Path) -> None:
    harness = make_harness(tmp_path)
    job = batch_job("sweep", 2, 4, restart_policy="OnFailure", annotations=sim_notes("10m", 1))
    submit(harness, job)
    harness.advance(601)  # both first attempts failed at 600 s and restarted
    body = detail(harness, "sweep")
    assert job_status(body) == ("Running", "Running", None, 0, 4, 0, 2)
    assert [p["restarts"] for p in body["pod_views"]] == [1, 1]
    harness.advance(1200)  # 1801: completions 0 and 1 done at 1210 s; 2 and 3 run from then
    assert job_status(detail(harness, "sweep")) == ("Running", "Running", None, 2, 4, 0, 2)
    harness.advance(620)  # 2421: 2 and 3 failed at 1810 s, restarted at 1820 s, done at 2420 s
    body = detail(harness, "sweep")
    assert job_status(body) == ("Succeeded", "Succeeded", "Completed", 4, 4, 0, 4)
    reasons = [e["reason"] for e in body["events"]]
    assert reasons.count("BackOff") == 4
    assert reasons[-1] == "Completed"


def test_a_failed_job_is_shown_failed_with_its_reason(tmp_path: Path) -> None:
    harness = make_harness(tmp_path)
    submit(harness, batch_job("doomed", 2, backoffLimit=0, annotations=sim_notes("10m", 1)))
    harness.advance(601)
    body = detail(harness, "doomed")
    assert job_status(body) == ("Failed", "Failed", "BackoffLimitExceeded", 0, 2, 1, 0)
    assert [p["state"] for p in body["pod_views"]] == ["Failed", "Failed"]
    assert body["events"][-1]["type"] == "Warning"
    console = Console(width=160, record=True)
    console.print(describe_workload(WorkloadDetail(**body), Clock(harness.plane.now())))
    text = console.export_text()
    for pattern in (
        r"Job:\s+Failed \(BackoffLimitExceeded\)",
        r"Completions:\s+0/2",
        r"Failed pods:\s+1",
        r"Restarts:\s+0",
    ):
        assert re.search(pattern, text), text


def test_a_replaced_pod_waits_again_and_is_bound_again(tmp_path: Path) -> None:
    harness = make_harness(tmp_path)
    notes = sim_notes("1h", 1, "5m", 137)
    submit(harness, pytorch_job("pt", 1, restart_policy="ExitCode", annotations=notes))
    harness.advance(301)  # both failed with 137 at 300 s: new pods, scheduled again at once
    body = detail(harness, "pt")
    assert [p["state"] for p in body["pod_views"]] == ["Running", "Running"]
    assert job_status(body)[4:] == (1, 2, 0)
    assert [e["reason"] for e in body["events"]].count("Failed") == 2


def test_a_restarted_server_keeps_a_jobs_progress(tmp_path: Path) -> None:
    harness = make_harness(tmp_path)
    submit(harness, batch_job("steps", 1, 3, annotations=sim_notes("10m")))
    harness.advance(601)  # completion 0 done at 600 s, completion 1 runs from 600 s
    assert job_status(detail(harness, "steps"))[3] == 1
    harness.restart()
    harness.advance(0)
    assert job_status(detail(harness, "steps"))[3] == 1
    harness.advance(1200)  # 1801: done at 1800 s, not 2400 (no completion ran twice)
    body = detail(harness, "steps")
    assert job_status(body) == ("Succeeded", "Succeeded", "Completed", 3, 3, 0, 0)
    assert 1800.0 <= body["finished"] < 1802.0  # seen at the next turn after it


def test_a_job_that_waits_is_pending_not_running(tmp_path: Path) -> None:
    """A job that has not ended is in its workload's state: one that waits is Pending (issue
    29, item 18: a job blocked by its budget was listed as Running)."""
    harness = make_harness(tmp_path)  # nodes of 4 GPUs
    submit(harness, batch_job("huge", 1, gpus=8, annotations=sim_notes("10m")))
    submit(harness, batch_job("small", 1, annotations=sim_notes("1h")))
    harness.advance(60)
    assert job_status(detail(harness, "small"))[:2] == ("Running", "Running")
    body = detail(harness, "huge")
    assert job_status(body)[:2] == ("Pending", "Pending")
    console = Console(width=160, record=True)
    console.print(describe_workload(WorkloadDetail(**body), Clock(harness.plane.now())))
    assert re.search(r"^Job:\s+Pending\s*$", console.export_text(), re.M)


def test_an_indexed_jobs_failed_indexes_are_shown(tmp_path: Path) -> None:
    harness = make_harness(tmp_path)
    job = batch_job(
        "arr", 3, 3, indexed=True, backoffLimitPerIndex=0, annotations=sim_notes("10m", 1)
    )
    submit(harness, job)
    harness.advance(601)  # each index's first attempt failed at 600 s: its limit is 0
    body = detail(harness, "arr")
    (row,) = body["jobs"]
    assert (row["state"], row["reason"], row["failed_indexes"]) == (
        "Failed", "FailedIndexes", [0, 1, 2],
    )  # fmt: skip
    console = Console(width=160, record=True)
    console.print(describe_workload(WorkloadDetail(**body), Clock(harness.plane.now())))
    assert re.search(r"Failed indexes:\s+0-2", console.export_text())
