"""A run as another user sees in /proc only its own user's processes (ProtectProc=invisible).

The hiding itself needs root and a kernel that lets it mount (CAP_SYS_ADMIN): those tests skip
where either is missing. A refusal is made real, without a mock, by a "python" that drops
CAP_SYS_ADMIN before it starts (``setpriv``): the kernel then refuses the shim as it would in
an unprivileged container.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from gpufleet.backends.local.proc_hiding import probe, proc_hides
from gpufleet.backends.local.run_state import read_json
from gpufleet.backends.local.supervisor import RunEnd, RunStatus, Supervisor
from gpufleet.model.processes import ProcessSpec
from gpufleet.testing.waiting import wait_until
from tests.backends.local.scripts import log_has, wait_end, write_script

#: Prints the PIDs its /proc lists, its own, and what kill -0 and reading the cmdline of the
#: PID in $1 gave.
LOOK = """
echo "PIDS $(ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' ')"
echo "SELF $$"
echo "KILL $(kill -0 "$1" 2>&1 && echo sent)"
echo "CMDLINE $(cat /proc/"$1"/cmdline 2>/dev/null | tr '\\0' ' ' || true)"
"""

#: Says it is ready, then waits until the file in $1 exists.
WAIT = """
echo ready
while [ ! -e "$1" ]; do sleep 0.02; done
"""

NOBODY = 65534
OTHER = 65533


@functools.cache
def hiding_refused() -> str | None:
    """Why this machine cannot hide processes (None: it can)."""
    if os.geteuid() != 0:
        return "only root runs processes as another user"
    return probe(NOBODY, NOBODY)


def needs_hiding() -> None:
    refused = hiding_refused()
    if refused is not None:
        pytest.skip(f"processes cannot be hidden here: {refused}")


def mounts() -> list[str]:
    """This process's mounts, without their IDs' order mattering."""
    return sorted(Path("/proc/self/mountinfo").read_text().splitlines())


@pytest.fixture
def work(state_root: Path) -> Path:
    """Scripts and a working directory every uid may read."""
    directory = state_root / "work"
    directory.mkdir(mode=0o755)
    return directory


def shell(work: Path, name: str, text: str, *args: str, uid: int | None = None) -> ProcessSpec:
    script = write_script(work, name, text)
    return ProcessSpec(
        ("sh", str(script), *args),
        "/bin/sh",
        {"PATH": "/usr/bin:/bin"},
        str(work),
        uid=uid,
        gid=uid,
    )


def said(supervisor: Supervisor, run_id: str) -> dict[str, str]:
    """The run's log lines as ``WORD rest`` -> rest."""
    lines = supervisor.log_path(run_id).read_text().splitlines()
    return {word: rest for word, _, rest in (line.partition(" ") for line in lines)}


def wait_ends(supervisor: Supervisor, run_ids: set[str], timeout_s: float = 10.0) -> list[RunEnd]:
    """The ends of all of ``run_ids`` (a poll returns every run that ended, in any order)."""
    ends: list[RunEnd] = []
    deadline = time.monotonic() + timeout_s
    while {end.run_id for end in ends} != run_ids:
        assert time.monotonic() < deadline, f"not all of {sorted(run_ids)} ended"
        ends += [end for end in supervisor.poll() if end.run_id in run_ids]
        supervisor.wait(0.05)
    return ends


def started(supervisor: Supervisor, run_id: str) -> int:
    wait_until(log_has(supervisor, run_id, "ready"))
    wait_until(lambda: supervisor.child(run_id) is not None)  # recorded once Popen returned
    child = supervisor.child(run_id)
    assert child is not None
    return child.pid


def test_a_run_sees_its_own_users_processes_and_no_other(
    supervisor: Supervisor, work: Path
) -> None:
    needs_hiding()
    before = mounts()
    release = work / "release"
    supervisor.start("other", shell(work, "wait.sh", WAIT, str(release), uid=OTHER))
    supervisor.start("mine", shell(work, "wait.sh", WAIT, str(release), uid=NOBODY))
    try:
        other, mine = started(supervisor, "other"), started(supervisor, "mine")
        handle = supervisor.start("look", shell(work, "look.sh", LOOK, str(other), uid=NOBODY))
        assert wait_end(supervisor, "look").succeeded
    finally:
        release.touch()
    assert all(end.succeeded for end in wait_ends(supervisor, {"other", "mine"}))
    seen = said(supervisor, "look")
    pids = {int(p) for p in seen["PIDS"].split()}
    assert int(seen["SELF"]) in pids
    assert mine in pids  # the same uid's other run stays visible
    assert other not in pids
    assert handle.shim.pid not in pids  # its own shim runs as root
    assert os.getpid() not in pids  # nor the server
    assert "sent" not in seen["KILL"]
    assert "not permitted" in seen["KILL"] or "No such process" in seen["KILL"]
    assert seen["CMDLINE"] == ""
    assert mounts() == before  # nothing mounted here: the mount stayed in the run's namespace


def test_a_hidden_run_is_found_again_after_a_restart(state_root: Path, work: Path) -> None:
    needs_hiding()
    release = work / "release"
    first = Supervisor(state_root / "state")
    first.start("long", shell(work, "wait.sh", WAIT, str(release), uid=NOBODY))
    try:
        child = started(first, "long")
    except AssertionError:
        release.touch()
        raise
    finally:
        first.close()

    second = Supervisor(state_root / "state")
    try:
        (found,) = second.adopt()
        assert found.status is RunStatus.RUNNING  # by PID and start time, in the host's /proc
        release.touch()
        assert wait_end(second, "long").succeeded
        again = second.child("long")
        assert again is not None
        assert again.pid == child  # the same process, never a second one
    finally:
        second.close()


def test_a_run_without_a_user_switch_sees_every_process(supervisor: Supervisor, work: Path) -> None:
    supervisor.start("look", shell(work, "look.sh", LOOK, str(os.getpid())))
    assert wait_end(supervisor, "look").succeeded
    spec = read_json(supervisor.run_dir("look") / "spec.json")
    assert spec is not None
    assert spec["hide_processes"] is False
    seen = said(supervisor, "look")
    assert os.getpid() in {int(p) for p in seen["PIDS"].split()}
    assert seen["KILL"] == "sent"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs processes as another user")
def test_shared_proc_leaves_every_process_visible(state_root: Path, work: Path) -> None:
    shared = Supervisor(state_root / "state", shared_proc=True)
    try:
        shared.start("look", shell(work, "look.sh", LOOK, str(os.getpid()), uid=NOBODY))
        assert wait_end(shared, "look").succeeded
        spec = read_json(shared.run_dir("look") / "spec.json")
        assert spec is not None
        assert spec["hide_processes"] is False
        seen = said(shared, "look")
        assert os.getpid() in {int(p) for p in seen["PIDS"].split()}
        assert "not permitted" in seen["KILL"]  # seen, still not signalled
    finally:
        shared.close()


@pytest.fixture
def python_without_sys_admin(state_root: Path) -> Path:
    """A "python" that starts without CAP_SYS_ADMIN, as in an unprivileged container."""
    if os.geteuid() != 0:
        pytest.skip("only root runs processes as another user")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("no setpriv to drop CAP_SYS_ADMIN with")
    wrapper = state_root / "python-without-sys-admin"
    wrapper.write_text(
        f"#!/bin/sh\nexec {setpriv} --bounding-set=-sys_admin --inh-caps=-sys_admin "
        f'{os.path.realpath(sys.executable)} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def test_a_run_the_kernel_will_not_hide_fails_and_never_starts(
    state_root: Path, work: Path, python_without_sys_admin: Path
) -> None:
    refused = Supervisor(state_root / "state", python=str(python_without_sys_admin))
    try:
        never = work / "never-started"
        refused.start("r1", shell(work, "touch.sh", 'touch "$1"', str(never), uid=NOBODY))
        end = wait_end(refused, "r1")
        assert not end.succeeded
        assert end.record is not None
        assert "not started" in end.record.error
        assert "unshare(CLONE_NEWNS)" in end.record.error
        assert "EPERM" in end.record.error
        assert end.record.error in refused.log_path("r1").read_text()
        assert end.describe() == end.record.error  # what the pod's end and describe say
        assert refused.child("r1") is None
        assert not never.exists()
    finally:
        refused.close()


def test_the_probe_says_what_the_kernel_refused(python_without_sys_admin: Path) -> None:
    why = probe(NOBODY, NOBODY, python=str(python_without_sys_admin))
    assert why is not None
    assert "unshare(CLONE_NEWNS)" in why
    assert "Operation not permitted (EPERM)" in why


HOST_PROC = "22 27 0:21 / /proc rw,relatime shared:13 - proc proc rw"
HIDING_PROC = "412 22 0:64 / /proc rw,nosuid,nodev,noexec - proc proc rw,hidepid=2"


@pytest.mark.parametrize(
    ("mountinfo", "hides"),
    [
        pytest.param(HOST_PROC, False, id="a-plain-proc"),
        pytest.param(HOST_PROC.replace(" rw", " rw,hidepid=2"), True, id="hidepid-2"),
        pytest.param(HOST_PROC + ",hidepid=invisible", True, id="hidepid-invisible"),
        pytest.param(HOST_PROC + ",hidepid=1", False, id="hidepid-1-shows-directories"),
        pytest.param(HOST_PROC + ",hidepid=ptraceable", False, id="ptraceable-is-not-hidden"),
        pytest.param(f"{HOST_PROC}\n{HIDING_PROC}", True, id="the-last-mount-on-proc-wins"),
        pytest.param(f"{HIDING_PROC}\n{HOST_PROC}", False, id="a-plain-one-over-a-hiding-one"),
        pytest.param(HIDING_PROC.replace(" /proc ", " /mnt/proc "), False, id="not-on-proc"),
        pytest.param("", False, id="no-proc-at-all"),
    ],
)
def test_whether_the_proc_in_use_hides_processes(mountinfo: str, hides: bool) -> None:
    assert proc_hides(mountinfo) is hides
