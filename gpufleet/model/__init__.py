"""Plain data: nodes, GPU devices, pods, placements, actions and events.

Everything here is a frozen dataclass holding integers (milli-CPU, MiB, milli-GPU). Parsing
files into these types lives in ``gpufleet.io``; computing with them lives in
``gpufleet.scheduling``.
"""

from gpufleet.model.gpu import MILLI_PER_GPU, GpuDevice, MigProfile, MigSlice, parse_mig_profile
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
    "MILLI_PER_GPU",
    "GpuDevice",
    "GpuRequest",
    "MigProfile",
    "MigSlice",
    "Node",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Placement",
    "Pod",
    "PodClass",
    "Taint",
    "TaintEffect",
    "Toleration",
    "gfd_labels",
    "parse_mig_profile",
]
