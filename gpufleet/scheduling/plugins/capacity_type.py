"""The ``capacity-type`` score plugin: placement that knows how nodes are bought.

A node's capacity type is read from its labels as the cost report reads it
(:data:`~gpufleet.economics.runs.CAPACITY_LABELS`, through
:func:`~gpufleet.economics.runs.capacity_type` once per distinct label value: gpufleet's own
``gpufleet.dev/capacity-type``, Karpenter's, EKS', GKE's and AKS' spot and reserved labels; a
node that says nothing is on-demand). A pod's need is its workload's
(:func:`~gpufleet.scheduling.capacity.capacity_need`: fault-tolerant, critical or neither).
Preferences, strongest first:

* reserved capacity first, for everyone: it is paid for whether it is used or not;
* then a fault-tolerant pod prefers spot, a critical one (not preemptible, or
  inference-critical) on-demand; a pod that is neither has no preference between them.

Scores are tiers (2 for reserved, 1 for the preferred type, 0 else), normalised to steps of
:data:`TIER` over the feasible nodes: with weight 1 a better tier outweighs any difference the
built-in policies' own scores make (they are in milli-GPU or 0..100), so capacity type decides
first and the policy chooses within a tier; a profile weight such as 1e-5 makes it a
tie-breaker instead. When every feasible node is of one tier the normalised scores are all 0
(exactly), so on a cluster without capacity labels every decision is what it was without this
plugin. The per-row capacity is computed once per node set (numpy over the label columns).

It is in the default profile. It decides nothing about taints: a spot node tainted against
pods that do not tolerate it is kept from them by the taint filter, before scoring.
"""

from __future__ import annotations

import numpy as np

from gpufleet.economics.runs import CAPACITY_LABELS, capacity_type
from gpufleet.model.capacity import CapacityNeed, CapacityType
from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.framework import FloatArray
from gpufleet.scheduling.node_table import IntArray, NodeTable

#: The step between two tiers after normalisation.
TIER = float(2**20)

#: Column of a capacity type in :data:`_TIERS`.
_CODE = {CapacityType.ON_DEMAND: 0, CapacityType.SPOT: 1, CapacityType.RESERVED: 2}
#: Per need, the tier of on-demand, spot and reserved nodes.
_TIERS = {
    CapacityNeed.ANY: np.array([0.0, 0.0, 1.0]),
    CapacityNeed.FAULT_TOLERANT: np.array([0.0, 1.0, 2.0]),
    CapacityNeed.CRITICAL: np.array([1.0, 0.0, 2.0]),
}


class CapacityTypeScore:
    """See the module docstring."""

    name = "capacity-type"
    row_local = False  # a pod's need is not part of the shape's score key

    def __init__(self) -> None:
        self._codes: IntArray = np.zeros(0, np.int64)
        self._version = -1
        self._one_type = True

    def codes(self, table: NodeTable) -> IntArray:
        """Per row, its capacity type (0 on-demand, 1 spot, 2 reserved)."""
        if self._version != table.topology_version:
            self._codes = _capacity_codes(table)
            alive = self._codes[table.alive[: table.size]]
            self._one_type = alive.size == 0 or bool((alive == alive[0]).all())
            self._version = table.topology_version
        return self._codes

    def score(self, table: NodeTable, demand: Demand, rows: IntArray) -> FloatArray:
        codes = self.codes(table)
        if self._one_type:
            return np.zeros(rows.size, np.float64)
        tiers: FloatArray = _TIERS[demand.capacity][codes[rows]]
        return tiers

    def normalize(self, scores: FloatArray) -> FloatArray:
        if self._one_type or scores.size == 0:  # (zeros from :meth:`score`)
            return scores
        low = scores.min()
        if scores.max() == low:
            return np.zeros_like(scores)
        normalised: FloatArray = (scores - low) * TIER
        return normalised


def _capacity_codes(table: NodeTable) -> IntArray:
    """Every row's capacity type from its labels: the first capacity label a row carries
    decides (a value that names no spot or reserved capacity: on-demand)."""
    n = table.size
    codes = np.zeros(n, np.int64)
    decided = np.zeros(n, np.bool_)
    for key, _ in CAPACITY_LABELS:
        column = table.label_ids.get(key)
        if column is None:
            continue
        ids = column[:n]
        present = (ids >= 0) & ~decided
        if not present.any():
            continue
        values = table.label_values[key]
        lookup = np.zeros(len(values), np.int64)
        for text, value_id in values.items():
            lookup[value_id] = _CODE[capacity_type({key: text})]
        codes[present] = lookup[ids[present]]
        decided |= present
    return codes


__all__ = ["TIER", "CapacityTypeScore"]
