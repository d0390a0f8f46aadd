"""Backfill with a reservation: keep the capacity that frees first for a blocked workload.

When the first workload in order cannot be placed for lack of capacity (a large gang, say),
the running workloads are released on a trial in the order they are expected to end, until the
blocked one fits. The end time of the last release is its estimated start, and the nodes it
would take then are reserved: other workloads may use them only if they are expected to end by
that time. Releases are tried at 1, 2, 4, ... workloads, then bisected, so a plan costs
O(log n) placement attempts.

:class:`Backfill` decides when to plan: only for gangs (and workloads asking a topology),
only for the first one blocked by capacity (the reservation is held by :class:`~.holds.Holds`
until it starts or leaves), and at most once per ``replan_interval`` for the same one.

What it does not do: guarantee the start (run times are estimates; the plan is remade as the
cluster changes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.model.workload import Workload
from gpufleet.scheduling.engine import Unschedulable
from gpufleet.scheduling.node_table import BoolArray, NodeTable
from gpufleet.scheduling.pending import Parked
from gpufleet.scheduling.running import RunningWorkload
from gpufleet.scheduling.topology import place_workload

if TYPE_CHECKING:
    from gpufleet.scheduling.state import CoreState


@dataclass(frozen=True, slots=True)
class Reservation:
    owner: str
    start: float
    rows: BoolArray


def plan_reservation(
    table: NodeTable,
    owner: str,
    running: Sequence[RunningWorkload],
    default_runtime: float,
    placement_rows: Callable[[], BoolArray | None],
    now: float = 0.0,
) -> Reservation | None:
    """See the module docstring. ``placement_rows`` places the blocked workload on the current
    trial state, returns the rows it took (or None if it does not fit) and undoes itself."""
    ending = sorted(running, key=lambda r: r.expected_end(default_runtime))
    if not ending:
        return None
    outer = table.begin_trial()
    try:
        released = 0
        step = 1
        while True:
            upper = min(step, len(ending))
            block = table.begin_trial()
            for r in ending[released:upper]:
                for bound in r.bound.values():
                    table.release(bound.allocation)
            rows = placement_rows()
            if rows is not None:
                break
            table.commit(block)
            released = upper
            if upper == len(ending):
                return None
            step *= 2
        # The workload fits after releasing ending[:upper] but not ending[:released]: bisect.
        low, high, best = released, upper, rows
        while high - low > 1:
            middle = (low + high) // 2
            table.rollback(block)
            block = table.begin_trial()
            for r in ending[released:middle]:
                for bound in r.bound.values():
                    table.release(bound.allocation)
            rows = placement_rows()
            if rows is not None:
                high, best = middle, rows
            else:
                low = middle
        table.rollback(block)
        # Work that overran its expected end may end any moment: not before now.
        start = max(now, ending[high - 1].expected_end(default_runtime))
        return Reservation(owner, start, np.asarray(best, dtype=np.bool_))
    finally:
        table.rollback(outer)


class Backfill:
    """See the module docstring."""

    def __init__(self, state: CoreState) -> None:
        self.state = state
        self._planned_at = -math.inf

    def plan(self, workload: Workload) -> None:
        """``workload`` did not fit: reserve where and when it could start, if it may."""
        state = self.state
        config = state.config
        holds = state.holds
        if not config.backfill:
            return
        if holds.reservation is not None and holds.reservation.owner != workload.key:
            return
        if workload.gang_size <= 1 and workload.topology is None:
            return  # a lone pod finds room soon enough; reservations are for gangs
        previous = holds.reservation
        if (
            previous is not None
            and previous.owner == workload.key
            and state.now - self._planned_at < config.replan_interval
        ):
            return  # the plan is an estimate: re-planning at every freed pod costs too much
        self._planned_at = state.now
        holds.reserve(self.estimate(workload))
        current = holds.reservation
        if (previous is None) != (current is None) or (
            previous is not None
            and current is not None
            and not np.array_equal(previous.rows, current.rows)
        ):
            state.pending.wake_all(Parked.CAPACITY)  # the rows others may use changed

    def estimate(self, workload: Workload) -> Reservation | None:
        """Where and when ``workload`` could start if running work ends as expected."""
        state = self.state
        table = state.table

        def rows_taken() -> BoolArray | None:
            mark = table.begin_trial()
            try:
                result = place_workload(state.engine, workload)
                if isinstance(result, Unschedulable):
                    return None
                rows = np.zeros(table.size, np.bool_)
                rows[[b.allocation.row for b in result]] = True
                return rows
            finally:
                table.rollback(mark)

        return plan_reservation(
            table,
            workload.key,
            list(state.running.workloads.values()),
            state.config.default_expected_runtime,
            rows_taken,
            state.now,
        )
