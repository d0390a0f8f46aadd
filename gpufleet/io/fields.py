"""Unknown fields of gpufleet's own objects, refused with a hint at what was meant.

Owns :func:`check_fields` (the one check of a mapping's keys against the fields a format
knows), :func:`unknown_field` (its message: a did-you-mean from ``difflib`` or, for the names
of Kueue's ClusterQueue and LocalQueue API, where gpufleet keeps that setting) and the field
sets of the objects that are gpufleet's: Queue, the gpufleet PodGroup, and PriorityClass's top
level (Kubernetes' own fields, which ``kubectl apply`` also checks strictly). The readers call
it; it does not read any value.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any

from gpufleet.io.manifests import Context

#: The top level of an API object of gpufleet's (a Queue, a PodGroup).
OBJECT_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
PRIORITY_CLASS_FIELDS = (
    "apiVersion", "kind", "metadata", "value", "globalDefault", "description", "preemptionPolicy",
)  # fmt: skip
QUEUE_SPEC_FIELDS = (
    "parent", "quota", "borrowingLimit", "lendingLimit", "weight", "namespaces",
    "namespaceSelector", "priorityClasses", "preemption", "queueingStrategy", "gpuModels",
    "flavorFungibility", "budget",
)  # fmt: skip
QUEUE_BUDGET_FIELDS = ("gpuHours", "period", "warnAt", "action")
QUEUE_PREEMPTION_FIELDS = (
    "withinQueue", "withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort",
)  # fmt: skip
BORROW_WITHIN_COHORT_FIELDS = ("policy", "maxPriorityThreshold")
FLAVOR_FUNGIBILITY_FIELDS = ("whenCanBorrow", "whenCanPreempt")
POD_GROUP_SPEC_FIELDS = ("minMember", "queue", "priorityClassName")

_QUOTA = "spec.quota here (one map of resource to amount; a GPU model's as nvidia.com/gpu.<MODEL>)"
_NO_COUNTERPART = "has no counterpart in gpufleet"
#: Where a Queue keeps what Kueue's ClusterQueue (and LocalQueue) spell otherwise, by field.
KUEUE_SPEC_HINTS: dict[str, str] = {
    "nominalQuota": "Kueue's nominalQuota is spec.quota here",
    "resourceGroups": f"Kueue's resourceGroups are {_QUOTA}",
    "coveredResources": f"Kueue's coveredResources are the keys of {_QUOTA}",
    "flavors": (
        "Kueue's flavors are GPU models here: nvidia.com/gpu.<MODEL> keys of spec.quota, "
        "tried in the order of spec.gpuModels"
    ),
    "resources": f"Kueue's resources are {_QUOTA}",
    "cohort": "Kueue's cohort is spec.parent here (a queue's parent is its cohort)",
    "cohortName": "Kueue's cohortName is spec.parent here (a queue's parent is its cohort)",
    "fairSharing": "Kueue's fairSharing.weight is spec.weight here",
    "clusterQueue": (
        "a LocalQueue's clusterQueue has no counterpart: a workload names its Queue with the "
        "label gpufleet.dev/queue"
    ),
    "stopPolicy": f"Kueue's stopPolicy {_NO_COUNTERPART}",
    "admissionChecks": f"Kueue's admissionChecks {_NO_COUNTERPART}",
    "admissionChecksStrategy": f"Kueue's admissionChecksStrategy {_NO_COUNTERPART}",
    "admissionScope": f"Kueue's admissionScope {_NO_COUNTERPART}",
    **dict.fromkeys(
        ("withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"),
        "a preemption policy: it goes under spec.preemption",
    ),
    **dict.fromkeys(("whenCanBorrow", "whenCanPreempt"), "it goes under spec.flavorFungibility"),
}
KUEUE_PREEMPTION_HINTS: dict[str, str] = {
    **dict.fromkeys(
        ("policy", "maxPriorityThreshold"), "it goes under spec.preemption.borrowWithinCohort"
    ),
    **dict.fromkeys(
        ("whenCanBorrow", "whenCanPreempt"), "it goes under spec.flavorFungibility, not preemption"
    ),
}
#: Kueue's per-resource limits, met where gpufleet expects a resource name or an amount.
KUEUE_RESOURCE_LIMITS: dict[str, str] = {
    "nominalQuota": "Kueue's nominalQuota is spec.quota here",
    "borrowingLimit": "Kueue's per-resource borrowingLimit is spec.borrowingLimit here, a map "
    "beside spec.quota",
    "lendingLimit": "Kueue's per-resource lendingLimit is spec.lendingLimit here, a map beside "
    "spec.quota",
}


def unknown_field(key: str, known: Collection[str], hints: Mapping[str, str] | None = None) -> str:
    """The message for an unknown field ``key``: a hint, a did-you-mean, or what is known."""
    if hints and key in hints:
        return f"unknown field; {hints[key]}"
    by_lower = {name.lower(): name for name in known}
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
    if close:
        return f"unknown field; did you mean {by_lower[close[0]]!r}?"
    return f"unknown field (expected one of: {', '.join(known)})"


#: A metav1.LabelSelector's fields (a namespaceSelector, an affinity term's labelSelector).
LABEL_SELECTOR_FIELDS = ("matchLabels", "matchExpressions")


def check_fields(
    context: Context,
    mapping: Mapping[str, Any],
    path: str | None,
    known: Collection[str],
    hints: Mapping[str, str] | None = None,
) -> None:
    """Raise :class:`~gpufleet.io.errors.InputError` at the first key of ``mapping`` that
    ``known`` lacks."""
    for key in mapping:
        if key not in known:
            field = key if not path else f"{path}.{key}"
            raise context.error(field, unknown_field(key, known, hints))


def check_object_fields(
    context: Context, obj: Mapping[str, Any], spec_fields: Collection[str]
) -> None:
    """The top level of one of gpufleet's API objects (a spec field there belongs in spec)."""
    for key in obj:
        if key not in OBJECT_FIELDS:
            hint = {key: f"{key} belongs under spec"} if key in spec_fields else None
            raise context.error(key, unknown_field(key, OBJECT_FIELDS, hint))


def quota_value_hint(value: object) -> str | None:
    """Why an amount that is a mapping of Kueue's limits is not one here, if it is."""
    if isinstance(value, Mapping) and any(k in KUEUE_RESOURCE_LIMITS for k in value):
        return (
            "Kueue's per-resource nominalQuota, borrowingLimit and lendingLimit are three "
            "maps here: spec.quota, spec.borrowingLimit and spec.lendingLimit"
        )
    return None
