"""GPU fragmentation (the FGD measure), vectorised over nodes and cached per row.

For a node n and target workload M = {(m, p_m)}: F_n = sum_m p_m * f_n(m) milli-GPU, where
f_n(m) is all idle milli-GPU of n if m is CPU-only, may not use n's GPU model, or does not fit
(too few devices with at least m's milli-GPU left, or too little CPU); otherwise it is the sum of
the left milli-GPU of devices with less left than m asks for.

Per row we cache ``cnt_ge[m]`` (devices with at least m's milli left), ``sum_lt[m]`` (milli left
on devices with less than m's milli left), the idle milli-GPU and F_n. The fragmentation *after*
placing a pod is then derived from those in O(M) per candidate without touching other devices:
placing a share r on device g with v left changes only the terms where v or v - r crosses a
threshold. This keeps a whole FGD fill-up run on 1,213 nodes to seconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.model import MILLI_PER_GPU
from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.node_table import IntArray, NodeTable
from gpufleet.scheduling.target import TargetWorkload

FloatArray = npt.NDArray[np.float64]
I32Array = npt.NDArray[np.int32]


class FragmentationModel:
    """F_n for every row of a table, against one target workload."""

    def __init__(self, table: NodeTable, target: TargetWorkload) -> None:
        self.table = table
        self.target = target
        shapes = target.shapes
        # int32 throughout: values are at most a node's milli-CPU and 1000 x devices, and
        # half-width arrays halve the memory traffic of the hot (rows x devices x shapes) maths.
        self.t_cpu = np.array([s.cpu_milli for s in shapes], np.int32)
        self.t_milli = np.array([s.gpu_milli if s.gpu_count else 0 for s in shapes], np.int32)
        self.t_count = np.array([s.gpu_count for s in shapes], np.int32)
        self.t_prob = np.array(target.probabilities, np.float64)
        self.t_gpu = self.t_count > 0
        self._allowed_models = -1
        self._allowed = np.zeros((1, len(shapes)), np.bool_)
        self._capacity = -1
        self.cnt_ge: I32Array = np.zeros((0, len(shapes)), np.int32)
        self.sum_lt: I32Array = np.zeros((0, len(shapes)), np.int32)
        self.idle: I32Array = np.zeros(0, np.int32)
        self.frag: FloatArray = np.zeros(0, np.float64)
        self.valid: IntArray = np.zeros(0, np.int64)
        # The cluster total is kept as a running sum over rows (``_counted`` holds what each
        # row contributes), updated from the table's change log.
        self._counted: FloatArray = np.zeros(0, np.float64)
        self._total = 0.0
        self._total_mark = -1
        self._ensure_capacity()

    # ------------------------------------------------------------------------- caches
    def _ensure_capacity(self) -> None:
        table = self.table
        if table.capacity != self._capacity:
            m = len(self.target)
            old_n = max(self._capacity, 0)
            keep = min(old_n, table.capacity)
            cnt_ge = np.zeros((table.capacity, m), np.int32)
            sum_lt = np.zeros((table.capacity, m), np.int32)
            idle = np.zeros(table.capacity, np.int32)
            frag = np.zeros(table.capacity, np.float64)
            valid = np.full(table.capacity, -1, np.int64)
            if old_n:
                cnt_ge[:keep] = self.cnt_ge[:keep]
                sum_lt[:keep] = self.sum_lt[:keep]
                idle[:keep] = self.idle[:keep]
                frag[:keep] = self.frag[:keep]
                valid[:keep] = self.valid[:keep]
            self.cnt_ge, self.sum_lt, self.idle, self.frag, self.valid = (
                cnt_ge,
                sum_lt,
                idle,
                frag,
                valid,
            )
            self._counted = np.zeros(table.capacity, np.float64)
            self._total_mark = -1
            self._capacity = table.capacity
        if len(table.model_names) != self._allowed_models:
            # Row 0 stands for "no GPU model" (model id -1).
            names = ["", *table.model_names]
            allowed = np.zeros((len(names), len(self.target)), np.bool_)
            for j, shape in enumerate(self.target.shapes):
                for i, name in enumerate(names):
                    allowed[i, j] = bool(name) and (
                        not shape.gpu_models or name in shape.gpu_models
                    )
            self._allowed = allowed & self.t_gpu
            self._allowed_models = len(table.model_names)

    def allowed_for(self, rows: IntArray) -> npt.NDArray[np.bool_]:
        """(K, M): may shape m use the GPU model of each row (and does m want a GPU)?"""
        return self._allowed[self.table.model_id[rows] + 1]

    def refresh(self, rows: IntArray) -> None:
        """Bring the cached statistics of ``rows`` up to date."""
        self._ensure_capacity()
        table = self.table
        stale = rows[self.valid[rows] != table.version[rows]]
        if stale.size == 0:
            return
        free = table.gpu_free[stale].astype(np.int32)
        at_least = free[:, :, None] >= self.t_milli[None, None, :]
        self.cnt_ge[stale] = at_least.sum(axis=1)
        self.sum_lt[stale] = np.where(at_least, 0, free[:, :, None]).sum(axis=1)
        self.idle[stale] = free.sum(axis=1)
        self.frag[stale] = self._frag(
            self.cnt_ge[stale],
            self.sum_lt[stale],
            self.idle[stale][:, None],
            table.cpu_free[stale][:, None].astype(np.int32),
            self.allowed_for(stale),
        )
        self.valid[stale] = table.version[stale]

    def _frag(
        self,
        cnt_ge: npt.NDArray[np.integer[Any]],
        sum_lt: npt.NDArray[np.integer[Any]],
        idle: npt.NDArray[np.integer[Any]],
        cpu_free: npt.NDArray[np.integer[Any]],
        allowed: npt.NDArray[np.bool_],
    ) -> FloatArray:
        """F from per-shape statistics; leading axes broadcast, the last one is the shape."""
        fits = allowed & (cnt_ge >= self.t_count) & (cpu_free >= self.t_cpu)
        per_shape = np.where(fits, sum_lt, idle)
        result: FloatArray = per_shape @ self.t_prob
        return result

    # ------------------------------------------------------------------------- queries
    def node_frag(self, rows: IntArray) -> FloatArray:
        """F_n of ``rows`` as they are now."""
        self.refresh(rows)
        result: FloatArray = self.frag[rows]
        return result

    def cluster_frag(self) -> float:
        """Sum of F_n over all live nodes (milli-GPU), updated for the rows that changed."""
        self._ensure_capacity()
        table = self.table
        if self._total_mark < 0:
            rows = np.arange(table.size, dtype=np.int64)
            self._counted[:] = 0.0
            self._total = 0.0
        else:
            rows = table.changed_since(self._total_mark)
        if rows.size:
            self.refresh(rows)
            now = np.where(table.alive[rows], self.frag[rows], 0.0)
            self._total += float((now - self._counted[rows]).sum())
            self._counted[rows] = now
        self._total_mark = table.change_mark
        return self._total

    def frag_after(self, rows: IntArray, demand: Demand) -> FloatArray:
        """F_n after placing ``demand`` on each row.

        For a shared pod the result is (K, G): one value per device it could take, NaN where
        the device has too little left. Otherwise it is (K,).
        """
        self.refresh(rows)
        table = self.table
        cnt_ge = self.cnt_ge[rows]
        sum_lt = self.sum_lt[rows]
        idle = self.idle[rows]
        cpu_after = (table.cpu_free[rows] - demand.cpu_milli).astype(np.int32)
        allowed = self.allowed_for(rows)
        if demand.shared:
            free = table.gpu_free[rows].astype(np.int32)
            milli = demand.milli_on(rows)[:, None].astype(np.int32)
            after = free - milli
            t = self.t_milli[None, None, :]
            was_ge = free[:, :, None] >= t
            now_ge = after[:, :, None] >= t
            cnt_after = cnt_ge[:, None, :] - was_ge + now_ge
            sum_after = (
                sum_lt[:, None, :]
                - np.where(was_ge, 0, free[:, :, None])
                + np.where(now_ge, 0, after[:, :, None])
            )
            idle_after = (idle[:, None] - milli)[:, :, None]
            frag = self._frag(
                cnt_after, sum_after, idle_after, cpu_after[:, None, None], allowed[:, None, :]
            )
            frag[free < milli] = np.nan
            return frag
        taken = demand.gpu_count if (demand.gpu_count and not demand.shared) else 0
        # Whole devices: `taken` fully free devices drop to 0, which only lowers cnt_ge for
        # every GPU shape (their thresholds are in (0, 1000]); sum_lt does not change.
        cnt_after = cnt_ge - np.where(self.t_gpu, taken, 0)
        idle_after = idle - taken * MILLI_PER_GPU
        return self._frag(cnt_after, sum_lt, idle_after[:, None], cpu_after[:, None], allowed)
