"""What a workload's owner changes of a waiting workload through the API of ``gpufleet serve``.

Owns :class:`OwnerChanges`, the part of the live planes (the simulated cluster and ``--local``)
given their :class:`~gpufleet.service.live_state.LiveState`, offered to the API as their
:class:`~gpufleet.service.capabilities.WaitingChanges`, that answers ``ungate``, ``resume`` and
``suspend``: removing scheduling gates
(``spec.schedulingGates``, as a pod's owner does on Kubernetes), resuming a suspended Job and
suspending a waiting one (``spec.suspend``, as the Job's update does). Each changes the
workload's model form, stores it (a restart does not bring the gates back), records an event
and tells the world, which tells the core (``WorkloadReleased``; a suspended Job is taken out
of its queue and arrives again, held, as Kueue holds a suspended Job's workload). Suspending a
Job that has started (its pods stopped, the Job kept) is refused: cancel it instead.

Only what the caller may see can be changed (another tenant's workload is not found: 404);
nothing to change is a conflict (409). The pure part (the workload without some gates) is
:func:`without_gates`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gpufleet.model.workload import Workload
from gpufleet.service.auth import Principal
from gpufleet.service.live_state import LiveState
from gpufleet.service.plane_book import Change, ConflictError
from gpufleet.service.records import POD_PENDING, WorkloadRecord
from gpufleet.service.states import ChangeKind, WorkloadState
from gpufleet.service.store import StoredEvent

#: The kind whose ``spec.suspend`` the server honours.
SUSPENDABLE = "Job"


def gates_of(workload: Workload) -> list[str]:
    """Every scheduling gate of the workload's pods, each once, in the order first met."""
    return list(dict.fromkeys(gate for pod in workload.pods for gate in pod.scheduling_gates))


def without_gates(workload: Workload, gates: Sequence[str]) -> Workload:
    """``workload`` with the scheduling gates ``gates`` removed from every pod."""
    gone = set(gates)
    pods = tuple(
        dataclasses.replace(
            pod, scheduling_gates=tuple(g for g in pod.scheduling_gates if g not in gone)
        )
        for pod in workload.pods
    )
    return dataclasses.replace(workload, pods=pods)


class OwnerChanges:
    """See the module docstring."""

    def __init__(self, state: LiveState) -> None:
        self.state = state
        self.book = state.book

    def ungate(self, principal: Principal, key: str, gates: Sequence[str] = ()) -> WorkloadRecord:
        """Remove ``gates`` (every gate when empty) from the workload's pods; once none is
        left (and it is not suspended) it joins its queue. ConflictError when it has none of
        them."""
        with self.book.lock:
            record = self._waiting(principal, key)
            workload = record.timed.workload
            present = gates_of(workload)
            if not present:
                raise ConflictError(f"workload {key} has no scheduling gates")
            unknown = [gate for gate in gates if gate not in present]
            if unknown:
                raise ConflictError(
                    f"workload {key} has no scheduling gate {unknown[0]!r} "
                    f"(its gates: {', '.join(present)})"
                )
            removed = list(dict.fromkeys(gates)) or present
            changed = without_gates(workload, removed)
            left = gates_of(changed)
            plural = "s" if len(removed) > 1 else ""
            message = f"scheduling gate{plural} {', '.join(removed)} removed by {principal.tenant}"
            if left:
                message += f"; still gated by {', '.join(left)}"
            elif changed.suspended:
                message += "; it stays suspended until resumed"
            else:
                message += "; it joins its queue"
            told = self._owner_changed(record, changed, "Ungated", message, release=True)
        return self._told(record, *told)

    def resume(self, principal: Principal, key: str) -> WorkloadRecord:
        """Resume a suspended Job: it joins its queue (unless scheduling gates hold it).
        ConflictError when it is not suspended."""
        with self.book.lock:
            record = self._waiting(principal, key)
            workload = record.timed.workload
            if not workload.suspended:
                raise ConflictError(f"workload {key} is not suspended")
            changed = dataclasses.replace(workload, suspended=False)
            message = f"resumed by {principal.tenant}"
            left = gates_of(changed)
            message += f"; still gated by {', '.join(left)}" if left else "; it joins its queue"
            told = self._owner_changed(record, changed, "Resumed", message, release=True)
        return self._told(record, *told)

    def suspend(self, principal: Principal, key: str) -> WorkloadRecord:
        """Suspend a waiting Job: it leaves its queue and waits, Suspended, until resumed.
        ConflictError for another kind, one suspended already, or one that has started."""
        with self.book.lock:
            record = self._waiting(principal, key)
            workload = record.timed.workload
            if record.kind != SUSPENDABLE:
                raise ConflictError(
                    f"workload {key} is a {record.kind}: only a Job can be suspended (spec.suspend)"
                )
            if workload.suspended:
                raise ConflictError(f"workload {key} is suspended already")
            started = record.state is not WorkloadState.PENDING or any(
                pod.state != POD_PENDING for pod in record.pods.values()
            )
            waiting = self.state.world.pending
            if not started and key not in self.state.held:
                started = any(pod_key not in waiting for pod_key in record.pods)
            if started:
                raise ConflictError(
                    f"workload {key} has started: suspending a running Job (stopping its pods) "
                    "is not supported by this server; cancel it (gpufleet delete) instead"
                )
            changed = dataclasses.replace(workload, suspended=True)
            message = f"suspended by {principal.tenant}; it waits until resumed"
            told = self._owner_changed(record, changed, "Suspended", message, release=False)
        return self._told(record, *told)

    def _waiting(self, principal: Principal, key: str) -> WorkloadRecord:
        """The workload ``key`` the caller may see (else NotFoundError), not ended."""
        record = self.book.visible(principal, key)
        if not record.active:
            raise ConflictError(f"workload {key} has ended ({record.state.value})")
        return record

    def _owner_changed(
        self, record: WorkloadRecord, workload: Workload, reason: str, message: str, release: bool
    ) -> tuple[Change, StoredEvent]:
        """``workload`` replaces the record's (under the lock): stored, told in an event, given
        to the world (``release``: as a held workload changed; else its pods leave and it
        arrives again). Returns what to publish once the lock is let go."""
        timed = dataclasses.replace(record.timed, workload=workload)
        now = self.state.world.clock.now()
        event = StoredEvent(now, record.key, "Normal", reason, message)
        with self.book.store.transaction():
            self.book.store.set_workload_model(timed)
            self.book.store.add_events([event])
        record.timed = timed
        for pod in workload.pods:
            record.pods[pod.key].pod = pod
        record.events.append(event)
        if record.key not in self.state.held:  # a workload whose queue is set aside is not there
            if release:
                self.state.world.release(timed)
            else:
                self.state.world.cancel(list(record.pods))
                self.state.world.submit(timed)
        details: dict[str, object] = {"state": record.state.value, "reason": reason}
        return Change(ChangeKind.WORKLOAD, record.key, now, details), event

    def _told(self, record: WorkloadRecord, change: Change, event: StoredEvent) -> WorkloadRecord:
        self.book.publish([change], [event])
        return record
