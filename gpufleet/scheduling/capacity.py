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

from gpufleet.economics.runs import CAPACITY_LABELS, capacity_type
from gpufleet.model.capacity import CapacityNeed, CapacityType
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


def capacity_need(workload: Workload, pod: Pod) -> CapacityNeed:
    """What ``pod`` of ``workload`` says about the capacity it should run on."""
    return need_of(
        is_critical(workload), workload.checkpoint_interval is not None, accepts_spot(pod)
    )


def need_of(critical: bool, checkpointed: bool, spot_ok: bool) -> CapacityNeed:
    """The need of a pod of a ``critical`` workload (or not), of a ``checkpointed`` one, that
    accepts spot nodes itself (``spot_ok``: :func:`accepts_spot`)."""
    if critical:
        return CapacityNeed.CRITICAL
    if checkpointed or spot_ok:
        return CapacityNeed.FAULT_TOLERANT
    return CapacityNeed.ANY


def is_critical(workload: Workload) -> bool:
    """Must ``workload`` not be interrupted (not preemptible, or inference-critical)?"""
    return not workload.preemptible or workload.priority >= INFERENCE_CRITICAL_PRIORITY


def accepts_spot(pod: Pod) -> bool:
    """Does ``pod`` say it may run on spot nodes: a toleration of a spot taint, or a node
    selector on a spot label?"""
    if tolerates_spot(pod.tolerations):
        return True
    return any(capacity_type({key: value}) is CapacityType.SPOT for key, value in pod.node_selector)


def tolerates_spot(tolerations: tuple[Toleration, ...]) -> bool:
    """Does one of ``tolerations`` name a spot taint (a blanket toleration does not count)?"""
    return any(
        toleration.key is not None and tolerates(toleration, taint)
        for toleration in tolerations
        for taint in SPOT_TAINTS
    )


__all__ = [
    "INFERENCE_CRITICAL_PRIORITY",
    "SPOT_TAINTS",
    "CapacityNeed",
    "accepts_spot",
    "capacity_need",
    "is_critical",
    "need_of",
    "tolerates_spot",
]
