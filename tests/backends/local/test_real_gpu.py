"""A process run by the local machine on a real GPU sees exactly the one it was given, and a
share run under MPS cannot pin more memory than its share; skipped without a GPU (NVML and the
CUDA driver), the MPS test also without MPS."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
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
print(f"devices={count.value} uuid=GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}",
      flush=True)
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


#: Through the CUDA driver API: the memory MPS lets this client pin, tried by allocating a
#: quarter of it (must succeed) and one and a half times it (must fail), argv[1] the limit in MiB.
MPS_CHECK = """
import ctypes, sys
limit_mib = int(sys.argv[1])
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0, "cuInit failed"
device, context = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0, "no context"
assert cuda.cuCtxSetCurrent(context) == 0
def alloc(mib):
    pointer = ctypes.c_uint64()
    code = cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(mib << 20))
    if code == 0:
        cuda.cuMemFree_v2(pointer)
    return code
print(f"small={alloc(limit_mib // 4)} large={alloc(limit_mib * 3 // 2)}", flush=True)
"""


@pytest.fixture
def mps_daemon(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An MPS control daemon of its own (pipe and log directories under ``tmp_path``), the
    variables a client needs to reach it; skipped where MPS is not installed or does not
    start."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        pytest.skip("nvidia-cuda-mps-control is not installed")
    env = {
        "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "mps-pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "mps-log"),
    }
    for directory in env.values():
        Path(directory).mkdir()
    started = subprocess.run(
        [control, "-d"], env={**os.environ, **env}, capture_output=True, text=True, timeout=30
    )
    if started.returncode != 0:
        pytest.skip(f"the MPS daemon did not start: {started.stderr or started.stdout}")
    try:
        yield env
    finally:
        subprocess.run([control], input="quit\n", env={**os.environ, **env}, text=True, timeout=30)


def test_a_share_under_mps_cannot_take_more_memory_than_its_share(
    inventory: NodeInventory, state_root: Path, mps_daemon: dict[str, str]
) -> None:
    gpu = next(d for d in inventory.devices if not d.mig_enabled)
    work = state_root / "work"
    work.mkdir()
    script = write_script(work, "mps_check.py", MPS_CHECK)
    env = placement_env(Placement("here", (gpu.index,), 250), inventory, mps=True)
    limit_mib = gpu.memory_mib * 250 // 1000
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={limit_mib}M"
    spec = ProcessSpec(
        (sys.executable, str(script), str(limit_mib)),
        sys.executable,
        {**env, **mps_daemon},
        str(work),
    )
    supervisor = Supervisor(state_root / "state", allow_root=True)
    try:
        supervisor.start("mps", spec)
        end = wait_end(supervisor, "mps", timeout_s=120)
        log = supervisor.log_path("mps").read_text()
        assert end.succeeded, log
        # 0: CUDA_SUCCESS; 2: CUDA_ERROR_OUT_OF_MEMORY (the share's limit, not the GPU's 80 GB)
        assert "small=0 large=2" in log, log
    finally:
        supervisor.close()
