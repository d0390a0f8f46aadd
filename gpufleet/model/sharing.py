"""What a pod holds of a node's GPUs once placed: the one rule every world follows.

The kubelet admits a pod only if the node's allocatable of every extended resource covers the
sum over the pods bound there. So a node advertises *units* of one GPU resource
(``nvidia.com/gpu``, or ``nvidia.com/gpu.shared``), ``replicas`` per device
(:class:`~gpufleet.model.gpu.GpuSharing`), a pod asks for units (its ``nvidia.com/gpu`` limit,
:attr:`~gpufleet.model.pod.GpuRequest.units`), and gpufleet never binds more units to a node
than it advertises. Beside units, each device has 1000 milli-GPU, and a placed pod holds on
each device it gets:

=====================================  ==============  ========================  ===============
the pod asks                           no sharing      time-slicing / MPS (R)    HAMi split (R)
=====================================  ==============  ========================  ===============
``nvidia.com/gpu: N``                  N whole         N replicas, 1000/R each   N whole
a share with ``nvidia.com/gpu: 1``     1 whole device  its share, >= 1000/R      its share,
                                                                                 >= 1000/R
a share with no ``nvidia.com/gpu``     its share       its share                 its share
=====================================  ==============  ========================  ===============

A share is ``gpufleet.dev/gpu-milli`` and/or ``gpufleet.dev/gpu-memory`` (or HAMi's
``nvidia.com/gpucores`` / ``nvidia.com/gpumem``); a share given in memory is that fraction of the
device's memory, rounded up. Without sharing, the device plugin hands a pod asking for one unit
a whole device, so that is what it holds; with replicas, one unit is a replica, and a pod never
holds less than one (so a device takes at most about R such pods, as the plugin hands out R
replicas of it). A share that asks no unit is gpufleet's own: the kubelet counts nothing for it,
and it reaches its device through the ``gpufleet.dev/visible-devices`` hint. MIG slices are
resources of their own (``nvidia.com/mig-<profile>``) and hold no milli-GPU.

This module also owns the amount every view shows and charges for a pod
(:func:`held_gpu_milli`) and how a request is told before placement (:func:`describe_request`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gpufleet.model.gpu import MILLI_PER_GPU, GpuSharing
from gpufleet.model.pod import GpuRequest

#: Milli-GPU that no device can offer: a memory share on a device of unknown memory.
IMPOSSIBLE_MILLI = MILLI_PER_GPU + 1
_MIB_PER_GIB = 1024


def memory_share_milli(memory_mib: int, device_memory_mib: int) -> int:
    """Milli-GPU of ``memory_mib`` of GPU memory on a device of ``device_memory_mib``
    (rounded up; :data:`IMPOSSIBLE_MILLI` when the device's memory is unknown)."""
    if device_memory_mib <= 0:
        return IMPOSSIBLE_MILLI
    return -(-memory_mib * MILLI_PER_GPU // device_memory_mib)


def milli_per_device(request: GpuRequest, sharing: GpuSharing, device_memory_mib: int) -> int:
    """Milli-GPU ``request`` holds on each device it takes on a node with ``sharing`` and
    devices of ``device_memory_mib`` (more than :data:`MILLI_PER_GPU`: it cannot go there;
    0 for MIG slices and CPU-only pods). See the module docstring for the table."""
    if request.mig_profile is not None or request.count == 0:
        return 0
    if not request.is_shared:
        return sharing.whole_milli
    share = request.milli
    if request.memory_mib:
        share = max(share, memory_share_milli(request.memory_mib, device_memory_mib))
    if request.units:
        share = max(share, sharing.replica_milli)
    return share


def held_gpu_milli(milli_per_device: int, devices: int) -> int:
    """The GPU amount a placed pod holds, in milli-GPU: what every view shows and every
    quota charges for it."""
    return milli_per_device * devices


def format_gpus(milli: int) -> str:
    """Milli-GPU for people: ``2``, ``0.25``, ``0.667``."""
    return f"{round(milli / MILLI_PER_GPU, 3):g}"


def format_mib(mib: int) -> str:
    """``10240`` -> ``10Gi``, ``1536`` -> ``1536Mi``."""
    if mib and mib % _MIB_PER_GIB == 0:
        return f"{mib // _MIB_PER_GIB}Gi"
    return f"{mib}Mi"


def describe_request(request: GpuRequest) -> str:
    """What a pod asks for, as people write it, before it holds anything: ``2``, ``0.25``,
    ``10Gi`` (a share given in GPU memory), ``0.25+10Gi``, ``mig-1g.10gb``, ``2 mig-1g.10gb``,
    ``0`` (the amount, whichever GPU resource it asks units of)."""
    if request.mig_profile is not None:
        count = f"{request.mig_count} " if request.mig_count > 1 else ""
        return f"{count}mig-{request.mig_profile}"
    if not request.count:
        return "0"
    if not request.is_shared:
        return str(request.count)
    parts = []
    if request.milli:
        parts.append(format_gpus(request.milli))
    if request.memory_mib:
        parts.append(format_mib(request.memory_mib))
    return "+".join(parts)


def describe_requests(requests: Iterable[GpuRequest]) -> str:
    """What several pods ask for: ``4x1``, ``3x0.25+10Gi``, ``1x2, 2x0.5`` (each kind once, in
    the order first seen; a single pod without its count)."""
    counts = Counter(describe_request(r) for r in requests)
    if sum(counts.values()) == 1:
        return next(iter(counts))
    return ", ".join(f"{n}x{text}" for text, n in counts.items())
