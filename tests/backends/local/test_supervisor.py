"""Runs through their shims: recorded, stopped, ended, and found again after a restart."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from gpufleet.backends.local.run_state import (
    ProcessId,
    alive,
    process_id,
    read_json,
    read_process,
)
from gpufleet.backends.local.supervisor import (
    RunRefusedError,
    RunStatus,
    Supervisor,
)
from gpufleet.model.processes import ProcessSpec
from gpufleet.testing.waiting import wait_until
from tests.backends.local.scripts import (
    CHECKPOINTING,
    PARENT,
    REPORT,
    STUBBORN,
    log_has,
    python_spec,
    wait_end,
    write_script,
)


@pytest.fixture
def work(state_root: Path) -> Path:
    directory = state_root / "tenants" / "alice"
    directory.mkdir(parents=True)
    return directory


def seen(supervisor: Supervisor, run_id: str) -> dict[str, object]:
    line = next(
        line for line in supervisor.log_path(run_id).read_text().splitlines() if "SEEN " in line
    )
    found: dict[str, object] = json.loads(line.split("SEEN ", 1)[1])
    return found


def test_the_shim_records_the_process_and_its_exit_code(supervisor: Supervisor, work: Path) -> None:
    script = write_script(work, "report.py", REPORT)
    handle = supervisor.start("r1", python_spec(work, script, "3"), labels={"pod": "ml/a"})
    end = wait_end(supervisor, "r1")
    assert end.record is not None
    assert (end.record.exit_code, end.record.signal, end.succeeded) == (3, None, False)
    assert end.labels == {"pod": "ml/a"}
    assert end.describe() == "exit code 3"
    printed = seen(supervisor, "r1")
    assert supervisor.child("r1") == ProcessId(int(str(printed["pid"])), int(str(printed["start"])))
    assert printed["cwd"] == str(work)
    assert handle.shim.pid != printed["pid"]
    assert supervisor.poll() == []  # reported once
    assert supervisor.running == []


def test_exactly_the_given_environment(supervisor: Supervisor, work: Path) -> None:
    script = write_script(work, "report.py", REPORT)
    os.environ["GPUFLEET_TEST_LEAK"] = "1"
    try:
        spec = python_spec(work, script, "0", env={"CUDA_VISIBLE_DEVICES": "GPU-x"})
        supervisor.start("r1", spec)
        assert wait_end(supervisor, "r1").succeeded
    finally:
        del os.environ["GPUFLEET_TEST_LEAK"]
    printed = seen(supervisor, "r1")
    assert printed["CUDA_VISIBLE_DEVICES"] == "GPU-x"
    assert printed["HOME"] is None


def test_a_signal_that_kills_it_is_recorded(supervisor: Supervisor, work: Path) -> None:
    script = write_script(work, "die.py", "import os, signal\nos.kill(os.getpid(), 9)\n")
    supervisor.start("r1", python_spec(work, script))
    end = wait_end(supervisor, "r1")
    assert end.record is not None
    assert (end.record.exit_code, end.record.signal) == (None, signal.SIGKILL)
    assert end.describe() == "killed by signal 9 (SIGKILL)"


def test_a_command_that_cannot_start_is_recorded_as_the_shell_would(
    supervisor: Supervisor, work: Path
) -> None:
    spec = ProcessSpec(("gone",), str(work / "gone"), {}, str(work))
    supervisor.start("r1", spec)
    end = wait_end(supervisor, "r1")
    assert end.record is not None
    assert end.record.exit_code == 127
    assert "cannot start" in supervisor.log_path("r1").read_text()


def test_stop_sends_sigterm_to_the_process(supervisor: Supervisor, work: Path) -> None:
    script = write_script(work, "report.py", REPORT)
    supervisor.start("r1", python_spec(work, script, "0", str(work / "never")))
    wait_until(log_has(supervisor, "r1", "SEEN"))
    assert supervisor.stop("r1", grace_s=10)
    end = wait_end(supervisor, "r1")
    assert end.record is not None
    assert end.record.signal == signal.SIGTERM


def test_stop_escalates_to_sigkill_after_the_grace(supervisor: Supervisor, work: Path) -> None:
    script = write_script(work, "stubborn.py", STUBBORN)
    supervisor.start("r1", python_spec(work, script))
    wait_until(log_has(supervisor, "r1", "ready"))
    supervisor.stop("r1", grace_s=0.2)
    end = wait_end(supervisor, "r1")
    assert end.record is not None
    assert end.record.signal == signal.SIGKILL


@pytest.mark.parametrize(
    ("how", "session"),
    [
        pytest.param("stopped", "group", id="stopped"),
        pytest.param("leader-exits", "group", id="leader-exits"),
        pytest.param("stopped", "setsid", id="stopped-setsid-grandchild"),
        pytest.param("leader-exits", "setsid", id="leader-exits-setsid-grandchild"),
    ],
)
def test_a_processs_children_die_with_it(
    supervisor: Supervisor, work: Path, how: str, session: str
) -> None:
    """Even one that left the run's session (``setsid``) is gone by the time the end is
    reported: the shim, a child subreaper, kills and reaps it first."""
    script = write_script(work, "parent.py", PARENT)
    pid_file = work / "grandchild.pid"
    leave = "leave" if how != "stopped" else "stay"
    supervisor.start("r1", python_spec(work, script, str(pid_file), leave, session))
    wait_until(pid_file.exists)
    grandchild = process_id(int(pid_file.read_text()))
    assert grandchild is not None
    if how == "stopped":
        wait_until(log_has(supervisor, "r1", "ready"))
        supervisor.stop("r1", grace_s=5)
    wait_end(supervisor, "r1")
    assert not alive(grandchild)


def test_a_checkpointing_script_saves_on_sigterm_and_resumes(
    supervisor: Supervisor, work: Path
) -> None:
    script = write_script(work, "train.py", CHECKPOINTING)
    checkpoint = work / "step.txt"
    supervisor.start("train-1", python_spec(work, script, str(checkpoint), "100000"))
    wait_until(log_has(supervisor, "train-1", "step 3\n"))
    supervisor.stop("train-1", grace_s=10)
    first = wait_end(supervisor, "train-1")
    assert first.succeeded
    saved = int(checkpoint.read_text())
    assert saved >= 3
    supervisor.start("train-2", python_spec(work, script, str(checkpoint), str(saved + 2)))
    assert wait_end(supervisor, "train-2").succeeded
    log = supervisor.log_path("train-2").read_text()
    assert f"resumed from {saved}" in log
    assert f"step {saved + 1}\n" in log
    assert "step 1\n" not in log
    assert "done" in log


def test_a_new_supervisor_adopts_a_running_run_and_sees_it_end(
    state_root: Path, work: Path
) -> None:
    script = write_script(work, "report.py", REPORT)
    release = work / "release"
    first = Supervisor(state_root / "state", allow_root=True)
    first.start("long", python_spec(work, script, "0", str(release)))
    first.start("short", python_spec(work, script, "4"))
    wait_end(first, "short")
    wait_until(log_has(first, "long", "SEEN"))
    child = first.child("long")
    first.close()  # the server goes away; its runs do not

    second = Supervisor(state_root / "state", allow_root=True)
    try:
        found = {run.run_id: run for run in second.adopt()}
        assert {k: r.status for k, r in found.items()} == {
            "long": RunStatus.RUNNING,
            "short": RunStatus.ENDED,
        }
        ended = found["short"].end
        assert ended is not None
        assert ended.record is not None
        assert ended.record.exit_code == 4
        assert second.running == ["long"]
        with pytest.raises(RunRefusedError, match="started once"):
            second.start("long", python_spec(work, script, "0"))
        release.touch()
        end = wait_end(second, "long")
        assert end.succeeded
        assert second.child("long") == child  # the same process, never a second one
        assert second.log_path("long").read_text().count("SEEN") == 1
    finally:
        second.close()


def test_a_run_whose_shim_was_killed_is_lost_and_its_process_killed(
    state_root: Path, work: Path
) -> None:
    script = write_script(work, "report.py", REPORT)
    first = Supervisor(state_root / "state", allow_root=True)
    handle = first.start("r1", python_spec(work, script, "0", str(work / "never")))
    wait_until(log_has(first, "r1", "SEEN"))
    child = first.child("r1")
    assert child is not None
    os.kill(handle.shim.pid, signal.SIGKILL)
    wait_until(lambda: not alive(handle.shim))
    first.close()

    second = Supervisor(state_root / "state", allow_root=True)
    try:
        (found,) = second.adopt()
        assert found.status is RunStatus.LOST
        assert found.end is not None
        assert found.end.lost
        wait_until(lambda: not alive(child))
        assert second.running == []
    finally:
        second.close()


def test_a_shim_killed_under_a_running_supervisor_is_lost(
    supervisor: Supervisor, work: Path
) -> None:
    script = write_script(work, "report.py", REPORT)
    handle = supervisor.start("r1", python_spec(work, script, "0", str(work / "never")))
    wait_until(log_has(supervisor, "r1", "SEEN"))
    child = supervisor.child("r1")
    assert child is not None
    os.kill(handle.shim.pid, signal.SIGKILL)
    end = wait_end(supervisor, "r1")
    assert end.lost
    wait_until(lambda: not alive(child))


def test_a_reused_pid_is_not_the_process(supervisor: Supervisor) -> None:
    me = process_id(os.getpid())
    assert me is not None
    assert alive(me)
    assert not alive(ProcessId(me.pid, me.start_ticks + 1))
    assert process_id(2**22 + 1) is None


@pytest.mark.parametrize(
    ("run_id", "words"),
    [
        pytest.param("", "expected letters", id="empty"),
        pytest.param("../escape", "expected letters", id="path"),
        pytest.param(".hidden", "expected letters", id="dot"),
    ],
)
def test_bad_run_ids_are_refused(
    supervisor: Supervisor, work: Path, run_id: str, words: str
) -> None:
    with pytest.raises(RunRefusedError, match=words):
        supervisor.start(run_id, python_spec(work, work / "x.py"))
    assert supervisor.running == []


def test_root_never_runs_a_tenants_process_as_root(state_root: Path, work: Path) -> None:
    strict = Supervisor(state_root / "state", euid=0)
    try:
        with pytest.raises(RunRefusedError, match="as root"):
            strict.start("r1", python_spec(work, work / "x.py"))
        assert not (strict.runs_dir / "r1").exists()
    finally:
        strict.close()


def test_a_server_not_root_cannot_switch_users(state_root: Path, work: Path) -> None:
    plain = Supervisor(state_root / "state", euid=1000)
    try:
        spec = ProcessSpec(("true",), "/bin/true", {}, str(work), uid=1001, gid=1001)
        with pytest.raises(RunRefusedError, match="cannot run a process as uid 1001"):
            plain.start("r1", spec)
    finally:
        plain.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs processes as another user")
def test_root_runs_the_process_as_its_uid_and_gid(state_root: Path, work: Path) -> None:
    os.chown(work, 65534, 65534)
    # Processes shared: who it runs as, whether or not this kernel lets runs be hidden
    # (test_proc_hiding.py hides them).
    strict = Supervisor(state_root / "state", shared_proc=True)
    try:
        spec = ProcessSpec(
            ("sh", "-c", "id -u; id -g; id -G; pwd"),
            "/bin/sh",
            {"PATH": "/usr/bin:/bin"},
            str(work),
            uid=65534,
            gid=65534,
        )
        strict.start("r1", spec)
        assert wait_end(strict, "r1").succeeded
        assert strict.log_path("r1").read_text().split() == ["65534", "65534", "65534", str(work)]
        spec_file = read_json(strict.run_dir("r1") / "spec.json")
        assert spec_file is not None
        assert spec_file["uid"] == 65534
        assert read_process(strict.run_dir("r1") / "child.json") is not None
    finally:
        strict.close()


def test_wait_wakes_when_a_run_ends(supervisor: Supervisor, work: Path) -> None:
    script = write_script(work, "report.py", REPORT)
    supervisor.start("r1", python_spec(work, script, "0"))
    assert supervisor.wait(30.0)  # returns on the shim's byte, long before 30 s
    assert [e.run_id for e in supervisor.poll()] == ["r1"]
    supervisor.wake()
    assert supervisor.wait(30.0)


def test_the_process_starts_with_the_default_interrupt_and_hangup_actions(
    supervisor: Supervisor, work: Path
) -> None:
    script = write_script(
        work,
        "signals.py",
        "import json, signal\n"
        "print('SEEN ' + json.dumps({s: str(signal.getsignal(getattr(signal, s)))"
        " for s in ('SIGINT', 'SIGHUP')}), flush=True)\n",
    )
    supervisor.start("r1", python_spec(work, script))
    assert wait_end(supervisor, "r1").succeeded
    printed = seen(supervisor, "r1")
    assert printed["SIGINT"] == str(signal.default_int_handler)  # Python's own, not ignored
    assert printed["SIGHUP"] == str(signal.Handlers.SIG_DFL)
