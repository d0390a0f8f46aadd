"""A fake NVML: the functions of :class:`~gpufleet.devices.nvml.Nvml`, played from a YAML file.

Owns :class:`FakeNvml` (tests, demos, ``gpufleet agent --fake-gpus FILE``): devices, MIG
layouts, NVLink and fabric from :mod:`gpufleet.devices.fake_layout`; usage over time and
scheduled faults read against an injectable clock (seconds since start; tests pass their own);
and a programmatic API for tests (:meth:`FakeNvml.inject_xid`, :meth:`~FakeNvml.lose`,
:meth:`~FakeNvml.recover`). It answers with pynvml's own structures and raises pynvml's own
``NVMLError`` subclasses where the real library would: ``GpuIsLost`` from the dynamic reads of
a lost device (its identity, name, UUID and PCI id, stays readable), ``Timeout`` from an empty
event wait, ``NotSupported`` for MIG on a GPU without it or NVLink on a GPU without links.

A fault's effects, and the events NVML would deliver for them: ``xid`` -> an
``nvmlEventTypeXidCriticalError``; ``ecc_double_bit: N`` -> N more volatile uncorrected ECC
errors and an ``nvmlEventTypeDoubleBitEccError``; ``lost`` -> reads fail with GPU_IS_LOST;
``recover`` -> the device is readable again, its volatile ECC counts are cleared (as by a
reset) and an ``nvmlEventTypeGpuRecoveryAction`` with ``NVML_GPU_RECOVERY_ACTION_NONE`` says
no action is needed any more. Thread-safe: one lock around all state.
"""

# ruff: noqa: N802, N803, N815 - pynvml's names, kept so the fake and the module are interchangeable
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml

from gpufleet.devices.fake_layout import (
    FakeGpu,
    FakeMigInstance,
    build_gpus,
    compute_profile_id,
    gpu_profile_id,
)
from gpufleet.devices.fake_spec import FakeSpec, load_fake_spec
from gpufleet.devices.nvml import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNINITIALIZED,
    nvml_error,
)

Clock = Callable[[], float]
#: How often a waiting event set looks at the clock for scheduled faults (real seconds).
_WAIT_SLICE_S = 0.05
_NO_INSTANCE = 0xFFFFFFFF
_MAX_MIG_DEVICES = 7
SUPPORTED_EVENTS = (
    pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeGpuRecoveryAction
)


@dataclass(frozen=True, slots=True)
class _Gpu:
    index: int


@dataclass(frozen=True, slots=True)
class _Mig:
    gpu: int
    instance: FakeMigInstance


@dataclass(frozen=True, slots=True)
class _GpuInstance:
    gpu: int
    instance: FakeMigInstance


@dataclass(frozen=True, slots=True)
class _ComputeInstance:
    gpu: int
    instance: FakeMigInstance


@dataclass(slots=True)
class FakeEventData:
    """``nvmlEventData_t``: the device handle, the event type and its data (the XID)."""

    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int = _NO_INSTANCE
    computeInstanceId: int = _NO_INSTANCE


@dataclass(slots=True)
class _EventSet:
    registered: dict[int, int] = field(default_factory=dict)
    queue: deque[FakeEventData] = field(default_factory=deque)
    freed: bool = False


class FakeNvml:
    """NVML over a described node; see the module docstring for what it models."""

    NVML_TEMPERATURE_GPU: int = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM: int = pynvml.NVML_CLOCK_SM
    NVML_FEATURE_ENABLED: int = pynvml.NVML_FEATURE_ENABLED
    NVML_DEVICE_MIG_ENABLE: int = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC: int = pynvml.NVML_VOLATILE_ECC
    NVML_NVLINK_MAX_LINKS: int = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_NVLINK_DEVICE_TYPE_GPU: int = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
    NVML_NVLINK_DEVICE_TYPE_SWITCH: int = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
    NVML_GPU_INSTANCE_PROFILE_COUNT: int = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT: int = pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT: int = (
        pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT
    )
    NVML_GPU_FABRIC_STATE_COMPLETED: int = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    NVML_GPU_RECOVERY_ACTION_NONE: int = pynvml.NVML_GPU_RECOVERY_ACTION_NONE
    nvmlEventTypeXidCriticalError: int = pynvml.nvmlEventTypeXidCriticalError
    nvmlEventTypeDoubleBitEccError: int = pynvml.nvmlEventTypeDoubleBitEccError
    nvmlEventTypeGpuRecoveryAction: int = pynvml.nvmlEventTypeGpuRecoveryAction

    def __init__(self, spec: FakeSpec, clock: Clock | None = None, source: str = "") -> None:
        self.spec = spec
        self.gpus: tuple[FakeGpu, ...] = build_gpus(spec, source or "<fake gpus>")
        self._clock: Clock = clock if clock is not None else _seconds_since(time.monotonic())
        self._cond = threading.Condition()
        self._initialised = 0
        self._lost: set[int] = set()
        self._volatile_dbe: dict[int, int] = {}
        self._aggregate_dbe: dict[int, int] = {}
        self._event_sets: list[_EventSet] = []
        self._faults = sorted(spec.faults, key=lambda f: f.at)
        self._next_fault = 0

    # -- the test API ----------------------------------------------------------------------

    def inject_xid(self, gpu: int, xid: int) -> None:
        with self._cond:
            self._event(gpu, pynvml.nvmlEventTypeXidCriticalError, xid)

    def inject_double_bit_ecc(self, gpu: int, count: int = 1) -> None:
        with self._cond:
            self._ecc(gpu, count)

    def lose(self, gpu: int) -> None:
        with self._cond:
            self._gpu(gpu)
            self._lost.add(gpu)

    def recover(self, gpu: int) -> None:
        with self._cond:
            self._recover(gpu)

    def now(self) -> float:
        return self._clock()

    # -- fault playback ----------------------------------------------------------------------

    def _gpu(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise ValueError(f"no GPU {index} on this fake node ({len(self.gpus)} GPUs)")
        return self.gpus[index]

    def _event(self, gpu: int, event_type: int, data: int) -> None:
        self._gpu(gpu)
        for event_set in self._event_sets:
            if event_set.registered.get(gpu, 0) & event_type:
                event_set.queue.append(FakeEventData(_Gpu(gpu), event_type, data))
        self._cond.notify_all()

    def _ecc(self, gpu: int, count: int) -> None:
        self._volatile_dbe[gpu] = self._volatile_dbe.get(gpu, 0) + count
        self._aggregate_dbe[gpu] = self._aggregate_dbe.get(gpu, 0) + count
        self._event(gpu, pynvml.nvmlEventTypeDoubleBitEccError, 0)

    def _recover(self, gpu: int) -> None:
        self._lost.discard(self._gpu(gpu).index)
        self._volatile_dbe.pop(gpu, None)
        self._event(
            gpu, pynvml.nvmlEventTypeGpuRecoveryAction, pynvml.NVML_GPU_RECOVERY_ACTION_NONE
        )

    def _advance(self) -> None:
        """Apply every scheduled fault that is due (callers hold the lock)."""
        now = self._clock()
        while self._next_fault < len(self._faults) and self._faults[self._next_fault].at <= now:
            fault = self._faults[self._next_fault]
            self._next_fault += 1
            if fault.xid is not None:
                self._event(fault.gpu, pynvml.nvmlEventTypeXidCriticalError, fault.xid)
            elif fault.ecc_double_bit is not None:
                self._ecc(fault.gpu, fault.ecc_double_bit)
            elif fault.lost:
                self._lost.add(fault.gpu)
            else:
                self._recover(fault.gpu)

    def _check(self) -> None:
        if not self._initialised:
            raise nvml_error(NVML_ERROR_UNINITIALIZED)
        self._advance()

    def _device(self, handle: Any, *, dynamic: bool = True) -> FakeGpu:
        """The GPU behind a device handle; GPU_IS_LOST for a dynamic read of a lost one."""
        self._check()
        if not isinstance(handle, _Gpu | _Mig):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        index = handle.index if isinstance(handle, _Gpu) else handle.gpu
        if dynamic and index in self._lost:
            raise nvml_error(NVML_ERROR_GPU_IS_LOST)
        return self.gpus[index]

    def _whole(self, handle: Any) -> FakeGpu:
        gpu = self._device(handle)
        if isinstance(handle, _Mig):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        return gpu

    # -- library and system ----------------------------------------------------------------

    def nvmlInit(self) -> None:
        with self._cond:
            self._initialised += 1

    def nvmlShutdown(self) -> None:
        with self._cond:
            if not self._initialised:
                raise nvml_error(NVML_ERROR_UNINITIALIZED)
            self._initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        with self._cond:
            self._check()
            return self.spec.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        with self._cond:
            self._check()
            major, minor = self.spec.cuda_driver_version.split(".")
            return int(major) * 1000 + int(minor) * 10

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.nvmlSystemGetCudaDriverVersion()

    # -- device identity -------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        with self._cond:
            self._check()
            return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        with self._cond:
            self._check()
            if not 0 <= index < len(self.gpus):
                raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
            return _Gpu(index)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        with self._cond:
            gpu = self._device(handle, dynamic=False)
            return handle.instance.uuid if isinstance(handle, _Mig) else gpu.uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        with self._cond:
            gpu = self._device(handle, dynamic=False)
            if isinstance(handle, _Mig):
                return f"{gpu.name} MIG {handle.instance.profile}"
            return gpu.name

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        with self._cond:
            gpu = self._device(handle, dynamic=False)
            return _pci_info(gpu.pci_bus_id)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        with self._cond:
            return self._device(handle, dynamic=False).compute

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        with self._cond:
            gpu = self._device(handle)
            if isinstance(handle, _Mig):
                total, used = handle.instance.memory_mib, handle.instance.fb_used_mib
            elif gpu.mig_enabled:
                total, used = gpu.memory_mib, sum(i.fb_used_mib for i in gpu.mig)
            else:
                total, used = gpu.memory_mib, gpu.usage(self._clock()).fb_used_mib
            used = min(used, total)
            return pynvml.c_nvmlMemory_t(
                total=total << 20, free=(total - used) << 20, used=used << 20
            )

    # -- MIG -------------------------------------------------------------------------------

    def _mig_gpu(self, handle: Any) -> FakeGpu:
        gpu = self._whole(handle)
        if not gpu.mig_capable:
            raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        with self._cond:
            enabled = int(self._mig_gpu(device).mig_enabled)
            return [enabled, enabled]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        with self._cond:
            self._mig_gpu(device)
            return _MAX_MIG_DEVICES

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        with self._cond:
            gpu = self._mig_gpu(device)
            if not gpu.mig_enabled:
                raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
            if not 0 <= index < len(gpu.mig):
                raise nvml_error(NVML_ERROR_NOT_FOUND)
            return _Mig(gpu.index, gpu.mig[index])

    def _mig(self, handle: Any) -> FakeMigInstance:
        self._device(handle)
        if not isinstance(handle, _Mig):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        return handle.instance

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        with self._cond:
            return self._mig(device).gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        with self._cond:
            return self._mig(device).compute_instance_id

    def nvmlDeviceGetAttributes(self, device: Any) -> Any:
        with self._cond:
            instance = self._mig(device)
            return pynvml.c_nvmlDeviceAttributes(
                gpuInstanceSliceCount=instance.gpu_slices,
                computeInstanceSliceCount=instance.compute_slices,
                memorySizeMB=instance.memory_mib,
            )

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        with self._cond:
            gpu = self._mig_gpu(device)
            for instance in gpu.mig:
                if instance.gpu_instance_id == gpuInstanceId:
                    return _GpuInstance(gpu.index, instance)
            raise nvml_error(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> Any:
        with self._cond:
            gpu = self._mig_gpu(device)
            for instance in gpu.mig:
                if instance.gpu_profile_index == profile:
                    info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
                    info.id = gpu_profile_id(profile)
                    info.sliceCount = instance.gpu_slices
                    info.memorySizeMB = instance.memory_mib
                    return info
            raise nvml_error(NVML_ERROR_NOT_SUPPORTED)

    def _instance(
        self, handle: Any, kind: type[_GpuInstance] | type[_ComputeInstance]
    ) -> FakeMigInstance:
        self._check()
        if not isinstance(handle, kind):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        if handle.gpu in self._lost:
            raise nvml_error(NVML_ERROR_GPU_IS_LOST)
        return handle.instance

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        with self._cond:
            instance = self._instance(gpuInstance, _GpuInstance)
            return pynvml.c_nvmlGpuInstanceInfo_t(
                id=instance.gpu_instance_id,
                profileId=gpu_profile_id(instance.gpu_profile_index),
                placement=pynvml.c_nvmlGpuInstancePlacement_t(
                    start=instance.placement_start, size=instance.placement_size
                ),
            )

    def nvmlGpuInstanceGetComputeInstanceById(
        self, gpuInstance: Any, computeInstanceId: int
    ) -> Any:
        with self._cond:
            instance = self._instance(gpuInstance, _GpuInstance)
            if instance.compute_instance_id != computeInstanceId:
                raise nvml_error(NVML_ERROR_NOT_FOUND)
            return _ComputeInstance(gpuInstance.gpu, instance)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        with self._cond:
            instance = self._instance(device, _GpuInstance)
            if engProfile != 0 or profile != instance.compute_profile_index:
                raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
            info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
            info.id = compute_profile_id(profile)
            info.sliceCount = instance.compute_slices
            return info

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        with self._cond:
            instance = self._instance(computeInstance, _ComputeInstance)
            return pynvml.c_nvmlComputeInstanceInfo_t(
                id=instance.compute_instance_id,
                profileId=compute_profile_id(instance.compute_profile_index),
            )

    # -- NVLink and fabric -----------------------------------------------------------------

    def _link(self, device: Any, link: int) -> Any:
        gpu = self._whole(device)
        if not gpu.links:
            raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.links):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.links[link]

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        with self._cond:
            self._link(device, link)
            return int(pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> Any:
        with self._cond:
            return _pci_info(self._link(device, link).remote_bus_id)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        with self._cond:
            if self._link(handle, link).remote_is_switch:
                return int(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)

    def nvmlDeviceGetGpuFabricInfo(self, device: Any, gpuFabricInfo: Any) -> int:
        with self._cond:
            gpu = self._whole(device)
            if gpu.fabric is None:
                raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
            info = getattr(gpuFabricInfo, "_obj", gpuFabricInfo)  # byref(struct) or struct
            cluster, clique = gpu.fabric
            info.clusterUuid[:] = list(cluster)
            info.cliqueId = clique
            info.status = pynvml.NVML_SUCCESS
            info.state = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
            return int(pynvml.NVML_SUCCESS)

    # -- readings --------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        with self._cond:
            gpu = self._whole(handle)
            usage = gpu.usage(self._clock())
            return pynvml.c_nvmlUtilization_t(
                gpu=round(usage.gpu_util), memory=round(usage.mem_copy_util)
            )

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        with self._cond:
            gpu = self._whole(handle)
            if sensor != pynvml.NVML_TEMPERATURE_GPU:
                raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
            return round(gpu.usage(self._clock()).temperature_c)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        with self._cond:
            return round(self._whole(handle).usage(self._clock()).power_w * 1000)

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        with self._cond:
            gpu = self._whole(handle)
            if type != pynvml.NVML_CLOCK_SM:
                raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
            return gpu.usage(self._clock()).sm_clock_mhz

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        with self._cond:
            gpu = self._whole(handle)
            if errorType != pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
                return 0
            counts = (
                self._volatile_dbe
                if counterType == pynvml.NVML_VOLATILE_ECC
                else self._aggregate_dbe
            )
            return counts.get(gpu.index, 0)

    # -- events ----------------------------------------------------------------------------

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        with self._cond:
            self._whole(handle)
            return int(SUPPORTED_EVENTS)

    def nvmlEventSetCreate(self) -> Any:
        with self._cond:
            self._check()
            event_set = _EventSet()
            self._event_sets.append(event_set)
            return event_set

    def _event_set(self, event_set: Any) -> _EventSet:
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        with self._cond:
            gpu = self._whole(handle)
            if eventTypes & ~SUPPORTED_EVENTS:
                raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
            registered = self._event_set(eventSet).registered
            registered[gpu.index] = registered.get(gpu.index, 0) | eventTypes

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> FakeEventData:
        deadline = time.monotonic() + timeoutms / 1000
        with self._cond:
            while True:
                self._check()
                queue = self._event_set(eventSet).queue
                if queue:
                    return queue.popleft()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise nvml_error(NVML_ERROR_TIMEOUT)
                # Scheduled faults fall due as the clock moves: look again now and then.
                self._cond.wait(min(remaining, _WAIT_SLICE_S))

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> FakeEventData:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        with self._cond:
            self._event_set(eventSet).freed = True
            self._event_sets.remove(eventSet)
            self._cond.notify_all()


def _seconds_since(started: float) -> Clock:
    def clock() -> float:
        return time.monotonic() - started

    return clock


def _pci_info(bus_id: str) -> Any:
    info = pynvml.nvmlPciInfo_t()
    domain, bus, rest = bus_id.split(":")
    info.busId = bus_id.encode()
    info.busIdLegacy = bus_id[-12:].encode()
    info.domain = int(domain, 16)
    info.bus = int(bus, 16)
    info.device = int(rest.split(".")[0], 16)
    return info


def make_fake_nvml(path: str | Path, clock: Clock | None = None) -> FakeNvml:
    """An initialised fake NVML from a description file (as :func:`~gpufleet.devices.nvml.
    load_nvml` returns the real one initialised); FakeSpecError naming the file and field."""
    nvml = FakeNvml(load_fake_spec(path), clock=clock, source=str(path))
    nvml.nvmlInit()
    return nvml
