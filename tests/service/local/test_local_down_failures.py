"""``serve --local`` restarted after runs ended while it was down: their ends are taken in as if
it had been up. A Job's failure counts against its ``backoffLimit`` (started again on the same
GPUs, or failed ``BackoffLimitExceeded``), a lost run (its shim killed: the machine rebooted)
counts as a failure as a pod lost with its node does, and a gang is never left part running:
a member that failed stops the rest, one that succeeded lets the rest run on.

The jobs are a small script per rank: it counts its attempts, prints them, and waits for its
rank's release file, whose text is its exit code."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from gpufleet.backends.local.run_state import EXIT_FILE, SHIM_FILE, read_process
from gpufleet.cli.serve_observing import observe_settings, start_workload_notices
from gpufleet.testing.local_service import LocalHarness
from gpufleet.testing.waiting import wait_until
from tests.backends.local.scripts import CHECKPOINTING, write_script
from tests.service.local.test_local_plane import events, job, pod, printed, report, tenant_dir

#: ``ranked.py``: counts its attempts in ./attempts-<rank>, prints ``RANK r ATTEMPT n``, waits
#: for ./release-<rank> and exits with the code written in it (then removes it, so that the
#: next attempt waits again).
RANKED = """
import os, sys, time
rank = os.environ.get("RANK", "0")
counter = f"attempts-{rank}"
count = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
open(counter + ".tmp", "w").write(str(count))
os.replace(counter + ".tmp", counter)  # whole, for the test that reads it
print(f"RANK {rank} ATTEMPT {count}", flush=True)
release = f"release-{rank}"
while not os.path.exists(release):
    time.sleep(0.005)
code = int(open(release).read() or "0")
os.remove(release)
sys.exit(code)
"""

NAME = "g"
WORKLOAD = f"research/Job/{NAME}"


def ranked_job(harness: LocalHarness, pods: int, backoff_limit: int) -> dict[str, Any]:
    script = write_script(tenant_dir(harness), "ranked.py", RANKED)
    document = job(NAME, pods, [sys.executable, str(script)])
    document["spec"]["backoffLimit"] = backoff_limit
    return document


def pod_key(rank: int, pods: int) -> str:
    return f"research/{NAME}-{rank}"


def run_dir(harness: LocalHarness, rank: int, pods: int, attempt: int = 1) -> Path:
    pod = pod_key(rank, pods).partition("/")[2]
    return harness.machine.supervisor.runs_dir / f"research_{pod}_{attempt}"


def release(harness: LocalHarness, rank: int, code: int) -> None:
    path = tenant_dir(harness) / f"release-{rank}"
    path.with_suffix(".tmp").write_text(str(code))
    path.with_suffix(".tmp").replace(path)


def attempts(harness: LocalHarness, rank: int) -> int:
    return int((tenant_dir(harness) / f"attempts-{rank}").read_text())


def fail_while_down(
    rank: int, pods: int, code: int = 3, attempt: int = 1
) -> Callable[[LocalHarness], None]:
    """The rank's process exits with ``code``; waits until its shim has recorded it."""

    def happen(harness: LocalHarness) -> None:
        release(harness, rank, code)
        wait_until(lambda: (run_dir(harness, rank, pods, attempt) / EXIT_FILE).exists())

    return happen


def succeed_while_down(rank: int, pods: int) -> Callable[[LocalHarness], None]:
    """The rank's process exits with 0; waits until its shim has recorded it."""
    return fail_while_down(rank, pods, 0)


def lost_while_down(rank: int, pods: int) -> Callable[[LocalHarness], None]:
    """The rank's shim is killed (as a reboot kills it): no end is recorded."""

    def happen(harness: LocalHarness) -> None:
        shim = read_process(run_dir(harness, rank, pods) / SHIM_FILE)
        assert shim is not None
        os.kill(shim.pid, signal.SIGKILL)
        wait_until(lambda: _gone_or_zombie(shim.pid))

    return happen


def _gone_or_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def running_both(harness: LocalHarness, pods: int) -> Callable[[], bool]:
    def check() -> bool:
        return all(
            harness.machine.run_of(pod_key(r, pods)) is not None for r in range(pods)
        ) and all((tenant_dir(harness) / f"attempts-{r}").exists() for r in range(pods))

    return check


def restart_after(
    harness: LocalHarness, pods: int, backoff_limit: int, happen: Callable[[LocalHarness], None]
) -> None:
    assert harness.submit(ranked_job(harness, pods, backoff_limit))["status"] == 201
    harness.run_until(running_both(harness, pods))
    harness.restart(lambda: happen(harness))


def job_row(harness: LocalHarness) -> tuple[str, int, str | None]:
    [row] = harness.workload(NAME)["jobs"]
    return row["state"], row["failed_pods"], row["reason"]


# ------------------------------------------------------------------------------- one pod
@pytest.mark.parametrize(
    ("happen", "backoff_limit", "ended_by"),
    [
        pytest.param(fail_while_down, 1, "exit code 3", id="failed"),
        pytest.param(lost_while_down, 1, "lost", id="lost-counts-as-a-failure"),
    ],
)
def test_a_failure_while_down_is_retried_within_the_backoff_limit(
    harness: LocalHarness,
    happen: Callable[[int, int], Callable[[LocalHarness], None]],
    backoff_limit: int,
    ended_by: str,
) -> None:
    restart_after(harness, 1, backoff_limit, happen(0, 1))
    gpus_before = harness.workload(NAME)["pod_views"][0]["gpu_indices"]
    harness.run_until(lambda: run_dir(harness, 0, 1, 2).exists())
    harness.run_until(lambda: attempts(harness, 0) == 2)
    harness.run_until(lambda: "BackOff" in dict(events(harness, NAME)))  # told in a turn

    assert harness.workload(NAME)["state"] == "Running"
    assert harness.workload(NAME)["pod_views"][0]["gpu_indices"] == gpus_before  # the same GPUs
    backoffs = [m for r, m in events(harness, NAME) if r == "BackOff"]
    assert len(backoffs) == 1, backoffs
    assert ended_by in backoffs[0]
    assert "failure 1 of backoffLimit 1" in backoffs[0]
    assert job_row(harness)[1] == 1
    release(harness, 0, 0)
    harness.run_until(harness.state_is(NAME, "Succeeded"))
    assert harness.machine.runs_of(pod_key(0, 1)) == ["research_g-0_1", "research_g-0_2"]
    assert attempts(harness, 0) == 2


@pytest.mark.parametrize(
    "happen",
    [pytest.param(fail_while_down, id="failed"), pytest.param(lost_while_down, id="lost")],
)
def test_a_failure_while_down_past_the_backoff_limit_fails_the_job(
    harness: LocalHarness, happen: Callable[[int, int], Callable[[LocalHarness], None]]
) -> None:
    restart_after(harness, 1, 0, happen(0, 1))
    harness.run_until(harness.state_is(NAME, "Failed"))

    assert job_row(harness) == ("Failed", 1, "BackoffLimitExceeded")
    assert "BackOff" not in dict(events(harness, NAME))
    assert harness.machine.runs_of(pod_key(0, 1)) == ["research_g-0_1"]
    assert attempts(harness, 0) == 1


def test_the_count_before_the_restart_and_the_failure_while_down_add_up(
    harness: LocalHarness,
) -> None:
    assert harness.submit(ranked_job(harness, 1, 1))["status"] == 201
    harness.run_until(running_both(harness, 1))
    release(harness, 0, 3)  # failure 1, while up: started again
    harness.run_until(lambda: attempts(harness, 0) == 2)
    harness.restart(lambda: fail_while_down(0, 1, attempt=2)(harness))
    harness.run_until(harness.state_is(NAME, "Failed"))

    assert job_row(harness) == ("Failed", 2, "BackoffLimitExceeded")
    assert harness.machine.runs_of(pod_key(0, 1)) == ["research_g-0_1", "research_g-0_2"]


# ------------------------------------------------------------------------------- gangs
@pytest.mark.parametrize(
    ("happen", "backoff_limit", "outcome", "runs"),
    [
        pytest.param(fail_while_down, 0, "Failed", 1, id="failed-past-the-limit"),
        pytest.param(lost_while_down, 0, "Failed", 1, id="lost-past-the-limit"),
        pytest.param(fail_while_down, 2, "Succeeded", 2, id="failed-within-the-limit"),
        pytest.param(lost_while_down, 2, "Succeeded", 2, id="lost-within-the-limit"),
        pytest.param(succeed_while_down, 0, "Succeeded", 1, id="succeeded"),
    ],
)
def test_a_gang_member_that_ended_while_down_is_met_as_at_run_time(
    harness: LocalHarness,
    happen: Callable[[int, int], Callable[[LocalHarness], None]],
    backoff_limit: int,
    outcome: str,
    runs: int,
) -> None:
    """Rank 1 ends while the server is down, rank 0 runs on: failed for good, rank 0 is
    stopped and the gang fails; failed within its limit, both start again; succeeded, rank 0
    runs on alone."""
    restart_after(harness, 2, backoff_limit, happen(1, 2))
    if runs == 2:
        harness.run_until(lambda: attempts(harness, 0) == 2 and attempts(harness, 1) == 2)
        assert harness.workload(NAME)["state"] == "Running"
        for rank in (0, 1):
            release(harness, rank, 0)
    elif outcome == "Succeeded":
        harness.plane.turn()
        assert harness.machine.run_of(pod_key(0, 2)) is not None  # runs on alone
        assert harness.workload(NAME)["state"] == "Running"
        release(harness, 0, 0)
    harness.run_until(harness.state_is(NAME, outcome))

    for rank in (0, 1):
        assert harness.machine.runs_of(pod_key(rank, 2)) == [
            f"research_g-{rank}_{n}" for n in range(1, runs + 1)
        ]
        assert attempts(harness, rank) == runs
    states = [p["state"] for p in harness.workload(NAME)["pod_views"]]
    assert states == [outcome, outcome]
    if outcome == "Failed":
        assert job_row(harness) == ("Failed", 1, "BackoffLimitExceeded")
        # Rank 0 was stopped for it, not left running.
        assert (run_dir(harness, 0, 2) / EXIT_FILE).exists()
    assert not harness.machine.supervisor.running


def test_a_gang_member_stopped_for_its_peers_failure_before_a_restart_still_fails(
    harness: LocalHarness,
) -> None:
    """Rank 1 fails past the limit while the server is up; rank 0 ignores SIGTERM and is
    inside its grace when the server restarts: the new server still ends it as failed."""
    harness.machine.grace_s = 1.0
    document = ranked_job(harness, 2, 0)
    script = write_script(
        tenant_dir(harness),
        "ranked.py",
        "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + RANKED,
    )
    document["spec"]["template"]["spec"]["containers"][0]["command"] = [
        sys.executable,
        str(script),
    ]
    assert harness.submit(document)["status"] == 201
    harness.run_until(running_both(harness, 2))
    release(harness, 1, 3)
    harness.run_until(lambda: (run_dir(harness, 0, 2) / "stop.json").exists())

    harness.restart()
    harness.run_until(harness.state_is(NAME, "Failed"))
    pods = {p["name"]: p["state"] for p in harness.workload(NAME)["pod_views"]}
    assert pods == {"g-0": "Failed", "g-1": "Failed"}
    failed = [m for r, m in events(harness, NAME) if r == "Failed"]
    assert any("g-0" in m and "research/g-1 of its gang failed" in m for m in failed), failed
    assert harness.machine.runs_of(pod_key(0, 2)) == ["research_g-0_1"]


@pytest.mark.parametrize("while_down", [False, True], ids=["while-up", "while-down"])
def test_a_retry_starts_again_only_the_members_yet_to_succeed(
    harness: LocalHarness, while_down: bool
) -> None:
    """Rank 1 succeeds, then rank 0 fails within the limit: rank 0 alone starts again."""
    assert harness.submit(ranked_job(harness, 2, 1))["status"] == 201
    harness.run_until(running_both(harness, 2))
    if while_down:

        def both() -> None:
            succeed_while_down(1, 2)(harness)
            fail_while_down(0, 2)(harness)

        harness.restart(both)
    else:
        release(harness, 1, 0)
        harness.run_until(lambda: harness.machine.run_of(pod_key(1, 2)) is None)
        release(harness, 0, 3)
    harness.run_until(lambda: attempts(harness, 0) == 2)
    assert harness.machine.runs_of(pod_key(1, 2)) == ["research_g-1_1"]
    assert harness.machine.run_of(pod_key(0, 2)) == "research_g-0_2"
    release(harness, 0, 0)
    harness.run_until(harness.state_is(NAME, "Succeeded"))
    assert job_row(harness) == ("Succeeded", 1, None)
    assert attempts(harness, 1) == 1


def test_a_gang_preempted_after_a_member_succeeded_starts_again_without_it(
    harness: LocalHarness,
) -> None:
    """Rank 1 succeeded; rank 0 is preempted, waits, and starts again alone (a new run)."""
    document = ranked_job(harness, 2, 0)
    document["spec"]["template"]["spec"]["priorityClassName"] = "low"
    document["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"
    ] = 4
    assert harness.submit(document)["status"] == 201
    harness.run_until(running_both(harness, 2))
    release(harness, 1, 0)
    harness.run_until(lambda: harness.machine.run_of(pod_key(1, 2)) is None)

    high = job("urgent", 1, [sys.executable, "-c", "pass"], gpus=8)
    high["spec"]["template"]["spec"]["priorityClassName"] = "high"
    assert harness.submit(high)["status"] == 201
    harness.run_until(harness.state_is("urgent", "Succeeded"))
    harness.run_until(lambda: attempts(harness, 0) == 2)

    assert harness.machine.runs_of(pod_key(0, 2)) == ["research_g-0_1", "research_g-0_2"]
    assert harness.machine.runs_of(pod_key(1, 2)) == ["research_g-1_1"]
    release(harness, 0, 0)
    harness.run_until(harness.state_is(NAME, "Succeeded"))


def test_a_preempted_job_waiting_at_a_restart_waits_and_resumes_after(
    harness: LocalHarness,
) -> None:
    """Its run ended when it was preempted (exit 0 after its checkpoint): that end is no
    success; after the restart it still waits, and resumes when the GPUs are free again."""
    root = tenant_dir(harness)
    train = write_script(root, "train.py", CHECKPOINTING)
    checkpoint = root / "step.txt"
    low = pod("low", [sys.executable, str(train), str(checkpoint), "100000"], gpus=8,
              priority_class="low")  # fmt: skip
    assert harness.submit(low)["status"] == 201
    harness.run_until(printed(harness, "low", "step 3\n"))
    high = pod("high", report(harness, "0", str(root / "release")), gpus=8, priority_class="high")
    assert harness.submit(high)["status"] == 201
    harness.run_until(printed(harness, "high"))
    assert harness.workload("low")["state"] == "Pending"

    harness.restart()
    harness.plane.turn()
    assert harness.workload("low")["state"] == "Pending"
    (root / "release").touch()
    harness.run_until(harness.state_is("high", "Succeeded"))
    harness.run_until(printed(harness, "low", "resumed from", attempt=2))
    harness.run_until(harness.state_is("low", "Running"))  # printed before it is recorded


def test_a_restart_does_not_tell_an_old_preemption_again(harness: LocalHarness) -> None:
    """The preempted run ended (and was recorded ``Preempted``) before the restart: the
    restarted server does not record it a second time."""
    root = tenant_dir(harness)
    train = write_script(root, "train.py", CHECKPOINTING)
    low = pod("low", [sys.executable, str(train), str(root / "step.txt"), "100000"], gpus=8,
              priority_class="low")  # fmt: skip
    assert harness.submit(low)["status"] == 201
    harness.run_until(printed(harness, "low", "step 3\n"))
    high = pod("high", report(harness, "0", str(root / "release")), gpus=8, priority_class="high")
    assert harness.submit(high)["status"] == 201
    harness.run_until(printed(harness, "high"))
    preempted = [m for r, m in events(harness, "low") if r == "Preempted"]
    assert len(preempted) == 1

    harness.restart()
    harness.plane.turn()
    harness.plane.turn()
    assert [m for r, m in events(harness, "low") if r == "Preempted"] == preempted
    assert harness.workload("low")["state"] == "Pending"


# ------------------------------------------------------------------------------- notices
class _Sent:
    """A sender that keeps what it is given (the webhook's payloads)."""

    def __init__(self) -> None:
        self.payloads: list[Mapping[str, Any]] = []

    def submit(self, receiver: str, url: str, payload: Mapping[str, Any]) -> bool:
        self.payloads.append(payload)
        return True


@pytest.mark.parametrize(
    ("code", "status"),
    [
        pytest.param(0, "WorkloadSucceeded", id="succeeded"),
        pytest.param(3, "WorkloadFailed", id="failed"),
    ],
)
def test_a_workload_that_ended_while_down_is_told_once_after_the_restart(
    harness: LocalHarness, code: int, status: str
) -> None:
    restart_after(harness, 1, 0, fail_while_down(0, 1, code))
    settings = observe_settings(None, False, None, alert_webhook="http://127.0.0.1:9/hook")
    assert settings.routing is not None
    sent = _Sent()
    start_workload_notices(harness.plane, settings.routing, cast(Any, sent), "")
    harness.run_until(harness.state_is(NAME, "Succeeded", "Failed"))
    for _ in range(3):
        harness.plane.turn()
    names = [a["labels"]["alertname"] for p in sent.payloads for a in p["alerts"]]
    assert names == [status]
