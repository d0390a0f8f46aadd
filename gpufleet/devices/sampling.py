"""One reading of every GPU and MIG instance, in dcgm-exporter's units.

Owns :func:`read_samples`: per device a :class:`~gpufleet.model.telemetry.DeviceSample`
(utilisation and memory-copy utilisation in percent, framebuffer used and free in MiB,
temperature in C, power in W from NVML's milliwatts, SM clock in MHz, the last XID seen), and
per MIG instance one more with its own framebuffer, its profile and GPU instance id. ``model``
is NVML's device name as dcgm-exporter's ``modelName`` carries it (``NVIDIA H100 80GB HBM3``),
not GFD's label form. It does not judge health: devices that answer GPU_IS_LOST are skipped and
reported back for the health monitor to act on.

MIG instances: NVML has no utilisation for a MIG device (dcgm-exporter takes it from DCGM's
profiling fields) so theirs is 0 unless NVML answers; temperature and SM clock are the physical
GPU's; power is not split among instances and stays 0 (it would count twice in a sum).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.devices.discovery import mig_device_handles
from gpufleet.devices.nvml import (
    DEVICE_GONE_ERRORS,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    Nvml,
    NVMLError,
    nvml_error_code,
)
from gpufleet.model.inventory import InventoryDevice, NodeInventory
from gpufleet.model.telemetry import DeviceSample

_MIB = 1 << 20
_UNSUPPORTED = frozenset({NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT})


@dataclass(frozen=True, slots=True)
class SampleRead:
    samples: tuple[DeviceSample, ...]
    #: Indices of the devices that answered GPU_IS_LOST (or RESET_REQUIRED).
    lost: tuple[int, ...]


def _optional(read: Any, *args: Any) -> Any:
    """A reading NVML may not support on this device: None then."""
    try:
        return read(*args)
    except NVMLError as error:
        if nvml_error_code(error) not in _UNSUPPORTED:
            raise
        return None


def _device_sample(
    nvml: Nvml, device: InventoryDevice, handle: Any, model: str, xid: int
) -> tuple[DeviceSample, list[DeviceSample]]:
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    utilization = _optional(nvml.nvmlDeviceGetUtilizationRates, handle)
    temperature = _optional(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
    power_mw = _optional(nvml.nvmlDeviceGetPowerUsage, handle)
    clock = _optional(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
    sample = DeviceSample(
        gpu=device.index,
        uuid=device.uuid,
        model=model,
        gpu_util=float(utilization.gpu) if utilization is not None else 0.0,
        mem_copy_util=float(utilization.memory) if utilization is not None else 0.0,
        fb_used_mib=memory.used // _MIB,
        fb_free_mib=memory.free // _MIB,
        temperature_c=float(temperature or 0),
        power_w=(power_mw or 0) / 1000,
        sm_clock_mhz=int(clock or 0),
        xid=xid,
    )
    if not device.mig_enabled:
        return sample, []
    by_uuid = {m.uuid: m for m in device.mig}
    instances = []
    for mig in mig_device_handles(nvml, handle):
        instance = by_uuid.get(nvml.nvmlDeviceGetUUID(mig))
        if instance is None:
            continue  # created after discovery: the next inventory lists it
        mig_memory = nvml.nvmlDeviceGetMemoryInfo(mig)
        mig_utilization = _optional(nvml.nvmlDeviceGetUtilizationRates, mig)
        instances.append(
            DeviceSample(
                gpu=device.index,
                uuid=instance.uuid,
                model=model,
                gpu_util=float(mig_utilization.gpu) if mig_utilization is not None else 0.0,
                mem_copy_util=float(mig_utilization.memory) if mig_utilization else 0.0,
                fb_used_mib=mig_memory.used // _MIB,
                fb_free_mib=mig_memory.free // _MIB,
                temperature_c=sample.temperature_c,
                sm_clock_mhz=sample.sm_clock_mhz,
                xid=xid,
                mig_profile=instance.profile,
                gpu_instance_id=instance.gpu_instance_id,
            )
        )
    instances.sort(key=lambda s: s.gpu_instance_id)
    return sample, instances


def read_samples(
    nvml: Nvml,
    inventory: NodeInventory,
    last_xid: Mapping[int, int],
    models: dict[int, str] | None = None,
) -> SampleRead:
    """A sample of every readable device of ``inventory`` and of its MIG instances.

    ``models`` caches NVML device names by index between calls (names do not change).
    """
    names = {} if models is None else models
    samples: list[DeviceSample] = []
    lost: list[int] = []
    for device in inventory.devices:
        handle = nvml.nvmlDeviceGetHandleByIndex(device.index)
        try:
            if device.index not in names:
                names[device.index] = nvml.nvmlDeviceGetName(handle)
            sample, instances = _device_sample(
                nvml, device, handle, names[device.index], last_xid.get(device.index, 0)
            )
        except NVMLError as error:
            if nvml_error_code(error) not in DEVICE_GONE_ERRORS:
                raise
            lost.append(device.index)
            continue
        samples.append(sample)
        samples.extend(instances)
    return SampleRead(tuple(samples), tuple(lost))
