"""What the scheduling core asks a backend to do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.model.placement import Placement
from gpufleet.model.pod import Pod
from gpufleet.model.workload import split_workload_key

#: How a victim is told of a preemptor in another namespace (another tenant's business).
PREEMPTOR_ELSEWHERE = "a workload of another namespace"


@dataclass(frozen=True, slots=True)
class Bind:
    """Run ``pod`` on ``placement`` (the core has already assumed it)."""

    pod: Pod
    placement: Placement


@dataclass(frozen=True, slots=True)
class MarkUnschedulable:
    """Tell users why ``pod`` waits (``PodScheduled=False``, reason ``Unschedulable``)."""

    pod: Pod
    message: str
    reasons: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Evict:
    """Stop ``pod`` (it goes back to waiting); ``preemptor`` names the workload it makes room
    for, if any."""

    pod: Pod
    reason: str
    preemptor: str | None = None


Action = Bind | MarkUnschedulable | Evict


def told_to_victim(
    reason: str, preemptor: str | None, victim_namespace: str
) -> tuple[str | None, str]:
    """The preemptor and reason as the victim's owner may read them: a preemptor of the
    victim's own namespace by its key; one of another namespace only as
    :data:`PREEMPTOR_ELSEWHERE`, in the reason too (kube-scheduler likewise names no other
    namespace's pod to a victim, only an opaque UID). The core's own records keep the key."""
    if preemptor is None or split_workload_key(preemptor)[0] == victim_namespace:
        return preemptor, reason
    return PREEMPTOR_ELSEWHERE, reason.replace(preemptor, PREEMPTOR_ELSEWHERE)
