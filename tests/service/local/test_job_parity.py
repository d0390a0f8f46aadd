"""Parity of the two worlds that run Jobs: the same Job, its pods failing the same way, ends
the same in the simulated cluster (``serve``'s embedded world, failures from its annotations)
and on the local machine (``serve --local``, real processes that fail), since both ask
:mod:`gpufleet.job_controller`: the same state, reason, message, failed pods, failed indexes
and completions in the Job's row."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpufleet.testing.job_objects import batch_job, sim_notes
from gpufleet.testing.local_service import LocalHarness
from gpufleet.testing.service import as_yaml, make_harness
from tests.backends.local.scripts import write_script
from tests.service.local.test_local_plane import pod, tenant_dir

#: ``failing.py FAILS MODE``: counts its runs of its index (./runs-<JOB_COMPLETION_INDEX>, or
#: ./runs-job) and fails (exit 1) on the first FAILS; MODE ``hang`` sleeps first.
FAILING = """
import os, sys, time
path = "runs-" + os.environ.get("JOB_COMPLETION_INDEX", "job")
count = int(open(path).read()) + 1 if os.path.exists(path) else 1
open(path + ".tmp", "w").write(str(count))
os.replace(path + ".tmp", path)  # whole, for the test that reads it
if sys.argv[2] == "hang":
    time.sleep(600)
sys.exit(1 if count <= int(sys.argv[1]) else 0)
"""


@dataclass(frozen=True)
class Scenario:
    """A Job whose every task fails its first ``fails`` attempts (or runs on, ``hangs``)."""

    parallelism: int = 1
    completions: int = 1
    indexed: bool = False
    fails: int = 0
    hangs: bool = False
    spec: dict[str, int] = field(default_factory=dict)

    def job(self, annotations: dict[str, str] | None = None) -> dict[str, Any]:
        made = batch_job(
            "parity", self.parallelism, self.completions, indexed=self.indexed,
            annotations=annotations,
        )  # fmt: skip
        made["spec"].update(self.spec)
        return made


def row_of(body: dict[str, Any]) -> tuple[object, ...]:
    (row,) = body["jobs"]
    return (
        row["state"], row["reason"], row["message"], row["failed_pods"], row["failed_indexes"],
        row["completed"],
    )  # fmt: skip


def decided(row: tuple[object, ...]) -> tuple[object, ...]:
    """The row, but of a success only its state and counts: the simulator's row says why
    (``Completed``, ``Job completed``), the local plane's does not (its pods' ends are all it
    reports of a success)."""
    return row if row[0] != "Succeeded" else (row[0], *row[3:])


def simulated(tmp_path: Path, scenario: Scenario) -> tuple[object, ...]:
    """The Job's row once it ended in the simulated cluster (a minute a run; failing at its
    end), its clock stepped a minute at a time so that replacements are scheduled in time."""
    harness = make_harness(tmp_path)
    notes = sim_notes("1h" if scenario.hangs else "1m", scenario.fails)
    answer = harness.client("team-a").post(
        "/api/v1/workloads",
        content=as_yaml(scenario.job(notes)),
        headers={"Content-Type": "application/yaml"},
    )
    assert answer.status_code == 201, answer.text
    for _ in range(60):
        harness.advance(60)
        body = harness.client("team-a").get("/api/v1/workloads/team-a/parity").json()
        if body["state"] in ("Succeeded", "Failed"):
            return row_of(body)
    raise AssertionError(f"the simulated Job did not end: {body}")


def local(harness: LocalHarness, scenario: Scenario) -> tuple[object, ...]:
    """The Job's row once it ended on the local machine, its pods running ``FAILING``."""
    script = write_script(tenant_dir(harness), "failing.py", FAILING)
    argv = [sys.executable, str(script), str(scenario.fails), "hang" if scenario.hangs else "-"]
    document = scenario.job()
    document["spec"]["template"] = {"spec": {**pod("x", argv)["spec"], "restartPolicy": "Never"}}
    assert harness.submit(document)["status"] == 201
    harness.run_until(harness.state_is("parity", "Succeeded", "Failed"), timeout_s=60)
    return row_of(harness.workload("parity"))


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        pytest.param(
            Scenario(fails=2, spec={"backoffLimit": 1}),
            ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit (1)",
             2, [], 0),
            id="fails-twice-past-backoff-limit-1",
        ),
        pytest.param(
            Scenario(fails=1, spec={"backoffLimit": 1}),
            ("Succeeded", 1, [], 1),
            id="fails-once-within-backoff-limit-1",
        ),
        pytest.param(
            Scenario(2, 2, indexed=True, fails=2, spec={"backoffLimitPerIndex": 1}),
            ("Failed", "FailedIndexes", "Job has failed indexes 0,1", 4, [0, 1], 0),
            id="indexes-past-backoff-limit-per-index",
        ),
        pytest.param(
            Scenario(2, 2, indexed=True, fails=1, spec={"backoffLimitPerIndex": 1}),
            ("Succeeded", 2, [], 2),
            id="indexes-retried-within-backoff-limit-per-index",
        ),
        pytest.param(
            Scenario(hangs=True, spec={"activeDeadlineSeconds": 1}),
            ("Failed", "DeadlineExceeded",
             "active longer than its time limit (activeDeadlineSeconds)", 0, [], 0),
            id="active-past-its-deadline",
        ),
    ],
)  # fmt: skip
def test_both_worlds_end_a_job_alike(
    harness: LocalHarness, tmp_path: Path, scenario: Scenario, expected: tuple[object, ...]
) -> None:
    in_simulation = decided(simulated(tmp_path, scenario))
    on_this_machine = decided(local(harness, scenario))
    assert in_simulation == on_this_machine
    assert on_this_machine == expected
