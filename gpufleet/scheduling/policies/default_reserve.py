"""Keep room for pods that only fit in few places: a price on every "slot" a placement takes.

A pod asking for k whole GPUs needs one node with k fully free GPUs and its CPU and memory; a
pod restricted to some GPU models (or nodes) needs room on those nodes. Such slots are scarce
only when the pods that need them are expected to outnumber them, so the price of a slot comes
from a supply-and-demand estimate, not from a fixed reserve. Tracked shapes are the
multi-GPU ones and the GPU pods whose nodes are restricted; for each:

* supply ``S_m``: slots the cluster has now (per node ``min(devices with at least the pod's
  milli free // k, cpu_free // cpu, mem_free // mem)`` over the nodes m may use), kept up to
  date row by row;
* demand ``D_m``: pods of shape m expected before the cluster is full: m's share of the pods
  seen so far (learned online: the target workload is cut at 95% of pods and rarely holds
  such shapes) times the pods that the free GPUs can still take. Bigger shapes (more GPUs,
  CPU, memory; a subset of m's nodes) use m's slots too, so they count as m's demand;
* price of one slot: the milli-GPU of the m-pod that would fail without it, times the chance
  that it is needed, ``P(D_m >= S_m)`` (normal approximation).

With many slots and few such pods the price is zero and nothing changes; as slots run short
it rises to the value of the pod, so other pods go where their placement costs no slot (a
node with 5 free GPUs can give one away without losing its 4-GPU slot).

Not done: unrestricted one-GPU pods and shares (everyone competes for their room, which the
gap values and CPU terms of the default policy handle), and pods that leave (the estimate
is of arrivals until full).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable

FloatArray = npt.NDArray[np.float64]

#: Prices below this (milli-GPU, a thousandth of a GPU) count as zero: no per-row work.
NEGLIGIBLE_PRICE = 1.0
#: Logistic approximation of the standard normal CDF: Phi(z) ~ 1 / (1 + exp(-1.702 z)).
_LOGISTIC_SCALE = 1.702


class SlotReserve:
    """Learns hard-to-place shapes from arrivals and prices the slots they need.

    Shapes are grouped by (milli per device, devices, allowed nodes, the node sizes whose CPU
    fits them); a group's slot asks for the least CPU and memory of its members.
    """

    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self.pods_seen = 0
        self.milli_seen = 0
        self._arrivals: dict[tuple[object, ...], int] = {}  # per signature, ever
        self._group_of: dict[tuple[object, ...], int] = {}  # signature -> group (-1: easy)
        self._group_index: dict[tuple[int, int, int, int], int] = {}
        self._class_of: dict[bytes, int] = {}
        self._class_masks = np.zeros((0, 0), np.bool_)  # [class, row]
        self._class_within = np.zeros((0, 0), np.bool_)  # [a, b]: a's rows within b's
        self._cpu_sizes = np.zeros(0, np.int64)
        self._counts = np.zeros(0, np.float64)
        self._class = np.zeros(0, np.int64)
        self._need = np.zeros((0, 4), np.int64)  # per group: milli/device, devices, CPU, memory
        self._wider = np.zeros((0, 0), np.float64)  # [i, j]: j's pods use i's slots (ratio)
        self._devices = np.zeros((0, 0), np.int64)  # [row, group]: devices with room for it
        self._slots = np.zeros((0, 0), np.int64)  # [row, group], allowed nodes only
        self._idle = np.zeros(0, np.int64)
        self._mark = 0
        self._supply = np.zeros(0, np.int64)
        self._idle_total = 0
        self._topology = -1
        self.prices = np.zeros(0, np.float64)
        self._priced_at: tuple[int, int, int] = (-1, -1, -1)
        self._priced = False

    # ------------------------------------------------------------------------- learning
    def observe(self, demand: Demand) -> None:
        """Count one arriving pod (the scheduling core calls this once per pod)."""
        self.pods_seen += 1
        self.milli_seen += demand.gpu_count * demand.gpu_milli
        signature = demand.signature
        self._arrivals[signature] = self._arrivals.get(signature, 0) + 1
        if self._topology != self.table.topology_version:
            self._reset()
        group = self._group_of.get(signature)
        if group is None:  # new, or the node set changed: count its earlier arrivals too
            group = self._group_of[signature] = self._classify(demand)
            if group >= 0:
                self._counts[group] += self._arrivals[signature] - 1
        if group >= 0:
            self._counts[group] += 1

    def _classify(self, demand: Demand) -> int:
        """The group of a new signature, or -1 when its pods are easy to place."""
        table = self.table
        n = table.size
        if demand.mig_count or not demand.gpu_count or demand.milli_by_row is not None:
            return -1
        static = demand.static_mask
        if n == 0 or static.size != n:  # no nodes yet (pools at zero): nothing to keep
            return -1
        if demand.gpu_count == 1:
            gpu_nodes = table.schedulable[:n] & (table.gpu_count[:n] > 0)
            if not (gpu_nodes & ~static).any():
                return -1
        node_class = self._node_class(static)
        fit = int(np.searchsorted(self._cpu_sizes, demand.cpu_milli))
        key = (demand.gpu_milli, demand.gpu_count, node_class, fit)
        group = self._group_index.get(key)
        cpu, memory = max(demand.cpu_milli, 1), max(demand.memory_mib, 1)
        if group is None:
            group = self._group_index[key] = self._counts.size
            self._add_group(demand.gpu_milli, demand.gpu_count, cpu, memory, node_class)
        elif cpu < self._need[group, 2] or memory < self._need[group, 3]:
            self._need[group, 2] = min(cpu, int(self._need[group, 2]))
            self._need[group, 3] = min(memory, int(self._need[group, 3]))
            self._count_column(group)
        return group

    def _node_class(self, static: BoolArray) -> int:
        key = static.tobytes()
        found = self._class_of.get(key)
        if found is not None:
            return int(found)
        masks = np.vstack([self._class_masks.reshape(-1, static.size), static[None, :]])
        self._class_masks = masks
        self._class_within = ~np.any(masks[:, None, :] & ~masks[None, :, :], axis=2)
        self._class_of[key] = masks.shape[0] - 1
        return int(masks.shape[0]) - 1

    def _add_group(self, milli: int, devices: int, cpu: int, memory: int, node_class: int) -> None:
        table = self.table
        self._counts = np.append(self._counts, 0.0)
        self._class = np.append(self._class, node_class)
        self._need = np.vstack([self._need, np.array([[milli, devices, cpu, memory]], np.int64)])
        self._devices = np.hstack([self._devices, np.zeros((table.capacity, 1), np.int64)])
        self._slots = np.hstack([self._slots, np.zeros((table.capacity, 1), np.int64)])
        self._supply = np.append(self._supply, 0)
        need = self._need
        covers = np.all(need[:, None, :] >= need[None, :, :], axis=2)  # [j, i]: j needs more
        within = self._class_within[self._class][:, self._class]  # [j, i]: j's nodes in i's
        ratio = need[:, 1][:, None] / need[:, 1][None, :]
        self._wider = np.where(covers & within, ratio, 0.0).T
        self._count_column(self._counts.size - 1)

    # ------------------------------------------------------------------------- supply
    def _reset(self) -> None:
        """Forget groups and per-row counts (the node set changed); arrival totals stay."""
        table = self.table
        n = table.size
        self._group_of.clear()
        self._group_index.clear()
        self._class_of.clear()
        self._class_masks = np.zeros((0, n), np.bool_)
        self._class_within = np.zeros((0, 0), np.bool_)
        self._cpu_sizes = np.unique(table.cpu_cap[:n][table.alive[:n]])
        self._counts = np.zeros(0)
        self._class = np.zeros(0, np.int64)
        self._need = np.zeros((0, 4), np.int64)
        self._wider = np.zeros((0, 0))
        self._devices = np.zeros((table.capacity, 0), np.int64)
        self._slots = np.zeros((table.capacity, 0), np.int64)
        self._supply = np.zeros(0, np.int64)
        self._idle = np.where(table.alive[: table.capacity], table.gpu_free.sum(axis=1), 0)
        self._idle_total = int(self._idle.sum())
        self._mark = table.change_mark
        self._topology = table.topology_version

    def _count_column(self, group: int) -> None:
        """Recount one group's devices and slots on every row."""
        table = self.table
        n = table.size
        devices = (table.gpu_free[:n] >= self._need[group, 0]).sum(axis=1)
        slots = self._slots_of(
            devices[:, None], table.cpu_free[:n], table.mem_free[:n], np.array([group])
        )[:, 0]
        slots = np.where(self._class_masks[self._class[group]], slots, 0)
        self._devices[:n, group] = devices
        self._slots[:n, group] = slots
        self._supply[group] = int(slots.sum())

    def _refresh(self) -> None:
        table = self.table
        if self._topology != table.topology_version or self._idle.size != table.capacity:
            self._reset()
        stale = table.changed_since(self._mark)
        self._mark = table.change_mark
        if stale.size == 0:
            return
        free = table.gpu_free[stale]
        if self._counts.size:
            devices = (free[:, :, None] >= self._need[:, 0]).sum(axis=1)
            fresh = self._slots_of(devices, table.cpu_free[stale], table.mem_free[stale])
            fresh *= self._class_masks[self._class][:, stale].T
            self._supply += (fresh - self._slots[stale]).sum(axis=0)
            self._devices[stale] = devices
            self._slots[stale] = fresh
        idle = np.where(table.alive[stale], free.sum(axis=1), 0)
        self._idle_total += int((idle - self._idle[stale]).sum())
        self._idle[stale] = idle

    def _slots_of(
        self,
        devices: IntArray,
        cpu_free: IntArray,
        mem_free: IntArray,
        groups: IntArray | slice = slice(None),
    ) -> IntArray:
        """Slots per group (last axis) from devices with room, free CPU and memory."""
        need = self._need[groups]
        by_gpu = devices // need[:, 1]
        by_cpu = np.maximum(cpu_free, 0)[..., None] // need[:, 2]
        by_mem = np.maximum(mem_free, 0)[..., None] // need[:, 3]
        result: IntArray = np.minimum(np.minimum(by_gpu, by_cpu), by_mem)
        return result

    # ------------------------------------------------------------------------- prices
    def update_prices(self) -> bool:
        """Recompute the slot prices; True when any of them matters."""
        moment = (self.table.clock, self.pods_seen, self._counts.size)
        if moment == self._priced_at:
            return self._priced
        self._priced_at = moment
        self._priced = self._update_prices()
        return self._priced

    def _update_prices(self) -> bool:
        self._refresh()
        if not self._counts.size or self.milli_seen == 0:
            self.prices = np.zeros(self._counts.size)
            return False
        pods_left = self._idle_total * self.pods_seen / self.milli_seen
        expected = self._wider @ (self._counts / self.pods_seen * pods_left)
        z = (expected - self._supply + 0.5) / np.sqrt(expected + 1.0)
        with np.errstate(over="ignore"):
            chance = 1.0 / (1.0 + np.exp(-_LOGISTIC_SCALE * z))
        self.prices = (self._need[:, 0] * self._need[:, 1]) * chance
        return bool((self.prices > NEGLIGIBLE_PRICE).any())

    def loss(
        self,
        rows: IntArray,
        device_free: IntArray | None,
        milli: IntArray,
        devices_taken: int,
        cpu_after: IntArray,
        mem_after: IntArray,
    ) -> FloatArray:
        """Milli-GPU value of the slots that ``rows`` lose to one placement.

        The pod takes ``milli`` from a device that had ``device_free`` (a share; arrays of
        shape ``(rows, options)``), or ``devices_taken`` fully free devices, or neither; it
        leaves ``cpu_after`` and ``mem_after`` (shape ``(rows, 1)`` with options, else
        ``(rows,)``). Uses the prices of the last :meth:`update_prices`.
        """
        options = device_free.shape if device_free is not None else rows.shape
        active = np.flatnonzero((self.prices > NEGLIGIBLE_PRICE) & (self._supply > 0))
        if active.size == 0:
            return np.zeros(options)
        before = self._slots[np.ix_(rows, active)]
        present = before.any(axis=0)  # only groups with a slot on some of the rows can lose one
        if not present.all():
            active = active[present]
            before = before[:, present]
            if active.size == 0:
                return np.zeros(options)
        room = self._need[active, 0]
        devices = self._devices[np.ix_(rows, active)]
        if device_free is not None:
            devices = devices[:, None, :]
            before = before[:, None, :]
            had = device_free[..., None] >= room
            keeps = (device_free - milli)[..., None] >= room
            devices = devices - (had & ~keeps)
        else:
            devices = devices - devices_taken
        after = self._slots_of(devices, cpu_after, mem_after, active)
        lost = np.maximum(before - after, 0)  # 0 before on rows the group may not use
        result: FloatArray = lost @ self.prices[active]
        return result
