"""``serve --local`` and an Indexed Job's ``backoffLimitPerIndex`` and ``maxFailedIndexes``: a
failed index is run again on its own (the pods running the other indexes run on, untouched)
until its failures exceed the limit; then it fails for good and the Job goes on, failing at
the end with its failed indexes listed, or at once beyond ``maxFailedIndexes``; the counts
hold across a restart of the plane."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import pytest

from gpufleet.testing.local_service import LocalHarness
from tests.backends.local.scripts import write_script
from tests.service.local.test_local_plane import events, job, tenant_dir

#: ``indexes.py FAILING TIMES HOLD``: prints ``INDEX i`` (its JOB_COMPLETION_INDEX), counts
#: its runs in ./runs-<i>; index FAILING fails (exit 3) on its first TIMES runs (-1: always);
#: index HOLD waits for ./release first; the others exit 0.
INDEXES = """
import os, sys, time
index = os.environ["JOB_COMPLETION_INDEX"]
count = int(open(f"runs-{index}").read()) + 1 if os.path.exists(f"runs-{index}") else 1
open(f"runs-{index}.tmp", "w").write(str(count))
os.replace(f"runs-{index}.tmp", f"runs-{index}")  # whole, for the test that reads it
print(f"INDEX {index}", flush=True)
if index == sys.argv[3]:
    while not os.path.exists("release"):
        time.sleep(0.005)
times = int(sys.argv[2])
sys.exit(3 if index == sys.argv[1] and (times < 0 or count <= times) else 0)
"""


def indexed_job(
    harness: LocalHarness,
    failing: int,
    times: int,
    hold: int = -1,
    parallelism: int = 2,
    completions: int = 4,
    **spec: int,
) -> dict[str, Any]:
    script = write_script(tenant_dir(harness), "indexes.py", INDEXES)
    argv = [sys.executable, str(script), str(failing), str(times), str(hold)]
    document = job("sweep", parallelism, argv)
    document["spec"].update(completions=completions, completionMode="Indexed", **spec)
    document["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    return document


def runs(harness: LocalHarness, completions: int = 4) -> dict[int, int]:
    """How many times each index ran (its runs-<i> file; 0: never)."""
    root = tenant_dir(harness)
    return {
        i: int((root / f"runs-{i}").read_text()) if (root / f"runs-{i}").exists() else 0
        for i in range(completions)
    }


def indices_run(harness: LocalHarness, parallelism: int = 2) -> Counter[str]:
    """The index each run printed, over every run of every pod."""
    seen: Counter[str] = Counter()
    for rank in range(parallelism):
        for run in harness.machine.runs_of(f"research/sweep-{rank}"):
            text = harness.machine.supervisor.log_path(run).read_text()
            seen.update(line.split()[1] for line in text.splitlines() if line.startswith("INDEX"))
    return seen


@pytest.mark.parametrize(
    ("failing", "times", "spec", "state", "reason", "ran", "failed_pods", "failed_indexes"),
    [
        pytest.param(
            1, 2, {"backoffLimitPerIndex": 2}, "Succeeded", None, {0: 1, 1: 3, 2: 1, 3: 1}, 2, [],
            id="index-retried-within-its-limit-succeeds",
        ),
        pytest.param(
            1, -1, {"backoffLimitPerIndex": 1}, "Failed", "FailedIndexes",
            {0: 1, 1: 2, 2: 1, 3: 1}, 2, [1],
            id="index-past-its-limit-fails-the-job-at-the-end",
        ),
        pytest.param(
            2, -1, {"backoffLimitPerIndex": 0, "maxFailedIndexes": 1}, "Failed", "FailedIndexes",
            {0: 1, 1: 1, 2: 1, 3: 1}, 1, [2],
            id="failed-indexes-within-max-run-the-rest",
        ),
        pytest.param(
            1, -1, {"backoffLimitPerIndex": 3, "backoffLimit": 1}, "Failed",
            "BackoffLimitExceeded", None, 2, [],
            id="backoff-limit-still-counts-every-failure",
        ),
    ],
)  # fmt: skip
def test_a_failed_index_is_run_again_on_its_own(
    harness: LocalHarness,
    failing: int,
    times: int,
    spec: dict[str, int],
    state: str,
    reason: str | None,
    ran: dict[int, int] | None,
    failed_pods: int,
    failed_indexes: list[int],
) -> None:
    assert harness.submit(indexed_job(harness, failing, times, **spec))["status"] == 201
    harness.run_until(harness.state_is("sweep", state))

    if ran is not None:
        assert runs(harness) == ran
        assert indices_run(harness) == Counter({str(i): n for i, n in ran.items()})
    [row] = harness.workload("sweep")["jobs"]
    found = (row["state"], row["reason"], row["failed_pods"], row["failed_indexes"])
    assert found == (state, reason, failed_pods, failed_indexes)
    if reason == "FailedIndexes":
        assert row["message"] == f"Job has failed indexes {','.join(map(str, failed_indexes))}"


def test_healthy_indexes_run_on_while_a_failed_one_is_retried(harness: LocalHarness) -> None:
    document = indexed_job(harness, 1, 2, hold=0, completions=2, backoffLimitPerIndex=2)
    assert harness.submit(document)["status"] == 201
    harness.run_until(
        lambda: runs(harness, 2)[1] == 3 and harness.machine.run_of("research/sweep-1") is None
    )
    # Index 0 still runs its first run, never stopped for index 1's failures.
    assert harness.machine.runs_of("research/sweep-0") == ["research_sweep-0_1"]
    assert harness.machine.run_of("research/sweep-0") == "research_sweep-0_1"
    assert harness.workload("sweep")["state"] == "Running"
    (tenant_dir(harness) / "release").touch()
    harness.run_until(harness.state_is("sweep", "Succeeded"))

    assert runs(harness, 2) == {0: 1, 1: 3}
    [row] = harness.workload("sweep")["jobs"]
    assert (row["completed"], row["failed_pods"], row["failed_indexes"]) == (2, 2, [])
    backoffs = [m for r, m in events(harness, "sweep") if r == "BackOff"]
    assert len(backoffs) == 2
    assert all("runs index 1 again" in m for m in backoffs)


def test_more_failed_indexes_than_the_max_fail_the_job_at_once(harness: LocalHarness) -> None:
    # Index 0 waits (for ever); index 1 fails: past maxFailedIndexes 0, the Job fails now,
    # index 0 is stopped and indexes 2 and 3 never run.
    spec = {"backoffLimitPerIndex": 1, "maxFailedIndexes": 0}
    assert harness.submit(indexed_job(harness, 1, -1, hold=0, **spec))["status"] == 201
    harness.run_until(harness.state_is("sweep", "Failed"))

    assert runs(harness) == {0: 1, 1: 2, 2: 0, 3: 0}
    [row] = harness.workload("sweep")["jobs"]
    assert (row["reason"], row["failed_indexes"]) == ("MaxFailedIndexesExceeded", [1])
    assert row["message"] == "Job has exceeded the maximum of 0 failed indexes"


def test_the_failed_indexes_hold_across_a_restart(harness: LocalHarness) -> None:
    # Index 1 fails for good (limit 0) while index 0 waits; the plane restarts; index 1 is not
    # run again and the Job fails at the end with it listed.
    document = indexed_job(harness, 1, -1, hold=0, completions=3, backoffLimitPerIndex=0)
    assert harness.submit(document)["status"] == 201
    harness.run_until(lambda: runs(harness, 3) == {0: 1, 1: 1, 2: 1})
    harness.run_until(lambda: harness.workload("sweep")["jobs"][0]["failed_indexes"] == [1])
    harness.restart()
    (tenant_dir(harness) / "release").touch()
    harness.run_until(harness.state_is("sweep", "Failed"))

    assert runs(harness, 3) == {0: 1, 1: 1, 2: 1}
    [row] = harness.workload("sweep")["jobs"]
    assert (row["reason"], row["failed_indexes"]) == ("FailedIndexes", [1])


@pytest.mark.parametrize(
    ("annotation", "indexed", "expected"),
    [
        pytest.param("0-9", True, "a job array of 10 tasks is an Indexed Job of 10", id="count"),
        pytest.param("0-3", False, "a job array of 4 tasks is an Indexed Job of 4", id="mode"),
        pytest.param("three", True, "expected FIRST-LAST", id="malformed"),
    ],
)
def test_a_job_array_annotation_must_match_its_job(
    harness: LocalHarness, annotation: str, indexed: bool, expected: str
) -> None:
    document = indexed_job(harness, 1, 0)
    document["metadata"]["annotations"] = {"gpufleet.dev/array": annotation}
    if not indexed:
        del document["spec"]["completionMode"]
    answer = harness.submit(document)
    assert answer["status"] == 422, answer
    assert expected in str(answer), answer
