"""GPU devices, MIG slices, and how a node's device plugin advertises its GPUs.

A GPU is counted in milli-GPU (1000 = one whole device). A device may be partitioned into MIG
slices, as the NVIDIA device plugin's *mixed* strategy advertises them
(``nvidia.com/mig-1g.10gb``, ``nvidia.com/mig-3g.40gb``, ...); a partitioned device is then only
usable through its slices, never whole or shared.

:class:`GpuSharing` says what the device plugin advertises for the other devices: units of one
extended resource (``nvidia.com/gpu``, or ``nvidia.com/gpu.shared`` when time-slicing renames
it), ``replicas`` of them per device. What a pod holds of them is :mod:`gpufleet.model.sharing`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

MILLI_PER_GPU = 1000
#: The extended resource the NVIDIA device plugin advertises GPUs as.
GPU_RESOURCE = "nvidia.com/gpu"
#: What time-slicing or MPS advertises instead with ``renameByDefault: true``.
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
GPU_RESOURCES = (GPU_RESOURCE, SHARED_GPU_RESOURCE)
#: The extended resource gpufleet's node agent advertises for GPU shares: a fixed number of
#: share slots per (not MIG-partitioned) GPU. A share pod asks for exactly one in its limits
#: (so that the kubelet calls the agent's Allocate for it) and says its size with the
#: ``gpufleet.dev/gpu-milli`` or ``gpufleet.dev/gpu-memory`` annotation; the device it uses is
#: the one the scheduler chose. Nodes advertise it as any extended resource.
SHARE_RESOURCE = "gpufleet.dev/gpu-share"
#: Compute slices of one MIG-capable GPU (A100, H100, H200, B200 all have seven).
MIG_COMPUTE_SLICES = 7

_MIG_PROFILE = re.compile(r"^(?P<g>[1-7])g\.(?P<mem>\d+)gb(?:\+me)?$")


#: Prefixes of GPU product names that name no model (GPU Feature Discovery writes
#: ``NVIDIA-H100-80GB-HBM3`` and ``Tesla-T4``; nvidia-smi ``NVIDIA A100-SXM4-40GB``).
_VENDOR_PREFIXES = ("nvidia-", "tesla-", "geforce-", "quadro-")


# A cluster has a handful of model and product names; compiling a pod's demand asks for them
# over and over.
@lru_cache(maxsize=4096)
def canonical_model(name: str) -> str:
    """A GPU model or product name as :func:`model_matches` compares it: lower case, ``-`` for
    spaces and underscores, vendor prefixes dropped (``NVIDIA-H100-80GB-HBM3`` ->
    ``h100-80gb-hbm3``)."""
    text = re.sub(r"[\s_]+", "-", name.strip().lower())
    changed = True
    while changed:
        changed = False
        for prefix in _VENDOR_PREFIXES:
            if text.startswith(prefix) and len(text) > len(prefix):
                text = text[len(prefix) :]
                changed = True
    return text


def model_matches(name: str, product: str) -> bool:
    """Does the short model ``name`` a user writes (``H100``, ``A100-80GB``, ``T4``) cover the
    GPU ``product`` a node reports (``NVIDIA-H100-80GB-HBM3``, ``NVIDIA-A100-SXM4-80GB``,
    ``Tesla-T4``)? Case-insensitively, once vendor prefixes are dropped: the product is the name
    or starts with it followed by ``-`` (so ``A10`` does not cover ``A100-SXM4-40GB``, and
    ``A100-80GB`` does not cover ``A100-SXM4-80GB``: name the variant as the product does)."""
    short, full = canonical_model(name), canonical_model(product)
    return full == short or full.startswith(short + "-")


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG profile name such as ``3g.40gb``: compute slices and memory."""

    name: str
    compute_slices: int
    memory_gb: int


def parse_mig_profile(name: str) -> MigProfile:
    """Parse ``1g.10gb`` (or ``nvidia.com/mig-1g.10gb``) into a :class:`MigProfile`."""
    bare = name.removeprefix("nvidia.com/mig-")
    match = _MIG_PROFILE.match(bare)
    if match is None:
        raise ValueError(f"not a MIG profile: {name!r} (expected e.g. '1g.10gb' or '3g.40gb')")
    return MigProfile(bare, int(match["g"]), int(match["mem"]))


@dataclass(frozen=True, slots=True)
class MigSlice:
    """One MIG instance on a GPU: its profile and its slot on that device."""

    profile: str
    slot: int


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU of a node. ``mig_slices`` non-empty means the device is MIG-partitioned.

    ``uuid`` is NVML's (``GPU-8f2c...``; empty where nothing reports it). ``healthy`` False: the
    node's agent saw the device fail (an XID, ECC errors, lost): nothing new is placed on it
    (nor on its MIG slices) until it is healthy again. Both take part in equality, so that a
    node whose devices changed health is a changed node
    (:func:`gpufleet.model.node.same_but_health` tells that change apart).
    """

    index: int
    model: str
    memory_mib: int
    mig_slices: tuple[MigSlice, ...] = ()
    uuid: str = ""
    healthy: bool = True

    @property
    def partitioned(self) -> bool:
        return bool(self.mig_slices)


class SharingStrategy(StrEnum):
    """How a node's device plugin shares its GPUs (GFD's ``nvidia.com/gpu.sharing-strategy``,
    plus HAMi's ``split``)."""

    NONE = "none"
    TIME_SLICING = "time-slicing"
    MPS = "mps"
    #: HAMi: ``deviceSplitCount`` units per device; a unit is a whole device unless the pod
    #: asks for a share (``nvidia.com/gpumem``, ``nvidia.com/gpucores``).
    SPLIT = "split"


@dataclass(frozen=True, slots=True)
class GpuSharing:
    """What a node advertises per (not MIG-partitioned) device: ``replicas`` units of
    ``resource``. Without sharing, one ``nvidia.com/gpu`` per device."""

    strategy: SharingStrategy = SharingStrategy.NONE
    replicas: int = 1
    resource: str = GPU_RESOURCE
    #: The device plugin's ``failRequestsGreaterThanOne``: a pod may ask for one unit only.
    one_unit_per_pod: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.replicas <= MILLI_PER_GPU:
            raise ValueError(
                f"replicas per GPU must be from 1 to {MILLI_PER_GPU}, got {self.replicas}"
            )
        if self.strategy is SharingStrategy.NONE and (
            self.replicas != 1 or self.resource != GPU_RESOURCE or self.one_unit_per_pod
        ):
            raise ValueError("a node without GPU sharing advertises one nvidia.com/gpu per GPU")
        if self.resource not in GPU_RESOURCES:
            raise ValueError(
                f"GPU resource must be one of {', '.join(GPU_RESOURCES)}, got {self.resource!r}"
            )

    @property
    def time_sliced(self) -> bool:
        """Every unit is a replica: a pod asking ``nvidia.com/gpu: 1`` gets a slice of a device."""
        return self.strategy in (SharingStrategy.TIME_SLICING, SharingStrategy.MPS)

    @property
    def replica_milli(self) -> int:
        """The least a pod holding one unit holds of its device: the whole device without
        sharing, 1/replicas of it (rounded down) with sharing."""
        return MILLI_PER_GPU // self.replicas

    @property
    def whole_milli(self) -> int:
        """What each unit of a plain ``nvidia.com/gpu: N`` request holds of its device."""
        return self.replica_milli if self.time_sliced else MILLI_PER_GPU


NO_SHARING = GpuSharing()
