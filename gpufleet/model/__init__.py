"""Plain data: nodes, GPU devices, pods, placements, actions and events.

Everything here is a frozen dataclass holding integers (milli-CPU, MiB, milli-GPU). Parsing
files into these types lives in ``gpufleet.io``; computing with them lives in
``gpufleet.scheduling``.
"""

from gpufleet.model.gpu import (
    GPU_RESOURCE,
    MILLI_PER_GPU,
    NO_SHARING,
    SHARED_GPU_RESOURCE,
    GpuDevice,
    GpuSharing,
    MigProfile,
    MigSlice,
    SharingStrategy,
    parse_mig_profile,
)
from gpufleet.model.node import GFD_LABELS, Node, Taint, TaintEffect, gfd_labels
from gpufleet.model.placement import Placement
from gpufleet.model.pod import (
    GpuRequest,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodClass,
    Toleration,
)

__all__ = [
    "GFD_LABELS",
    "GPU_RESOURCE",
    "MILLI_PER_GPU",
    "NO_SHARING",
    "SHARED_GPU_RESOURCE",
    "GpuDevice",
    "GpuRequest",
    "GpuSharing",
    "MigProfile",
    "MigSlice",
    "Node",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Placement",
    "Pod",
    "PodClass",
    "SharingStrategy",
    "Taint",
    "TaintEffect",
    "Toleration",
    "gfd_labels",
    "parse_mig_profile",
]
