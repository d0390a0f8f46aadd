"""Explain: why a workload waits, where it stands in its queue, and when it may start.

For every waiting workload, queue by queue in the order they will be tried: what it waits for
(``SchedulingGated`` or ``Suspended`` for a held one, behind all its queue tries; the reason it
was last parked with, "preempting" while its victims leave, "backoff", "queue
order" behind the first workload of a StrictFIFO queue, or "not tried yet"), what it was told,
and an estimated start: the backfill plan's for the head of a group blocked by capacity, when
enough running work ends (as expected) for a workload blocked by quota, the end of its backoff;
sooner, when victims it may preempt once their minimum run time ends would admit it: then the
time the last of them ripens, its message saying "will preempt ... at ..." (the victims are
found on a trial, ripest first: an estimate, not the search the cycle makes then). A head
blocked by capacity that could not fit even with nothing else running is ``never`` (Kueue:
Inadmissible): no estimate, no position that promises a turn.

The messages of a placement that failed are made here too: kube-scheduler's "0/N nodes are
available" per reason, and, for a gang or a topology request, whether it could fit at all if
nothing else ran (kept per shape while what the nodes offer is the same).

What it does not do: change what it reads (estimates are made on trials that roll back).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from gpufleet.model.priorities import PreemptionPolicy
from gpufleet.model.workload import Workload
from gpufleet.scheduling.admission import requested
from gpufleet.scheduling.backfill import Backfill
from gpufleet.scheduling.engine import Unschedulable
from gpufleet.scheduling.gates import Held
from gpufleet.scheduling.memo import VersionedMemo
from gpufleet.scheduling.ordering import QueueOrder
from gpufleet.scheduling.pending import Parked, PendingWorkload
from gpufleet.scheduling.topology import place_workload
from gpufleet.scheduling.view import PendingExplanation, WaitingWorkload

if TYPE_CHECKING:
    from gpufleet.scheduling.preemption.candidates import Candidates
    from gpufleet.scheduling.state import CoreState

#: Shapes whose never_fits answer is kept (past this, all are forgotten).
_NEVER_FITS_MEMO_SIZE = 4096


@dataclass(frozen=True, slots=True)
class _Standing:
    """One waiting workload as explain sees it."""

    pending: PendingWorkload
    position: int
    waiting_for: str
    message: str
    start: float | None
    never: bool = False


class Explainer:
    """See the module docstring."""

    def __init__(self, state: CoreState, order: QueueOrder, backfill: Backfill) -> None:
        self.state = state
        self.order = order
        self.backfill = backfill
        #: The preemption plugin's candidate rules, when it has them (for estimates).
        self.candidates: Candidates | None = None
        #: never_fits's answers, by the node set they were found on.
        self._never_fits: VersionedMemo[object, bool] = VersionedMemo(_NEVER_FITS_MEMO_SIZE)

    # ----------------------------------------------------------------------------- messages
    def unfit_message(self, workload: Workload, unfit: Unschedulable) -> str:
        if not self.state.explain_failures:
            return "no node fits"
        message = unfit.message()
        # Unhealthy devices may come back: "never" cannot be said while some are out.
        if (
            (workload.gang_size > 1 or workload.topology)
            and not self.state.table.any_unhealthy
            and self.never_fits(workload)
        ):
            message = f"{workload.key} can never fit on this cluster as a whole. {message}"
        return message

    def never_fits(self, workload: Workload) -> bool:
        """Would the gang not fit even if nothing else ran? (Kept per shape while what the
        nodes offer is the same: the table's ``topology_version``.)"""
        key = (
            tuple(p.signature for p in workload.pods[: workload.gang_size]),
            workload.topology,
        )
        return self._never_fits.get(
            key, self.state.table.topology_version, lambda: self._never_fits_now(workload)
        )

    def _never_fits_now(self, workload: Workload) -> bool:
        state = self.state
        table = state.table
        mark = table.begin_trial()
        try:
            running = state.running
            for admitted in (*running.workloads.values(), *running.evicting.values()):
                for bound in admitted.bound.values():
                    table.release(bound.allocation)
            return isinstance(place_workload(state.engine, workload), Unschedulable)
        finally:
            table.rollback(mark)

    # ----------------------------------------------------------------------------- waiting
    def explanations(self, estimate: bool = True) -> list[PendingExplanation]:
        held = [
            PendingExplanation(
                h.workload.key, h.workload.queue, position, h.reason, h.message, None
            )
            for h, position in self._held_positions()
        ]
        return [
            PendingExplanation(
                s.pending.workload.key,
                s.pending.workload.queue,
                s.position,
                s.waiting_for,
                s.message,
                s.start,
                s.never,
            )
            for s in self._standings(estimate)
        ] + held

    def _held_positions(self) -> list[tuple[Held, int]]:
        """The held workloads, each placed behind everything its queue would try."""
        state = self.state
        queued: dict[str, int] = {}
        for pending in state.pending.workloads():
            queue = pending.workload.queue
            queued[queue] = queued.get(queue, 0) + 1
        out = []
        for held in state.held.all():
            queue = held.workload.queue
            queued[queue] = queued.get(queue, 0) + 1
            out.append((held, queued[queue]))
        return out

    def waiting(self, estimate: bool = True) -> list[WaitingWorkload]:
        state = self.state
        least = state.requests.least_whole_milli()
        nominated = state.holds.nominated
        out = []
        for s in self._standings(estimate):
            pending = s.pending
            workload = pending.workload
            gang = workload.pods[: workload.gang_size]
            out.append(
                WaitingWorkload(
                    workload.key,
                    workload.queue,
                    workload.namespace,
                    state.priority(pending),
                    len(workload.pods),
                    len(gang),
                    MappingProxyType(requested(gang, least)),
                    pending.since,
                    state.arrivals.queued_at(workload.key, pending.since),
                    pending.attempts,
                    s.position,
                    s.waiting_for,
                    s.message,
                    pending.reason,
                    pending.not_before,
                    s.start,
                    tuple(sorted(nominated.get(workload.key, ()))),
                    s.never,
                )
            )
        for held, position in self._held_positions():
            workload = held.workload
            gang = workload.pods[: workload.gang_size]
            out.append(
                WaitingWorkload(
                    workload.key,
                    workload.queue,
                    workload.namespace,
                    workload.priority,
                    len(workload.pods),
                    len(gang),
                    MappingProxyType(requested(gang, least)),
                    held.since,
                    held.since,
                    0,
                    position,
                    held.reason,
                    held.message,
                    held.reason,
                    0.0,
                    None,
                    (),
                )
            )
        return out

    def _standings(self, estimate: bool) -> Iterator[_Standing]:
        state = self.state
        by_queue: dict[str, list[PendingWorkload]] = {}
        for pending in state.pending.workloads():
            by_queue.setdefault(pending.workload.queue, []).append(pending)
        heads = {id(g.head) for g in state.pending.groups()}
        for queue, items in sorted(by_queue.items()):
            items.sort(key=lambda p: (-state.priority(p), p.not_before, p.order))
            strict = self.order.strict_fifo(queue)
            for position, pending in enumerate(items, start=1):
                key = pending.workload.key
                waiting_for = pending.reason or "not tried yet"
                told = pending.told
                if strict and position > 1 and not told:
                    waiting_for = "queue order"
                    told = f"waiting behind {items[0].workload.key}: queue {queue} is StrictFIFO"
                start: float | None = None
                never = False
                if key in state.holds.nominated:
                    waiting_for = "preempting"
                    start = state.now
                elif waiting_for == "backoff":
                    start = pending.not_before
                elif waiting_for == Parked.CAPACITY and self.can_never_fit(pending.workload):
                    never = True
                elif estimate and id(pending) in heads:
                    start = self._estimated_start(pending.workload, waiting_for)
                    preempt = self._preemption_start(pending.workload, waiting_for)
                    if preempt is not None and (start is None or preempt[0] < start):
                        start = preempt[0]
                        told = (
                            f"{told} " if told else ""
                        ) + f"Will preempt {', '.join(preempt[1])} at {state.time_format(start)}."
                message = told or (
                    f"in backoff until {state.time_format(pending.not_before)}"
                    if waiting_for == "backoff"
                    else "not tried yet"
                )
                yield _Standing(pending, position, waiting_for, message, start, never)

    def can_never_fit(self, workload: Workload) -> bool:
        """Could ``workload`` not fit even with nothing else running (and no device out)?"""
        if self.state.table.any_unhealthy:
            return False  # unhealthy devices may come back
        return self.never_fits(workload)

    def _preemption_start(
        self, workload: Workload, waiting_for: str
    ) -> tuple[float, list[str]] | None:
        """When victims it may preempt, now too young, ripen enough to admit ``workload``
        (taken ripest first on a trial), and their keys; None when none would."""
        candidates = self.candidates
        if (
            candidates is None
            or waiting_for not in (Parked.CAPACITY, Parked.QUOTA)
            or workload.preemption_policy is PreemptionPolicy.NEVER
        ):
            return None
        state = self.state
        least = state.config.min_runtime
        young = candidates.candidates(workload, min_runtime=0.0)
        if not young:
            return None
        young.sort(key=lambda r: (r.started, r.key))  # the first to ripen first
        request = requested(workload.pods[: workload.gang_size], state.requests.least_whole_milli())
        quotas, table = state.quotas, state.table
        snapshot, mark = quotas.snapshot(), table.begin_trial()
        try:
            taken: list[str] = []
            for victim in young:
                quotas.refund(victim.workload, victim.usage)
                for bound in victim.bound.values():
                    table.release(bound.allocation)
                taken.append(victim.key)
                if not quotas.check(workload, request).admits:
                    continue
                trial = table.begin_trial()
                try:
                    placed = place_workload(state.engine, workload)
                finally:
                    table.rollback(trial)
                if not isinstance(placed, Unschedulable):
                    return max(state.now, victim.started + least), taken
            return None
        finally:
            table.rollback(mark)
            quotas.restore(snapshot)

    def _estimated_start(self, workload: Workload, waiting_for: str) -> float | None:
        reservation = self.state.holds.reservation
        if reservation is not None and reservation.owner == workload.key:
            return reservation.start
        if waiting_for == Parked.CAPACITY:
            plan = self.backfill.estimate(workload)
            return plan.start if plan is not None else None
        if waiting_for == Parked.QUOTA:
            return self._quota_start(workload)
        return None

    def _quota_start(self, workload: Workload) -> float | None:
        """When enough running work ends (as expected) for ``workload`` to pass its quota."""
        state = self.state
        quotas = state.quotas
        request = requested(workload.pods[: workload.gang_size], state.requests.least_whole_milli())
        default = state.config.default_expected_runtime
        snapshot = quotas.snapshot()
        try:
            running = sorted(
                state.running.workloads.values(), key=lambda r: r.expected_end(default)
            )
            for admitted in running:
                quotas.refund(admitted.workload, admitted.usage)
                if quotas.check(workload, request).admits:
                    return max(state.now, admitted.expected_end(default))
            return None
        finally:
            quotas.restore(snapshot)
