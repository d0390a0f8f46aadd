"""Which devices a process sees, and the environment that says so: one rule for every runner.

Owns the names of the variables and the pure functions that fill them, shared by the node
agent's answer to the kubelet (:mod:`gpufleet.agent.allocation`) and the local machine's
processes (:mod:`gpufleet.backends.local`):

* a placement's GPU indices -> the devices' UUIDs, and its MIG slices (``(gpu, slot)``) -> the
  MIG instances' UUIDs (:func:`gpu_uuids`, :func:`mig_uuids`, :func:`mig_instance`): a device
  or slot the inventory lacks (or a MIG-enabled GPU asked for whole) is a
  :class:`DeviceNotFoundError`;
* the limits the CUDA MPS server honours for a share of ``milli`` per device
  (:func:`mps_limits`): ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (the share in percent, rounded
  up, at least 1) and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``<n>=<MiB>M`` per visible device
  ``n``, the share of its memory).

Pure: no NVML, no files. It does not decide which devices a pod gets (the scheduler does).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from gpufleet.model.gpu import MILLI_PER_GPU
from gpufleet.model.inventory import MigInstance, NodeInventory

VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
CUDA_VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
GPU_MILLI_ENV = "GPUFLEET_GPU_MILLI"
MPS_THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"


class DeviceNotFoundError(ValueError):
    """A placement names a device (or MIG slot) this node's inventory does not serve."""


def mig_instance(inventory: NodeInventory, gpu_index: int, slot: int) -> MigInstance | None:
    """The MIG instance at ``slot`` of device ``gpu_index`` (the scheduler's ``gpu:slot``)."""
    device = inventory.device(gpu_index)
    if device is None:
        return None
    return next((m for m in device.mig if m.slot == slot), None)


def gpu_uuids(inventory: NodeInventory, gpu_indices: Iterable[int]) -> tuple[str, ...]:
    """The UUIDs of the whole (or shared) GPUs ``gpu_indices``, in that order."""
    uuids = []
    for index in gpu_indices:
        device = inventory.device(index)
        if device is None or device.mig_enabled:
            raise DeviceNotFoundError(f"GPU {index}, which serves no GPU")
        uuids.append(device.uuid)
    return tuple(uuids)


def mig_uuids(inventory: NodeInventory, slices: Iterable[tuple[int, int]]) -> tuple[str, ...]:
    """The UUIDs of the MIG instances at ``(gpu, slot)``, in that order."""
    uuids = []
    for gpu, slot in slices:
        instance = mig_instance(inventory, gpu, slot)
        if instance is None:
            raise DeviceNotFoundError(f"MIG slot {gpu}:{slot}, which is absent")
        uuids.append(instance.uuid)
    return tuple(uuids)


def mps_limits(devices: Sequence[str], milli: int, memory_mib: Mapping[str, int]) -> dict[str, str]:
    """MPS's limits for a share of ``milli`` on each of ``devices`` (UUIDs, in the order the
    process sees them; ``memory_mib``: each device's memory)."""
    return {
        MPS_THREADS_ENV: str(max(1, math.ceil(milli / 10))),
        MPS_MEMORY_ENV: ",".join(
            f"{n}={memory_mib.get(uuid, 0) * milli // MILLI_PER_GPU}M"
            for n, uuid in enumerate(devices)
        ),
    }
