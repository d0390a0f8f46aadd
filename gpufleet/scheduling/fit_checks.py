"""Cheap answers to "would this gang place?", and the memos behind them.

A busy cycle asks whether a workload would place far more often than it places one: to refuse
work a preemptor's hold keeps out without placing it, at every step of a victim search, and
whenever capacity frees on a few rows. :meth:`PlacementChecks.surely_places` answers True only
when cheap checks make it certain (identical pods of whole GPUs, room counted per row, per
topology domain and per GPU model); :meth:`PlacementChecks.fits_some_row` asks single rows in
scalar reads. The columns they read (feasibility per pod shape, pods per row, free milli-GPU per
row) and their answers are kept by the table's state number, which a rolled-back trial gives
back, so that answers hold across victim searches; the cycle drops them when it starts (the
last cycle's binds and evictions left those states behind).

What it does not do: place anything (:func:`~.topology.place_workload` does, on a trial).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from gpufleet.model.workload import TopologyMode, Workload
from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.engine import PlacementEngine
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable
from gpufleet.scheduling.topology import least_gpu_milli, one_model

#: surely_places's answers kept at most per cycle (over the table states seen lately), and
#: the columns derived for them (each as long as the table).
SURE_MEMO_SIZE = 4096
COLUMN_MEMO_SIZE = 256


class PlacementChecks:
    """See the module docstring."""

    def __init__(self, table: NodeTable, engine: PlacementEngine, cycle: Callable[[], int]) -> None:
        """``cycle``: the number of the cycle under way; answers hold for one cycle (the
        engine's filters include plugins whose masks no table version names)."""
        self.table = table
        self.engine = engine
        self._cycle = cycle
        self._sure: dict[tuple[object, ...], tuple[BoolArray | None, bool]] = {}
        self._feasible: dict[tuple[object, ...], BoolArray] = {}
        self._fit: dict[tuple[object, ...], IntArray | None] = {}
        self._free_milli: tuple[tuple[int, int, int], IntArray] = (
            (-1, -1, -1),
            np.zeros(0, np.int64),
        )

    def surely_places(self, workload: Workload, restrict: BoolArray | None) -> bool:
        """Would :func:`place_workload` place the gang on ``restrict`` now? True only when
        cheap checks make it certain: one pod, or identical pods of whole GPUs (or none), and
        the rows it may use have room for every pod between them (each pod placed takes one
        pod's room from one row, whichever row the policy picks); with a required topology,
        the rows of one domain that place_workload would try; with a preferred one, anywhere
        (where it falls back to)."""
        table = self.table
        if len(self._sure) > SURE_MEMO_SIZE:
            self._sure.clear()
        # By the table's state, which a rolled-back trial (a victim search) restores, so that
        # answers hold across searches. By id: the entry holds the mask, so no other object
        # has its id meanwhile.
        gang = workload.pods[: workload.gang_size]
        memo_key = (
            self._cycle(),
            table.state,
            table.topology_version,
            id(restrict),
            workload.topology,
            *(p.signature for p in gang),
        )
        known = self._sure.get(memo_key)
        if known is None or known[0] is not restrict:
            known = self._sure[memo_key] = (restrict, self._surely_places_now(workload, restrict))
        return known[1]

    def _surely_places_now(self, workload: Workload, restrict: BoolArray | None) -> bool:
        pods = workload.pods[: workload.gang_size]
        first = pods[0]
        if any(p.signature != first.signature for p in pods[1:]):
            return False
        if self.table.pod_index.repelling or (len(pods) > 1 and first.rules is not None):
            return False  # running pods' anti-affinity reads labels; a gang's pods may repel
        engine, table = self.engine, self.table
        demand = engine.demand(first)
        feasible = self.feasible(first.signature, demand)
        mask = feasible if restrict is None else feasible & restrict[: feasible.size]
        topology = workload.topology
        spread = topology is None or topology.mode is TopologyMode.PREFERRED
        if len(pods) == 1:
            if spread:
                return bool(mask.any())  # (room.sum() >= 1 with room the mask as 0/1)
            room: IntArray = mask.astype(np.int64)
        elif demand.shared or demand.mig_count or demand.milli_by_row is not None:
            return False
        else:
            # Room for len(pods) where the mask allows (free amounts are never negative).
            fit = self.pods_per_row(first.signature, demand)
            if fit is None:
                room = np.where(mask, len(pods), 0)
            else:
                room = np.where(mask, np.minimum(fit[: mask.size], len(pods)), 0)
        by_model = one_model(workload) and len(table.model_names) > 1
        if topology is None or topology.mode is TopologyMode.PREFERRED:
            if by_model:  # room for the whole gang on one GPU model
                ids = table.model_id[: room.size]
                gpu_rows = ids >= 0
                per_model = np.bincount(ids[gpu_rows], weights=room[gpu_rows])
                return bool((per_model >= len(pods)).any())
            return int(room.sum()) >= len(pods)
        # As place_workload picks domains: labelled, allowed rows; enough free GPUs in all.
        column = table.label_ids.get(topology.level)
        if column is None:
            return False
        n = room.size
        if n != table.size:
            return False
        ids = column[:n]
        allowed = table.schedulable[:n]
        if restrict is not None:
            allowed = allowed & restrict[:n]
        labelled = (ids >= 0) & allowed
        # Per label value id (no domain of place_workload's is left out; a value without
        # labelled rows adds room 0, which never suffices).
        domains = ids[labelled]
        capacity = np.bincount(domains, weights=self.free_gpu_milli()[labelled])
        need = least_gpu_milli(engine, pods)
        if by_model:  # room for the whole gang on one GPU model of a domain
            width = len(table.model_names) + 1
            pairs = domains * width + table.model_id[:n][labelled] + 1
            room_in = np.bincount(pairs, weights=room[labelled])
            in_domain = np.arange(room_in.size) // width
            return bool(((room_in >= len(pods)) & (capacity[in_domain] >= need)).any())
        room_in = np.bincount(domains, weights=room[labelled])
        return bool(((capacity >= need) & (room_in >= len(pods))).any())

    def feasible(self, signature: tuple[object, ...], demand: Demand) -> BoolArray:
        """``engine.feasible(demand)`` (read-only; kept while the table's state is the same:
        many workloads of a cycle share a pod shape, and victim searches roll back)."""
        table = self.table
        if len(self._feasible) > COLUMN_MEMO_SIZE:
            self._feasible.clear()
        memo_key = (self._cycle(), table.state, table.topology_version, table.size, signature)
        mask = self._feasible.get(memo_key)
        if mask is None:
            mask = self.engine.feasible(demand)
            mask.flags.writeable = False
            self._feasible[memo_key] = mask
        return mask

    def pods_per_row(self, signature: tuple[object, ...], demand: Demand) -> IntArray | None:
        """How many pods of a whole-GPU ``demand`` each row has room for by its free whole
        GPUs, CPU and memory (None: it asks none of them); read-only, kept while the table's
        state is the same."""
        table = self.table
        if len(self._fit) > COLUMN_MEMO_SIZE:
            self._fit.clear()
        memo_key = (self._cycle(), table.state, table.topology_version, table.size, signature)
        if memo_key in self._fit:
            return self._fit[memo_key]
        fit: IntArray | None = None
        n = table.size
        limits = [
            (table.full_free, demand.gpu_count),
            (table.cpu_free, demand.cpu_milli),
            (table.mem_free, demand.memory_mib),
        ]
        if table.any_unhealthy and demand.units:  # units withheld may bind before devices do
            limits.append((np.maximum(table.units_free, 0), demand.units))
        for free, need in limits:
            if need > 0:
                room = free[:n] // need
                fit = room if fit is None else np.minimum(fit, room)
        if fit is not None:
            fit.flags.writeable = False
        self._fit[memo_key] = fit
        return fit

    def free_gpu_milli(self) -> IntArray:
        """Free milli-GPU per row (read-only; kept while the table's state is the same)."""
        table = self.table
        at = (table.state, table.topology_version, table.size)
        if self._free_milli[0] != at:
            free = table.gpu_free[: table.size].sum(axis=1)
            free.flags.writeable = False
            self._free_milli = (at, free)
        return self._free_milli[1]

    def fits_some_row(self, workload: Workload, rows: Iterable[int]) -> bool:
        """Could one of the gang's pods go on one of ``rows`` now (rows where capacity freed:
        only they can help a workload parked for capacity)?"""
        engine = self.engine
        demands = {p.signature: engine.demand(p) for p in workload.pods[: workload.gang_size]}
        alive = self.table.alive
        return any(
            bool(alive[row]) and engine.fits_row(d, row) for row in rows for d in demands.values()
        )
