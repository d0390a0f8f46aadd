"""Plain data: nodes, GPU devices, pods, placements, workloads (gangs), queues, priority
classes, actions and events.

Everything here is a frozen dataclass holding integers (milli-CPU, MiB, milli-GPU). Parsing
files into these types lives in ``gpufleet.io``; computing with them lives in
``gpufleet.scheduling``.
"""

from gpufleet.model.gpu import (
    GPU_RESOURCE,
    MILLI_PER_GPU,
    NO_SHARING,
    SHARE_RESOURCE,
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
from gpufleet.model.priorities import PreemptionPolicy, PriorityClass
from gpufleet.model.queues import Queue, ResourceQuota
from gpufleet.model.resources import Resources
from gpufleet.model.workload import PodGroup, TimedPod, TimedWorkload, Workload

__all__ = [
    "GFD_LABELS",
    "GPU_RESOURCE",
    "MILLI_PER_GPU",
    "NO_SHARING",
    "SHARED_GPU_RESOURCE",
    "SHARE_RESOURCE",
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
    "PodGroup",
    "PreemptionPolicy",
    "PriorityClass",
    "Queue",
    "ResourceQuota",
    "Resources",
    "SharingStrategy",
    "Taint",
    "TaintEffect",
    "TimedPod",
    "TimedWorkload",
    "Toleration",
    "Workload",
    "gfd_labels",
    "parse_mig_profile",
]
