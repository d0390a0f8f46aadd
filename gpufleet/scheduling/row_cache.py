"""Which rows of a per-row cache to recompute, from the node table's change log.

Per-row quantities (scores, a policy's terms for one pod shape) are cached over all rows and
kept current by recomputing only the rows that changed. A :class:`RowTracker` answers "which
rows now?": every row of the static mask the first time (a new cache, or a table that grew),
afterwards the rows of the static mask changed since the previous call.

Rows outside the static mask are never computed and must never be read. A row infeasible when
computed may hold a meaningless value, but it can only become feasible by changing, which puts
it in the change log; so callers must compute every stale row, feasible or not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable


@dataclass(slots=True)
class RowTracker:
    mark: int = -1
    capacity: int = -1

    def stale_rows(self, table: NodeTable, static_mask: BoolArray) -> IntArray:
        """Rows to recompute now (see the module docstring)."""
        if self.mark < 0 or self.capacity != table.capacity:
            stale = np.flatnonzero(static_mask)
            self.capacity = table.capacity
        else:
            changed = table.changed_since(self.mark)
            changed = changed[changed < static_mask.size]
            stale = changed[static_mask[changed]]
        self.mark = table.change_mark
        return stale
