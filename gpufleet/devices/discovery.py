"""What a node's GPUs are, read from NVML: the :class:`~gpufleet.model.inventory.NodeInventory`.

Owns :func:`discover` (every device: index, UUID, product in GPU Feature Discovery's label form,
memory, compute capability, PCI bus id, MIG mode and instances with their profile, ids,
placement and slot, NVLink peers; the driver and CUDA versions) and :func:`discover_fabric`
(the multi-node NVLink fabric, GFD's ``nvidia.com/gpu.clique``). A device that answers
GPU_IS_LOST while it is read is listed unhealthy with what could be read. It does not watch
health over time (:mod:`gpufleet.devices.health`) nor take samples.

Rules taken from the NVIDIA device plugin and GFD: the product label drops every character but
letters, digits, ``-``, ``_``, ``.`` and spaces and joins the words with ``-``
(``NVIDIA H100 80GB HBM3`` -> ``NVIDIA-H100-80GB-HBM3``); a MIG device's profile is named from
its GPU and compute instance profile indices and its memory (:mod:`gpufleet.devices.mig`);
the fabric is the one cluster UUID and clique id all fabric-attached devices agree on.
NVLink peers: an active link to a GPU names it by PCI bus id; links to NVSwitches make every
two GPUs that reach a common switch peers.
"""

from __future__ import annotations

import ctypes
import re
import uuid
from dataclasses import dataclass, replace
from typing import Any

import pynvml

from gpufleet.devices.mig import mig_profile
from gpufleet.devices.nvml import (
    DEVICE_GONE_ERRORS,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    Nvml,
    NVMLError,
    gone_reason,
    nvml_error_code,
)
from gpufleet.model.inventory import InventoryDevice, MigInstance, NodeInventory

_MIB = 1 << 20
_UNSUPPORTED = frozenset({NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT})
_NOT_THERE = frozenset({NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND})


def gfd_product(name: str) -> str:
    """GFD's product label value for an NVML device name."""
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", name).split())


def cuda_version(version: int) -> str:
    """``nvmlSystemGetCudaDriverVersion``'s 12040 -> ``12.4``."""
    return f"{version // 1000}.{version % 1000 // 10}"


def normalise_bus_id(bus_id: bytes | str) -> str:
    """``0000:1b:00.0`` or ``00000000:1B:00.0`` -> ``00000000:1B:00.0`` (NVML's long form)."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    domain, _, rest = text.strip().rpartition(":")
    domain, _, bus = domain.rpartition(":")
    return f"{int(domain or '0', 16):08X}:{bus.upper()}:{rest.upper()}"


def discover(nvml: Nvml) -> NodeInventory:
    """Every GPU of an initialised NVML, ordered by index."""
    devices = [_device(nvml, index) for index in range(nvml.nvmlDeviceGetCount())]
    peers = _nvlink_peers(nvml, [d.pci_bus_id for d in devices])
    return NodeInventory(
        devices=tuple(replace(d, nvlink_peers=peers[d.index]) for d in devices),
        driver_version=nvml.nvmlSystemGetDriverVersion(),
        cuda_driver_version=cuda_version(_cuda_driver_version(nvml)),
    )


def _cuda_driver_version(nvml: Nvml) -> int:
    try:
        return nvml.nvmlSystemGetCudaDriverVersion_v2()
    except NVMLError as error:
        if nvml_error_code(error) not in _NOT_THERE:
            raise
        return nvml.nvmlSystemGetCudaDriverVersion()


def _device(nvml: Nvml, index: int) -> InventoryDevice:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    device = InventoryDevice(
        index=index,
        uuid=nvml.nvmlDeviceGetUUID(handle),
        product=gfd_product(nvml.nvmlDeviceGetName(handle)),
        memory_mib=0,
        pci_bus_id=normalise_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId),
    )
    try:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        total = nvml.nvmlDeviceGetMemoryInfo(handle).total
        device = replace(device, memory_mib=total // _MIB, compute_major=major, compute_minor=minor)
        enabled = _mig_enabled(nvml, handle)
        instances = _mig_instances(nvml, handle, total) if enabled else ()
    except NVMLError as error:
        if nvml_error_code(error) not in DEVICE_GONE_ERRORS:
            raise
        return replace(device, healthy=False, reason=gone_reason(error))
    return replace(device, mig_enabled=enabled, mig=instances)


def _mig_enabled(nvml: Nvml, handle: Any) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except NVMLError as error:
        if nvml_error_code(error) not in _NOT_THERE:
            raise
        return False
    return bool(current == nvml.NVML_DEVICE_MIG_ENABLE)


def mig_device_handles(nvml: Nvml, handle: Any) -> list[Any]:
    handles = []
    for n in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            handles.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, n))
        except NVMLError as error:
            if nvml_error_code(error) != NVML_ERROR_NOT_FOUND:
                raise
    return handles


@dataclass(frozen=True, slots=True)
class _Found:
    uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    placement_start: int
    placement_size: int


def _mig_instances(nvml: Nvml, parent: Any, total_bytes: int) -> tuple[MigInstance, ...]:
    gpu_profiles = _gpu_profile_indices(nvml, parent)
    found: list[_Found] = []
    for mig in mig_device_handles(nvml, parent):
        gi_id = nvml.nvmlDeviceGetGpuInstanceId(mig)
        ci_id = nvml.nvmlDeviceGetComputeInstanceId(mig)
        gpu_instance = nvml.nvmlDeviceGetGpuInstanceById(parent, gi_id)
        gi_info = nvml.nvmlGpuInstanceGetInfo(gpu_instance)
        ci_info = nvml.nvmlComputeInstanceGetInfo(
            nvml.nvmlGpuInstanceGetComputeInstanceById(gpu_instance, ci_id)
        )
        profile = mig_profile(
            gpu_profiles[gi_info.profileId],
            _compute_profile_index(nvml, gpu_instance, ci_info.profileId),
            nvml.nvmlDeviceGetAttributes(mig).memorySizeMB,
            total_bytes,
        )
        found.append(
            _Found(
                nvml.nvmlDeviceGetUUID(mig),
                str(profile),
                gi_id,
                ci_id,
                gi_info.placement.start,
                gi_info.placement.size,
            )
        )
    found.sort(key=lambda f: (f.placement_start, f.gpu_instance_id, f.compute_instance_id))
    return tuple(
        MigInstance(
            profile=f.profile,
            uuid=f.uuid,
            slot=slot,
            gpu_instance_id=f.gpu_instance_id,
            compute_instance_id=f.compute_instance_id,
            placement_start=f.placement_start,
            placement_size=f.placement_size,
        )
        for slot, f in enumerate(found)
    )


def _gpu_profile_indices(nvml: Nvml, parent: Any) -> dict[int, int]:
    """GPU instance profile id -> profile index, over the profiles the device supports."""
    indices: dict[int, int] = {}
    for index in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            indices[nvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, index).id] = index
        except NVMLError as error:
            if nvml_error_code(error) not in _UNSUPPORTED:
                raise
    return indices


def _compute_profile_index(nvml: Nvml, gpu_instance: Any, profile_id: int) -> int:
    for index in range(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        for engines in range(nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT):
            try:
                info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gpu_instance, index, engines
                )
            except NVMLError as error:
                if nvml_error_code(error) not in _UNSUPPORTED:
                    raise
                continue
            if info.id == profile_id:
                return index
    raise ValueError(f"no compute instance profile has id {profile_id}")


def _links(nvml: Nvml, handle: Any) -> tuple[set[str], set[str]]:
    """(bus ids of GPUs, bus ids of NVSwitches) this device reaches over active links."""
    gpus: set[str] = set()
    switches: set[str] = set()
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            remote = normalise_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except NVMLError as error:
            # NOT_SUPPORTED: no NVLink at all; INVALID_ARGUMENT: past the device's last link.
            if nvml_error_code(error) in _UNSUPPORTED | DEVICE_GONE_ERRORS:
                break
            raise
        (switches if kind == nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH else gpus).add(remote)
    return gpus, switches


def _nvlink_peers(nvml: Nvml, bus_ids: list[str]) -> list[tuple[int, ...]]:
    links = [_links(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(len(bus_ids))]
    peers: list[tuple[int, ...]] = []
    for i, (gpus, switches) in enumerate(links):
        peers.append(
            tuple(
                j
                for j, (_, other_switches) in enumerate(links)
                if j != i and (bus_ids[j] in gpus or switches & other_switches)
            )
        )
    return peers


@dataclass(frozen=True, slots=True)
class Fabric:
    """The NVLink fabric a node's GPUs are attached to (multi-node NVLink: GB200 NVL72)."""

    cluster_uuid: str
    clique_id: int

    @property
    def clique(self) -> str:
        """GFD's ``nvidia.com/gpu.clique`` value: ``<cluster UUID>.<clique id>``."""
        return f"{self.cluster_uuid}.{self.clique_id}"


def _fabric_of(nvml: Nvml, handle: Any) -> Fabric | None:
    info = pynvml.c_nvmlGpuFabricInfo_t()
    try:
        nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    except AttributeError:
        return None  # an nvidia-ml-py without the call
    except NVMLError as error:
        if nvml_error_code(error) not in _NOT_THERE | DEVICE_GONE_ERRORS:
            raise
        return None
    cluster = bytes(info.clusterUuid)
    attached = (
        info.state == nvml.NVML_GPU_FABRIC_STATE_COMPLETED
        and info.status == pynvml.NVML_SUCCESS
        and any(cluster)
    )
    return Fabric(str(uuid.UUID(bytes=cluster)), int(info.cliqueId)) if attached else None


def discover_fabric(nvml: Nvml) -> Fabric | None:
    """The fabric every fabric-attached GPU agrees on; None without one, or if they differ."""
    fabrics = set()
    for index in range(nvml.nvmlDeviceGetCount()):
        fabric = _fabric_of(nvml, nvml.nvmlDeviceGetHandleByIndex(index))
        if fabric is not None:
            fabrics.add(fabric)
    return fabrics.pop() if len(fabrics) == 1 else None
