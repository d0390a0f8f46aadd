"""BestFit: the node left with the least free CPU and GPU after placement wins.

raw = int(100 * (1 - [0.5 (cpu_left - cpu_req)/MaxCpu + 0.5 (gpu_left - gpu_req)/MaxGpu])),
then kube-scheduler's integer min-max normalisation over the feasible nodes.
"""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.framework import FloatArray, Policy, minmax_normalize_int
from gpufleet.scheduling.node_table import IntArray, NodeTable
from gpufleet.scheduling.policies.devices import BestFitDevices
from gpufleet.scheduling.policies.dotprod import (
    MAX_CPU_MILLI,
    MAX_GPU_MILLI,
    requested_gpu_milli,
)


class BestFitScore:
    name = "BestFitScore"
    row_local = True

    def score(self, table: NodeTable, demand: Demand, rows: IntArray) -> FloatArray:
        cpu_term = (table.cpu_free[rows] - demand.cpu_milli) / MAX_CPU_MILLI * 0.5
        gpu_left = table.gpu_free[rows].sum(axis=1)
        gpu_term = (gpu_left - requested_gpu_milli(demand, rows)) / MAX_GPU_MILLI * 0.5
        scores: FloatArray = np.trunc((1.0 - (0.0 + cpu_term + gpu_term)) * 100.0)
        return scores

    def normalize(self, scores: FloatArray) -> FloatArray:
        return minmax_normalize_int(scores)


def bestfit_policy() -> Policy:
    return Policy("bestfit", [(BestFitScore(), 1.0)], BestFitDevices(), "best fit")
