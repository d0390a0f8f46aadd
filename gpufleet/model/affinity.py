"""Placement rules that relate a pod to other pods, and its preferred node affinity.

Plain data in the shapes of Kubernetes' API (``spec.affinity.podAffinity``,
``podAntiAffinity``, ``topologySpreadConstraints``, ``nodeAffinity.preferred...``), with what
depends on the pod itself already resolved by the reader (``io/kube/affinity``):

* a term's namespaces: the pod's own namespace when the term names none, every namespace for
  an empty ``namespaceSelector`` (``None`` here), the names a ``namespaceSelector`` on
  ``kubernetes.io/metadata.name`` picks;
* ``matchLabelKeys`` / ``mismatchLabelKeys`` folded into the label selector as ``In`` /
  ``NotIn`` requirements on the pod's own label values.

Selectors and their matching live in :mod:`gpufleet.model.selectors`; counting
pods per node and topology domain lives in ``scheduling`` (``pod_index``, ``interpod``,
``spread``). Everything is hashable, so that pods with equal rules share compiled answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.model.selectors import LabelSelector, NodeSelectorTerm, PodSelector


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """Pods matching ``selector`` in the same domain of ``topology_key`` (a node label)."""

    selector: PodSelector
    topology_key: str


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int  # 1..100
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class PreferredNodeTerm:
    """``nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution`` entry."""

    weight: int  # 1..100
    term: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One ``topologySpreadConstraints`` entry. Pods are counted in the pod's own namespace.

    ``schedule_anyway``: ``whenUnsatisfiable: ScheduleAnyway`` (a score), else
    ``DoNotSchedule`` (a filter). ``honor_node_affinity`` and ``honor_taints`` are
    ``nodeAffinityPolicy`` / ``nodeTaintsPolicy`` (defaults Honor and Ignore, as in Kubernetes).
    """

    max_skew: int
    topology_key: str
    schedule_anyway: bool
    selector: LabelSelector | None
    min_domains: int = 1
    honor_node_affinity: bool = True
    honor_taints: bool = False


@dataclass(frozen=True, slots=True)
class PlacementRules:
    """Everything of a pod's placement that depends on other pods or only scores nodes."""

    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_pod_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    topology_spread: tuple[SpreadConstraint, ...] = ()
    preferred_node_affinity: tuple[PreferredNodeTerm, ...] = ()
    #: The terms that act on *other* pods once this one runs (kube-scheduler's symmetric
    #: rules): its required anti-affinity keeps pods it matches out of its domains; its
    #: required affinity and preferred terms score them. None when it has none.
    carried: CarriedTerms | None = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        carried = CarriedTerms(
            self.pod_anti_affinity,
            self.pod_affinity,
            self.preferred_pod_affinity,
            self.preferred_pod_anti_affinity,
        )
        object.__setattr__(self, "carried", None if carried.empty else carried)

    @property
    def empty(self) -> bool:
        return not (
            self.pod_affinity
            or self.pod_anti_affinity
            or self.preferred_pod_affinity
            or self.preferred_pod_anti_affinity
            or self.topology_spread
            or self.preferred_node_affinity
        )


@dataclass(frozen=True, slots=True)
class CarriedTerms:
    """What of a running pod's rules acts on others; see :attr:`PlacementRules.carried`."""

    required_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    required_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedPodAffinityTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.required_anti_affinity
            or self.required_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
        )
