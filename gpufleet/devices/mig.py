"""MIG profile names (``1g.10gb``, ``1c.3g.40gb``, ``1g.10gb+me``), as the NVIDIA device plugin
and ``nvidia-smi`` write them.

Owns the naming rule and its inverse. The device plugin (go-nvlib's ``MigProfileInfo``) names
a MIG device from three things NVML reports: the *index* of its GPU instance profile
(``NVML_GPU_INSTANCE_PROFILE_3_SLICE`` ...: the ``g`` count and attributes such as ``+me``),
the *index* of its compute instance profile (the ``c`` count, written only when it differs
from ``g``), and its memory rounded to eighths of the device, in whole GB of the device's
rounded-up size. The device plugin then writes ``+`` as ``.`` in resource names
(``nvidia.com/mig-1g.10gb.me``): :func:`mig_resource_suffix`. Reading NVML is
:mod:`gpufleet.devices.discovery`'s job; this module only computes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pynvml

_MIB = 1 << 20
_GIB = 1 << 30

#: GPU instance profile index -> (GPU slices, attributes, negated attributes).
GPU_INSTANCE_PROFILES: dict[int, tuple[int, tuple[str, ...], tuple[str, ...]]] = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (1, (), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: (1, ("me",), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: (1, (), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX: (1, ("gfx",), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME: (1, (), ("me",)),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: (1, ("me.all",), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (2, (), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1: (2, ("me",), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX: (2, ("gfx",), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME: (2, (), ("me",)),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: (2, ("me.all",), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: (3, (), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: (4, (), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX: (4, ("gfx",), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_6_SLICE: (6, (), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: (7, (), ()),
    pynvml.NVML_GPU_INSTANCE_PROFILE_8_SLICE: (8, (), ()),
}

#: Compute instance profile index -> compute slices.
COMPUTE_INSTANCE_PROFILES: dict[int, int] = {
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1: 1,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE: 6,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL: 7,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE: 8,
}

#: CUDA compute capabilities of the GPUs that support MIG: A100/A30 (8.0), H100/H200/GH200
#: (9.0), B200/GB200 (10.0). The A10, A40, L4, L40S (8.6, 8.9) do not.
MIG_CAPABLE_COMPUTE = frozenset({(8, 0), (9, 0), (10, 0)})

_EIGHTHS = 8


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A parsed MIG profile name."""

    compute_slices: int
    gpu_slices: int
    memory_gb: int
    attributes: tuple[str, ...] = ()
    negated_attributes: tuple[str, ...] = ()

    def __str__(self) -> str:
        suffix = ""
        if self.attributes:
            suffix = "+" + ",".join(self.attributes)
        if self.negated_attributes:
            suffix = "-" + ",".join(self.negated_attributes)
        if self.compute_slices == self.gpu_slices:
            return f"{self.gpu_slices}g.{self.memory_gb}gb{suffix}"
        return f"{self.compute_slices}c.{self.gpu_slices}g.{self.memory_gb}gb{suffix}"


def device_memory_gb(device_memory_bytes: int) -> int:
    """The device's memory in whole GB, rounded up (80 for an H100's 79.6 GiB)."""
    return (device_memory_bytes + _GIB - 1) // _GIB


def memory_eighths(mig_memory_mib: int, device_memory_bytes: int) -> int:
    """The instance's memory in eighths of the device, rounded up (MIG memory slices)."""
    return math.ceil(mig_memory_mib * _MIB / device_memory_bytes * _EIGHTHS)


def mig_memory_gb(mig_memory_mib: int, device_memory_bytes: int) -> int:
    """The ``gb`` of a profile name: eighths of the device times its rounded-up GB."""
    fraction = memory_eighths(mig_memory_mib, device_memory_bytes) / _EIGHTHS
    return round(fraction * device_memory_gb(device_memory_bytes))


def mig_profile(
    gpu_profile_index: int,
    compute_profile_index: int,
    mig_memory_mib: int,
    device_memory_bytes: int,
) -> MigProfile:
    """The profile of a MIG device; ValueError for a profile index NVML does not define."""
    try:
        gpu_slices, attributes, negated = GPU_INSTANCE_PROFILES[gpu_profile_index]
    except KeyError:
        raise ValueError(f"unknown GPU instance profile index {gpu_profile_index}") from None
    try:
        compute_slices = COMPUTE_INSTANCE_PROFILES[compute_profile_index]
    except KeyError:
        raise ValueError(
            f"unknown compute instance profile index {compute_profile_index}"
        ) from None
    return MigProfile(
        compute_slices,
        gpu_slices,
        mig_memory_gb(mig_memory_mib, device_memory_bytes),
        attributes,
        negated,
    )


_PROFILE = re.compile(
    r"^(?:(?P<c>[1-9]\d*)c\.)?(?P<g>[1-9]\d*)g\.(?P<gb>[1-9]\d*)gb"
    r"(?:(?P<sign>[+-])(?P<attrs>[a-z][a-z0-9.]*(?:,[a-z][a-z0-9.]*)*))?$"
)


def parse_mig_profile(name: str) -> MigProfile:
    """``3g.40gb`` -> MigProfile; ValueError naming the expected form otherwise."""
    match = _PROFILE.match(name)
    if match is None:
        raise ValueError(
            f"{name!r} is not a MIG profile (expected [Cc.]Gg.NNgb[+attr], e.g. 3g.40gb)"
        )
    gpu_slices = int(match["g"])
    attrs = tuple(match["attrs"].split(",")) if match["attrs"] else ()
    return MigProfile(
        compute_slices=int(match["c"] or gpu_slices),
        gpu_slices=gpu_slices,
        memory_gb=int(match["gb"]),
        attributes=attrs if match["sign"] == "+" else (),
        negated_attributes=attrs if match["sign"] == "-" else (),
    )


def mig_resource_suffix(profile: str) -> str:
    """The device plugin's resource name part: ``nvidia.com/mig-`` + this (``+`` -> ``.``)."""
    return profile.replace("+", ".")
