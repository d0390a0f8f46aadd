"""What a pod prefers among the nodes it fits: preferred node affinity, preferred pod
(anti-)affinity and soft topology spread, and how that combines with the packing policies.

kube-scheduler adds three score plugins to its default profile, each normalised to 0..100 and
weighted 2: NodeAffinity (the sum of the weights of the preferred terms a node matches, scaled
so that the best node has 100), InterPodAffinity (:mod:`.interpod`) and PodTopologySpread
(:mod:`.spread`). gpufleet computes the same three scores with the same weights, and:

**How they combine with the policy.** kube-scheduler adds them to its resource scores. gpufleet
ranks *lexicographically*: among the feasible nodes it keeps those with the highest weighted
sum of the three, and the placement policy (``default``, ``fgd``, ``bestfit``...) chooses among
those. A preference is thus never traded for packing, and the policy still packs among nodes
the pod likes equally (all nodes of a preferred zone). Why not a sum: the policies' scores are
on scales that do not compare with 0..100 (milli-GPU of expected waste, FGD's sigmoid, a random
draw), and the default policy scores nodes that cannot win only by a bound; a sum would make
the weight of a preference depend on the policy and on the cluster's state.

When no pod uses these fields (no preferred terms of its own, no running pod's terms that match
it, no soft spread), nothing here runs and every policy decides exactly as before.
"""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.domains import FloatArray
from gpufleet.scheduling.interpod import interpod_scores
from gpufleet.scheduling.node_table import IntArray, NodeTable
from gpufleet.scheduling.spread import spread_scores

#: kube-scheduler's default profile weights for the three score plugins.
NODE_AFFINITY_WEIGHT = 2
INTER_POD_AFFINITY_WEIGHT = 2
TOPOLOGY_SPREAD_WEIGHT = 2
MAX_NODE_SCORE = 100


def may_prefer(table: NodeTable, demand: Demand) -> bool:
    """Could a preference tell the feasible rows apart for a pod of ``demand``? (A cheap test
    before :func:`preferred_rows`; running pods' terms may apply to any pod.)"""
    return demand.prefers or bool(table.pod_index.carried)


def preference_scores(
    table: NodeTable, demand: Demand, identity: int, rows: IntArray
) -> FloatArray | None:
    """The weighted sum of the three scores over ``rows`` (None when none applies)."""
    total: FloatArray | None = None
    parts = (
        (NODE_AFFINITY_WEIGHT, _node_affinity_scores(demand, rows)),
        (INTER_POD_AFFINITY_WEIGHT, interpod_scores(table, demand.interpod, identity, rows)),
        (TOPOLOGY_SPREAD_WEIGHT, spread_scores(table, demand.spread, rows)),
    )
    for weight, scores in parts:
        if scores is not None:
            total = weight * scores if total is None else total + weight * scores
    return total


def preferred_rows(table: NodeTable, demand: Demand, identity: int, rows: IntArray) -> IntArray:
    """The rows of ``rows`` with the best preference score (all of them when none applies)."""
    total = preference_scores(table, demand, identity, rows)
    if total is None:
        return rows
    best: IntArray = rows[total == total.max()]
    return best


def _node_affinity_scores(demand: Demand, rows: IntArray) -> FloatArray | None:
    """kube-scheduler's NodeAffinity score: matched weights scaled to the best node's 100."""
    if demand.node_preference is None:
        return None
    raw = demand.node_preference[rows]
    high = float(raw.max()) if raw.size else 0.0
    if high <= 0:
        return np.zeros(rows.size, np.float64)
    scores: FloatArray = np.floor_divide(MAX_NODE_SCORE * raw, high)
    return scores
