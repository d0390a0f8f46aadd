"""Selectors: of nodes by their labels (node affinity) and of pods by namespace and labels
(pod affinity, anti-affinity and topology spread), with Kubernetes' matching rules for labels.

Plain, hashable data; node selectors are evaluated over all nodes at once in
``scheduling/demand`` (from the node table's label columns), pod selectors here, one pod's
labels at a time (:meth:`PodSelector.matches`), when the scheduler first sees a pod's labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One ``matchExpressions`` entry of a node selector term."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements that must all hold (terms of a node affinity are ORed)."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()


#: Label selector operators (those of ``metav1.LabelSelectorRequirement``).
LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One requirement of a label selector (``matchLabels`` entries are ``In`` with one value)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None  # DoesNotExist


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """Requirements that must all hold; none means every set of labels matches (``{}``).

    A missing selector (``labelSelector`` absent) matches no pod: it is ``None`` where a
    selector is optional, never an empty :class:`LabelSelector`.
    """

    requirements: tuple[LabelRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


@dataclass(frozen=True, slots=True)
class PodSelector:
    """Which pods a term counts: those in ``namespaces`` (``None``: any) whose labels match."""

    labels: LabelSelector | None
    namespaces: frozenset[str] | None

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.labels is None:
            return False
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return self.labels.matches(labels)
