"""The NVML protocol: the fake satisfies it; a missing driver is a clear error."""

from __future__ import annotations

import pynvml
import pytest

from gpufleet.devices.fake import FakeNvml
from gpufleet.devices.fake_spec import FakeSpec
from gpufleet.devices.nvml import Nvml, NvmlUnavailableError, load_nvml, nvml_error_code


def test_the_fake_is_an_nvml() -> None:
    fake: Nvml = FakeNvml(FakeSpec())  # checked by mypy: the fake has every protocol member
    members = [
        name
        for name in vars(Nvml)
        if name.startswith(("nvml", "NVML")) and not name.startswith("__")
    ]
    annotated = list(Nvml.__annotations__)
    for name in members + annotated:
        assert hasattr(fake, name), name
        assert hasattr(pynvml, name), f"pynvml has no {name}"


def test_a_missing_driver_says_how_to_run_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    with pytest.raises(NvmlUnavailableError) as error:
        load_nvml()
    assert str(error.value) == (
        "no NVIDIA driver found (nvmlInit: NVML Shared Library Not Found); "
        "use --fake-gpus FILE to run without a GPU"
    )


def test_fake_errors_are_pynvmls_own() -> None:
    fake = FakeNvml(FakeSpec.model_validate({"devices": [{"product": "Tesla T4"}]}))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetMigMode(handle)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetNvLinkState(handle, 0)
    event_set = fake.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_Timeout):
        fake.nvmlEventSetWait_v2(event_set, 0)
    fake.lose(0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost) as lost:
        fake.nvmlDeviceGetUtilizationRates(handle)
    assert nvml_error_code(lost.value) == pynvml.NVML_ERROR_GPU_IS_LOST
    assert fake.nvmlDeviceGetUUID(handle).startswith("GPU-")  # identity stays readable
    assert fake.nvmlDeviceGetPciInfo(handle).busId == "00000000:18:00.0"
