"""Backfill with a reservation: keep the capacity that frees first for a blocked workload.

When the first workload in order cannot be placed for lack of capacity (a large gang, say),
the running workloads are released on a trial in the order they are expected to end, until the
blocked one fits. The end time of the last release is its estimated start, and the nodes it
would take then are reserved: other workloads may use them only if they are expected to end by
that time. Releases are tried at 1, 2, 4, ... workloads, then bisected, so a plan costs
O(log n) placement attempts.

What it does not do: guarantee the start (run times are estimates; the plan is remade as the
cluster changes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.scheduling.node_table import BoolArray, NodeTable
from gpufleet.scheduling.running import RunningWorkload


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
