"""DotProd (Tetris): prefer nodes whose free vector is least aligned with the request.

score = int(100 * (1 - free . req / 2)) with free = [cpu_left/MaxCpu, gpu_left/MaxGpu] and
req = [cpu_req/MaxCpu, gpu_req/MaxGpu], evaluated in the artifact's order of float operations.
"""

from __future__ import annotations

import numpy as np

from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.framework import FloatArray, Policy, identity
from gpufleet.scheduling.node_table import IntArray, NodeTable
from gpufleet.scheduling.policies.devices import BestFitDevices

MAX_CPU_MILLI = 128_000
MAX_GPU_MILLI = 8_000


def requested_gpu_milli(demand: Demand, rows: IntArray) -> IntArray:
    """Milli-GPU the pod takes in all on each row."""
    return demand.milli_on(rows) * demand.gpu_count


class DotProductScore:
    name = "DotProductScore"
    row_local = True

    def score(self, table: NodeTable, demand: Demand, rows: IntArray) -> FloatArray:
        free_cpu = table.cpu_free[rows] / MAX_CPU_MILLI
        free_gpu = table.gpu_free[rows].sum(axis=1) / MAX_GPU_MILLI
        req_cpu = demand.cpu_milli / MAX_CPU_MILLI
        req_gpu = requested_gpu_milli(demand, rows) / MAX_GPU_MILLI
        dot = free_cpu * req_cpu + free_gpu * req_gpu
        scores: FloatArray = np.trunc(100.0 * (1.0 - dot / 2.0))
        return scores

    def normalize(self, scores: FloatArray) -> FloatArray:
        return identity(scores)


def dotprod_policy() -> Policy:
    return Policy("dotprod", [(DotProductScore(), 1.0)], BestFitDevices(), "Tetris dot product")
