"""Priority classes: Kubernetes' named priorities, and whether a workload may preempt.

A workload carries the value and policy of its class (:class:`~gpufleet.model.workload.Workload`
``priority``, ``preemption_policy``); resolving a class's name is io's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

#: The lowest priority a workload can have (a 32-bit priority's least): the priority of a
#: workload lowered to preemptible (an idle policy's ``Preemptible``, a spent ``Preemptible``
#: budget), below every priority class, so that any waiting workload may preempt it.
LOWEST_PRIORITY = -(2**31)
#: The highest value a PriorityClass not named ``system-...`` may have (Kubernetes'
#: ``HighestUserDefinablePriority``).
HIGHEST_USER_PRIORITY = 1_000_000_000


class PreemptionPolicy(StrEnum):
    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """Kubernetes ``scheduling.k8s.io/v1`` PriorityClass."""

    name: str
    value: int
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    global_default: bool = False
