"""Device choice on the chosen node (the Reserve step): which GPUs, which MIG slices.

Whole-GPU pods take the first fully free devices (as the FGD artifact does); shared pods take
the best-fitting device (least left that still fits) unless a policy chooses otherwise; the
replicas a whole-GPU pod gets on a time-sliced node come from the best-fitting devices, one
replica per device (as the device plugin tries to hand them out).
"""

from __future__ import annotations

import numpy as np

from gpufleet.model import MILLI_PER_GPU
from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.framework import DeviceChoice
from gpufleet.scheduling.node_table import NodeTable


def first_free_devices(table: NodeTable, row: int, count: int) -> tuple[int, ...]:
    """Positions of the first ``count`` fully free devices of ``row``."""
    free = np.flatnonzero(table.gpu_free[row] == MILLI_PER_GPU)
    if free.size < count:
        raise ValueError(f"{table.nodes[row].name!r} has {free.size} free GPUs, {count} asked")
    return tuple(int(p) for p in free[:count])


def share_milli(table: NodeTable, row: int, demand: Demand) -> int:
    """Milli-GPU the pod takes on each of its devices on ``row``."""
    if demand.milli_by_row is not None:
        return int(demand.milli_by_row[row])
    return demand.gpu_milli


def replica_devices(table: NodeTable, row: int, milli: int, count: int) -> tuple[int, ...]:
    """Positions of ``count`` distinct devices with ``milli`` left, the fullest first (ties:
    the lowest position)."""
    free = table.gpu_free[row]
    fitting = np.flatnonzero(free >= milli)
    if fitting.size < count:
        raise ValueError(
            f"{table.nodes[row].name!r} has {fitting.size} devices with {milli} milli-GPU left, "
            f"{count} asked"
        )
    order = fitting[np.argsort(free[fitting], kind="stable")]
    return tuple(int(p) for p in order[:count])


def best_fit_share(table: NodeTable, row: int, demand: Demand) -> int:
    """The fitting device with the least left; ties go to the lowest position."""
    free = table.gpu_free[row]
    milli = share_milli(table, row, demand)
    candidates = np.where(free >= milli, free, MILLI_PER_GPU + 1)
    position = int(np.argmin(candidates))
    if free[position] < milli:
        raise ValueError(f"no device on {table.nodes[row].name!r} has {milli} milli-GPU left")
    return position


def mig_slices_for(table: NodeTable, row: int, demand: Demand) -> tuple[tuple[int, int], ...]:
    """Slices of the asked profile, from the devices with the fewest free slices first."""
    free = table.free_mig_slices(row, demand.mig_profile)
    if len(free) < demand.mig_count:
        raise ValueError(f"{table.nodes[row].name!r} lacks free MIG slices")
    per_device: dict[int, int] = {}
    for position, _ in free:
        per_device[position] = per_device.get(position, 0) + 1
    free.sort(key=lambda s: (per_device[s[0]], s[0], s[1]))
    return tuple(free[: demand.mig_count])


class BestFitDevices:
    """Whole GPUs: first free; shares: best fit; MIG: fullest device first."""

    def choose(self, table: NodeTable, row: int, demand: Demand) -> DeviceChoice:
        if demand.mig_count:
            return DeviceChoice(mig_slices=mig_slices_for(table, row, demand))
        if demand.shared:
            return DeviceChoice((best_fit_share(table, row, demand),))
        if demand.gpu_count:
            return DeviceChoice(first_free_devices(table, row, demand.gpu_count))
        return DeviceChoice()


class RandomShareDevices:
    """Like :class:`BestFitDevices`, but a share goes to a uniformly random fitting device."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.fallback = BestFitDevices()

    def choose(self, table: NodeTable, row: int, demand: Demand) -> DeviceChoice:
        if not demand.shared:
            return self.fallback.choose(table, row, demand)
        fitting = np.flatnonzero(table.gpu_free[row] >= share_milli(table, row, demand))
        return DeviceChoice((int(fitting[self.rng.integers(fitting.size)]),))
