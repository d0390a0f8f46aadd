"""A process run by the local machine on a real GPU sees exactly the one it was given; skipped
without a GPU (NVML and the CUDA driver)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpufleet.backends.local.devices_env import placement_env
from gpufleet.backends.local.supervisor import Supervisor
from gpufleet.devices.discovery import discover
from gpufleet.devices.nvml import NvmlUnavailableError, load_nvml
from gpufleet.model import Placement
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.processes import ProcessSpec
from tests.backends.local.scripts import wait_end, write_script

pytestmark = pytest.mark.gpu

#: The CUDA driver API through ctypes: how many devices, and the first one's UUID.
CUDA_CHECK = """
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0, "cuInit failed"
count = ctypes.c_int()
assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
device = ctypes.c_int()
assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
uuid = (ctypes.c_ubyte * 16)()
assert cuda.cuDeviceGetUuid(uuid, device) == 0
h = bytes(uuid).hex()
print(f"devices={count.value} uuid=GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
"""


@pytest.fixture
def inventory() -> NodeInventory:
    try:
        nvml = load_nvml()
    except NvmlUnavailableError as error:
        pytest.skip(str(error))
    found = discover(nvml)
    if not any(not d.mig_enabled for d in found.devices):
        pytest.skip("no GPU outside MIG mode")
    return found


def test_a_process_sees_exactly_its_gpu(inventory: NodeInventory, state_root: Path) -> None:
    gpu = next(d for d in reversed(inventory.devices) if not d.mig_enabled)
    work = state_root / "work"
    work.mkdir()
    script = write_script(work, "cuda_check.py", CUDA_CHECK)
    env = placement_env(Placement("here", (gpu.index,)), inventory)
    spec = ProcessSpec((sys.executable, str(script)), sys.executable, env, str(work))
    supervisor = Supervisor(state_root / "state", allow_root=True)
    try:
        supervisor.start("cuda", spec)
        end = wait_end(supervisor, "cuda", timeout_s=60)
        log = supervisor.log_path("cuda").read_text()
        assert end.succeeded, log
        assert f"devices=1 uuid={gpu.uuid}" in log
    finally:
        supervisor.close()
