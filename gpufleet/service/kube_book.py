"""How the Kubernetes plane's book reads its pods' objects: a pod's state and placement, its
containers' restarts, a job's progress, where a pod runs in words, why a pod is unschedulable,
and when it was made. Pure functions of the API's dicts; grouping pods into workloads and the
events are :mod:`gpufleet.service.kube_plane`'s.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Sequence
from typing import Any

from gpufleet.io.kube.annotations import placement_from_annotations
from gpufleet.model import Placement
from gpufleet.service.kube_writes import COMPLETIONS_ANNOTATION
from gpufleet.service.records import (
    POD_FAILED,
    POD_PENDING,
    POD_RUNNING,
    POD_SUCCEEDED,
    JobProgress,
    PodRecord,
    WorkloadRecord,
)

Obj = dict[str, Any]


def pod_state(obj: Obj) -> tuple[str, Placement | None]:
    status = obj.get("status") or {}
    phase = status.get("phase")
    node = (obj.get("spec") or {}).get("nodeName")
    if phase == "Succeeded":
        return POD_SUCCEEDED, None
    if phase == "Failed":
        return POD_FAILED, None
    if not node:
        return POD_PENDING, None
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return POD_RUNNING, placement_from_annotations(str(node), annotations) or Placement(str(node))


def restarts(obj: Obj) -> int:
    """Restarts of a pod's containers (its kubelet's restartCount)."""
    status = obj.get("status") or {}
    counts = [
        c.get("restartCount") or 0
        for key in ("initContainerStatuses", "containerStatuses")
        for c in status.get(key) or ()
    ]
    return sum(int(n) for n in counts if isinstance(n, int))


def progress(kind: str, pods: Sequence[Obj], record: WorkloadRecord) -> JobProgress:
    """A job's progress as its pods show it: for a Job, succeeded pods of its completions (our
    annotation); failed pods; container restarts."""
    annotations = (pods[0].get("metadata") or {}).get("annotations") or {}
    completions = str(annotations.get(COMPLETIONS_ANNOTATION) or "")
    states = [p.state for p in record.pods.values()]
    return JobProgress(
        kind,
        completed=states.count(POD_SUCCEEDED) if kind == "Job" else 0,
        completions=int(completions) if completions.isdigit() else 0,
        failed_pods=states.count(POD_FAILED),
        restarts=sum(p.restarts for p in record.pods.values()),
    )


def where(pod: PodRecord) -> str:
    placement = pod.placement
    if placement is None:
        return "?"
    gpus = ",".join(str(i) for i in placement.gpu_indices)
    return placement.node + (f" GPU {gpus}" if gpus else "")


def unschedulable_message(pods: Sequence[Obj]) -> str | None:
    for obj in pods:
        for condition in (obj.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return str(condition.get("message") or condition.get("reason") or "")
    return None


def created(obj: Obj) -> float:
    text = (obj.get("metadata") or {}).get("creationTimestamp")
    if not text:
        return time.time()
    try:
        return float(calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return time.time()
