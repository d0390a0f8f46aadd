"""Each run in a cgroup of its own: CPU quota, memory limit (OOMKilled), pids limit, removed
after the run.

What is written where is checked on a fake cgroup tree (plain files in a temporary directory,
built by :func:`v1_tree` and :func:`v2_tree`). What the kernel does with it is checked on this
machine's cgroups: those tests skip, saying why, where no hierarchy can be written (not
root, or a container whose cgroups are read-only).
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.backends.local.cgroups import (
    BASE_DEVICES,
    PERIOD_US,
    Hierarchy,
    Limits,
    RunCgroup,
    detect,
    own_paths,
)
from gpufleet.backends.local.run_state import ExitRecord, read_exit, write_exit
from gpufleet.backends.local.supervisor import Supervisor
from gpufleet.model.processes import ProcessSpec
from gpufleet.testing.waiting import wait_until
from tests.backends.local.scripts import log_has, wait_end, write_script

MIB = 1024 * 1024


# ----------------------------------------------------------------------------- fake trees
def v1_tree(root: Path, own: str = "/") -> Path:
    """A cgroup v1 layout: one directory per controller, and a /proc/self/cgroup naming
    ``own`` for each; returns that file."""
    lines = []
    for number, controller in enumerate(("cpu", "memory", "pids", "devices"), start=1):
        base = root / controller / own.lstrip("/")
        base.mkdir(parents=True, exist_ok=True)
        (root / controller / "cgroup.procs").write_text("")
        lines.append(f"{number}:{controller}:{own}")
    proc = root / "proc-self-cgroup"
    proc.write_text("\n".join(lines) + "\n")
    return proc


def v2_tree(root: Path, controllers: str = "cpu memory pids io") -> Path:
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("")
    proc = root / "proc-self-cgroup"
    proc.write_text("0::/\n")
    return proc


@pytest.mark.parametrize(
    ("cpu_milli", "quota"),
    [(None, None), (500, 50_000), (2000, 200_000), (1, 1_000)],
    ids=["none", "half-a-core", "two-cores", "at-least-the-kernels-minimum"],
)
def test_a_cpu_limit_is_a_cfs_quota(cpu_milli: int | None, quota: int | None) -> None:
    assert Limits(cpu_milli, None, None).quota_us() == quota


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("0::/user.slice/x\n", {"": "/user.slice/x"}),
        (
            "4:memory:/a\n2:cpu,cpuacct:/b\n0::/\n",
            {"memory": "/a", "cpu": "/b", "cpuacct": "/b", "": "/"},
        ),
        ("9:name=systemd:/\n", {"name=systemd": "/"}),
    ],
    ids=["v2", "v1-and-joined-controllers", "named-hierarchy"],
)
def test_own_paths(text: str, paths: dict[str, str]) -> None:
    assert own_paths(text) == paths


def test_v1_limits_are_written_per_controller(tmp_path: Path) -> None:
    proc = v1_tree(tmp_path, "/box")
    hierarchy = detect(str(tmp_path), str(proc))
    assert isinstance(hierarchy, Hierarchy), hierarchy
    assert hierarchy.version == 1
    assert hierarchy.parents["memory"] == str(tmp_path / "memory" / "box" / "gpufleet")
    cgroup = RunCgroup(hierarchy, "run-1")
    cgroup.create(Limits(500, 100 * MIB, 64), ["c 195:1 rwm"])
    run = {c: tmp_path / c / "box" / "gpufleet" / "run-1" for c in hierarchy.parents}
    assert (run["cpu"] / "cpu.cfs_quota_us").read_text() == "50000"
    assert (run["cpu"] / "cpu.cfs_period_us").read_text() == str(PERIOD_US)
    assert (run["memory"] / "memory.limit_in_bytes").read_text() == str(100 * MIB)
    assert (run["pids"] / "pids.max").read_text() == "64"
    assert (run["devices"] / "devices.deny").read_text() == "a"
    # A plain file keeps the last line written; the kernel takes each write as one rule.
    assert (run["devices"] / "devices.allow").read_text() == "c 195:1 rwm"


def test_v2_limits_are_written_in_one_cgroup(tmp_path: Path) -> None:
    proc = v2_tree(tmp_path)
    hierarchy = detect(str(tmp_path), str(proc))
    assert isinstance(hierarchy, Hierarchy), hierarchy
    assert hierarchy.version == 2
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    cgroup = RunCgroup(hierarchy, "run-1")
    cgroup.create(Limits(250, 64 * MIB, 10))
    run = tmp_path / "gpufleet" / "run-1"
    assert (run / "cpu.max").read_text() == f"25000 {PERIOD_US}"
    assert (run / "memory.max").read_text() == str(64 * MIB)
    assert (run / "pids.max").read_text() == "10"


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (lambda root: v2_tree(root, "io hugetlb"), "cpu, memory, pids not available"),
        (lambda root: _proc_only(root), "no cpu hierarchy mounted"),
    ],
    ids=["v2-without-controllers", "nothing-mounted"],
)
def test_no_writable_hierarchy_says_why(tmp_path: Path, build: object, said: str) -> None:
    proc = build(tmp_path)  # type: ignore[operator]
    found = detect(str(tmp_path), str(proc))
    assert isinstance(found, str)
    assert said in found


def _proc_only(root: Path) -> Path:
    proc = root / "proc-self-cgroup"
    proc.write_text("0::/\n")
    return proc


@pytest.mark.parametrize(
    ("version", "name", "text", "killed"),
    [
        (2, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n", True),
        (2, "memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", False),
        (1, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", True),
        (1, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", False),
    ],
    ids=["v2-killed", "v2-not", "v1-killed", "v1-not"],
)
def test_an_oom_kill_is_read_from_the_cgroup(
    tmp_path: Path, version: int, name: str, text: str, killed: bool
) -> None:
    key = "" if version == 2 else "memory"
    cgroup = RunCgroup(Hierarchy(version, {key: str(tmp_path)}), "run")
    Path(cgroup.paths[key]).mkdir()
    (Path(cgroup.paths[key]) / name).write_text(text)
    assert cgroup.oom_killed() is killed


def test_an_oom_killed_end_is_recorded_and_described(tmp_path: Path) -> None:
    record = ExitRecord(None, 9, 1.0, reason="OOMKilled")
    write_exit(tmp_path / "exit.json", record)
    assert read_exit(tmp_path / "exit.json") == record
    assert record.describe() == "OOMKilled: killed by signal 9 (SIGKILL)"


def test_the_base_devices_are_runcs() -> None:
    assert "c 1:3 rwm" in BASE_DEVICES
    assert "c 136:* rwm" in BASE_DEVICES


# ----------------------------------------------------------------------------- the kernel
@functools.cache
def _kernel_hierarchy() -> Hierarchy | str:
    if os.geteuid() != 0:
        return "only root writes this machine's cgroups"
    return detect(parent=f"gpufleet-test-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def hierarchy() -> Iterator[Hierarchy]:
    found = _kernel_hierarchy()
    if isinstance(found, str):
        pytest.skip(f"no cgroup hierarchy can be written here: {found}")
    yield found
    found.remove()


@pytest.fixture
def limited(state_root: Path, hierarchy: Hierarchy) -> Iterator[Supervisor]:
    supervisor = Supervisor(state_root / "state", allow_root=True, cgroups=hierarchy)
    yield supervisor
    supervisor.close()


@pytest.fixture
def work(state_root: Path) -> Path:
    directory = state_root / "work"
    directory.mkdir(mode=0o755)
    return directory


def shell(work: Path, text: str, *args: str) -> ProcessSpec:
    script = write_script(work, "run.sh", text)
    return ProcessSpec(("sh", str(script), *args), "/bin/sh", {"PATH": "/usr/bin:/bin"}, str(work))


def run_paths(hierarchy: Hierarchy, run_id: str) -> dict[str, Path]:
    return {c: Path(p) / run_id for c, p in hierarchy.parents.items()}


def test_a_run_beyond_its_memory_limit_ends_oom_killed(
    limited: Supervisor, hierarchy: Hierarchy, work: Path
) -> None:
    grab = "import sys; b = bytearray(200 * 1024 * 1024); print('survived', len(b))"
    spec = ProcessSpec(("python3", "-c", grab), "/usr/bin/python3", {}, str(work))
    limited.start("oom", spec, limits=Limits(None, 50 * MIB, None))
    end = wait_end(limited, "oom", timeout_s=30)
    assert end.record is not None
    assert end.record.reason == "OOMKilled", end.describe()
    assert not end.succeeded
    assert "OOMKilled" in end.describe()
    assert all(not p.exists() for p in run_paths(hierarchy, "oom").values())


def test_a_run_within_its_memory_limit_is_not_oom_killed(limited: Supervisor, work: Path) -> None:
    grab = "b = bytearray(10 * 1024 * 1024); print('fine', len(b))"
    spec = ProcessSpec(("python3", "-c", grab), "/usr/bin/python3", {}, str(work))
    limited.start("fits", spec, limits=Limits(None, 200 * MIB, None))
    end = wait_end(limited, "fits", timeout_s=30)
    assert end.succeeded, end.describe()
    assert end.record is not None
    assert end.record.reason == ""


def test_the_quota_and_limits_are_set_as_written_and_the_cgroup_removed_after(
    limited: Supervisor, hierarchy: Hierarchy, work: Path
) -> None:
    go = work / "go"
    limited.start(
        "quota",
        shell(work, 'echo ready; while [ ! -e "$1" ]; do sleep 0.02; done', str(go)),
        limits=Limits(500, 64 * MIB, 32),
    )
    wait_until(log_has(limited, "quota", "ready"))
    # The child may print before its shim has written down who it is.
    wait_until(lambda: limited.child("quota") is not None)
    paths = run_paths(hierarchy, "quota")
    child = limited.child("quota")
    assert child is not None
    if hierarchy.version == 1:
        assert (paths["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (paths["cpu"] / "cpu.cfs_period_us").read_text().strip() == str(PERIOD_US)
        assert (paths["memory"] / "memory.limit_in_bytes").read_text().strip() == str(64 * MIB)
        assert (paths["pids"] / "pids.max").read_text().strip() == "32"
        for path in paths.values():
            assert str(child.pid) in (path / "cgroup.procs").read_text().split()
    else:
        assert (paths[""] / "cpu.max").read_text().strip() == f"50000 {PERIOD_US}"
        assert (paths[""] / "memory.max").read_text().strip() == str(64 * MIB)
        assert (paths[""] / "pids.max").read_text().strip() == "32"
        assert str(child.pid) in (paths[""] / "cgroup.procs").read_text().split()
    shim = limited.child("quota")
    assert shim is not None
    go.touch()
    end = wait_end(limited, "quota")
    assert end.succeeded, end.describe()
    assert all(not p.exists() for p in paths.values())


def test_a_run_cannot_start_more_tasks_than_its_pids_limit(limited: Supervisor, work: Path) -> None:
    fork = (
        "import os, time\n"
        "started = 0\n"
        "for _ in range(20):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(5); os._exit(0)\n"
        "        started += 1\n"
        "    except BlockingIOError:\n"
        "        pass\n"
        "print('started', started, flush=True)\n"
    )
    spec = ProcessSpec(("python3", "-c", fork), "/usr/bin/python3", {}, str(work))
    limited.start("pids", spec, limits=Limits(None, None, 5))
    end = wait_end(limited, "pids", timeout_s=30)
    assert end.succeeded, end.describe()
    log = limited.log_path("pids").read_text()
    assert "started 4" in log, log  # the run itself is one of its five tasks


def test_closing_removes_the_parent_cgroups_once_no_run_is_left_in_them(
    state_root: Path, hierarchy: Hierarchy, work: Path
) -> None:
    parents = [Path(p) for p in hierarchy.parents.values()]
    first = Supervisor(state_root / "state", allow_root=True, cgroups=hierarchy)
    go = work / "go"
    first.start("stays", shell(work, f'while [ ! -e "{go}" ]; do sleep 0.01; done'))
    wait_until(lambda: first.child("stays") is not None)  # started, in its cgroup
    first.close()  # the run goes on, so its parents stay for the next server
    assert all(p.is_dir() for p in parents)
    second = Supervisor(state_root / "state", allow_root=True, cgroups=hierarchy)
    assert [run.run_id for run in second.adopt()] == ["stays"]
    go.touch()
    end = wait_end(second, "stays")
    assert end.succeeded, end.describe()
    second.close()
    assert not any(p.exists() for p in parents)
