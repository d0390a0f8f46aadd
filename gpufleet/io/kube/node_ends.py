"""The taints by which Kubernetes, its autoscalers and the clouds announce that a node is going
away, read off a Node: which keep new pods off it (and the reason ``explain`` gives), and when a
pod running there must leave.

What is read, and where it is defined:

* Cluster Autoscaler (``utils/taints``): ``ToBeDeletedByClusterAutoscaler`` (NoSchedule, its
  value the Unix time the scale-down began) on a node it drains and deletes. Its
  ``DeletionCandidateOfClusterAutoscaler`` (PreferNoSchedule: an unneeded node it may remove
  later) is not read: a soft taint, which gpufleet does not score, and a node where pods run is
  no longer unneeded.
* Karpenter: ``karpenter.sh/disrupted:NoSchedule`` (v1; ``karpenter.sh/disruption=disrupting``
  from v0.32 to v1) on a node it disrupts (consolidation, drift, expiration, interruption),
  before it drains and deletes it.
* GKE: ``cloud.google.com/impending-node-termination:NoSchedule`` (its node termination and
  maintenance handlers) before a preemption or host maintenance.
* The AWS Node Termination Handler (with ``taintNode``): ``aws-node-termination-handler/
  spot-itn``, ``/scheduled-maintenance`` and ``/asg-lifecycle-termination`` before the instance
  goes, and ``/rebalance-recommendation`` when a spot instance is at an elevated risk of
  interruption (not yet interrupted); its ``taintEffect`` (NoSchedule by default) may be
  PreferNoSchedule or NoExecute, so every effect counts.
* Kubernetes: ``node.kubernetes.io/out-of-service`` (non-graceful node shutdown: the node is
  gone), ``node.cloudprovider.kubernetes.io/shutdown`` (the cloud node lifecycle controller: its
  instance is shut down), the node lifecycle controller's ``node.kubernetes.io/unreachable`` and
  ``/not-ready`` (NoSchedule by condition, and NoExecute with ``timeAdded`` for taint-based
  eviction), and ``node.kubernetes.io/unschedulable`` (the mirror of ``spec.unschedulable``).

Two uses:

* :func:`going_away`: the first of these taints on a node (in the order above) makes it
  unschedulable, with its reason. Deliberately unlike kube-scheduler, a pod that tolerates the
  taint (a toleration with ``operator: Exists`` and no key tolerates everything) is not placed
  there either: the node is on its way out, and what starts there is lost with it.
* :func:`node_ends` and :func:`leave_at`: when a pod on the node must leave. At once on a node
  being removed or terminated (:attr:`NodeFate.REMOVED`), whatever it tolerates: its drainer
  evicts it regardless and the node goes. On a node unreachable or not ready
  (:attr:`NodeFate.UNHEALTHY`), when the taint-based eviction controller would evict it: for the
  NoExecute taints only; a taint it does not tolerate, at once; otherwise after the
  ``tolerationSeconds`` of the first toleration that matches each taint (none: never), the least
  of them, counted from the taint's ``timeAdded`` (the controller counts from when it saw the
  taint, which is that moment; without ``timeAdded``, from when the caller first saw it). A node
  at risk (:attr:`NodeFate.AT_RISK`) or cordoned sends no pod away.

It reads objects already read once by :mod:`.nodes` and :mod:`.pods` (which report
bad fields), so it reads leniently: a field it cannot read is left out. It keeps no clock: times
are the caller's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from gpufleet.model import Taint, TaintEffect, Toleration

_EFFECTS = {e.value: e for e in TaintEffect}


class NodeFate(StrEnum):
    """What a taint says about the node's future."""

    #: Being removed or terminated: its pods must leave now.
    REMOVED = "removed"
    #: Not ready or unreachable: its pods leave as taint-based eviction says.
    UNHEALTHY = "unhealthy"
    #: May be interrupted soon: no new pods, nothing sent away.
    AT_RISK = "at-risk"
    #: Taken out of service by hand (``kubectl cordon``, ``drain``).
    CORDONED = "cordoned"


@dataclass(frozen=True, slots=True)
class NodeSignal:
    """One taint key that announces a node's end: what it means and how it is told."""

    key: str
    fate: NodeFate
    #: ``explain``'s reason, kube-scheduler style: "node(s) are being removed by ...".
    reason: str
    #: What happens to the node, for Events: "is being removed by the cluster autoscaler".
    what: str


#: In order of precedence: a node with several is told by the first.
SIGNALS: tuple[NodeSignal, ...] = (
    NodeSignal(
        "ToBeDeletedByClusterAutoscaler",
        NodeFate.REMOVED,
        "node(s) are being removed by the cluster autoscaler",
        "is being removed by the cluster autoscaler",
    ),
    NodeSignal(
        "karpenter.sh/disrupted",
        NodeFate.REMOVED,
        "node(s) are being disrupted by Karpenter",
        "is being disrupted by Karpenter",
    ),
    NodeSignal(
        "karpenter.sh/disruption",
        NodeFate.REMOVED,
        "node(s) are being disrupted by Karpenter",
        "is being disrupted by Karpenter",
    ),
    NodeSignal(
        "cloud.google.com/impending-node-termination",
        NodeFate.REMOVED,
        "node(s) are about to be terminated (GKE)",
        "is about to be terminated (GKE impending node termination)",
    ),
    NodeSignal(
        "aws-node-termination-handler/spot-itn",
        NodeFate.REMOVED,
        "node(s) are about to be terminated (AWS spot interruption)",
        "is about to be terminated (AWS spot interruption notice)",
    ),
    NodeSignal(
        "aws-node-termination-handler/scheduled-maintenance",
        NodeFate.REMOVED,
        "node(s) are about to be terminated (AWS scheduled maintenance)",
        "is about to be terminated (AWS scheduled maintenance)",
    ),
    NodeSignal(
        "aws-node-termination-handler/asg-lifecycle-termination",
        NodeFate.REMOVED,
        "node(s) are about to be terminated (AWS Auto Scaling scale-in)",
        "is about to be terminated (AWS Auto Scaling scale-in)",
    ),
    NodeSignal(
        "node.kubernetes.io/out-of-service",
        NodeFate.REMOVED,
        "node(s) were out of service",
        "is out of service (shut down)",
    ),
    NodeSignal(
        "node.cloudprovider.kubernetes.io/shutdown",
        NodeFate.REMOVED,
        "node(s) were shut down",
        "is shut down (its cloud instance stopped)",
    ),
    NodeSignal(
        "aws-node-termination-handler/rebalance-recommendation",
        NodeFate.AT_RISK,
        "node(s) are at risk of interruption (AWS rebalance recommendation)",
        "is at risk of interruption (AWS rebalance recommendation)",
    ),
    NodeSignal(
        "node.kubernetes.io/unreachable",
        NodeFate.UNHEALTHY,
        "node(s) were unreachable",
        "is unreachable",
    ),
    NodeSignal(
        "node.kubernetes.io/not-ready",
        NodeFate.UNHEALTHY,
        "node(s) were not ready",
        "is not ready",
    ),
    NodeSignal(
        "node.kubernetes.io/unschedulable",
        NodeFate.CORDONED,
        "node(s) were unschedulable",
        "is cordoned",
    ),
)
_BY_KEY = {signal.key: signal for signal in SIGNALS}
_RANK = {signal.key: rank for rank, signal in enumerate(SIGNALS)}
#: The taint keys of :data:`SIGNALS`.
SIGNAL_KEYS = frozenset(_BY_KEY)


def going_away(taints: Iterable[Taint]) -> NodeSignal | None:
    """The first signal (in :data:`SIGNALS` order) among ``taints``, of any effect."""
    found = [_BY_KEY[t.key] for t in taints if t.key in _BY_KEY]
    return min(found, key=lambda s: _RANK[s.key]) if found else None


@dataclass(frozen=True, slots=True)
class NodeEnd:
    """A taint that sends the node's pods away, and when it was added (Unix seconds; None:
    the taint does not say)."""

    signal: NodeSignal
    taint: Taint
    added: float | None = None


def node_ends(obj: Mapping[str, Any]) -> tuple[NodeEnd, ...]:
    """The taints of a Node object that send its pods away: those of a node being removed
    (any effect) and those of a node unreachable or not ready (NoExecute), in
    :data:`SIGNALS` order."""
    spec = obj.get("spec")
    taints = spec.get("taints") if isinstance(spec, Mapping) else None
    ends: list[NodeEnd] = []
    for entry in taints if isinstance(taints, list) else ():
        if not isinstance(entry, Mapping):
            continue
        signal = _BY_KEY.get(str(entry.get("key")))
        effect = _EFFECTS.get(str(entry.get("effect")))
        if signal is None or effect is None:
            continue
        if signal.fate is NodeFate.REMOVED or (
            signal.fate is NodeFate.UNHEALTHY and effect is TaintEffect.NO_EXECUTE
        ):
            value = entry.get("value")
            taint = Taint(signal.key, value if isinstance(value, str) else "", effect)
            ends.append(NodeEnd(signal, taint, _timestamp(entry.get("timeAdded"))))
    return tuple(sorted(ends, key=lambda e: _RANK[e.signal.key]))


def pod_tolerations(obj: Mapping[str, Any]) -> tuple[tuple[Toleration, float | None], ...]:
    """A Pod object's tolerations, each with its ``tolerationSeconds`` (None: no limit)."""
    spec = obj.get("spec")
    items = spec.get("tolerations") if isinstance(spec, Mapping) else None
    found: list[tuple[Toleration, float | None]] = []
    for entry in items if isinstance(items, list) else ():
        if not isinstance(entry, Mapping):
            continue
        key, value = entry.get("key") or None, entry.get("value") or ""
        operator = entry.get("operator") or "Equal"
        effect_text = entry.get("effect") or ""
        effect = _EFFECTS.get(str(effect_text)) if effect_text else None
        if operator not in ("Equal", "Exists") or (effect_text and effect is None):
            continue
        seconds = entry.get("tolerationSeconds")
        limit = float(seconds) if isinstance(seconds, int | float) else None
        found.append((Toleration(key and str(key), str(operator), str(value), effect), limit))
    return tuple(found)


def leave_at(
    ends: Sequence[NodeEnd], tolerations: Sequence[tuple[Toleration, float | None]], seen: float
) -> float | None:
    """When a pod with ``tolerations`` (:func:`pod_tolerations`) on a node with ``ends``
    (:func:`node_ends`) must leave, in Unix seconds (a time past: now); None: it may stay.
    ``seen``: when the caller first saw the node's ends, for a taint without ``timeAdded``.
    See the module docstring for the rules."""
    due = math.inf
    for end in ends:
        start = end.added if end.added is not None else seen
        if end.signal.fate is NodeFate.REMOVED:
            due = min(due, start)
            continue
        # As the taint-based eviction controller: the first toleration matching the taint.
        matching = [limit for t, limit in tolerations if t.tolerates(end.taint)][:1]
        if not matching:
            due = min(due, start)  # not tolerated: evicted at once
        elif matching[0] is not None:
            due = min(due, start + max(matching[0], 0.0))
    return None if math.isinf(due) else due


def _timestamp(value: object) -> float | None:
    """An RFC 3339 time (``2025-01-02T03:04:05Z``) as Unix seconds; None if it does not read."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
