"""What the scheduling core asks a backend to do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.model.placement import Placement
from gpufleet.model.pod import Pod


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
