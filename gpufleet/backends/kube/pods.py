"""What a Pod object means to the scheduler: waiting for it, bound somewhere, or nothing to it.

Owns the reading of a pod's lifecycle fields (kube-scheduler's view): a pod with
``spec.nodeName`` holds its node's resources until it is deleted or reaches a terminal phase
(Succeeded, Failed), terminating pods included; a pod without one waits for the scheduler its
``spec.schedulerName`` names, once its ``spec.schedulingGates`` are gone; a pod is ready when
its Ready condition is True; a pod labelled ``gpufleet.dev/preemptible: "true"`` (an idle
policy's ``Preemptible``) asks that its workload be lowered to preemptible. Also the gang a pod
belongs to (pod-group labels), whether a bound pod may be preempted
(``gpufleet.dev/preemptible``, else the autoscalers' do-not-disrupt annotations:
:mod:`gpufleet.io.kube.disruption`), and the minMember of PodGroup objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from gpufleet.io.kube.disruption import protection
from gpufleet.io.kube.workload_settings import PREEMPTIBLE_ANNOTATION
from gpufleet.model.idle import PREEMPTIBLE_LABEL
from gpufleet.model.workload import COSCHEDULING_POD_GROUP_LABEL, POD_GROUP_LABEL

DEFAULT_SCHEDULER = "default-scheduler"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class PodState(Enum):
    GONE = "gone"  # deleted, finished, or not ours and not bound: holds nothing
    BOUND = "bound"
    WAITING = "waiting"  # ours to schedule


def pod_state(obj: Mapping[str, Any] | None, scheduler_name: str) -> PodState:
    if obj is None:
        return PodState.GONE
    status = obj.get("status") or {}
    if status.get("phase") in TERMINAL_PHASES:
        return PodState.GONE
    spec = obj.get("spec") or {}
    if spec.get("nodeName"):
        return PodState.BOUND
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return PodState.GONE
    if (spec.get("schedulerName") or DEFAULT_SCHEDULER) == scheduler_name:
        return PodState.WAITING
    return PodState.GONE


def scheduling_gates(obj: Mapping[str, Any]) -> list[str]:
    """The names of the live pod's ``spec.schedulingGates``: while any is left kube-scheduler
    does not place it, and neither does gpufleet (its owner removes them by updating it)."""
    gates = (obj.get("spec") or {}).get("schedulingGates") or []
    if not isinstance(gates, list):
        return ["?"]
    return [str(g.get("name")) if isinstance(g, Mapping) else str(g) for g in gates]


def is_demoted(obj: Mapping[str, Any]) -> bool:
    """Whether the pod asks that its workload be lowered to preemptible (its label)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(PREEMPTIBLE_LABEL) == "true")


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = (obj.get("metadata") or {}).get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def is_preemptible(obj: Mapping[str, Any]) -> bool:
    """Whether a bound pod may be preempted, as its workload was read when it waited:
    ``gpufleet.dev/preemptible`` if it says true or false, else not if an autoscaler's
    annotation protects it."""
    annotations = annotations_of(obj)
    said = str(annotations.get(PREEMPTIBLE_ANNOTATION, "")).strip().lower()
    if said in ("true", "false"):
        return said == "true"
    return protection(annotations) is None


def is_ready(obj: Mapping[str, Any]) -> bool:
    status = obj.get("status") or {}
    for condition in status.get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return status.get("phase") == "Running"


def node_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("nodeName") or "")


def uid_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


#: The annotations by which Volcano's PodGroups claim their pods (KubeRay, the training and
#: MPI operators write the first with their Volcano integration).
VOLCANO_GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")


def pod_group(obj: Mapping[str, Any]) -> str | None:
    """The gang a pod joins: ours or the scheduler-plugins coscheduling label, else Volcano's
    group-name annotation; None for a pod of no gang."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    group = labels.get(POD_GROUP_LABEL) or labels.get(COSCHEDULING_POD_GROUP_LABEL)
    if not group:
        annotations = metadata.get("annotations") or {}
        group = next(
            (annotations[k] for k in VOLCANO_GROUP_ANNOTATIONS if annotations.get(k)), None
        )
    return str(group) if group else None


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")


def min_member(obj: Mapping[str, Any]) -> int | None:
    """A PodGroup's ``spec.minMember`` when it is a whole number >= 1, else None."""
    value = (obj.get("spec") or {}).get("minMember")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value
