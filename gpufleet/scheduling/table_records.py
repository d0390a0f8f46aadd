"""What a pod takes on one row of the node table, what it holds there, and what the table saves
of a row: the records :class:`~gpufleet.scheduling.node_table.NodeTable` takes and gives.

Owns :class:`Claim` (what one pod takes on one row: the one argument of
:meth:`NodeTable.allocate <gpufleet.scheduling.node_table.NodeTable.allocate>`, for a new
placement and for a pod put back where it already runs alike), :class:`Allocation` (what it
holds once taken: enough to give it back exactly), :class:`Sickness` (what a row withholds
for its unhealthy devices) and :class:`RowImage` (a row's mutable state, saved inside a trial).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.model.sharing import held_gpu_milli

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Claim:
    """What one pod takes on one row (``positions``: column positions of its devices, each
    taking ``milli_per_device``; ``mig_slices``: (position, slot) of MIG profile id
    ``mig_profile``; ``extended``: (resource id, units); ``identity``: the holder's identity in
    the table's pod index, -1 when the inter-pod rules do not count it; ``units``: units of the
    node's GPU resource, what the kubelet counts).

    ``existing``: the holder already runs there (bound by someone else, or put back after a
    trial release): it may hold devices that are unhealthy now, which nothing new may take.
    ``missing``: GPU indices an existing holder holds that the node no longer lists (the
    device plugin withdrew them): kept in the allocation, and its ``units`` counted whatever
    the node advertises, so that nothing new takes a unit until usage fits the node again.
    ``beyond``: an existing holder counted even beyond what the row has free (CPU, memory,
    extended resources, units going below zero): a pod that ran there before the node shrank.
    """

    row: int
    cpu_milli: int
    memory_mib: int
    positions: tuple[int, ...] = ()
    milli_per_device: int = 0
    mig_profile: int = -1
    mig_slices: tuple[tuple[int, int], ...] = ()
    tag: int = -1
    extended: tuple[tuple[int, int], ...] = ()
    identity: int = -1
    units: int = 0
    existing: bool = False
    missing: tuple[int, ...] = ()
    beyond: bool = False


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one pod holds on one row; enough to give it back exactly."""

    row: int
    cpu_milli: int
    memory_mib: int
    gpu_indices: tuple[int, ...] = ()
    gpu_milli_per_device: int = 0
    mig_profile: int = -1
    mig_slices: tuple[tuple[int, int], ...] = ()
    tag: int = -1
    #: Extended resources held: (resource id, units).
    extended: tuple[tuple[int, int], ...] = ()
    #: The holder's identity in the table's pod index (-1: not counted there).
    identity: int = -1
    #: Units of the node's GPU resource taken (what the kubelet counts).
    units: int = 0

    @property
    def gpu_milli(self) -> int:
        """The GPU amount held (:func:`~gpufleet.model.sharing.held_gpu_milli`)."""
        return held_gpu_milli(self.gpu_milli_per_device, len(self.gpu_indices))


@dataclass(slots=True)
class Sickness:
    """What a row withholds for its unhealthy devices (positions)."""

    positions: frozenset[int]
    #: Position -> milli-GPU free on that device, not offered.
    withheld: dict[int, int]
    #: MIG profile id -> free slices (position, slot) on unhealthy devices, not offered.
    slices: dict[int, list[tuple[int, int]]]
    #: Units of the node's GPU resource not offered (the kubelet stops advertising them).
    units: int

    def copy(self) -> Sickness:
        slices = {pid: list(free) for pid, free in self.slices.items()}
        return Sickness(self.positions, dict(self.withheld), slices, self.units)


@dataclass(slots=True)
class RowImage:
    """A row's mutable state, saved before a change inside a trial."""

    row: int
    cpu_free: int
    mem_free: int
    gpu_free: IntArray
    mig_free: IntArray
    tag_count: IntArray
    free_slices: list[list[tuple[int, int]]]
    ext_free: IntArray | None
    units_free: int
    sickness: Sickness | None
