"""The node table's storage: its numpy columns, one row per node, and their growth.

Owns :class:`TableColumns`, the base of :class:`~gpufleet.scheduling.node_table.NodeTable`:
the columns (capacity and free CPU, memory, milli-GPU per device, MIG slices per profile,
extended resources, units of the GPU resource; the static facts filters read), the registries
whose every new entry adds a column (MIG profiles, extended resource names, hard taints), each
row's free MIG slices, and the table's pod index, all grown together when a node needs more
rows or devices than there is room for, contents kept. What the columns mean, and every change
to them, is the table's (:mod:`gpufleet.scheduling.node_table`).
"""

from __future__ import annotations

import numpy as np

from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.node import Taint
from gpufleet.scheduling.pod_index import PodIndex
from gpufleet.scheduling.table_records import IntArray

#: The numpy columns, copied over when the table grows.
_COLUMNS = (
    "cpu_cap", "mem_cap", "cpu_free", "mem_free", "gpu_free", "gpu_count",
    "full_free", "max_free", "gpu_mem", "model_id", "mig_cap", "mig_free", "tag_count", "alive",
    "schedulable", "version", "hard_taints", "ext_cap", "ext_free", "units_cap", "units_free",
    "replica_milli", "whole_milli", "resource_id", "one_unit",
)  # fmt: skip


class TableColumns:
    """See the module docstring: ``max_gpus`` devices per row, room for ``capacity`` rows."""

    def __init__(self, max_gpus: int, capacity: int) -> None:
        self.max_gpus = max_gpus
        self.size = 0
        self.mig_profiles: list[str] = []
        self.mig_profile_id: dict[str, int] = {}
        self.taints: list[Taint] = []
        self.taint_id: dict[Taint, int] = {}
        self.ext_names: list[str] = []
        self.ext_id: dict[str, int] = {}
        self.pod_index = PodIndex()
        #: Per row, per MIG profile id: the free slices, (position, slot).
        self._free_slices: list[list[list[tuple[int, int]]]] = []
        self._allocate_columns(capacity)

    def _allocate_columns(self, capacity: int) -> None:
        g = self.max_gpus
        self.capacity = capacity
        self.cpu_cap = np.zeros(capacity, np.int64)
        self.mem_cap = np.zeros(capacity, np.int64)
        self.cpu_free = np.zeros(capacity, np.int64)
        self.mem_free = np.zeros(capacity, np.int64)
        self.gpu_free = np.zeros((capacity, g), np.int64)
        self.gpu_count = np.zeros(capacity, np.int64)
        self.full_free = np.zeros(capacity, np.int64)
        self.max_free = np.zeros(capacity, np.int64)
        self.gpu_mem = np.zeros(capacity, np.int64)
        self.model_id = np.full(capacity, -1, np.int64)
        self.mig_cap = np.zeros((capacity, 0), np.int64)
        self.mig_free = np.zeros((capacity, 0), np.int64)
        self.tag_count = np.zeros((capacity, g + 1), np.int64)
        self.alive = np.zeros(capacity, np.bool_)
        self.schedulable = np.zeros(capacity, np.bool_)
        self.version = np.zeros(capacity, np.int64)
        self.hard_taints = np.zeros((capacity, 0), np.bool_)
        self.ext_cap = np.zeros((capacity, 0), np.int64)
        self.ext_free = np.zeros((capacity, 0), np.int64)
        self.units_cap = np.zeros(capacity, np.int64)
        self.units_free = np.zeros(capacity, np.int64)
        #: Per row: the least milli-GPU a pod holding one unit holds (1000 without sharing).
        self.replica_milli = np.full(capacity, MILLI_PER_GPU, np.int64)
        #: Per row: what each unit of a whole-GPU request holds of its device.
        self.whole_milli = np.full(capacity, MILLI_PER_GPU, np.int64)
        #: Per row: the GPU resource advertised (index into ``gpu_resources``; -1: no GPUs).
        self.resource_id = np.full(capacity, -1, np.int64)
        #: Per row: the device plugin refuses a pod asking for more than one unit.
        self.one_unit = np.zeros(capacity, np.bool_)
        self.label_ids: dict[str, IntArray] = {}
        self.pod_index.grow(capacity)

    def _grow(self, rows: int, gpus: int) -> None:
        """Make room for ``rows`` rows and ``gpus`` devices per node, keeping the contents."""
        if rows <= self.capacity and gpus <= self.max_gpus:
            return
        old = {name: getattr(self, name) for name in _COLUMNS}
        old_labels = self.label_ids
        old_g = self.max_gpus
        self.max_gpus = max(self.max_gpus, gpus)
        self._allocate_columns(max(rows, 2 * self.capacity))
        n = self.size
        for name, array in old.items():
            new = getattr(self, name)
            if array.ndim == 1:
                new[:n] = array[:n]
            elif name == "tag_count":
                new[:n, : old_g + 1] = array[:n]
            elif name == "gpu_free":
                new[:n, :old_g] = array[:n]
            else:
                resized = np.zeros((self.capacity, array.shape[1]), array.dtype)
                resized[:n] = array[:n]
                setattr(self, name, resized)
        for key, ids in old_labels.items():
            column = np.full(self.capacity, -1, np.int64)
            column[:n] = ids[:n]
            self.label_ids[key] = column

    def _add_mig_profile(self, profile: str) -> int:
        pid = len(self.mig_profiles)
        self.mig_profiles.append(profile)
        self.mig_profile_id[profile] = pid
        self.mig_cap = np.hstack([self.mig_cap, np.zeros((self.capacity, 1), np.int64)])
        self.mig_free = np.hstack([self.mig_free, np.zeros((self.capacity, 1), np.int64)])
        for slices in self._free_slices:
            slices.append([])
        return pid

    def _add_extended(self, name: str) -> int:
        rid = len(self.ext_names)
        self.ext_names.append(name)
        self.ext_id[name] = rid
        self.ext_cap = np.hstack([self.ext_cap, np.zeros((self.capacity, 1), np.int64)])
        self.ext_free = np.hstack([self.ext_free, np.zeros((self.capacity, 1), np.int64)])
        return rid

    def _add_taint(self, taint: Taint) -> int:
        tid = len(self.taints)
        self.taints.append(taint)
        self.taint_id[taint] = tid
        self.hard_taints = np.hstack([self.hard_taints, np.zeros((self.capacity, 1), np.bool_)])
        return tid
