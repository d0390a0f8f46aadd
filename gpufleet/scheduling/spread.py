"""Topology spread constraints: kube-scheduler's PodTopologySpread plugin on numpy columns.

Follows kube-scheduler (``pkg/scheduler/framework/plugins/podtopologyspread``):

* Pods counted for a constraint are those in the pod's namespace that its ``labelSelector``
  matches (``matchLabelKeys`` already folded in by the reader), on nodes that have every
  topology key of the pod's constraints of that kind and pass the node inclusion policies:
  ``nodeAffinityPolicy: Honor`` (default; the pod's nodeSelector and required node affinity,
  and here also its ``gpufleet.dev/gpu-models``) and ``nodeTaintsPolicy: Ignore`` (default;
  ``Honor`` leaves out nodes with a NoSchedule/NoExecute taint the pod does not tolerate).
  A domain exists when such a node is in it; cordoned nodes count, as in Kubernetes.
* **Filter** (``DoNotSchedule``): a node without the topology key fails ("missing required
  label"); otherwise the skew ``pods in the node's domain + (1 if the pod matches its own
  selector) - the least pods in any domain`` must be at most ``maxSkew``; with fewer domains
  than ``minDomains`` the least is taken as 0.
* **Score** (``ScheduleAnyway``, for :mod:`.preferences`): per constraint
  ``pods in the domain * log(domains + 2) + maxSkew - 1`` (for ``kubernetes.io/hostname`` the
  pods on the node and the number of candidate nodes), rounded; nodes missing a key score 0;
  the others ``100 * (max + min - score) / max`` (100 when max is 0).

Counts come from the table's pod index (pods placed earlier in a trial count: a gang spreads).
Where gpufleet differs: no cluster-level default constraints (kube-scheduler adds soft hostname
and zone spreading to pods of Services and controllers that set none); counts of two
constraints on the same key are kept apart (older kube-schedulers mixed them); pods being
evicted count until they are gone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpufleet.model import GFD_LABELS, Pod
from gpufleet.model.affinity import SpreadConstraint
from gpufleet.model.selectors import PodSelector
from gpufleet.scheduling.domains import FloatArray, domains_of
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable

SKEW_REASON = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL_REASON = f"{SKEW_REASON} (missing required label)"


@dataclass(frozen=True, slots=True)
class CompiledSpread:
    """One constraint compiled against a node table."""

    #: Column of the pods it counts in the pod index (-1: no selector, it counts none).
    selector: int
    key: str
    max_skew: int
    min_domains: int
    #: 1 when the pod matches its own selector (it will count once placed).
    self_match: int
    #: Rows whose pods and domains count (inclusion policies, every key of its kind).
    counted: BoolArray


@dataclass(frozen=True, slots=True)
class SpreadRules:
    """A pod's constraints: filters (DoNotSchedule) and scores (ScheduleAnyway)."""

    filters: tuple[CompiledSpread, ...]
    #: Rows with every filter key (the others fail: missing required label).
    filter_labelled: BoolArray
    scores: tuple[CompiledSpread, ...]
    #: Rows with every score key (the others are ignored: score 0).
    score_labelled: BoolArray


def compile_spread(
    table: NodeTable, pod: Pod, node_affinity: BoolArray | None, untainted: BoolArray | None
) -> SpreadRules | None:
    """The pod's constraints against ``table`` (None when it has none). ``node_affinity`` and
    ``untainted`` are the pod's static masks for the inclusion policies (None: every node)."""
    if pod.rules is None or not pod.rules.topology_spread:
        return None
    n = table.size
    everywhere = np.ones(n, np.bool_)
    groups: dict[bool, tuple[list[CompiledSpread], BoolArray]] = {}
    for anyway in (False, True):
        constraints = [c for c in pod.rules.topology_spread if c.schedule_anyway is anyway]
        labelled = everywhere.copy()
        for c in constraints:
            labelled &= domains_of(table, c.topology_key).labelled
        compiled = [
            _compile(table, pod, c, labelled, node_affinity, untainted) for c in constraints
        ]
        groups[anyway] = (compiled, labelled)
    return SpreadRules(
        tuple(groups[False][0]), groups[False][1], tuple(groups[True][0]), groups[True][1]
    )


def _compile(
    table: NodeTable,
    pod: Pod,
    constraint: SpreadConstraint,
    labelled: BoolArray,
    node_affinity: BoolArray | None,
    untainted: BoolArray | None,
) -> CompiledSpread:
    counted = labelled.copy()
    if constraint.honor_node_affinity and node_affinity is not None:
        counted &= node_affinity
    if constraint.honor_taints and untainted is not None:
        counted &= untainted
    selector = -1
    self_match = 0
    if constraint.selector is not None:
        own = PodSelector(constraint.selector, frozenset((pod.namespace,)))
        selector = table.pod_index.selector((own,))
        self_match = int(constraint.selector.matches(pod.labels))
    return CompiledSpread(
        selector,
        constraint.topology_key,
        constraint.max_skew,
        constraint.min_domains,
        self_match,
        counted,
    )


def _column(table: NodeTable, spread: CompiledSpread) -> IntArray:
    n = table.size
    if spread.selector < 0:
        return np.zeros(n, np.int64)
    column: IntArray = table.pod_index.matching(spread.selector)[:n]
    return column


def failures(table: NodeTable, rules: SpreadRules) -> tuple[BoolArray, BoolArray]:
    """Rows missing a topology key, and the others where a skew would pass ``maxSkew``."""
    n = table.size
    alive = table.alive[:n]
    missing: BoolArray = ~rules.filter_labelled
    skewed = np.zeros(n, np.bool_)
    for spread in rules.filters:
        domains = domains_of(table, spread.key)
        counted = spread.counted & alive
        totals = domains.totals(_column(table, spread), counted)
        present = domains.present(counted)
        if int(np.count_nonzero(present)) < spread.min_domains:
            least = 0.0
        else:
            least = float(totals[present].min())
        skew = domains.per_row(totals) + spread.self_match - least
        skewed |= domains.labelled & (skew > spread.max_skew)
    return missing, skewed & ~missing


def spread_scores(table: NodeTable, rules: SpreadRules | None, rows: IntArray) -> FloatArray | None:
    """Normalised PodTopologySpread scores (0..100) of ``rows``; None without soft constraints."""
    if rules is None or not rules.scores:
        return None
    n = table.size
    alive = table.alive[:n]
    considered = rules.score_labelled[rows]
    raw = np.zeros(rows.size, np.float64)
    for spread in rules.scores:
        column = _column(table, spread)
        domains = domains_of(table, spread.key)
        if spread.key == GFD_LABELS.HOSTNAME:
            counts: FloatArray = column[rows].astype(np.float64)
            size = int(np.count_nonzero(considered))
        else:
            counts = domains.per_row(domains.totals(column, spread.counted & alive))[rows]
            size = int(np.unique(domains.ids[rows[considered]]).size)
        raw += counts * math.log(size + 2) + (spread.max_skew - 1)
    raw = np.floor(raw + 0.5)  # Go's math.Round, for scores that are never negative
    scores = np.zeros(rows.size, np.float64)
    if considered.any():
        values = raw[considered]
        high, low = float(values.max()), float(values.min())
        if high == 0:
            scores[considered] = 100.0
        else:
            scores[considered] = np.floor_divide(100.0 * (high + low - values), high)
    return scores
