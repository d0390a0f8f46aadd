"""What a workload asks and holds, as quotas count it, kept while it waits.

A gang's request (:func:`~.admission.requested` of its first ``gang_size`` pods, whole GPUs at
the least a whole-GPU unit holds on any node) and the same as the quota tree's amounts are
asked many times while a workload waits (ordering, admission, preemption, holds): they are kept
per waiting workload, dropped when most have left or when what a whole GPU holds changes. What
a placed gang holds (:func:`~.admission.used`, GPUs per model under the quota key of their
model) is derived from where it landed.

What it does not do: check quotas or charge them (:class:`~.admission.Quotas`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.resources import CPU, GPU, MEMORY
from gpufleet.model.workload import Workload
from gpufleet.scheduling.admission import Quotas, requested, used
from gpufleet.scheduling.engine import Bound
from gpufleet.scheduling.node_table import NodeTable

#: A kept request: the workload it was made for, as resources, and as the tree's amounts.
RequestEntry = tuple[Workload, dict[str, int], tuple[int, ...]]


class Requests:
    """See the module docstring."""

    def __init__(self, table: NodeTable, quotas: Quotas, waiting: Callable[[], int]) -> None:
        """``waiting``: how many workloads wait now (the kept requests are bounded by it)."""
        self.table = table
        self.quotas = quotas
        #: The per-model quota key a GPU model counts under (None: no quota names it).
        self.model_key = quotas.tree.model_keys
        self._keys_beyond_request = bool(set(quotas.tree.keys) - {CPU, MEMORY, GPU})
        self._waiting = waiting
        self._entries: dict[str, RequestEntry] = {}
        self._least = MILLI_PER_GPU

    def entry(self, workload: Workload) -> RequestEntry:
        least = self.least_whole_milli()
        if least != self._least:
            self._entries.clear()
            self._least = least
        known = self._entries.get(workload.key)
        if known is None or known[0] is not workload:
            if len(self._entries) > 2 * self._waiting() + 1024:
                self._entries.clear()  # most of their workloads have left
            request = requested(workload.pods[: workload.gang_size], least)
            amounts = self.quotas.tree.limited(request)
            known = self._entries[workload.key] = (workload, request, amounts)
        return known

    def request_of(self, workload: Workload) -> dict[str, int]:
        """:func:`requested` of the gang (read-only; kept while it waits)."""
        return self.entry(workload)[1]

    def amounts_of(self, workload: Workload) -> tuple[int, ...]:
        """:meth:`request_of` as the quota tree's amounts (``tree.limited``)."""
        return self.entry(workload)[2]

    def usage_of(self, bound: Sequence[Bound]) -> dict[str, int]:
        """:func:`used` of placed pods, GPUs per model under the quota keys of their models."""
        models = self.table.row_models
        return used(bound, [models[b.allocation.row] for b in bound], self.model_key)

    def usage_is_request(self, workload: Workload) -> bool:
        """Is what the workload's gang will hold once placed, as quotas count it, what it asks
        (:func:`used` equals :func:`requested` on every key a quota limits), wherever it goes?
        Not with per-model quotas or namespace caps (keys the request lacks), nor for GPU
        memory shares or MIG slices (their milli-GPU depends on the node)."""
        if self._keys_beyond_request or self.quotas.namespace_caps:
            return False
        if self.table.time_sliced:  # whole GPUs hold a replica or a device
            return False
        return all(
            not p.gpu.memory_mib and not p.gpu.mig_count and not (p.gpu.is_shared and p.gpu.units)
            for p in workload.pods[: workload.gang_size]
        )

    def least_whole_milli(self) -> int:
        """The least a whole-GPU unit holds on any node (a replica where nodes time-slice)."""
        table = self.table
        if not table.time_sliced:
            return MILLI_PER_GPU
        n = table.size
        usable = table.whole_milli[:n][table.alive[:n] & (table.gpu_count[:n] > 0)]
        return int(usable.min()) if usable.size else MILLI_PER_GPU
