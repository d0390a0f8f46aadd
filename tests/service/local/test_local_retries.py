"""``serve --local`` and a Job's ``backoffLimit``: a failed process is started again as a new
run of the same pod (its log kept apart) until the failures exceed the limit, which fails the
Job with ``BackoffLimitExceeded``; the count holds across a restart of the plane. The jobs are
small scripts that fail a given number of times, counting their attempts in a file."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from gpufleet.testing.local_service import LocalHarness
from tests.backends.local.scripts import write_script
from tests.service.local.test_local_plane import events, job, tenant_dir

#: ``flaky.py FAILS [HOLD_ATTEMPT RELEASE]``: counts its attempts in ./attempts, fails (exit
#: 3) on the first FAILS, succeeds after; attempt HOLD_ATTEMPT waits for the file RELEASE.
FLAKY = """
import os, sys, time
count = int(open("attempts").read()) + 1 if os.path.exists("attempts") else 1
open("attempts.tmp", "w").write(str(count))
os.replace("attempts.tmp", "attempts")  # whole, for the test that reads it
print(f"ATTEMPT {count}", flush=True)
if len(sys.argv) > 3 and count == int(sys.argv[2]):
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.005)
sys.exit(3 if count <= int(sys.argv[1]) else 0)
"""


def pod_key(harness: LocalHarness) -> str:
    """The Job's one pod (its name is the Job's and a suffix)."""
    [only] = {r.rsplit("_", 1)[0] for r in os.listdir(harness.machine.supervisor.runs_dir)}
    return only.replace("_", "/", 1)


def run_ids(harness: LocalHarness, count: int) -> list[str]:
    name = pod_key(harness).partition("/")[2]
    return [f"research_{name}_{n}" for n in range(1, count + 1)]


def flaky_job(harness: LocalHarness, backoff_limit: int, *args: str) -> dict[str, Any]:
    script = write_script(tenant_dir(harness), "flaky.py", FLAKY)
    document = job("flaky", 1, [sys.executable, str(script), *args])
    document["spec"]["backoffLimit"] = backoff_limit
    return document


@pytest.mark.parametrize(
    ("backoff_limit", "fails", "state", "runs", "reason"),
    [
        pytest.param(3, 2, "Succeeded", 3, None, id="two-failures-within-3-succeeds"),
        pytest.param(1, 2, "Failed", 2, "BackoffLimitExceeded", id="two-failures-past-1-fails"),
        pytest.param(0, 1, "Failed", 1, "BackoffLimitExceeded", id="limit-0-no-retry"),
    ],
)
def test_a_failed_job_is_started_again_until_its_backoff_limit(
    harness: LocalHarness, backoff_limit: int, fails: int, state: str, runs: int, reason: str | None
) -> None:
    assert harness.submit(flaky_job(harness, backoff_limit, str(fails)))["status"] == 201
    harness.run_until(harness.state_is("flaky", state))

    assert (tenant_dir(harness) / "attempts").read_text() == str(runs)
    assert harness.machine.runs_of(pod_key(harness)) == run_ids(harness, runs)
    for attempt in range(1, runs + 1):  # each run's log kept apart
        assert harness.log("flaky", attempt=attempt)["text"] == f"ATTEMPT {attempt}\n"
    [row] = harness.workload("flaky")["jobs"]
    failures = min(fails, backoff_limit + 1)
    assert (row["state"], row["failed_pods"], row["reason"]) == (state, failures, reason)
    backoffs = [m for r, m in events(harness, "flaky") if r == "BackOff"]
    assert len(backoffs) == runs - 1
    assert all("exit code 3" in m for m in backoffs)
    if reason:
        assert dict(events(harness, "flaky"))[reason] == (
            f"Job has reached the specified backoff limit ({backoff_limit})"
        )
    assert not harness.machine.supervisor.running


def test_the_failure_count_holds_across_a_restart_of_the_plane(harness: LocalHarness) -> None:
    release = tenant_dir(harness) / "release"
    # Fails twice: the second attempt waits for the release, across the restart.
    harness.submit(flaky_job(harness, 1, "2", "2", str(release)))
    harness.run_until(harness.state_is("flaky", "Running"))
    key = pod_key(harness)
    harness.run_until(lambda: harness.machine.run_of(key) == run_ids(harness, 2)[1])

    harness.restart()
    assert harness.machine.run_of(key) == run_ids(harness, 2)[1]
    assert harness.machine.failures_of("research/Job/flaky") == 1
    assert harness.workload("flaky")["jobs"][0]["failed_pods"] == 1
    release.touch()
    harness.run_until(harness.state_is("flaky", "Failed"))
    [row] = harness.workload("flaky")["jobs"]
    outcome = (row["state"], row["failed_pods"], row["reason"])
    assert outcome == ("Failed", 2, "BackoffLimitExceeded")
    assert harness.machine.runs_of(key) == run_ids(harness, 2)
    assert (tenant_dir(harness) / "attempts").read_text() == "2"
