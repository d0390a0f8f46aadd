"""``serve --local`` and a Job's ``completions`` beyond its ``parallelism``: its pods run the
completions in turn, a pod whose completion succeeded running the next one in place (a new
run, its own log), each completion once; an Indexed Job's runs see ``JOB_COMPLETION_INDEX``;
the completions done hold across a restart of the plane."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import pytest

from gpufleet.backends.local.run_state import EXIT_FILE
from gpufleet.testing.local_service import LocalHarness
from gpufleet.testing.waiting import wait_until
from tests.backends.local.scripts import write_script
from tests.service.local.test_local_plane import events, job, tenant_dir

#: ``indexed.py [WAIT]``: prints ``INDEX i`` (its JOB_COMPLETION_INDEX); with WAIT, waits for
#: ./release-<i> first; exits 0.
INDEXED = """
import os, sys, time
index = os.environ.get("JOB_COMPLETION_INDEX")
print(f"INDEX {index}", flush=True)
if len(sys.argv) > 1:
    while not os.path.exists(f"release-{index}"):
        time.sleep(0.005)
"""


def completions_job(
    harness: LocalHarness, parallelism: int, completions: int, indexed: bool, *args: str
) -> dict[str, Any]:
    script = write_script(tenant_dir(harness), "indexed.py", INDEXED)
    document = job("sweep", parallelism, [sys.executable, str(script), *args])
    document["spec"]["completions"] = completions
    if indexed:
        document["spec"]["completionMode"] = "Indexed"
    return document


def indices(harness: LocalHarness, parallelism: int) -> list[str]:
    """The index each run printed, over every run of every pod."""
    seen: list[str] = []
    for rank in range(parallelism):
        for run in harness.machine.runs_of(f"research/sweep-{rank}"):
            text = harness.machine.supervisor.log_path(run).read_text()
            seen.extend(line.split()[1] for line in text.splitlines() if line.startswith("INDEX"))
    return seen


@pytest.mark.parametrize(
    ("parallelism", "completions", "indexed", "expected"),
    [
        pytest.param(2, 5, True, ["0", "1", "2", "3", "4"], id="indexed-5-two-at-a-time"),
        pytest.param(1, 3, False, ["None"] * 3, id="non-indexed-3-one-at-a-time"),
        pytest.param(2, 2, True, ["0", "1"], id="indexed-as-many-as-pods"),
    ],
)
def test_a_jobs_pods_run_its_completions_in_turn(
    harness: LocalHarness, parallelism: int, completions: int, indexed: bool, expected: list[str]
) -> None:
    document = completions_job(harness, parallelism, completions, indexed)
    assert harness.submit(document)["status"] == 201
    harness.run_until(harness.state_is("sweep", "Succeeded"))

    assert sorted(indices(harness, parallelism)) == expected
    runs = sum(len(harness.machine.runs_of(f"research/sweep-{r}")) for r in range(parallelism))
    assert runs == completions
    if completions > parallelism:
        [row] = harness.workload("sweep")["jobs"]
        progress = (row["completed"], row["completions"], row["state"])
        assert progress == (completions, completions, "Succeeded")
    completed = [m for r, m in events(harness, "sweep") if r == "Completed"]
    assert len(completed) == completions - parallelism


def test_the_completions_done_hold_across_a_restart(harness: LocalHarness) -> None:
    document = completions_job(harness, 2, 4, True, "wait")
    assert harness.submit(document)["status"] == 201
    harness.run_until(lambda: sorted(indices(harness, 2)) == ["0", "1"])
    first = harness.machine.run_of("research/sweep-0")
    assert first is not None

    def complete_index_0() -> None:
        (tenant_dir(harness) / "release-0").touch()
        wait_until(lambda: (harness.machine.supervisor.run_dir(first) / EXIT_FILE).exists())

    harness.restart(complete_index_0)
    harness.run_until(lambda: sorted(indices(harness, 2)) == ["0", "1", "2"])
    assert harness.workload("sweep")["jobs"][0]["completed"] == 1
    for index in (1, 2, 3):
        (tenant_dir(harness) / f"release-{index}").touch()
    harness.run_until(harness.state_is("sweep", "Succeeded"))

    assert Counter(indices(harness, 2)) == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert harness.workload("sweep")["jobs"][0]["completed"] == 4


#: ``flaky_index.py``: like indexed.py (no wait), but index 2 fails (exit 3) on its first run,
#: counting its runs in ./runs-2.
FLAKY_INDEX = """
import os, sys
index = os.environ.get("JOB_COMPLETION_INDEX")
print(f"INDEX {index}", flush=True)
if index == "2":
    count = int(open("runs-2").read()) + 1 if os.path.exists("runs-2") else 1
    open("runs-2.tmp", "w").write(str(count))
    os.replace("runs-2.tmp", "runs-2")
    sys.exit(3 if count == 1 else 0)
"""


def test_a_failed_completion_is_retried_and_every_index_completes_once(
    harness: LocalHarness,
) -> None:
    script = write_script(tenant_dir(harness), "flaky_index.py", FLAKY_INDEX)
    document = job("sweep", 2, [sys.executable, str(script)])
    document["spec"].update(completions=5, completionMode="Indexed", backoffLimit=1)
    assert harness.submit(document)["status"] == 201
    harness.run_until(harness.state_is("sweep", "Succeeded"))

    printed = Counter(indices(harness, 2))
    assert set(printed) == {"0", "1", "2", "3", "4"}
    assert printed["2"] == 2  # its failed run and its retry
    [row] = harness.workload("sweep")["jobs"]
    assert (row["completed"], row["failed_pods"], row["state"]) == (5, 1, "Succeeded")
    assert len([m for r, m in events(harness, "sweep") if r == "BackOff"]) == 1
