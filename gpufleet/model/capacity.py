"""How the capacity under a node is bought: on-demand, spot or reserved, and the label and
taint gpufleet's own nodes say it with.

Owns :class:`CapacityType` (the prices of :mod:`gpufleet.economics.prices`, the node pools of
:mod:`gpufleet.model.nodepools` and placement all speak of it, so it sits in the model), what a
workload needs of it (:class:`CapacityNeed`), the label ``gpufleet.dev/capacity-type`` and the
taint a spot pool puts on its nodes. Reading a node's capacity type from the labels clouds
write (Karpenter, EKS, GKE, AKS) is :func:`gpufleet.economics.runs.capacity_type`; reading a
workload's need is :func:`gpufleet.scheduling.capacity.capacity_need`.
"""

from __future__ import annotations

from enum import StrEnum

from gpufleet.model.node import Taint, TaintEffect


class CapacityType(StrEnum):
    """How the capacity under a workload is bought (Karpenter's ``karpenter.sh/capacity-type``
    spells the first two the same way)."""

    ON_DEMAND = "on-demand"
    SPOT = "spot"
    RESERVED = "reserved"


class CapacityNeed(StrEnum):
    """What a workload says about the capacity it should run on (how it is read:
    :func:`gpufleet.scheduling.capacity.capacity_need`): it survives an interruption
    (``fault-tolerant``: spot suits it), it must not be interrupted (``critical``: on-demand or
    reserved), or neither (``any``)."""

    ANY = "any"
    FAULT_TOLERANT = "fault-tolerant"
    CRITICAL = "critical"


#: The label gpufleet's node pools put on their nodes (``on-demand``, ``spot``, ``reserved``).
CAPACITY_TYPE_LABEL = "gpufleet.dev/capacity-type"

#: What a spot pool's nodes carry so that only pods that accept being interrupted land there
#: (AKS puts ``kubernetes.azure.com/scalesetpriority=spot:NoSchedule`` on its spot pools, and
#: GKE's documentation suggests ``cloud.google.com/gke-spot=true:NoSchedule``; gpufleet uses
#: its own label's key and value, so one toleration covers every gpufleet spot pool).
SPOT_TAINT = Taint(CAPACITY_TYPE_LABEL, CapacityType.SPOT.value, TaintEffect.NO_SCHEDULE)

__all__ = ["CAPACITY_TYPE_LABEL", "SPOT_TAINT", "CapacityNeed", "CapacityType"]
