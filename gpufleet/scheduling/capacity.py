"""What a workload says about the capacity it should run on: :func:`capacity_need`.

Three answers (:class:`CapacityNeed`), read from the workload and its pod:

* **fault-tolerant**: the work survives an interruption, so cheap interruptible capacity
  (spot) suits it (the seeds' guides: "spot instances for fault-tolerant training jobs with
  checkpointing"). A pod says so by tolerating a spot taint (``gpufleet.dev/capacity-type=spot``,
  which gpufleet's spot pools carry, or the spot label of Karpenter, EKS, GKE or AKS node pools
  used as a taint: the keys and spot values of
  :data:`~gpufleet.economics.runs.CAPACITY_LABELS`), by selecting spot nodes (a
  ``nodeSelector`` such as ``cloud.google.com/gke-preemptible: "true"``, which is how the seeds'
  orchestration guide writes its "spot tolerance"), or its workload by declaring a checkpoint
  interval (``gpufleet.dev/checkpoint-interval``: it loses at most that much work);
* **critical**: an interruption is what it must not suffer: the workload is not preemptible
  (``gpufleet.dev/preemptible: "false"``), or it is *inference-critical*: its priority is at
  least :data:`INFERENCE_CRITICAL_PRIORITY`, the value of the ``inference-critical``
  PriorityClass of the seeds' guide and of ``examples/tenancy/priorities.yaml`` ("production
  inference endpoints"); classes above it (``system-cluster-critical``) count too. Critical
  wins over fault-tolerant: a checkpointing job that must not be preempted is still one that
  must not be;
* **any**: neither.

A blanket toleration (``operator: Exists`` with no key) tolerates every taint and says nothing
about spot, so it does not count. Used by placement (the ``capacity-type`` score plugin) and by
the node-pool autoscaler (critical work is not given spot nodes).
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache

from gpufleet.economics.runs import CAPACITY_LABELS, capacity_type
from gpufleet.model.capacity import CapacityType
from gpufleet.model.node import Taint, TaintEffect
from gpufleet.model.pod import Pod, Toleration
from gpufleet.model.workload import Workload
from gpufleet.scheduling.demand import tolerates

#: The priority at and above which a workload is inference-critical.
INFERENCE_CRITICAL_PRIORITY = 1_000_000

#: Taints that keep pods off spot nodes: each capacity label's spot value, as a taint.
SPOT_TAINTS: tuple[Taint, ...] = tuple(
    Taint(key, value, TaintEffect.NO_SCHEDULE)
    for key, values in CAPACITY_LABELS
    for value, capacity in values.items()
    if capacity is CapacityType.SPOT
)


class CapacityNeed(StrEnum):
    """See the module docstring."""

    ANY = "any"
    FAULT_TOLERANT = "fault-tolerant"
    CRITICAL = "critical"


def capacity_need(workload: Workload, pod: Pod) -> CapacityNeed:
    """What ``pod`` of ``workload`` says about the capacity it should run on."""
    if not workload.preemptible or workload.priority >= INFERENCE_CRITICAL_PRIORITY:
        return CapacityNeed.CRITICAL
    if workload.checkpoint_interval is not None or _accepts_spot(
        pod.tolerations, pod.node_selector
    ):
        return CapacityNeed.FAULT_TOLERANT
    return CapacityNeed.ANY


def tolerates_spot(tolerations: tuple[Toleration, ...]) -> bool:
    """Does one of ``tolerations`` name a spot taint (a blanket toleration does not count)?"""
    return any(
        toleration.key is not None and tolerates(toleration, taint)
        for toleration in tolerations
        for taint in SPOT_TAINTS
    )


@lru_cache(maxsize=1024)
def _accepts_spot(
    tolerations: tuple[Toleration, ...], node_selector: tuple[tuple[str, str], ...]
) -> bool:
    # Cached per (tolerations, selector): pods of one shape share them, and this runs for every
    # pod placed.
    if tolerates_spot(tolerations):
        return True
    return any(capacity_type({key: value}) is CapacityType.SPOT for key, value in node_selector)


__all__ = [
    "INFERENCE_CRITICAL_PRIORITY",
    "SPOT_TAINTS",
    "CapacityNeed",
    "capacity_need",
    "tolerates_spot",
]
