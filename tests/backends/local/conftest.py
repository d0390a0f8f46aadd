"""Fixtures for the local machine: fake GPUs, state directories, a supervisor, and a check that
no process a test started outlives it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpufleet.backends.local.supervisor import Supervisor
from gpufleet.devices.discovery import discover
from gpufleet.devices.fake import FakeNvml, make_fake_nvml
from gpufleet.devices.fake_spec import parse_fake_spec
from gpufleet.model.inventory import NodeInventory

REPO_ROOT = Path(__file__).resolve().parents[3]
DGX_EXAMPLE = REPO_ROOT / "examples" / "agent" / "fake-gpus.yaml"

EIGHT_GPUS = """
node: box
driver_version: "550.54.15"
cuda_driver_version: "12.4"
devices:
  - product: NVIDIA H100 80GB HBM3
    count: 8
"""


@pytest.fixture(scope="session")
def eight_gpus() -> NodeInventory:
    """A machine with eight whole H100s (the fake NVML)."""
    nvml = FakeNvml(parse_fake_spec(yaml.safe_load(EIGHT_GPUS), "eight.yaml"), clock=lambda: 0)
    nvml.nvmlInit()
    return discover(nvml)


@pytest.fixture(scope="session")
def dgx() -> NodeInventory:
    """The README's fake DGX: eight H100s, GPU 7 in MIG mode."""
    return discover(make_fake_nvml(DGX_EXAMPLE, clock=lambda: 0))


def _children(pid: int) -> set[int]:
    """Every living descendant of ``pid`` that is not a zombie, and every process of a session
    one of them led (shims leave their session; ``/proc`` is read directly)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.fixture(autouse=True)
def no_process_left() -> Iterator[None]:
    """Fails a test that leaves a child (or grandchild) of the test process running, after
    killing it so that the rest of the session is not disturbed."""
    before = _children(os.getpid())
    yield
    deadline = time.monotonic() + 3.0
    while left := _children(os.getpid()) - before:
        if time.monotonic() > deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            pytest.fail(f"processes outlived the test: {sorted(left)}")
        time.sleep(0.01)


@pytest.fixture
def state_root() -> Iterator[Path]:
    """A state directory that another user may traverse (the tests' tmp_path is private to
    its owner, and a run as another uid must reach its working directory)."""
    root = Path(tempfile.mkdtemp(prefix="gpufleet-local-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def supervisor(state_root: Path) -> Iterator[Supervisor]:
    """A supervisor of runs in ``state_root``, as root may run them (closed after)."""
    made = Supervisor(state_root / "state", allow_root=True)
    yield made
    made.close()
