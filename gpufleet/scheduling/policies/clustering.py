"""GpuClustering: keep pods of the same GPU kind together.

Tags: "share" (one device, < 1000 milli) or "k-gpu". Base 75 if the node holds only GPU pods of
the pod's tag, 50 if that tag is among several, 25 if it holds no GPU pods, 0 if only other
tags; plus int(25 * (MaxGpu - gpu_left) / MaxGpu). CPU-only pods score 0 everywhere.
"""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.framework import FloatArray, Policy, identity
from gpufleet.scheduling.node_table import IntArray, NodeTable
from gpufleet.scheduling.policies.devices import BestFitDevices
from gpufleet.scheduling.policies.dotprod import MAX_GPU_MILLI


class GpuClusteringScore:
    name = "GpuClusteringScore"
    row_local = True

    def score(self, table: NodeTable, demand: Demand, rows: IntArray) -> FloatArray:
        if demand.tag < 0:
            return np.zeros(rows.size, np.float64)
        present = table.tag_count[rows] > 0
        kinds = present.sum(axis=1)
        mine = present[:, demand.tag]
        base = np.where(mine, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
        left = table.gpu_free[rows].sum(axis=1)
        scores: FloatArray = (base + 25 * (MAX_GPU_MILLI - left) // MAX_GPU_MILLI).astype(
            np.float64
        )
        return scores

    def normalize(self, scores: FloatArray) -> FloatArray:
        return identity(scores)


def clustering_policy() -> Policy:
    return Policy(
        "gpu-clustering", [(GpuClusteringScore(), 1.0)], BestFitDevices(), "GPU-kind clustering"
    )
