"""The pod annotations by which the node autoscalers are told to leave a pod running, read as
gpufleet's own "never evict it", and written by gpufleet on the pods of a gang it binds.

Read (where defined):

* ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`` (Cluster Autoscaler: a pod so
  annotated blocks the scale-down of its node; only the exact value ``false`` counts, as there);
* ``karpenter.sh/do-not-disrupt: "true"`` (Karpenter v0.32+: blocks the voluntary disruption
  of its node: consolidation, drift) and ``karpenter.sh/do-not-evict: "true"`` (its name before
  v0.32). Karpenter also takes a duration there (protected that long after the pod starts);
  gpufleet reads only ``"true"``, for good: a duration is left to Karpenter.

:func:`protection` says which of them protects a pod. gpufleet honours it in its own
disruptions: a protected workload is not preemptible (never a preemption victim, and run within
its queue's nominal quota, as ``gpufleet.dev/preemptible: "false"``, unless that annotation says
otherwise: gpufleet's own word on preemption wins), and an idle policy does not stop, scale to
zero or lower it.

Written: :func:`gang_guard`, the annotations gpufleet adds to each pod of a gang as it binds it
(``safe-to-evict: "false"`` and ``do-not-disrupt: "true"``, where the pod does not say
otherwise), so that neither autoscaler scales down or consolidates a node under a running gang
and takes one of its pods: a gang that loses a pod loses all its work, while a lone pod's
controller just starts it again elsewhere. Lone pods are left to the autoscalers. What gpufleet
wrote is listed in :data:`GUARD_ANNOTATION`, so that it is never read back as the user's own
protection (gpufleet may still preempt its gangs, and an idle policy stop them). A node that
goes away anyway (a spot interruption, an expiry) sends the whole gang away
(:mod:`.node_ends`).
"""

from __future__ import annotations

from collections.abc import Mapping

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DO_NOT_EVICT = "karpenter.sh/do-not-evict"
#: The annotation keys gpufleet set on the pod itself (comma-separated).
GUARD_ANNOTATION = "gpufleet.dev/disruption-guard"
#: Each protecting annotation and the exact value that protects.
PROTECTING: tuple[tuple[str, str], ...] = (
    (SAFE_TO_EVICT, "false"),
    (DO_NOT_DISRUPT, "true"),
    (DO_NOT_EVICT, "true"),
)
#: What gpufleet writes on a gang's pods.
GANG_GUARD: tuple[tuple[str, str], ...] = ((SAFE_TO_EVICT, "false"), (DO_NOT_DISRUPT, "true"))


def protecting_key(annotations: Mapping[str, object]) -> str | None:
    """The key of the first annotation (in :data:`PROTECTING` order) that protects a pod from
    disruption; None: none does (those gpufleet wrote itself do not count)."""
    ours = set(str(annotations.get(GUARD_ANNOTATION) or "").split(","))
    for key, value in PROTECTING:
        if annotations.get(key) == value and key not in ours:
            return key
    return None


def protection(annotations: Mapping[str, object]) -> str | None:
    """The annotation that protects a pod from disruption, as ``key: "value"`` (for messages);
    None: none does."""
    key = protecting_key(annotations)
    return None if key is None else f'{key}: "{dict(PROTECTING)[key]}"'


def gang_guard(annotations: Mapping[str, object]) -> dict[str, str]:
    """The annotations to add to a gang's pod that has ``annotations``: each of
    :data:`GANG_GUARD` it does not set itself, and :data:`GUARD_ANNOTATION` listing them
    (nothing when it sets them all, whatever to: its own word stands)."""
    added = {key: value for key, value in GANG_GUARD if key not in annotations}
    if not added:
        return {}
    return {**added, GUARD_ANNOTATION: ",".join(added)}
