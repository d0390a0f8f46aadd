"""The NVML functions the node agent calls, as a protocol, and the real library behind it.

Owns :class:`Nvml`: exactly the ``pynvml`` (``nvidia-ml-py``) functions and constants the
agent uses, with pynvml's names and signatures, so that the real module and
:class:`~gpufleet.devices.fake.FakeNvml` are interchangeable; the shapes of the structures
those functions return (as far as the agent reads them); and :func:`load_nvml`, which
initialises the real library or says clearly that there is no driver. Errors are pynvml's own
``NVMLError`` subclasses in both implementations (:func:`nvml_error_code` reads their code).
It does not interpret anything NVML returns (discovery, sampling and health do).

Handles (devices, MIG devices, GPU and compute instances, event sets) are opaque: ctypes
pointers from the real library, small objects from the fake; nothing but NVML looks inside.
"""

# ruff: noqa: N802, N803, N815 - pynvml's names, kept so the fake and the module are interchangeable
from __future__ import annotations

from typing import Any, Protocol, cast

import pynvml

#: The structures NVML fills in: the fields the agent reads.


class PciInfo(Protocol):
    busId: bytes | str  # pynvml's printable structures decode it to str


class MemoryInfo(Protocol):
    total: int
    free: int
    used: int


class Utilization(Protocol):
    gpu: int
    memory: int


class GpuInstancePlacement(Protocol):
    start: int
    size: int


class GpuInstanceInfo(Protocol):
    id: int
    profileId: int
    placement: GpuInstancePlacement


class ComputeInstanceInfo(Protocol):
    id: int
    profileId: int


class ProfileInfo(Protocol):
    """A GPU instance or compute instance profile (``nvmlGpuInstanceProfileInfo_v2_t``)."""

    id: int


class DeviceAttributes(Protocol):
    """``nvmlDeviceAttributes_t`` of a MIG device."""

    memorySizeMB: int
    gpuInstanceSliceCount: int
    computeInstanceSliceCount: int


class EventData(Protocol):
    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int
    computeInstanceId: int


class Nvml(Protocol):
    """The subset of ``pynvml`` the agent calls; both the module and the fake satisfy it."""

    NVML_TEMPERATURE_GPU: int
    NVML_CLOCK_SM: int
    NVML_FEATURE_ENABLED: int
    NVML_DEVICE_MIG_ENABLE: int
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int
    NVML_VOLATILE_ECC: int
    NVML_NVLINK_MAX_LINKS: int
    NVML_NVLINK_DEVICE_TYPE_GPU: int
    NVML_NVLINK_DEVICE_TYPE_SWITCH: int
    NVML_GPU_INSTANCE_PROFILE_COUNT: int
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT: int
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT: int
    NVML_GPU_FABRIC_STATE_COMPLETED: int
    NVML_GPU_RECOVERY_ACTION_NONE: int
    nvmlEventTypeXidCriticalError: int
    nvmlEventTypeDoubleBitEccError: int
    nvmlEventTypeGpuRecoveryAction: int

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlSystemGetCudaDriverVersion_v2(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> MemoryInfo: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> PciInfo: ...
    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any: ...
    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int: ...
    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int: ...
    def nvmlDeviceGetAttributes(self, device: Any) -> DeviceAttributes: ...
    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any: ...
    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> ProfileInfo: ...
    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> GpuInstanceInfo: ...
    def nvmlGpuInstanceGetComputeInstanceById(
        self, gpuInstance: Any, computeInstanceId: int
    ) -> Any: ...
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> ProfileInfo: ...
    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> ComputeInstanceInfo: ...
    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int: ...
    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> PciInfo: ...
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int: ...
    def nvmlDeviceGetGpuFabricInfo(self, device: Any, gpuFabricInfo: Any) -> int: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Utilization: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int: ...
    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None: ...
    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> EventData: ...
    def nvmlEventSetFree(self, eventSet: Any) -> None: ...


#: pynvml's error classes, named here so callers need not import pynvml (the fake raises them).
NVMLError: type[Exception] = pynvml.NVMLError
NVML_ERROR_UNINITIALIZED: int = pynvml.NVML_ERROR_UNINITIALIZED
NVML_ERROR_NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
NVML_ERROR_INVALID_ARGUMENT: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
NVML_ERROR_NOT_FOUND: int = pynvml.NVML_ERROR_NOT_FOUND
NVML_ERROR_TIMEOUT: int = pynvml.NVML_ERROR_TIMEOUT
NVML_ERROR_GPU_IS_LOST: int = pynvml.NVML_ERROR_GPU_IS_LOST
NVML_ERROR_RESET_REQUIRED: int = pynvml.NVML_ERROR_RESET_REQUIRED
NVML_ERROR_FUNCTION_NOT_FOUND: int = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND

#: Errors after which the device answers nothing until it is reset or comes back.
DEVICE_GONE_ERRORS = frozenset({NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED})


def gone_reason(error: BaseException) -> str:
    """Why a device that stopped answering is unhealthy, in the words the agent publishes."""
    if nvml_error_code(error) == NVML_ERROR_RESET_REQUIRED:
        return "GPU requires reset"
    return "GPU is lost"


def nvml_error(code: int) -> Exception:
    """pynvml's own exception for ``code`` (``NVMLError_GpuIsLost`` for 15, ...)."""
    return cast(Exception, pynvml.NVMLError(code))


def nvml_error_code(error: BaseException) -> int | None:
    """The NVML return code an exception carries, None when it is not an NVML error."""
    if isinstance(error, pynvml.NVMLError):
        return int(error.value)
    return None


class NvmlUnavailableError(RuntimeError):
    """There is no usable NVIDIA driver on this machine."""


def load_nvml() -> Nvml:
    """Initialise the real NVML (``nvidia-ml-py``) and return it; the caller shuts it down.

    Raises :class:`NvmlUnavailableError` when the library or the driver is missing, saying how
    to run without a GPU.
    """
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise NvmlUnavailableError(
            f"no NVIDIA driver found (nvmlInit: {error}); use --fake-gpus FILE to run without a GPU"
        ) from error
    return cast(Nvml, pynvml)
