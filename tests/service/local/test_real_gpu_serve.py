"""``serve --local`` on this machine's real GPUs (NVML): every GPU runs one workload at a time,
each process sees exactly its GPU through CUDA, and one workload more than there are GPUs waits
until a GPU is free. Skipped without a GPU."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.devices.discovery import discover
from gpufleet.devices.nvml import NvmlUnavailableError, load_nvml
from gpufleet.model.inventory import NodeInventory
from gpufleet.testing.local_service import LocalHarness
from tests.backends.local.scripts import write_script
from tests.backends.local.test_real_gpu import CUDA_CHECK
from tests.service.local.test_local_plane import pod, printed, tenant_dir

pytestmark = pytest.mark.gpu

#: The CUDA check, then a wait for the file argv[1] names.
CHECK_AND_WAIT = (
    CUDA_CHECK
    + """
import os, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
"""
)


@pytest.fixture
def real_box(state_root: Path) -> Iterator[LocalHarness]:
    try:
        nvml = load_nvml()
    except NvmlUnavailableError as error:
        pytest.skip(str(error))
    try:
        inventory: NodeInventory = discover(nvml)
    finally:
        nvml.nvmlShutdown()
    if not inventory.devices or any(d.mig_enabled for d in inventory.devices):
        pytest.skip("needs GPUs, none of them in MIG mode")
    harness = LocalHarness.start(inventory, state_root)
    try:
        yield harness
    finally:
        harness.shut_down()


def test_each_workload_sees_exactly_its_own_real_gpu_and_one_more_waits(
    real_box: LocalHarness,
) -> None:
    gpus = len(real_box.inventory.devices)
    root = tenant_dir(real_box)
    script = write_script(root, "check.py", CHECK_AND_WAIT)
    release = root / "release"
    names = [f"cuda-{n}" for n in range(gpus + 1)]
    for name in names:
        submitted = real_box.submit(pod(name, [sys.executable, str(script), str(release)]))
        assert submitted["status"] == 201, submitted
    running, last = names[:gpus], names[gpus]
    real_box.run_until(lambda: all(printed(real_box, n, "devices=")() for n in running), 120)

    seen = {name: real_box.log(name)["text"].split("uuid=", 1)[1].split()[0] for name in running}
    assert all("devices=1 " in real_box.log(name)["text"] for name in running)
    assert sorted(seen.values()) == sorted(d.uuid for d in real_box.inventory.devices)
    assert real_box.workload(last)["state"] == "Pending"

    release.touch()
    real_box.run_until(lambda: printed(real_box, last, "devices=1 ")(), 120)
    real_box.run_until(lambda: all(real_box.state_is(n, "Succeeded")() for n in names), 120)
