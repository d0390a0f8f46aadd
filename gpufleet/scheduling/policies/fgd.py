"""FGD: Fragmentation Gradient Descent (Weng et al., USENIX ATC 2023).

A node's score is int(100 * sigmoid(delta / 1000)) where delta is how much placing the pod
lowers the node's fragmentation F_n (see :mod:`gpufleet.scheduling.fragmentation`). For a
shared pod every fitting device is tried; the node scores its best device, and the pod takes
that device (the first one on ties).
"""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.framework import DeviceChoice, FloatArray, Policy, identity
from gpufleet.scheduling.node_table import IntArray, NodeTable
from gpufleet.scheduling.policies.devices import BestFitDevices


def sigmoid_score(delta: FloatArray) -> FloatArray:
    """int(100 * sigmoid(delta / 1000)), as the artifact computes it."""
    with np.errstate(over="ignore"):
        return np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0)))


class FgdScore:
    name = "FGDScore"
    row_local = True

    def __init__(self, model: FragmentationModel) -> None:
        self.model = model
        # Best device per row for shared pods, remembered with the row version it was computed
        # at, so the device chooser does not recompute what scoring just did.
        self._best: dict[tuple[object, ...], tuple[IntArray, IntArray]] = {}

    def device_scores(self, rows: IntArray, demand: Demand) -> FloatArray:
        """(K, G) scores of placing a shared pod on each device; NaN where it does not fit."""
        before = self.model.node_frag(rows)
        after = self.model.frag_after(rows, demand)
        return sigmoid_score(before[:, None] - after)

    def score(self, table: NodeTable, demand: Demand, rows: IntArray) -> FloatArray:
        if demand.shared:
            per_device = self.device_scores(rows, demand)
            fits = ~np.isnan(per_device)
            masked = np.where(fits, per_device, -1.0)
            best = masked.argmax(axis=1)
            self._remember(table, demand, rows, best)
            result: FloatArray = np.where(fits.any(axis=1), masked.max(axis=1), np.nan)
            return result
        before = self.model.node_frag(rows)
        return sigmoid_score(before - self.model.frag_after(rows, demand))

    def _remember(self, table: NodeTable, demand: Demand, rows: IntArray, best: IntArray) -> None:
        entry = self._best.get(demand.score_key)
        if entry is None or entry[0].size != table.capacity:
            entry = (
                np.zeros(table.capacity, np.int64),
                np.full(table.capacity, -1, np.int64),
            )
            self._best[demand.score_key] = entry
        entry[0][rows] = best
        entry[1][rows] = table.version[rows]

    def best_device(self, table: NodeTable, row: int, demand: Demand) -> int:
        """The device a shared pod takes on ``row`` (first best on ties)."""
        entry = self._best.get(demand.score_key)
        fresh = entry is not None and entry[0].size == table.capacity
        if fresh and entry is not None and entry[1][row] == table.version[row]:
            return int(entry[0][row])
        scores = self.device_scores(np.array([row]), demand)[0]
        return int(np.nanargmax(scores))

    def normalize(self, scores: FloatArray) -> FloatArray:
        return identity(scores)


class FgdDevices:
    """A share goes to the device with the best FGD score (first on ties)."""

    def __init__(self, scorer: FgdScore) -> None:
        self.scorer = scorer
        self.fallback = BestFitDevices()

    def choose(self, table: NodeTable, row: int, demand: Demand) -> DeviceChoice:
        if not demand.shared:
            return self.fallback.choose(table, row, demand)
        return DeviceChoice((self.scorer.best_device(table, row, demand),))


def fgd_policy(model: FragmentationModel) -> Policy:
    scorer = FgdScore(model)
    return Policy("fgd", [(scorer, 1.0)], FgdDevices(scorer), "fragmentation gradient descent")
