"""Random: one feasible node uniformly at random; a share goes to a random fitting device."""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.framework import FloatArray, Policy, identity
from gpufleet.scheduling.node_table import IntArray, NodeTable
from gpufleet.scheduling.policies.devices import RandomShareDevices


class RandomScore:
    """Scores one uniformly drawn feasible row 100 and the others 0 (as the artifact does)."""

    name = "RandomScore"
    row_local = False

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def score(self, table: NodeTable, demand: Demand, rows: IntArray) -> FloatArray:
        scores = np.zeros(rows.size, np.float64)
        scores[self.rng.integers(rows.size)] = 100.0
        return scores

    def normalize(self, scores: FloatArray) -> FloatArray:
        return identity(scores)


def random_policy(rng: np.random.Generator) -> Policy:
    return Policy(
        "random",
        [(RandomScore(rng), 1.0)],
        RandomShareDevices(rng),
        "a feasible node uniformly at random",
    )
