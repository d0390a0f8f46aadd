"""GpuPacking: fill partly used devices first, then free devices of used nodes, then new nodes.

(1) all devices of the node free: max(33 - n_gpus, n_gpus); (2) the pod needs k fully free
devices of a partly used node: max(50 - k, 33); (3) it fits on partly used devices:
max(100 - sum over chosen devices of floor(left * 100 / 1000) / 10, 50), devices chosen in
ascending order of left. CPU-only pods score 0.
"""

from __future__ import annotations

import numpy as np

from gpufleet.model import MILLI_PER_GPU
from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.framework import FloatArray, Policy, identity
from gpufleet.scheduling.node_table import IntArray, NodeTable
from gpufleet.scheduling.policies.devices import BestFitDevices


class GpuPackingScore:
    name = "GpuPackingScore"
    row_local = True

    def score(self, table: NodeTable, demand: Demand, rows: IntArray) -> FloatArray:
        if not (demand.gpu_count and (demand.gpu_milli or demand.milli_by_row is not None)):
            return np.zeros(rows.size, np.float64)
        full = table.full_free[rows]
        count = table.gpu_count[rows]
        all_free = np.maximum(33 - full, full)
        if demand.shared:
            free = table.gpu_free[rows]
            milli = demand.milli_on(rows)[:, None]
            least = np.where(free >= milli, free, MILLI_PER_GPU + 1).min(axis=1)
            on_used = np.maximum(100 - (least * 100 // MILLI_PER_GPU) // 10, 50)
            partly = np.where(least == MILLI_PER_GPU, max(50 - 1, 33), on_used)
        else:
            partly = np.full(rows.size, max(50 - demand.gpu_count, 33))
        scores: FloatArray = np.where(full == count, all_free, partly).astype(np.float64)
        return scores

    def normalize(self, scores: FloatArray) -> FloatArray:
        return identity(scores)


def packing_policy() -> Policy:
    return Policy("gpu-packing", [(GpuPackingScore(), 1.0)], BestFitDevices(), "GPU packing")
