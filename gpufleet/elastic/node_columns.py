"""The nodes of one pool that a scale-up plans, as columns, and the arithmetic of fitting pods
of one shape on all of them at once.

Owns :class:`ShapeOnPool` (what one pod of a shape takes on a node of a pool), :class:`EmptyNode`
(what a pool's node offers), :class:`NodeColumns` (free CPU, memory, units of the GPU
resource, milli-GPU per device, MIG slices per profile and extended resources of each planned
node, with its zone), :func:`capacity` (how many pods of a shape each node still takes) and
:func:`commit` (take them). Each is a handful of numpy operations over all nodes, never a
Python loop over nodes.

How devices are counted follows the placement engine: a pod of ``devices`` GPUs at ``milli``
per device takes that many *distinct* devices with ``milli`` free each (whole GPUs: fully free
devices); ``t`` such pods fit on a node when ``sum over devices of min(free // milli, t) >= t *
devices`` (each device serves a pod at most once), which for whole GPUs is ``t <= free devices
// devices`` and for a share ``t <= sum of free // milli``. Shares go to devices first-fit.

What it does not do: choose which pods or pools (:mod:`.packing`, :mod:`.nodepools`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.model import MILLI_PER_GPU
from gpufleet.scheduling.node_table import BoolArray, IntArray

#: What "as many as you like" is when a pod asks for nothing a node runs out of.
UNBOUNDED = 1 << 40


@dataclass(frozen=True, slots=True)
class ShapeOnPool:
    """What one pod of a shape takes on one node of a pool (columns as in the catalog)."""

    cpu: int
    memory: int
    #: GPUs (distinct devices) it takes, and milli-GPU on each (1000: whole devices).
    devices: int
    milli: int
    #: Units of the node's GPU resource (the kubelet's count).
    units: int
    #: MIG profile column (-1: none) and slices of it.
    mig_profile: int
    mig_count: int
    #: Extended resources: (column, units).
    extended: tuple[tuple[int, int], ...]
    #: Per zone of the pool (its order; one entry for a pool without zones): may it go there?
    zones: BoolArray
    #: How many fit on one empty node of the pool (in a zone it may go to); 0 until known.
    per_empty_node: int = 0
    #: Has inter-pod rules: it gets a node of its own.
    alone: bool = False


@dataclass(frozen=True, slots=True)
class EmptyNode:
    """What one empty node of a pool offers, in the catalog's columns."""

    cpu: int
    memory: int
    units: int
    devices: IntArray
    mig: IntArray
    extended: IntArray


class NodeColumns:
    """The planned nodes of one pool (see the module docstring). Rows are appended, never
    removed; ``closed`` rows take nothing more (a pod with inter-pod rules has them alone)."""

    def __init__(self, empty: EmptyNode, rows: int = 16) -> None:
        self.empty = empty
        self.size = 0
        self._allocate(max(rows, 1))

    def _allocate(self, rows: int) -> None:
        empty = self.empty
        self.zone = np.zeros(rows, np.int64)
        self.cpu = np.zeros(rows, np.int64)
        self.memory = np.zeros(rows, np.int64)
        self.units = np.zeros(rows, np.int64)
        self.devices = np.zeros((rows, empty.devices.size), np.int64)
        self.mig = np.zeros((rows, empty.mig.size), np.int64)
        self.extended = np.zeros((rows, empty.extended.size), np.int64)
        self.closed = np.zeros(rows, np.bool_)

    def add(self, zones: Sequence[int]) -> IntArray:
        """Append empty nodes in ``zones`` (indices into the pool's zones); their rows."""
        count = len(zones)
        start = self.size
        if start + count > self.zone.size:
            old = self.copy()
            self._allocate(max(2 * self.zone.size, start + count))
            self._paste(old)
        end = start + count
        empty = self.empty
        self.zone[start:end] = zones
        self.cpu[start:end] = empty.cpu
        self.memory[start:end] = empty.memory
        self.units[start:end] = empty.units
        self.devices[start:end] = empty.devices
        self.mig[start:end] = empty.mig
        self.extended[start:end] = empty.extended
        self.closed[start:end] = False
        self.size = end
        return np.arange(start, end, dtype=np.int64)

    def copy(self) -> NodeColumns:
        """A copy of the rows in use (for a trial; :meth:`restore` puts one back)."""
        twin = object.__new__(NodeColumns)
        twin.empty = self.empty
        twin.size = n = self.size
        twin.zone = self.zone[:n].copy()
        twin.cpu = self.cpu[:n].copy()
        twin.memory = self.memory[:n].copy()
        twin.units = self.units[:n].copy()
        twin.devices = self.devices[:n].copy()
        twin.mig = self.mig[:n].copy()
        twin.extended = self.extended[:n].copy()
        twin.closed = self.closed[:n].copy()
        return twin

    def restore(self, saved: NodeColumns) -> None:
        """Back to ``saved`` (a :meth:`copy` of this state)."""
        if saved.size > self.zone.size:
            self._allocate(saved.size)
        self._paste(saved)
        self.size = saved.size

    def paste_rows(self, other: NodeColumns, rows: IntArray) -> None:
        """Take ``rows`` as ``other`` (a changed :meth:`copy` of this state) has them."""
        self.cpu[rows] = other.cpu[rows]
        self.memory[rows] = other.memory[rows]
        self.units[rows] = other.units[rows]
        self.devices[rows] = other.devices[rows]
        self.mig[rows] = other.mig[rows]
        self.extended[rows] = other.extended[rows]
        self.closed[rows] = other.closed[rows]

    def _paste(self, saved: NodeColumns) -> None:
        n = saved.size
        self.zone[:n] = saved.zone[:n]
        self.cpu[:n] = saved.cpu[:n]
        self.memory[:n] = saved.memory[:n]
        self.units[:n] = saved.units[:n]
        self.devices[:n] = saved.devices[:n]
        self.mig[:n] = saved.mig[:n]
        self.extended[:n] = saved.extended[:n]
        self.closed[:n] = saved.closed[:n]

    @classmethod
    def of_empty(cls, empty: EmptyNode, count: int, zone: int = 0) -> NodeColumns:
        """``count`` empty nodes in ``zone``."""
        columns = cls(empty, count)
        columns.add([zone] * count)
        return columns


def capacity(columns: NodeColumns, shape: ShapeOnPool, rows: IntArray | None = None) -> IntArray:
    """How many more pods of ``shape`` each of ``rows`` (default: every row) takes."""
    if rows is None:
        rows = np.arange(columns.size, dtype=np.int64)
    fit = np.full(rows.size, UNBOUNDED, np.int64)
    if shape.cpu:
        np.minimum(fit, columns.cpu[rows] // shape.cpu, out=fit)
    if shape.memory:
        np.minimum(fit, columns.memory[rows] // shape.memory, out=fit)
    if shape.units:
        np.minimum(fit, columns.units[rows] // shape.units, out=fit)
    if shape.devices:
        np.minimum(fit, _device_fit(columns.devices[rows], shape), out=fit)
    if shape.mig_count:
        np.minimum(fit, columns.mig[rows, shape.mig_profile] // shape.mig_count, out=fit)
    for column, amount in shape.extended:
        np.minimum(fit, columns.extended[rows, column] // amount, out=fit)
    fit[~shape.zones[columns.zone[rows]] | columns.closed[rows]] = 0
    return fit


def _device_fit(devices: IntArray, shape: ShapeOnPool) -> IntArray:
    k, milli = shape.devices, shape.milli
    if milli >= MILLI_PER_GPU:
        whole: IntArray = np.count_nonzero(devices >= MILLI_PER_GPU, axis=1) // k
        return whole
    if k == 1:
        shares: IntArray = (devices // milli).sum(axis=1)
        return shares
    count, _ = _fullest_first(devices, k, milli)
    return count


def _fullest_first(
    devices: IntArray, k: int, milli: int, limit: IntArray | None = None
) -> tuple[IntArray, IntArray]:
    """Pods of ``k`` distinct devices at ``milli`` each, one after the other on every row, each
    on the fullest devices that still fit (as the placement engine chooses replicas of a
    time-sliced node: :func:`~gpufleet.scheduling.policies.devices.replica_devices`), until
    none fits or ``limit`` pods are placed: how many per row, and the devices after."""
    free = devices.copy()
    count = np.zeros(free.shape[0], np.int64)
    active = np.ones(free.shape[0], np.bool_) if limit is None else limit > 0
    while True:
        fits = free >= milli
        active &= np.count_nonzero(fits, axis=1) >= k
        rows = np.flatnonzero(active)
        if rows.size == 0:
            return count, free
        order = np.argsort(np.where(fits[rows], free[rows], _NEVER), axis=1, kind="stable")
        free[rows[:, None], order[:, :k]] -= milli
        count[rows] += 1
        if limit is not None:
            active &= count < limit


#: Sorts after every free amount.
_NEVER = np.iinfo(np.int64).max


def commit(columns: NodeColumns, shape: ShapeOnPool, rows: IntArray, counts: IntArray) -> None:
    """Take ``counts`` pods of ``shape`` on ``rows`` (each within its :func:`capacity`)."""
    keep = counts > 0
    rows, counts = rows[keep], counts[keep]
    if rows.size == 0:
        return
    columns.cpu[rows] -= counts * shape.cpu
    columns.memory[rows] -= counts * shape.memory
    columns.units[rows] -= counts * shape.units
    if shape.devices:
        columns.devices[rows] = _take_devices(columns.devices[rows], shape, counts)
    if shape.mig_count:
        columns.mig[rows, shape.mig_profile] -= counts * shape.mig_count
    for column, amount in shape.extended:
        columns.extended[rows, column] -= counts * amount
    if shape.alone:
        columns.closed[rows] = True


def _take_devices(devices: IntArray, shape: ShapeOnPool, counts: IntArray) -> IntArray:
    k, milli = shape.devices, shape.milli
    if milli >= MILLI_PER_GPU:
        free = devices >= MILLI_PER_GPU
        taken = free & (np.cumsum(free, axis=1) <= counts[:, None] * k)
        result: IntArray = np.where(taken, devices - MILLI_PER_GPU, devices)
        return result
    if k > 1:
        _, after = _fullest_first(devices, k, milli, counts)
        return after
    # Shares go to the fullest device that fits, as the engine's best fit puts them: filling
    # the fitting devices from the fullest up.
    slots = devices // milli
    order = np.argsort(np.where(slots > 0, devices, _NEVER), axis=1, kind="stable")
    ordered = np.take_along_axis(slots, order, axis=1)
    before = np.cumsum(ordered, axis=1) - ordered
    take = np.zeros_like(slots)
    np.put_along_axis(take, order, np.clip(counts[:, None] - before, 0, ordered), axis=1)
    shared: IntArray = devices - take * milli
    return shared


__all__ = ["UNBOUNDED", "EmptyNode", "NodeColumns", "ShapeOnPool", "capacity", "commit"]
