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
    #: May it go to every zone of the pool (so zones need not be looked at)?
    everywhere: bool = True


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
    removed; ``closed`` rows take nothing more (a pod with inter-pod rules has them alone).

    One integer matrix holds every row (zone, CPU, memory, units, the best device, the fully
    free devices, closed, then milli-GPU per device, MIG slices per profile, extended
    resources), so that copying the rows, putting them back or writing a whole row is one
    operation; the named columns are views of it."""

    def __init__(self, empty: EmptyNode, rows: int = 16) -> None:
        self.empty = empty
        self.size = 0
        g, p = empty.devices.size, empty.mig.size
        self._devices = slice(_FIXED, _FIXED + g)
        self._mig = slice(_FIXED + g, _FIXED + g + p)
        self._extended = slice(_FIXED + g + p, _FIXED + g + p + empty.extended.size)
        #: Where the devices, the MIG slices and the extended resources start in a row.
        self.layout = (_FIXED, _FIXED + g, _FIXED + g + p)
        self._empty_row = np.concatenate(
            [
                [0, empty.cpu, empty.memory, empty.units, empty.devices.max(initial=0),
                 np.count_nonzero(empty.devices >= MILLI_PER_GPU), 0],
                empty.devices, empty.mig, empty.extended,
            ]
        ).astype(np.int64)  # fmt: skip
        self.any_closed = False
        self._most: tuple[int, int, int, int] | None = None
        self._bind(np.zeros((max(rows, 1), self._empty_row.size), np.int64))

    def _bind(self, data: IntArray) -> None:
        self.data = data
        self.zone = data[:, 0]
        self.cpu = data[:, 1]
        self.memory = data[:, 2]
        self.units = data[:, 3]
        #: Per row: the most milli-GPU free on one device, and the devices fully free (so that
        #: the rows a pod may fit on are found without reading every device).
        self.best = data[:, 4]
        self.whole = data[:, 5]
        self.closed = data[:, 6]
        self.devices = data[:, self._devices]
        self.mig = data[:, self._mig]
        self.extended = data[:, self._extended]

    def add(self, zones: Sequence[int] | IntArray) -> IntArray:
        """Append empty nodes in ``zones`` (indices into the pool's zones); their rows."""
        count = len(zones)
        start, end = self.size, self.size + count
        if end > self.data.shape[0]:
            grown = np.zeros((max(2 * self.data.shape[0], end), self._empty_row.size), np.int64)
            grown[:start] = self.data[:start]
            self._bind(grown)
        self.data[start:end] = self._empty_row
        self.zone[start:end] = zones
        self.size = end
        self._most = None
        return np.arange(start, end, dtype=np.int64)

    def add_runs(self, zones: Sequence[int], counts: Sequence[int]) -> int:
        """Append ``counts[i]`` empty nodes in ``zones[i]``, run after run; the first new row."""
        start = self.size
        end = start + sum(counts)
        if end > self.data.shape[0]:
            grown = np.zeros((max(2 * self.data.shape[0], end), self._empty_row.size), np.int64)
            grown[:start] = self.data[:start]
            self._bind(grown)
        self.data[start:end] = self._empty_row
        at = start
        for zone, count in zip(zones, counts, strict=True):
            self.zone[at : at + count] = zone
            at += count
        self.size = end
        self._most = None
        return start

    @property
    def most_known(self) -> bool:
        """Is the most free of each column (:meth:`most`) known without working it out?"""
        return self._most is not None

    def copy(self) -> NodeColumns:
        """A copy of the rows in use (for a trial; :meth:`restore` puts one back)."""
        twin = object.__new__(NodeColumns)
        twin.empty, twin.size = self.empty, self.size
        twin._devices, twin._mig, twin._extended = self._devices, self._mig, self._extended
        twin.layout = self.layout
        twin._empty_row, twin.any_closed, twin._most = self._empty_row, self.any_closed, self._most
        twin._bind(self.data[: self.size].copy())
        return twin

    def restore(self, saved: NodeColumns) -> None:
        """Back to ``saved`` (a :meth:`copy` of this state)."""
        if saved.size > self.data.shape[0]:
            self._bind(np.zeros((saved.size, self._empty_row.size), np.int64))
        self.data[: saved.size] = saved.data[: saved.size]
        self.size = saved.size
        self.any_closed = saved.any_closed
        self._most = saved._most

    def paste_rows(self, other: NodeColumns, rows: IntArray) -> None:
        """Take ``rows`` as ``other`` (a changed :meth:`copy` of this state) has them."""
        self.data[rows] = other.data[rows]
        self.any_closed = self.any_closed or other.any_closed
        self._most = None

    def set_rows(self, rows: slice, like: IntArray) -> None:
        """Make ``rows`` what ``like`` is (a row of :meth:`row_after`; zones kept)."""
        self.data[rows, 1:] = like[1:]
        self.any_closed = self.any_closed or bool(like[6])
        self._most = None

    def row_after(self, shape: ShapeOnPool, pods: int) -> IntArray:
        """An empty node's row after taking ``pods`` pods of ``shape`` (within its
        capacity), worked out in plain integers (:func:`commit` on one row)."""
        values: list[int] = self._empty_row.tolist()
        _row_take(values, shape, self.layout, pods)
        return np.array(values, np.int64)

    def might_fit(self, shape: ShapeOnPool) -> bool:
        """Could a pod of ``shape`` fit on some row, by the most free of each cheap column
        (kept until the rows change: once a pool is full, pods that fit nowhere are turned
        away at once)."""
        most = self.most()
        if most is None:
            return False
        cpu, memory, best, whole = most
        if shape.cpu > cpu or shape.memory > memory:
            return False
        if shape.devices:
            return whole >= shape.devices if shape.milli >= MILLI_PER_GPU else best >= shape.milli
        return True

    def most(self) -> tuple[int, int, int, int] | None:
        """The most free CPU, memory, milli-GPU on one device, and fully free devices, of any
        row (None: no rows); kept until the rows change."""
        if not self.size:
            return None
        if self._most is None:
            most = self.data[: self.size, 1:6].max(axis=0)
            self._most = (int(most[0]), int(most[1]), int(most[3]), int(most[4]))
        return self._most

    @classmethod
    def of_empty(cls, empty: EmptyNode, count: int, zone: int = 0) -> NodeColumns:
        """``count`` empty nodes in ``zone``."""
        columns = cls(empty, count)
        columns.add([zone] * count)
        return columns


#: Columns before the devices: zone, CPU, memory, units, best device, free devices, closed.
_FIXED = 7


def candidates(columns: NodeColumns, shape: ShapeOnPool) -> IntArray:
    """The rows where a pod of ``shape`` may still fit, by the cheap columns (CPU, the best
    device, the free devices, MIG slices): a superset of the rows :func:`capacity` finds room
    on, far fewer than all once nodes fill up."""
    n = columns.size
    if shape.devices:
        if shape.milli >= MILLI_PER_GPU:
            ok = columns.whole[:n] >= shape.devices
        else:
            ok = columns.best[:n] >= shape.milli
        if shape.cpu:
            ok &= columns.cpu[:n] >= shape.cpu
    elif shape.mig_count:
        ok = columns.mig[:n, shape.mig_profile] >= shape.mig_count
    elif shape.cpu:
        ok = columns.cpu[:n] >= shape.cpu
    else:
        ok = columns.memory[:n] >= shape.memory
    found: IntArray = np.flatnonzero(ok)
    return found


def capacity(columns: NodeColumns, shape: ShapeOnPool, rows: IntArray | None = None) -> IntArray:
    """How many more pods of ``shape`` each of ``rows`` (default: every row) takes."""
    n = columns.size
    pick: IntArray | slice = slice(0, n) if rows is None else rows
    fit = np.full(n if rows is None else rows.size, UNBOUNDED, np.int64)
    if shape.cpu:
        np.minimum(fit, columns.cpu[pick] // shape.cpu, out=fit)
    if shape.memory:
        np.minimum(fit, columns.memory[pick] // shape.memory, out=fit)
    if shape.units:
        np.minimum(fit, columns.units[pick] // shape.units, out=fit)
    if shape.devices:
        np.minimum(fit, _device_fit(columns.devices[pick], shape), out=fit)
    if shape.mig_count:
        np.minimum(fit, columns.mig[pick, shape.mig_profile] // shape.mig_count, out=fit)
    for column, amount in shape.extended:
        np.minimum(fit, columns.extended[pick, column] // amount, out=fit)
    if not shape.everywhere:
        fit[~shape.zones[columns.zone[pick]]] = 0
    if columns.any_closed:
        fit[columns.closed[pick] > 0] = 0
    return fit


def fits_on_empty(shape: ShapeOnPool, empty: EmptyNode) -> int:
    """:func:`capacity` on one empty node, in plain integers (it is asked for every distinct
    request and pool, where numpy's per-call cost would dominate)."""
    return fit_on_empty(
        empty, shape.cpu, shape.memory, shape.units, shape.devices, shape.milli,
        shape.mig_profile, shape.mig_count, shape.extended,
    )  # fmt: skip


def fit_on_empty(
    empty: EmptyNode,
    cpu: int,
    memory: int,
    units: int,
    devices: int,
    milli: int,
    mig_profile: int,
    mig_count: int,
    extended: tuple[tuple[int, int], ...],
) -> int:
    """:func:`fits_on_empty` of a shape given by its fields (before it is made)."""
    fit = UNBOUNDED
    for free, need in ((empty.cpu, cpu), (empty.memory, memory), (empty.units, units)):
        if need:
            fit = min(fit, free // need)
    if devices:
        free_devices = empty.devices.tolist()
        if milli >= MILLI_PER_GPU:
            fit = min(fit, sum(d >= MILLI_PER_GPU for d in free_devices) // devices)
        elif devices == 1:
            fit = min(fit, sum(d // milli for d in free_devices))
        else:
            count, _ = _fullest_first(empty.devices[None, :], devices, milli)
            fit = min(fit, int(count[0]))
    if mig_count:
        fit = min(fit, int(empty.mig[mig_profile]) // mig_count)
    for column, amount in extended:
        fit = min(fit, int(empty.extended[column]) // amount)
    return int(fit)


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
    columns._most = None
    columns.cpu[rows] -= counts * shape.cpu
    columns.memory[rows] -= counts * shape.memory
    columns.units[rows] -= counts * shape.units
    if shape.devices:
        devices = _take_devices(columns.devices[rows], shape, counts)
        columns.devices[rows] = devices
        columns.best[rows] = devices.max(axis=1)
        columns.whole[rows] = np.count_nonzero(devices >= MILLI_PER_GPU, axis=1)
    if shape.mig_count:
        columns.mig[rows, shape.mig_profile] -= counts * shape.mig_count
    for column, amount in shape.extended:
        columns.extended[rows, column] -= counts * amount
    if shape.alone:
        columns.closed[rows] = 1
        columns.any_closed = True


def few_fits(
    columns: NodeColumns, shape: ShapeOnPool, rows: IntArray
) -> list[tuple[int, list[int], int]]:
    """:func:`capacity` of a few ``rows``, in plain integers: (row, its values, pods that fit)
    for :func:`take_few`. Where a pod fits on a handful of nodes, numpy's cost per call is most
    of the work; the arithmetic is the column-wise one (a property test holds them together)."""
    data, layout = columns.data, columns.layout
    found = []
    for r in rows.tolist():
        values = data[r].tolist()
        found.append((r, values, _row_fit(values, shape, layout)))
    return found


def take_few(
    columns: NodeColumns, shape: ShapeOnPool, fits: Sequence[tuple[int, list[int], int]], count: int
) -> int:
    """:func:`commit` of ``count`` pods over the rows of :func:`few_fits` (each taking at most
    its fit, first rows first); how many were taken."""
    data, layout = columns.data, columns.layout
    placed = 0
    for r, values, fit in fits:
        take = min(fit, count - placed)
        if take <= 0:
            continue
        _row_take(values, shape, layout, take)
        data[r] = values
        placed += take
        if placed >= count:
            break
    if placed:
        columns._most = None
        columns.any_closed = columns.any_closed or shape.alone
    return placed


def _row_fit(row: list[int], shape: ShapeOnPool, layout: tuple[int, int, int]) -> int:
    """:func:`capacity` of one row (a list in the matrix's layout)."""
    if row[6] or not shape.zones[row[0]]:
        return 0
    fit = UNBOUNDED
    for column, need in ((1, shape.cpu), (2, shape.memory), (3, shape.units)):
        if need:
            fit = min(fit, row[column] // need)
    devices_at, mig_at, extended_at = layout
    if shape.devices:
        devices = row[devices_at:mig_at]
        k, milli = shape.devices, shape.milli
        if milli >= MILLI_PER_GPU:
            fit = min(fit, sum(d >= MILLI_PER_GPU for d in devices) // k)
        elif k == 1:
            fit = min(fit, sum(d // milli for d in devices))
        else:
            fit = min(fit, _replicas(devices, k, milli, UNBOUNDED))
    if shape.mig_count:
        fit = min(fit, row[mig_at + shape.mig_profile] // shape.mig_count)
    for column, amount in shape.extended:
        fit = min(fit, row[extended_at + column] // amount)
    return fit


def _row_take(row: list[int], shape: ShapeOnPool, layout: tuple[int, int, int], count: int) -> None:
    """:func:`commit` of ``count`` pods on one row (a list, changed in place)."""
    row[1] -= count * shape.cpu
    row[2] -= count * shape.memory
    row[3] -= count * shape.units
    devices_at, mig_at, extended_at = layout
    if shape.devices:
        devices = row[devices_at:mig_at]
        k, milli = shape.devices, shape.milli
        if milli >= MILLI_PER_GPU:
            left = count * k
            for p, d in enumerate(devices):
                if left and d >= MILLI_PER_GPU:
                    devices[p] = d - MILLI_PER_GPU
                    left -= 1
        elif k == 1:  # the fullest device that fits first (best fit)
            left = count
            for p in sorted(range(len(devices)), key=lambda p: devices[p]):
                if not left:
                    break
                take = min(left, devices[p] // milli)
                devices[p] -= take * milli
                left -= take
        else:
            _replicas(devices, k, milli, count)
        row[devices_at:mig_at] = devices
        row[4] = max(devices, default=0)
        row[5] = sum(d >= MILLI_PER_GPU for d in devices)
    if shape.mig_count:
        row[mig_at + shape.mig_profile] -= count * shape.mig_count
    for column, amount in shape.extended:
        row[extended_at + column] -= count * amount
    if shape.alone:
        row[6] = 1


def _replicas(devices: list[int], k: int, milli: int, limit: int) -> int:
    """:func:`_fullest_first` on one row's ``devices`` (a list, changed in place)."""
    count = 0
    while count < limit:
        fitting = sorted((d, p) for p, d in enumerate(devices) if d >= milli)
        if len(fitting) < k:
            break
        for _, p in fitting[:k]:
            devices[p] -= milli
        count += 1
    return count


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


__all__ = [
    "UNBOUNDED",
    "EmptyNode",
    "NodeColumns",
    "ShapeOnPool",
    "candidates",
    "capacity",
    "commit",
    "few_fits",
    "fit_on_empty",
    "fits_on_empty",
    "take_few",
]
