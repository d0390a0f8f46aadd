"""Parking and waking: what could not run waits, told why, until an event that could help.

A workload that could not start parks with its group (:mod:`.pending`), for capacity or for
quota, and every pod of the group is told why, once per distinct message (a kube-scheduler
style ``MarkUnschedulable``; the backfill reservation it holds, if any, is named). A workload
that joins a group while it is parked waits with it, untried, and is told what its group was
told at the end of the next cycle that leaves the group parked. Then:

* capacity freed on some rows wakes the groups parked for capacity one of whose pods could go
  on one of those rows (scalar reads per row: a pod ending must not cost a pass over nodes);
* pods that an inter-pod rule counts came or went: groups whose pods carry such rules may fit
  anywhere now (a domain's count changed, not a row's capacity); if a pod with required
  anti-affinity went, any group parked for capacity may;
* workloads whose preemption search was put off to the next cycle are tried again.

Quota given back wakes every group parked for quota (the places that give it back call
``pending.wake_all``), and those refused by an admission check that quota may help (its
``requeue_on``); a check wakes what it refused itself (``pending.wake_refused_by``); a new
candidate victim wakes the parked preemptors (the post-filter).

What it does not do: decide why a workload waits (the cycle does), or order the waiting.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpufleet.model.actions import Action, MarkUnschedulable
from gpufleet.model.priorities import PreemptionPolicy
from gpufleet.scheduling.pending import Group, Parked

if TYPE_CHECKING:
    from gpufleet.scheduling.state import CoreState

#: Each park reason as the plain string a waiting workload's ``reason`` holds (what explain,
#: the metrics and the views read; ``.value`` is a slower property).
_REASON_TEXT = {why: why.value for why in Parked}
#: Looked up once (an enum member's lookup on its class is slow on Python 3.11).
_ADMISSION_CHECK = Parked.ADMISSION_CHECK


class Parking:
    """See the module docstring."""

    def __init__(self, state: CoreState) -> None:
        self.state = state
        #: The pod index's (changes, repelling pods) when parked workloads were last woken.
        self._pod_rules_seen = (0, 0)

    def park(
        self,
        group: Group,
        actions: list[Action],
        why: Parked,
        message: str,
        reason: str | None = None,
    ) -> None:
        """Park ``group`` for ``why`` (what wakes it) and tell each
        of its pods ``message``; ``reason`` is what explain says it waits for (``why`` by
        default; for ``Parked.ADMISSION_CHECK``, the check's name)."""
        state = self.state
        workload = group.head.workload
        may_preempt = workload.preemption_policy is not PreemptionPolicy.NEVER
        by = (reason or "") if why is _ADMISSION_CHECK else ""
        state.pending.park(group, why, may_preempt, by)
        reservation = state.holds.reservation
        if reservation is not None and reservation.owner == workload.key:
            start = state.time_format(reservation.start)
            message += f" Capacity reserved for it from {start}."
        for pending in group.items:
            pending.reason = _REASON_TEXT[why] if reason is None else reason
            if pending.told != message:
                pending.told = message
                for pod in pending.workload.pods:
                    actions.append(MarkUnschedulable(pod, message))

    def park_unchanged(self, group: Group) -> None:
        """Park ``group`` for capacity again, as it was told (the rows that freed cannot
        hold any of its pods)."""
        workload = group.head.workload
        may_preempt = workload.preemption_policy is not PreemptionPolicy.NEVER
        self.state.pending.park(group, Parked.CAPACITY, may_preempt)

    def tell_joined(self, actions: list[Action]) -> None:
        """Workloads that joined a parked group wait with it untried (the cycle's end, the
        group parked still): tell each of their pods what the group was told."""
        for pending, group in self.state.pending.take_joined_parked():
            told = next((p for p in group.items if p is not pending and p.told), None)
            if told is None or pending.told == told.told:
                continue
            pending.told, pending.reason = told.told, told.reason
            for pod in pending.workload.pods:
                actions.append(MarkUnschedulable(pod, told.told))

    def wake_for_rows(self, rows: list[int]) -> None:
        """Capacity freed on ``rows``."""
        pending = self.state.pending
        if len(pending):
            fits = self.state.fits
            pending.wake(lambda group: fits.fits_some_row(group.head.workload, rows), rows)

    def wake_for_pod_rules(self) -> None:
        """Pods that some inter-pod rule counts came or went since the last cycle."""
        state = self.state
        index = state.table.pod_index
        seen = (index.changes, index.repelling)
        if seen == self._pod_rules_seen:
            return
        repelled_less = index.repelling < self._pod_rules_seen[1]
        self._pod_rules_seen = seen
        capacity = Parked.CAPACITY  # read once: an enum's member is slow to look up
        for group in state.pending.parked_groups():
            pods = group.head.workload.pods
            if group.parked is capacity and (
                repelled_less or any(p.rules is not None for p in pods)
            ):
                state.pending.unpark(group)
                group.freed_rows = None

    def wake_put_off(self, keys: Iterable[str]) -> None:
        """Workloads whose preemption search was put off: their turn has come."""
        pending = self.state.pending
        for key in keys:
            group = pending.group_of(key)
            if group is not None and group.parked is not None:
                pending.unpark(group)
                group.freed_rows = None
