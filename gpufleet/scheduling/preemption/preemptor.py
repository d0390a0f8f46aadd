"""The default post-filter plugin: Kueue's classical preemption, candidates and search together.

For a workload that quota or capacity kept out, :meth:`ClassicalPreemption.select` takes its
candidates (:mod:`.candidates`: Kueue's rules), orders them cheapest first from columns
(:func:`.victims.cheapest_victims`; node by node when nodes, not quota, are short), and
searches for the fewest whose eviction lets it both pass its quota and place
(:func:`.victims.find_victims`), in each of Kueue's attempts (with and without borrowing). Most
searches on a busy cluster fail, so each is first asked cheaply whether it can succeed at all:
with every candidate gone, would the quota pass, and would the gang place? Searches are
limited per cycle (``max_preemption_searches``): past that, a workload with candidates waits
for the next cycle (:meth:`ClassicalPreemption.begin_cycle` names it), one without waits until
a victim ripens (:meth:`ClassicalPreemption.next_timer`) or the cluster changes.

A workload whose minimum run time passes becomes a candidate victim: :meth:`wake` wakes the
parked workloads that may now preempt it.

What it does not do: evict, or hold the room the victims free (the core does both with the
:class:`~gpufleet.scheduling.framework.Preemption` returned).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.priorities import PreemptionPolicy
from gpufleet.model.resources import GPU
from gpufleet.model.workload import Workload
from gpufleet.scheduling.engine import Unschedulable
from gpufleet.scheduling.framework import Preemption
from gpufleet.scheduling.node_table import IntArray
from gpufleet.scheduling.pending import Group
from gpufleet.scheduling.preemption.candidates import Candidates
from gpufleet.scheduling.preemption.reclaim import still_borrowing
from gpufleet.scheduling.preemption.victims import cheapest_victims, find_victims
from gpufleet.scheduling.running import RunningWorkload
from gpufleet.scheduling.topology import place_workload

if TYPE_CHECKING:
    from gpufleet.scheduling.flavors import ModelChoice
    from gpufleet.scheduling.state import CoreState


class ClassicalPreemption:
    """See the module docstring."""

    name = "classical-preemption"

    def __init__(self, state: CoreState) -> None:
        self.state = state
        self.candidates = Candidates(state)
        #: Searches left this cycle, and workloads whose search was put off.
        self._search_budget = 0
        self._deferred: set[str] = set()
        #: (when it reaches its minimum run time, key) of preemptible running workloads.
        self._ripening: list[tuple[float, str]] = []
        #: The first time a victim now too young for a parked preemptor becomes one.
        self._victims_ripen: float | None = None

    # ----------------------------------------------------------------------------- watcher
    def started(self, running: RunningWorkload) -> None:
        if running.workload.preemptible:
            heapq.heappush(
                self._ripening, (running.started + self.state.config.min_runtime, running.key)
            )
            self.candidates.started(running)

    def shrunk(self, running: RunningWorkload, freed: Mapping[str, int]) -> None:
        self.candidates.shrunk(running)

    def stopped(self, running: RunningWorkload) -> None:
        self.candidates.stopped(running)

    def retagged(self, running: RunningWorkload, before: Workload) -> None:
        """Lowered (or raised): it may be a victim of parked preemptors now, so it ripens
        again at once if it ran its minimum time (the next :meth:`wake` looks at it)."""
        self.candidates.retagged(running)
        if running.workload.preemptible:
            ripe = max(self.state.now, running.started + self.state.config.min_runtime)
            heapq.heappush(self._ripening, (ripe, running.key))

    # ----------------------------------------------------------------------------- cycle
    def begin_cycle(self) -> list[str]:
        put_off = sorted(self._deferred)
        self._deferred.clear()
        self._search_budget = self.state.config.max_preemption_searches
        return put_off

    def searches_put_off(self) -> bool:
        return bool(self._deferred)

    def next_timer(self) -> float | None:
        times = []
        if self._victims_ripen is not None:
            times.append(self._victims_ripen)
        if self._deferred:
            times.append(self.state.now + 1.0)
        return min(times, default=None)

    def wake(self) -> None:
        state = self.state
        if self._victims_ripen is not None and self._victims_ripen <= state.now:
            self._victims_ripen = None
        due: list[RunningWorkload] = []
        ripening = self._ripening
        while ripening and ripening[0][0] <= state.now:
            running = state.running.get(heapq.heappop(ripening)[1])
            if running is not None:
                due.append(running)
        if not due or not state.pending.any_parked:
            return

        def could_preempt(group: Group) -> bool:
            workload = group.head.workload
            return any(self.candidates.is_candidate(workload, r) for r in due)

        state.pending.wake_preemptors(could_preempt)

    # ----------------------------------------------------------------------------- search
    def select(self, workload: Workload, model: ModelChoice | None) -> Preemption | None:
        """The cheapest victims whose eviction admits ``workload`` (Kueue's rules of
        :mod:`.reclaim`; the search of :func:`find_victims`); on one GPU model (its rows, its
        GPUs charged to its quota key) if ``model`` is given."""
        if workload.preemption_policy is PreemptionPolicy.NEVER:
            return None
        state = self.state
        candidates = self.candidates
        if self._search_budget <= 0:
            # Most attempts of a busy cycle end here: only whether victims exist matters.
            if not candidates.has_candidates(workload):
                self._note_young_victims(workload)
            else:  # searched enough this cycle: its turn comes next cycle
                self._deferred.add(workload.key)
            return None
        quotas = state.quotas
        _, request, amounts = state.requests.entry(workload)
        if model is not None and model.key is not None:
            request = {**request, model.key: request[GPU]}
            amounts = quotas.tree.limited(request)
        parts = candidates.parts(workload, amounts=amounts)
        count = sum(int(part.chosen.sum()) for part in parts)
        if not count:
            self._note_young_victims(workload)
            return None
        self._search_budget -= 1
        limit = state.config.max_victim_candidates
        need = max(
            p.gpu.count * MILLI_PER_GPU if p.gpu.milli >= MILLI_PER_GPU else 0
            for p in workload.pods[: workload.gang_size]
        )
        table = state.table
        tree = quotas.tree
        holds = state.holds
        queue_index = tree.index[workload.queue]
        planned: list[IntArray | None] = []  # rows of each placement that fitted
        restrict = holds.restrict_for(workload)
        if model is not None:
            on_model = model.rows
            restrict = on_model if restrict is None else restrict & on_model[: restrict.size]
        by_queue = {part.queue: part.candidate for part in parts if part.candidate is not None}

        def place() -> IntArray | None:
            """The rows the gang would take now, on a trial; None if it does not fit."""
            mark = table.begin_trial()
            try:
                placed = place_workload(state.engine, workload, restrict)
                if isinstance(placed, Unschedulable):
                    return None
                return np.array([b.allocation.row for b in placed], np.int64)
            finally:
                table.rollback(mark)

        def places() -> bool:
            """The placement part of fits()."""
            if state.fits.surely_places(workload, restrict):
                planned.append(None)  # where: placed below if this stays the last fit
                return True
            rows = place()
            if rows is None:
                return False
            planned.append(rows)
            return True

        def still_candidate(victim: RunningWorkload) -> bool:
            candidate = by_queue.get(victim.workload.queue)
            return candidate is None or still_borrowing(tree, candidate, amounts)

        nodes_short: bool | None = None  # found out once, when first needed
        victims: list[RunningWorkload] | None = None
        for borrowing in candidates.plan_for(workload, amounts).attempts:

            def may_fit(borrowing: bool = borrowing) -> bool:
                """The quota checks of fits(): evicting more victims never makes them fail."""
                if not quotas.check(workload, request, amounts).admits:
                    return False
                if not borrowing and not tree.fits_nominal(queue_index, amounts):
                    return False
                return not holds.any or holds.survive(workload, request, amounts)

            def fits(may_fit: Callable[[], bool] = may_fit) -> bool:
                # The quota checks first: they do not depend on the placement and cost far less.
                return may_fit() and places()

            columns = [
                (part.victims.columns(), part.chosen_when(borrowing), int(part.variant))
                for part in parts
            ]
            ordered = cheapest_victims(columns, state.now, limit)
            if len(ordered) > 1:
                if not self._quota_could_fit(ordered, may_fit):
                    continue  # (find_victims would find the same at once)
                # Regroup victims node by node only when nodes, not quota, are short: where
                # the gang already places, the cheapest victims overall are the ones to take.
                if need >= MILLI_PER_GPU:
                    if nodes_short is None:
                        nodes_short = not places()
                        planned.clear()
                    if nodes_short:
                        ordered = cheapest_victims(columns, state.now, limit, table, need)
                if nodes_short is not False and not self._places_without(ordered, places):
                    planned.clear()
                    continue  # not even with every candidate gone: no search can succeed
                planned.clear()
            victims = find_victims(table, quotas, ordered, fits, may_fit, still_candidate, places)
            if victims is not None:
                break
        if victims is None:
            self._note_young_victims(workload)
            return None
        rows = planned[-1]
        if rows is None:
            # The last fit was certain without placing: place now, with the same victims gone
            # (find_victims ends with exactly the victims of its last fit evicted).
            mark = table.begin_trial()
            try:
                for victim in victims:
                    for bound in victim.bound.values():
                        table.release(bound.allocation)
                rows = place()
            finally:
                table.rollback(mark)
            assert rows is not None, f"{workload.key} no longer fits where it surely did"
        return Preemption(victims, request, rows)

    def _places_without(
        self, candidates: Sequence[RunningWorkload], places: Callable[[], bool]
    ) -> bool:
        """Would the preemptor place with every candidate gone (a trial, rolled back)? Most
        searches on a busy cluster fail so, at the cost of one placement instead of one per
        candidate."""
        table = self.state.table
        mark = table.begin_trial()
        try:
            for candidate in candidates:
                for bound in candidate.bound.values():
                    table.release(bound.allocation)
            return places()
        finally:
            table.rollback(mark)

    def _quota_could_fit(
        self, candidates: Sequence[RunningWorkload], may_fit: Callable[[], bool]
    ) -> bool:
        """Would the quota checks pass with every candidate gone? (If not, no set of them
        admits the preemptor: :func:`find_victims` starts with the same test.)"""
        quotas = self.state.quotas
        mark = quotas.snapshot()
        quotas.refund_all((c.workload, c.usage) for c in candidates)
        try:
            return may_fit()
        finally:
            quotas.restore(mark)

    def _note_young_victims(self, workload: Workload) -> None:
        """After a failed search: when would a victim now too young to evict become one?
        (The loop wakes the core then; see :meth:`next_timer`.)"""
        first = self.candidates.first_ripening(workload)
        if first is not None and (self._victims_ripen is None or first < self._victims_ripen):
            self._victims_ripen = first
