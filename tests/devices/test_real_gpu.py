"""Discovery, labels and samples on the real driver (nvidia-ml-py); skipped without a GPU."""

from __future__ import annotations

import pytest

from gpufleet.devices.discovery import discover
from gpufleet.devices.labels import gfd_node_labels
from gpufleet.devices.nvml import Nvml, NvmlUnavailableError, load_nvml
from gpufleet.devices.nvml_source import NvmlDeviceSource

pytestmark = pytest.mark.gpu


@pytest.fixture
def nvml() -> Nvml:
    try:
        return load_nvml()
    except NvmlUnavailableError as error:
        pytest.skip(str(error))


def test_discover_and_sample_real_gpus(nvml: Nvml) -> None:
    source = NvmlDeviceSource(nvml)
    try:
        inventory = source.inventory()
        assert inventory.devices, "NVML initialised but reports no GPU"
        assert inventory.cuda_driver_version.count(".") == 1
        for device in inventory.devices:
            assert device.uuid.startswith("GPU-")
            assert device.memory_mib > 0
            assert " " not in device.product
            assert [m.slot for m in device.mig] == list(range(len(device.mig)))
        samples = source.samples()
        assert {s.gpu for s in samples if not s.mig_profile} == {d.index for d in inventory.devices}
        for sample in samples:
            assert 0 <= sample.gpu_util <= 100
            assert sample.fb_used_mib + sample.fb_free_mib > 0
        labels = gfd_node_labels(inventory, node_name="gpu-test")
        assert labels["nvidia.com/gpu.count"] == str(len(inventory.devices))
        assert source.wait_health(0.1) is not None
        assert discover(nvml).devices[0].uuid == inventory.devices[0].uuid
    finally:
        source.close()
