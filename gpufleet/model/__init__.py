"""Plain data: nodes, GPU devices, pods, placements, workloads (gangs), queues, priority
classes, actions and events.

Everything here is a frozen dataclass holding integers (milli-CPU, MiB, milli-GPU). Parsing
files into these types lives in ``gpufleet.io``; computing with them lives in
``gpufleet.scheduling``.
"""

# The names below are imported when first used (PEP 562), not with the package: a program that
# needs one small module of the model (the CLI's time formats) does not build every dataclass.
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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

#: Each name of :data:`__all__` and the module of this package that defines it.
_HOMES: dict[str, str] = {
    "GFD_LABELS": "node",
    "GPU_RESOURCE": "gpu",
    "MILLI_PER_GPU": "gpu",
    "NO_SHARING": "gpu",
    "SHARED_GPU_RESOURCE": "gpu",
    "SHARE_RESOURCE": "gpu",
    "GpuDevice": "gpu",
    "GpuRequest": "pod",
    "GpuSharing": "gpu",
    "MigProfile": "gpu",
    "MigSlice": "gpu",
    "Node": "node",
    "NodeSelectorRequirement": "pod",
    "NodeSelectorTerm": "pod",
    "Placement": "placement",
    "Pod": "pod",
    "PodClass": "pod",
    "PodGroup": "workload",
    "PreemptionPolicy": "priorities",
    "PriorityClass": "priorities",
    "Queue": "queues",
    "ResourceQuota": "queues",
    "Resources": "resources",
    "SharingStrategy": "gpu",
    "Taint": "node",
    "TaintEffect": "node",
    "TimedPod": "workload",
    "TimedWorkload": "workload",
    "Toleration": "pod",
    "Workload": "workload",
    "gfd_labels": "node",
    "parse_mig_profile": "gpu",
}


# Hidden from the type checker, which would otherwise take any name of the package as valid.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*globals(), *_HOMES])
