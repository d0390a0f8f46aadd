"""The scheduling core: cluster events in, actions out. Pure, synchronous, deterministic.

It keeps the node table, the pods it has placed (to give their devices back) and the pending
queue. :meth:`SchedulerCore.cycle` runs the steps of DESIGN.md that exist so far:

1. order the heads of the pending groups (priority, then arrival);
2. place each head on the table (the engine filters, scores and reserves devices);
3. emit a Bind for each placed pod (the core assumes it at once, as kube-scheduler does);
4. park groups that did not fit, telling each waiting pod why, once per message, until an
   event frees capacity on a row where the group could fit.

Admission (queues, quotas), gangs and preemption slot in between steps 1 and 3 later.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from gpufleet.model import MILLI_PER_GPU, Placement, Pod
from gpufleet.model.actions import Action, Bind, MarkUnschedulable
from gpufleet.model.events import (
    BindFailed,
    ClusterEvent,
    NodeAdded,
    NodeRemoved,
    PodAdded,
    PodBound,
    PodDeleted,
)
from gpufleet.scheduling.engine import Bound, PlacementEngine, Unschedulable
from gpufleet.scheduling.framework import Policy
from gpufleet.scheduling.node_table import IntArray, NodeTable
from gpufleet.scheduling.queue import PendingQueue


class SchedulerCore:
    """Events in, actions out; see the module docstring."""

    def __init__(
        self,
        table: NodeTable,
        policy: Policy,
        tie_rank: IntArray | None = None,
        explain: bool = True,
    ) -> None:
        self.table = table
        self.engine = PlacementEngine(table, policy, tie_rank=tie_rank)
        self.pending = PendingQueue()
        self.bound: dict[str, Bound] = {}
        self.explain_failures = explain
        #: Rows where capacity freed since the last cycle.
        self._freed: set[int] = set()

    # ----------------------------------------------------------------------------- events
    def handle(self, event: ClusterEvent) -> None:
        if isinstance(event, PodAdded):
            self._on_pod_added(event.pod)
        elif isinstance(event, PodDeleted):
            self._on_pod_deleted(event.key)
        elif isinstance(event, PodBound):
            self._on_pod_bound(event.pod, event.placement)
        elif isinstance(event, BindFailed):
            bound = self.bound.pop(event.key, None)
            if bound is not None:
                self._free(bound)
                self.pending.add(bound.pod)
        elif isinstance(event, NodeAdded):
            row = self.table.add_node(event.node)
            self._wake_for_rows([row])
        elif isinstance(event, NodeRemoved):
            self.table.remove_node(event.name)

    def handle_all(self, events: Iterable[ClusterEvent]) -> None:
        for event in events:
            self.handle(event)

    def _on_pod_added(self, pod: Pod) -> None:
        if pod.key in self.bound or pod.key in self.pending:
            return
        self.engine.observe(pod)
        self.pending.add(pod)

    def _on_pod_deleted(self, key: str) -> None:
        if self.pending.remove(key) is not None:
            return
        bound = self.bound.pop(key, None)
        if bound is not None:
            self._free(bound)

    def _free(self, bound: Bound) -> None:
        self.engine.release(bound.allocation)
        self._wake_for_rows([bound.allocation.row])

    def _on_pod_bound(self, pod: Pod, placement: Placement) -> None:
        """Take exactly the devices a pod already holds (bound by someone else, or resync)."""
        self.pending.remove(pod.key)
        previous = self.bound.pop(pod.key, None)
        if previous is not None:
            if previous.placement == placement:
                self.bound[pod.key] = previous
                return
            self.engine.release(previous.allocation)
        table = self.table
        row = table.row_of[placement.node]
        demand = self.engine.demand(pod)
        node = table.nodes[row]
        position_of = {gpu.index: p for p, gpu in enumerate(node.gpus)}
        slots = tuple((position_of[g], slot) for g, slot in placement.mig_slices)
        milli = placement.gpu_milli_per_device or (MILLI_PER_GPU if placement.gpu_indices else 0)
        allocation = table.allocate(
            row,
            pod.cpu_milli,
            pod.memory_mib,
            tuple(position_of[i] for i in placement.gpu_indices),
            milli,
            demand.mig_profile if slots else -1,
            slots,
            demand.tag,
        )
        self.bound[pod.key] = Bound(pod, placement, allocation)

    def _wake_for_rows(self, rows: Sequence[int]) -> None:
        """Unpark the groups whose head now fits on one of ``rows`` (which just freed up)."""
        if not len(self.pending):
            return
        self._freed.update(rows)
        engine = self.engine
        for group in self.pending.parked_groups():
            demand = engine.demand(group.head[1])
            if any(engine.fits_row(demand, row) for row in rows):
                group.parked = False
                group.woken_by_rows = True

    def _still_fits_where_freed(self, pod: Pod) -> bool:
        """A group woken by freed rows was parked because nothing else fitted, and placements
        this cycle only take capacity away; so it can only fit on a freed row, if at all."""
        demand = self.engine.demand(pod)
        return any(self.engine.fits_row(demand, row) for row in self._freed)

    # ----------------------------------------------------------------------------- cycle
    def cycle(self) -> list[Action]:
        """Place what can be placed now; see the module docstring."""
        actions: list[Action] = []
        heads = self.pending.active_heads()
        while heads:
            _, _, key = heapq.heappop(heads)
            group = self.pending.group(key)
            if group is None or group.parked:
                continue
            pod = group.head[1]
            if group.woken_by_rows and not self._still_fits_where_freed(pod):
                group.parked = True
                continue
            group.woken_by_rows = False
            result = self.engine.place(pod, explain=False)
            if isinstance(result, Bound):
                self.pending.pop_head(group)
                self.bound[pod.key] = result
                actions.append(Bind(pod, result.placement))
                if self.pending.group(key) is not None:
                    heapq.heappush(heads, (-key[1], group.head[0], key))
                continue
            group.parked = True
            untold = self.pending.take_untold(group)
            if untold:
                why = self.why(pod) if self.explain_failures else None
                message = why.message() if why is not None else "no node fits"
                reasons = dict(why.reasons) if why is not None else {}
                group.message = message
                actions.extend(MarkUnschedulable(waiting, message, reasons) for waiting in untold)
        self._freed.clear()
        return actions

    # ----------------------------------------------------------------------------- queries
    def why(self, pod: Pod) -> Unschedulable:
        """Why ``pod`` cannot be placed now (nodes per reason)."""
        return self.engine.explain(pod)
