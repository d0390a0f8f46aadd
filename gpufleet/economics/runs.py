"""What a pod held, in any world, as the cost report reads it: :class:`PodRun`.

Owns the plain record of one pod's hold on a node (which pod, whose, how much of which GPU
model, bought how, from when to when), how much GPU a placement holds (:func:`gpus_held`: a
share by its fraction, a MIG slice by its compute slices out of seven) and how a node is
bought, read from its labels (:func:`capacity_type`). A world makes the records: the control
plane from its book (:mod:`gpufleet.service.cost_holdings`), the simulator from its runs
(:mod:`gpufleet.backends.sim.costs`); pricing them is :mod:`gpufleet.economics.reports`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.economics.allocation import mig_fraction, milli_fraction
from gpufleet.model.capacity import CAPACITY_TYPE_LABEL, CapacityType
from gpufleet.model.gpu import GpuDevice
from gpufleet.model.node import Node

#: Node labels that say how a node is bought, in the order they are read, with their values
#: for spot and reserved capacity (any other value of a present label: on-demand).
#: gpufleet's own first; Karpenter's ``on-demand``/``spot``/``reserved``; EKS managed node
#: groups' ``ON_DEMAND``/``SPOT``/``CAPACITY_BLOCK``; GKE's Spot and preemptible VMs
#: (``"true"``); AKS spot node pools (``spot``).
CAPACITY_LABELS: tuple[tuple[str, Mapping[str, CapacityType]], ...] = (
    (CAPACITY_TYPE_LABEL, {"spot": CapacityType.SPOT, "reserved": CapacityType.RESERVED}),
    ("karpenter.sh/capacity-type", {"spot": CapacityType.SPOT, "reserved": CapacityType.RESERVED}),
    (
        "eks.amazonaws.com/capacityType",
        {"SPOT": CapacityType.SPOT, "CAPACITY_BLOCK": CapacityType.RESERVED},
    ),
    ("cloud.google.com/gke-spot", {"true": CapacityType.SPOT}),
    ("cloud.google.com/gke-preemptible", {"true": CapacityType.SPOT}),
    ("kubernetes.azure.com/scalesetpriority", {"spot": CapacityType.SPOT}),
)


def capacity_type(labels: Mapping[str, str]) -> CapacityType:
    """How a node with ``labels`` is bought (:data:`CAPACITY_LABELS`); on-demand when no
    label says."""
    for key, values in CAPACITY_LABELS:
        value = labels.get(key)
        if value is not None:
            return values.get(value.strip(), CapacityType.ON_DEMAND)
    return CapacityType.ON_DEMAND


@dataclass(frozen=True, slots=True)
class PodRun:
    """One pod's hold on a node from ``start`` to ``end`` (the world's clock), and whose it is.
    ``gpus``: the part of GPUs of ``gpu_model`` it held (a share by its fraction, a MIG slice
    by its compute slices out of seven); ``running``: it still holds them now."""

    workload: str
    name: str
    namespace: str
    pod: str
    node: str
    start: float
    end: float
    running: bool
    gpus: float = 0.0
    gpu_model: str = ""
    capacity: CapacityType = CapacityType.ON_DEMAND
    cpu: float = 0.0
    memory_gib: float = 0.0
    queue: str = ""
    tenant: str = ""
    kind: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The workload's key (``namespace/name``)."""
        return self.workload


def gpus_held(
    gpu_milli: int, mig_slices: Sequence[tuple[int, int]], node: Node | None
) -> tuple[float, str]:
    """The part of GPUs a placement holds (``gpu_milli`` milli-GPU and the ``(gpu index,
    slot)`` MIG slices of ``node``) and their model (the node's, where it is known)."""
    gpus = milli_fraction(gpu_milli)
    model = node.gpu_model if node is not None else None
    for index, slot in mig_slices:
        device = _device(node, index)
        if device is None:
            continue
        model = device.model
        profile = next((s.profile for s in device.mig_slices if s.slot == slot), None)
        if profile is not None:
            gpus += mig_fraction(profile)
    if gpus <= 0:
        return 0.0, ""
    return gpus, model or ""


def _device(node: Node | None, index: int) -> GpuDevice | None:
    if node is None:
        return None
    return next((gpu for gpu in node.gpus if gpu.index == index), None)
