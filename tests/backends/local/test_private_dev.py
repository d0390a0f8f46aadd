"""A run sees in /dev only its own GPUs' nodes (a private /dev), and, with a v1 devices cgroup,
cannot open another GPU's node even by another path.

On cgroup v2 the run's cgroup gets a device program that does the same.

The fake GPUs' device directory stands for /dev: plain files named ``nvidiaN`` (or, where the
test may ``mknod``, character devices of the NVIDIA driver's major 195, which open as ENXIO
without the driver, and as EPERM when the devices cgroup denies them). The kernel tests need
root and a kernel that lets the shim mount; they skip, saying why, elsewhere.
"""

from __future__ import annotations

import functools
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.backends.local.cgroups import Hierarchy, detect
from gpufleet.backends.local.private_dev import cgroup_rules, gpu_nodes, probe
from gpufleet.backends.local.supervisor import Supervisor
from gpufleet.model.processes import ProcessSpec
from tests.backends.local.cgroup2 import cgroup2_parent
from tests.backends.local.scripts import wait_end

NVIDIA_MAJOR = 195
CONTROL = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")

#: Lists /dev and tries to open each path of argv; prints one JSON line.
LOOK = """
import errno, json, os, sys
opened = {}
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDONLY))
        opened[path] = "ok"
    except OSError as error:
        opened[path] = errno.errorcode[error.errno]
print("SEEN " + json.dumps({"dev": sorted(os.listdir("/dev")), "opened": opened}), flush=True)
"""


def fake_dev(directory: Path, gpus: int = 4, nodes: bool = False) -> Path:
    """A directory standing for /dev: ``nvidia0``.. and the control nodes, plain files or
    (``nodes``) character devices."""
    directory.mkdir(exist_ok=True)
    names = [(f"nvidia{i}", i) for i in range(gpus)]
    names += [(name, 255 - n) for n, name in enumerate(CONTROL)]
    for name, minor in names:
        path = directory / name
        if nodes:
            os.mknod(path, 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, minor))
        else:
            path.write_text("")
    return directory


@pytest.mark.parametrize(
    ("gpus", "names"),
    [
        ([1], ["nvidia1", *CONTROL]),
        ([3, 0, 3], ["nvidia0", "nvidia3", *CONTROL]),
        ([], []),
        ([2], ["nvidia2", *CONTROL]),
    ],
    ids=["one-of-four", "two-sorted-once", "no-gpus-none", "no-mig-no-caps"],
)
def test_a_run_gets_its_own_gpus_nodes_and_the_control_nodes(
    tmp_path: Path, gpus: list[int], names: list[str]
) -> None:
    directory = fake_dev(tmp_path / "dev")
    (directory / "nvidia-caps").mkdir()
    (directory / "nvidia-caps" / "nvidia-cap1").write_text("")
    nodes = gpu_nodes(gpus, str(directory))
    assert [name for _, name in nodes] == names
    assert all(source == str(directory / name) for source, name in nodes)


@functools.cache
def _cannot_mknod() -> str | None:
    if os.geteuid() != 0:
        return "only root makes device nodes"
    probe_path = Path(f"/tmp/gpufleet-mknod-{uuid.uuid4().hex[:8]}")
    try:
        os.mknod(probe_path, 0o600 | 0o020000, os.makedev(NVIDIA_MAJOR, 0))
    except OSError as error:
        return f"mknod refused: {error.strerror}"
    probe_path.unlink()
    return None


def test_the_devices_cgroup_allows_the_char_nodes_given(tmp_path: Path) -> None:
    refused = _cannot_mknod()
    if refused is not None:
        pytest.skip(refused)
    directory = fake_dev(tmp_path / "dev", nodes=True)
    rules = cgroup_rules(gpu_nodes([1], str(directory)))
    assert rules == ["c 195:1 rwm", "c 195:255 rwm", "c 195:254 rwm", "c 195:253 rwm"]
    plain = fake_dev(tmp_path / "plain")
    assert cgroup_rules(gpu_nodes([1], str(plain))) == []  # plain files have no numbers


# ----------------------------------------------------------------------------- the kernel
@functools.cache
def _private_dev_refused() -> str | None:
    if os.geteuid() != 0:
        return "only root mounts a private /dev"
    return probe()


@pytest.fixture
def private(state_root: Path) -> Iterator[Supervisor]:
    refused = _private_dev_refused()
    if refused is not None:
        pytest.skip(f"no private /dev here: {refused}")
    supervisor = Supervisor(state_root / "state", allow_root=True, private_dev=True)
    yield supervisor
    supervisor.close()


def seen(supervisor: Supervisor, run_id: str) -> dict[str, object]:
    log = supervisor.log_path(run_id).read_text()
    line = next((x for x in log.splitlines() if x.startswith("SEEN ")), None)
    assert line is not None, log
    found: dict[str, object] = json.loads(line[5:])
    return found


def run_look(supervisor: Supervisor, run_id: str, work: Path, devices: list[tuple[str, str]],
             *paths: str) -> dict[str, object]:  # fmt: skip
    script = work / "look.py"
    script.write_text(LOOK)
    spec = ProcessSpec(("python3", str(script), *paths), "/usr/bin/python3", {}, str(work))
    supervisor.start(run_id, spec, devices=devices)
    end = wait_end(supervisor, run_id, timeout_s=30)
    assert end.succeeded, (end.describe(), supervisor.log_path(run_id).read_text())
    return seen(supervisor, run_id)


def test_a_run_given_gpu_1_of_4_sees_only_its_node_and_cannot_open_the_others(
    private: Supervisor, state_root: Path
) -> None:
    directory = fake_dev(state_root / "fake-dev")
    before = sorted(Path("/proc/self/mountinfo").read_text().splitlines())
    found = run_look(
        private,
        "one-of-four",
        state_root,
        gpu_nodes([1], str(directory)),
        *(f"/dev/nvidia{i}" for i in range(4)),
        "/dev/null",
    )
    dev = found["dev"]
    assert isinstance(dev, list)
    assert [n for n in dev if n.startswith("nvidia")] == ["nvidia-uvm", "nvidia-uvm-tools",
                                                          "nvidia1", "nvidiactl"]  # fmt: skip
    assert {"null", "zero", "urandom", "pts", "shm", "fd"} <= set(dev)
    assert found["opened"] == {
        "/dev/nvidia0": "ENOENT",
        "/dev/nvidia1": "ok",
        "/dev/nvidia2": "ENOENT",
        "/dev/nvidia3": "ENOENT",
        "/dev/null": "ok",
    }
    # The server's own /dev and mounts are untouched.
    assert sorted(Path("/proc/self/mountinfo").read_text().splitlines()) == before


def test_a_run_without_gpus_sees_no_gpu_node(private: Supervisor, state_root: Path) -> None:
    found = run_look(private, "no-gpus", state_root, [])
    dev = found["dev"]
    assert isinstance(dev, list)
    assert not [n for n in dev if n.startswith("nvidia")]


@functools.cache
def _devices_hierarchy() -> Hierarchy | str:
    if os.geteuid() != 0:
        return "only root writes this machine's cgroups"
    found = detect(parent=f"gpufleet-test-{uuid.uuid4().hex[:8]}")
    if isinstance(found, Hierarchy) and not found.devices:
        return f"{found.describe()} has no devices controller"
    return found


def test_the_devices_cgroup_denies_another_gpus_node_by_its_host_path(
    state_root: Path,
) -> None:
    for refused in (_private_dev_refused(), _cannot_mknod()):
        if refused is not None:
            pytest.skip(refused)
    hierarchy = _devices_hierarchy()
    if isinstance(hierarchy, str):
        pytest.skip(f"no v1 devices cgroup here: {hierarchy}")
    directory = fake_dev(state_root / "fake-dev", nodes=True)
    supervisor = Supervisor(
        state_root / "state", allow_root=True, private_dev=True, cgroups=hierarchy
    )
    try:
        found = run_look(
            supervisor,
            "denied",
            state_root,
            gpu_nodes([1], str(directory)),
            "/dev/nvidia1",
            str(directory / "nvidia1"),
            str(directory / "nvidia0"),
            "/dev/null",
        )
    finally:
        supervisor.close()
        hierarchy.remove()
    # Its own node is allowed (no driver behind it: ENXIO); another's is denied (EPERM).
    assert found["opened"] == {
        "/dev/nvidia1": "ENXIO",
        str(directory / "nvidia1"): "ENXIO",
        str(directory / "nvidia0"): "EPERM",
        "/dev/null": "ok",
    }


def test_the_v2_device_program_denies_another_gpus_node_by_its_host_path(
    state_root: Path,
) -> None:
    """The same fence on cgroup v2, through the real supervisor and shim: the run's cgroup gets
    the device program of its allow list (no cpu, memory or pids limit is written: a hybrid
    host's unified hierarchy has those controllers bound to v1)."""
    for refused in (_private_dev_refused(), _cannot_mknod()):
        if refused is not None:
            pytest.skip(refused)
    parent = cgroup2_parent()
    if isinstance(parent, str):
        pytest.skip(f"no cgroup v2 device program here: {parent}")
    hierarchy = Hierarchy(2, {"": str(parent)}, device_program=True)
    directory = fake_dev(state_root / "fake-dev", nodes=True)
    supervisor = Supervisor(state_root / "state", allow_root=True, private_dev=True,
                            cgroups=hierarchy, pids_limit=None)  # fmt: skip
    try:
        found = run_look(
            supervisor,
            "denied-v2",
            state_root,
            gpu_nodes([1], str(directory)),
            "/dev/nvidia1",
            str(directory / "nvidia1"),
            str(directory / "nvidia0"),
            "/dev/null",
        )
    finally:
        supervisor.close()
    assert found["opened"] == {
        "/dev/nvidia1": "ENXIO",
        str(directory / "nvidia1"): "ENXIO",
        str(directory / "nvidia0"): "EPERM",
        "/dev/null": "ok",
    }
    assert not (parent / "denied-v2").exists()  # removed with the run, its program with it
