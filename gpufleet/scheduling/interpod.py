"""Pod affinity and anti-affinity: kube-scheduler's InterPodAffinity plugin on numpy columns.

Follows kube-scheduler (``pkg/scheduler/framework/plugins/interpodaffinity``):

* **Filter**, in its order and with its reasons. (1) Required affinity: every term's topology
  key must be on the node, and each term's domain there must hold a pod that matches *all* the
  terms; unless no pod anywhere matches them all and the pod matches its own terms, when any
  node with all the keys passes (the first pod of a group that wants to be together).
  (2) Required anti-affinity: no domain of the node (per term) may hold a pod the term matches;
  a node without the key passes. (3) Symmetric: a node is refused if a pod already running in
  one of its domains has a required anti-affinity term that matches the new pod.
* **Score** (for :mod:`.preferences`): per node, the sum over its domains of the weights of the
  pod's preferred affinity terms times the matching pods there, minus the same for preferred
  anti-affinity; plus, symmetrically, the weights of running pods' preferred terms that match
  the new pod (anti-affinity negative) and ``hardPodAffinityWeight`` (1) per running pod whose
  *required* affinity matches it; normalised min-max to 0..100 over the candidate nodes.

Counts come from the table's :class:`~gpufleet.scheduling.pod_index.PodIndex` (pods placed
earlier in a trial count, such as a gang's first pods) and one ``bincount`` per topology key.

Where gpufleet differs: a ``namespaceSelector`` may only select by the namespace's name (the
``kubernetes.io/metadata.name`` label, or ``{}`` for all namespaces), since gpufleet does not
read Namespace objects (the reader refuses other selectors, naming the field); pods being
evicted count until they are gone (kube-scheduler stops counting a pod once it is terminating).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpufleet.model import Pod
from gpufleet.scheduling.domains import FloatArray, domains_of
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable
from gpufleet.scheduling.pod_index import TermKind

AFFINITY_REASON = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_REASON = "node(s) didn't satisfy existing pods anti-affinity rules"


@dataclass(frozen=True, slots=True)
class InterPodTerms:
    """A pod's own pod (anti-)affinity terms, compiled against a node table's pod index."""

    #: (selector column, topology key) of each required anti-affinity term.
    anti_affinity: tuple[tuple[int, str], ...]
    #: The column of pods matching all required affinity terms (-1: none), their keys, and
    #: whether the pod matches all of them itself.
    affinity_selector: int
    affinity_keys: tuple[str, ...]
    affinity_self: bool
    #: (selector column, topology key, signed weight) of each preferred term.
    preferred: tuple[tuple[int, str, int], ...]

    @property
    def filters(self) -> bool:
        return bool(self.anti_affinity) or self.affinity_selector >= 0


def compile_interpod(table: NodeTable, pod: Pod) -> InterPodTerms | None:
    """The pod's terms as columns of ``table.pod_index`` (None when it has none)."""
    rules = pod.rules
    if rules is None or not (
        rules.pod_affinity
        or rules.pod_anti_affinity
        or rules.preferred_pod_affinity
        or rules.preferred_pod_anti_affinity
    ):
        return None
    index = table.pod_index
    anti = tuple((index.selector((t.selector,)), t.topology_key) for t in rules.pod_anti_affinity)
    affinity_selector = -1
    if rules.pod_affinity:
        affinity_selector = index.selector(tuple(t.selector for t in rules.pod_affinity))
    preferred = tuple(
        (index.selector((w.term.selector,)), w.term.topology_key, sign * w.weight)
        for sign, weighted in (
            (1, rules.preferred_pod_affinity),
            (-1, rules.preferred_pod_anti_affinity),
        )
        for w in weighted
    )
    return InterPodTerms(
        anti,
        affinity_selector,
        tuple(t.topology_key for t in rules.pod_affinity),
        bool(rules.pod_affinity)
        and all(t.selector.matches(pod.namespace, pod.labels) for t in rules.pod_affinity),
        preferred,
    )


def affinity_failures(table: NodeTable, terms: InterPodTerms) -> BoolArray:
    """Rows where the pod's required affinity fails (see the module docstring)."""
    n = table.size
    if terms.affinity_selector < 0:
        return np.zeros(n, np.bool_)
    alive = table.alive[:n]
    column = table.pod_index.matching(terms.affinity_selector)[:n]
    passes = np.ones(n, np.bool_)
    labelled_all = np.ones(n, np.bool_)
    anywhere = False
    for key in terms.affinity_keys:
        domains = domains_of(table, key)
        totals = domains.totals(column, alive)
        anywhere = anywhere or bool(totals.any())
        labelled_all &= domains.labelled
        passes &= domains.labelled & (domains.per_row(totals) > 0)
    if not anywhere and terms.affinity_self:
        passes = labelled_all
    failing: BoolArray = ~passes
    return failing


def failures(table: NodeTable, terms: InterPodTerms) -> tuple[BoolArray, BoolArray]:
    """Rows failing the pod's required affinity, and rows passing it but failing its required
    anti-affinity (kube-scheduler's order of reasons)."""
    affinity = affinity_failures(table, terms)
    return affinity, anti_affinity_failures(table, terms) & ~affinity


def anti_affinity_failures(table: NodeTable, terms: InterPodTerms) -> BoolArray:
    """Rows where one of the pod's required anti-affinity terms has a match in the domain."""
    n = table.size
    failing = np.zeros(n, np.bool_)
    if not terms.anti_affinity:
        return failing
    alive = table.alive[:n]
    index = table.pod_index
    by_key: dict[str, IntArray] = {}
    for selector, key in terms.anti_affinity:
        column = index.matching(selector)[:n]
        by_key[key] = by_key[key] + column if key in by_key else column
    return _in_busy_domains(table, by_key, alive)


def existing_anti_affinity_failures(table: NodeTable, identity: int) -> BoolArray | None:
    """Rows refused to a pod of ``identity`` by running pods' required anti-affinity (None when
    no running pod has a term that matches it)."""
    index = table.pod_index
    if not index.repelling:
        return None
    n = table.size
    by_key: dict[str, IntArray] = {}
    for j in index.carried_matching(identity):
        term = index.carried[j]
        if term.kind != TermKind.REPEL:
            continue
        column = index.carrying(j)[:n]
        key = term.topology_key
        by_key[key] = by_key[key] + column if key in by_key else column
    if not by_key:
        return None
    return _in_busy_domains(table, by_key, table.alive[:n])


def _in_busy_domains(
    table: NodeTable, by_key: Mapping[str, IntArray], alive: BoolArray
) -> BoolArray:
    failing = np.zeros(table.size, np.bool_)
    for key, column in by_key.items():
        domains = domains_of(table, key)
        failing |= domains.labelled & (domains.per_row(domains.totals(column, alive)) > 0)
    return failing


def interpod_scores(
    table: NodeTable, terms: InterPodTerms | None, identity: int, rows: IntArray
) -> FloatArray | None:
    """Normalised InterPodAffinity scores (0..100) of ``rows``; None when no term applies."""
    index = table.pod_index
    n = table.size
    weighted: dict[str, FloatArray] = {}

    def add(key: str, column: IntArray, weight: int) -> None:
        part: FloatArray = column[:n].astype(np.float64) * weight
        weighted[key] = weighted[key] + part if key in weighted else part

    if terms is not None:
        for selector, key, weight in terms.preferred:
            add(key, index.matching(selector), weight)
    if index.carried:
        for j in index.carried_matching(identity):
            term = index.carried[j]
            if term.kind != TermKind.REPEL:
                add(term.topology_key, index.carrying(j), term.weight)
    if not weighted:
        return None
    alive = table.alive[:n]
    raw = np.zeros(n, np.float64)
    for key, column in weighted.items():
        domains = domains_of(table, key)
        raw += domains.per_row(domains.totals(column, alive))
    return _minmax_truncated(raw[rows])


def _minmax_truncated(scores: FloatArray) -> FloatArray:
    """kube-scheduler's InterPodAffinity normalisation: int(100 * (s - min) / (max - min))."""
    if scores.size == 0:
        return scores
    low, high = scores.min(), scores.max()
    if high == low:
        return np.zeros_like(scores)
    normalised: FloatArray = np.trunc(100.0 * ((scores - low) / (high - low)))
    return normalised
