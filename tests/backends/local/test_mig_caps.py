"""A run on a MIG slice gets in its private /dev only its own GPU instance's and compute
instance's ``nvidia-caps`` nodes (not ``config``, ``monitor`` nor another slice's), and the
devices cgroup (v1) or device program (v2) allows only those too.

The fake GPUs' device directory (:mod:`gpufleet.devices.fake_nodes`) holds the nodes and a
``mig-minors`` file as the driver writes them. The kernel tests need root and a kernel that
lets the shim mount; they skip, saying why, elsewhere. The ``gpu``-marked test runs CUDA on a
real MIG slice with only its capabilities, and skips without one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpufleet.backends.local.cgroups import Hierarchy
from gpufleet.backends.local.devices_env import placement_env
from gpufleet.backends.local.machine import LocalMachine
from gpufleet.backends.local.node import machine_node
from gpufleet.backends.local.private_dev import (
    MIG_MINORS,
    cgroup_rules,
    gpu_nodes,
    mig_cap_names,
    mig_minors_path,
    parse_mig_minors,
)
from gpufleet.backends.local.supervisor import Supervisor
from gpufleet.control.loop import ControlLoop, sync
from gpufleet.devices.discovery import discover
from gpufleet.devices.fake_nodes import (
    FAKE_CAPS_MAJOR,
    gpu_instance_minor,
    mig_minors_text,
    write_fake_device_dir,
)
from gpufleet.devices.fake_spec import FakeSpec, load_fake_spec, parse_fake_spec
from gpufleet.devices.nvml import NvmlUnavailableError, load_nvml
from gpufleet.model import Placement
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.processes import ProcessSpec
from gpufleet.testing.builders import make_queue, make_workload
from gpufleet.testing.fakes import make_core
from tests.backends.local.cgroup2 import cgroup2_parent
from tests.backends.local.conftest import DGX_EXAMPLE
from tests.backends.local.scripts import wait_end, write_script
from tests.backends.local.test_machine import Recorder, World
from tests.backends.local.test_private_dev import (
    _cannot_mknod,
    _devices_hierarchy,
    _private_dev_refused,
    run_look,
)

CONTROL = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]

#: Two GPUs: 0 whole, 1 in MIG mode with three slices (GPU instances 1, 2 and 5; the last with
#: compute instance 1).
TWO_GPUS = """
node: box
devices:
  - product: NVIDIA H100 80GB HBM3
  - product: NVIDIA H100 80GB HBM3
    mig:
      instances:
        - {profile: 3g.40gb, placement_start: 4, gpu_instance_id: 1}
        - {profile: 2g.20gb, placement_start: 0, gpu_instance_id: 2}
        - {profile: 1g.10gb, placement_start: 2, gpu_instance_id: 5, compute_instance_id: 1}
"""


def two_gpus() -> FakeSpec:
    return parse_fake_spec(yaml.safe_load(TWO_GPUS), "two.yaml")


def cap(gpu: int, gi: int, ci: int | None = None) -> str:
    minor = gpu_instance_minor(gpu, gi) + (0 if ci is None else 1 + ci)
    return f"nvidia-caps/nvidia-cap{minor}"


# ----------------------------------------------------------------------------- mig-minors
def test_the_fake_mig_minors_number_capabilities_as_the_driver_does() -> None:
    minors = parse_mig_minors(mig_minors_text(2))
    # NVIDIA's MIG user guide: config 1, monitor 2, gpu0/gi0/access 3, ..., and the brief's
    # gpu0/gi1/access 12 and gpu0/gi1/ci0/access 13.
    assert (minors["config"], minors["monitor"]) == (1, 2)
    assert (minors["gpu0/gi0/access"], minors["gpu0/gi0/ci0/access"]) == (3, 4)
    assert (minors["gpu0/gi1/access"], minors["gpu0/gi1/ci0/access"]) == (12, 13)
    assert minors["gpu1/gi0/access"] == 3 + 15 * 9
    assert len(set(minors.values())) == len(minors) == 2 + 2 * 15 * 9


@pytest.mark.parametrize(
    ("text", "minors"),
    [
        ("config 1\nmonitor 2\ngpu0/gi1/access 12\n", {"config": 1, "monitor": 2,
                                                      "gpu0/gi1/access": 12}),
        ("gpu0/gi1/access 12\n\nnot a line\ngpu0/gi1/ci0/access x\n", {"gpu0/gi1/access": 12}),
        ("", {}),
    ],
    ids=["driver-lines", "others-skipped", "empty"],
)  # fmt: skip
def test_mig_minors_lines_are_read(text: str, minors: dict[str, int]) -> None:
    assert parse_mig_minors(text) == minors


@pytest.mark.parametrize(
    ("instances", "names"),
    [
        ([(1, 2, 0)], [cap(1, 2), cap(1, 2, 0)]),
        ([(1, 5, 1)], [cap(1, 5), cap(1, 5, 1)]),
        ([(1, 1, 0), (1, 2, 0)], [cap(1, 1), cap(1, 1, 0), cap(1, 2), cap(1, 2, 0)]),
        ([(1, 2, 0), (1, 2, 0)], [cap(1, 2), cap(1, 2, 0)]),
        ([(9, 0, 0)], []),
    ],
    ids=["one-slice", "compute-instance-1", "two-slices", "once-each", "unknown-gpu"],
)
def test_a_slice_gets_its_gpu_and_compute_instance_access_caps(
    instances: list[tuple[int, int, int]], names: list[str]
) -> None:
    assert mig_cap_names(instances, parse_mig_minors(mig_minors_text(2))) == names


def test_the_real_dev_reads_the_drivers_mig_minors(tmp_path: Path) -> None:
    assert mig_minors_path("/dev") == MIG_MINORS == "/proc/driver/nvidia-caps/mig-minors"
    assert mig_minors_path(str(tmp_path)) == str(tmp_path / "mig-minors")


# ----------------------------------------------------------------------------- the nodes
def test_the_fake_device_dir_has_the_nodes_of_each_slice(tmp_path: Path) -> None:
    directory = write_fake_device_dir(two_gpus(), tmp_path / "dev")
    caps = sorted(p.name for p in (directory / "nvidia-caps").iterdir())
    slices = (cap(1, 1), cap(1, 1, 0), cap(1, 2), cap(1, 2, 0), cap(1, 5), cap(1, 5, 1))
    expected = ["nvidia-cap1", "nvidia-cap2"] + [Path(c).name for c in slices]
    assert caps == sorted(expected)
    assert {"nvidia0", "nvidia1", *CONTROL, "mig-minors"} <= {p.name for p in directory.iterdir()}


@pytest.mark.parametrize(
    ("gpus", "instances", "names"),
    [
        ([1], [(1, 5, 1)], ["nvidia1", *CONTROL, cap(1, 5), cap(1, 5, 1)]),
        ([0], [], ["nvidia0", *CONTROL]),
        ([1], [(1, 7, 0)], ["nvidia1", *CONTROL]),  # an instance with no node: left out
    ],
    ids=["slice-gets-its-caps", "whole-gpu-none", "missing-node"],
)
def test_a_mig_run_gets_only_its_slices_caps(
    tmp_path: Path, gpus: list[int], instances: list[tuple[int, int, int]], names: list[str]
) -> None:
    directory = write_fake_device_dir(two_gpus(), tmp_path / "dev")
    nodes = gpu_nodes(gpus, str(directory), instances)
    assert [name for _, name in nodes] == names
    assert all(source == str(directory / name) for source, name in nodes)


def test_the_allow_list_has_the_slices_caps(tmp_path: Path) -> None:
    refused = _cannot_mknod()
    if refused is not None:
        pytest.skip(refused)
    directory = write_fake_device_dir(two_gpus(), tmp_path / "dev", char_nodes=True)
    rules = cgroup_rules(gpu_nodes([1], str(directory), [(1, 2, 0)]))
    first = gpu_instance_minor(1, 2)
    caps = [f"c {FAKE_CAPS_MAJOR}:{first} rwm", f"c {FAKE_CAPS_MAJOR}:{first + 1} rwm"]
    assert rules == ["c 195:1 rwm", "c 195:255 rwm", "c 195:254 rwm", "c 195:253 rwm", *caps]


# ----------------------------------------------------------------------------- the kernel
def _hierarchy(kind: str) -> Hierarchy:
    if kind == "v1":
        found = _devices_hierarchy()
        if isinstance(found, str):
            pytest.skip(f"no v1 devices cgroup here: {found}")
        return found
    parent = cgroup2_parent()
    if isinstance(parent, str):
        pytest.skip(f"no cgroup v2 device program here: {parent}")
    return Hierarchy(2, {"": str(parent)}, device_program=True)


@pytest.fixture(params=["v1", "v2"])
def fenced(request: pytest.FixtureRequest, state_root: Path) -> Iterator[Supervisor]:
    for refused in (_private_dev_refused(), _cannot_mknod()):
        if refused is not None:
            pytest.skip(refused)
    hierarchy = _hierarchy(request.param)
    supervisor = Supervisor(state_root / "state", allow_root=True, private_dev=True,
                            cgroups=hierarchy, pids_limit=None)  # fmt: skip
    yield supervisor
    supervisor.close()


def test_a_mig_run_sees_and_opens_only_its_slices_caps(
    fenced: Supervisor, state_root: Path
) -> None:
    directory = write_fake_device_dir(two_gpus(), state_root / "fake-dev", char_nodes=True)
    other = cap(1, 1)  # the 3g.40gb slice's, by its host path
    found = run_look(
        fenced,
        "mig-slice",
        state_root,
        gpu_nodes([1], str(directory), [(1, 2, 0)]),
        "/dev/" + cap(1, 2),
        "/dev/" + cap(1, 2, 0),
        "/dev/nvidia-caps/nvidia-cap1",
        str(directory / other),
        str(directory / "nvidia-caps" / "nvidia-cap2"),
    )
    # Its own caps are allowed (no driver behind them: ENXIO); the others are absent from its
    # /dev and denied by any path (EPERM).
    assert found["opened"] == {
        "/dev/" + cap(1, 2): "ENXIO",
        "/dev/" + cap(1, 2, 0): "ENXIO",
        "/dev/nvidia-caps/nvidia-cap1": "ENOENT",
        str(directory / other): "EPERM",
        str(directory / "nvidia-caps" / "nvidia-cap2"): "EPERM",
    }


#: Prints the caps and GPU nodes it sees, and its devices' variable.
LIST_CAPS = """
import json, os
caps = sorted(os.listdir("/dev/nvidia-caps")) if os.path.isdir("/dev/nvidia-caps") else []
gpus = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
print("SEEN " + json.dumps({"caps": caps, "gpus": gpus,
                            "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}), flush=True)
"""


class MigWorld(World):
    """The fake DGX (GPU 7 in MIG mode) driven by the scheduling core, each run in a private
    /dev built from the fake device directory."""

    def __init__(self, inventory: NodeInventory, state: Path, device_dir: Path) -> None:
        node = machine_node(inventory, "box", 64_000, 262_144)
        self.machine = LocalMachine(inventory, state, node=node, allow_root=True, grace_s=5,
                                    private_dev=True, device_dir=str(device_dir))  # fmt: skip
        self.core = make_core([node], [make_queue("default", gpus=8)], min_runtime=0.0)
        self.recorder = Recorder()
        self.loop = ControlLoop(self.machine, lambda: self.core, [self.recorder])
        sync(self.core, self.machine.list_state())


def test_a_pod_on_a_mig_slice_gets_its_slices_caps_from_the_machine(
    dgx: NodeInventory, state_root: Path
) -> None:
    refused = _private_dev_refused()
    if refused is not None:
        pytest.skip(f"no private /dev here: {refused}")
    device_dir = write_fake_device_dir(load_fake_spec(DGX_EXAMPLE), state_root / "fake-dev")
    world = MigWorld(dgx, state_root / "state", device_dir)
    try:
        workload = make_workload("slice", gpus=0, mig="3g.40gb")
        root = world.machine.tenant_root(workload.namespace)
        script = write_script(root, "caps.py", LIST_CAPS)
        spec = ProcessSpec((sys.executable, str(script)), sys.executable, {}, str(root))
        world.machine.submit(workload, {workload.pods[0].key: spec})
        world.run_until(world.printed("default/slice"))
        seen = world.seen("default/slice")
    finally:
        world.shut_down()
    slice_ = next(m for m in dgx.device(7).mig if m.profile == "3g.40gb")  # type: ignore[union-attr]
    assert seen["visible"] == slice_.uuid
    assert seen["gpus"] == ["nvidia-caps", "nvidia-uvm", "nvidia-uvm-tools", "nvidia7", "nvidiactl"]
    assert seen["caps"] == sorted(Path(cap(7, slice_.gpu_instance_id, c)).name
                                  for c in (None, slice_.compute_instance_id))  # fmt: skip


# ----------------------------------------------------------------------------- a real GPU
CUDA_COUNT = """
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
code = cuda.cuInit(0)
count = ctypes.c_int()
if code == 0:
    cuda.cuDeviceGetCount(ctypes.byref(count))
print(f"cuInit={code} devices={count.value}", flush=True)
"""


@pytest.mark.gpu
def test_a_real_mig_slice_runs_cuda_with_only_its_caps(state_root: Path) -> None:
    """On a MIG GPU with the /dev capabilities (``nv_cap_enable_devfs=1``): a run given one
    slice, in a private /dev with only its GPU's node and its slice's caps, sees exactly one
    CUDA device (run as root, ``allow_root``: the paths of a test's files need not be
    readable by another user)."""
    try:
        inventory = discover(load_nvml())
    except NvmlUnavailableError as error:
        pytest.skip(str(error))
    gpu = next((d for d in inventory.devices if d.mig_enabled and d.mig), None)
    if gpu is None:
        pytest.skip("no GPU in MIG mode with an instance")
    refused = _private_dev_refused()
    if refused is not None:
        pytest.skip(refused)
    if not os.path.exists(MIG_MINORS) or not os.path.isdir("/dev/nvidia-caps"):
        pytest.skip("the driver exposes no MIG capabilities in /dev (nv_cap_enable_devfs=0)")
    instance = gpu.mig[0]
    ids = (gpu.index, instance.gpu_instance_id, instance.compute_instance_id)
    nodes = gpu_nodes([gpu.index], "/dev", [ids])
    assert sum(name.startswith("nvidia-caps/") for _, name in nodes) == 2, nodes
    work = state_root / "work"
    work.mkdir()
    script = write_script(work, "cuda_count.py", CUDA_COUNT)
    env = placement_env(Placement("here", (), mig_slices=((gpu.index, instance.slot),)), inventory)
    spec = ProcessSpec((sys.executable, str(script)), sys.executable, env, str(work))
    supervisor = Supervisor(state_root / "state", allow_root=True, private_dev=True)
    try:
        supervisor.start("mig", spec, devices=nodes)
        end = wait_end(supervisor, "mig", timeout_s=60)
        log = supervisor.log_path("mig").read_text()
        assert end.succeeded, log
        assert "cuInit=0 devices=1" in log, log
    finally:
        supervisor.close()
