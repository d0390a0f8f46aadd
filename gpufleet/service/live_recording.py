"""What a live plane writes down each turn: the world's events and the scheduler's actions,
into the workloads' records and the store.

Owns :class:`TurnRecorder`, the part of every
:class:`~gpufleet.service.live_plane.LivePlane` (the simulated cluster's,
:class:`~gpufleet.service.embedded_plane.EmbeddedControlPlane`, and this machine's,
:class:`~gpufleet.service.local_plane.LocalControlPlane`, whose recorder adds what its
processes tell: :mod:`~gpufleet.service.local_recording`) that observes the control loop,
given the plane's :class:`~gpufleet.service.live_state.LiveState`:
what the world reports (a bind done or refused, a pod finished, evicted, failed or restarted, a
job ended, a GPU's health changed: :meth:`~TurnRecorder.events_in`) and what the scheduler
decided (why a pod waits, for whom it was evicted: :meth:`~TurnRecorder.turn_done`) go into
the records and the :class:`~gpufleet.service.store.Store` in the turn's transaction, with each
touched workload's jobs' progress and state, and the history. Nodes that a scenario's spot
interruptions and node failures take away are told too: a notice as a ``NodeNotice`` event on
each workload whose pods run there (told to checkpoint; saved, when it checkpoints on notice),
a pod lost with its node or to its GPU's fault as ``Interrupted``, a node gone as a cluster
event ``NodeLost`` and a node back as ``NodeJoined``. What to publish once the turn is
committed is kept in the turn's notes (:class:`~gpufleet.service.live_state.TurnNotes`).

It does not open the transaction, take the lock or publish (the plane's turn scope does), and
it changes nothing in the world or the core.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gpufleet.backends.sim.live import health_message
from gpufleet.control.loop import Turn
from gpufleet.model.actions import Evict, MarkUnschedulable, told_to_victim
from gpufleet.model.events import (
    BindFailed,
    ClusterEvent,
    DeviceHealthChanged,
    JobEnded,
    NodeAdded,
    NodeGone,
    NodeNotice,
    PodBound,
    PodDeleted,
    PodEnd,
    PodRestarted,
)
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.framework import CheckWorld
from gpufleet.service.check_events import check_events
from gpufleet.service.live_state import LiveState
from gpufleet.service.plane_book import HISTORY_EVERY_S, Change
from gpufleet.service.records import (
    POD_FAILED,
    POD_PENDING,
    POD_RUNNING,
    POD_SUCCEEDED,
    PodRecord,
    WorkloadRecord,
)
from gpufleet.service.sim_records import placement_text, pod_key
from gpufleet.service.states import ChangeKind, WorkloadState
from gpufleet.service.store import StoredEvent
from gpufleet.service.usage_store import save_usage

log = logging.getLogger(__name__)

#: The world's reports of what happened to pods and jobs (a pod deleted on request is not one).
POD_NEWS = (PodBound, BindFailed, PodDeleted, PodRestarted, JobEnded)


class TurnRecorder:
    """See the module docstring."""

    def __init__(self, state: LiveState, check_world: CheckWorld) -> None:
        self.state = state
        self.book = state.book
        #: What the cores' admission checks keep for this world (its notices become events).
        self.check_world = check_world

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        """What the world reports happened to pods and jobs, into their records and the store
        (in the turn's transaction)."""
        notes = self.state.notes
        now = self.state.world.clock.now()
        for event in events:
            if isinstance(event, DeviceHealthChanged):
                notes.world_changed = True
                log.warning("%s", health_message(event))
            elif isinstance(event, NodeNotice | NodeGone | NodeAdded):
                notes.world_changed = True
                self._record_node(event, now)
            if not isinstance(event, POD_NEWS):
                continue
            if isinstance(event, PodDeleted):
                evicted_for = self.state.evicted_for.pop(event.key, None)
                if event.end is PodEnd.DELETED:
                    continue  # cancelled here: recorded then
            else:
                evicted_for = None
            notes.world_changed = True
            key = pod_key(event)
            record = self.state.record_of(key)
            if record is None or not record.active:
                continue
            self._record_news(record, record.pods[key], event, evicted_for, now)
            notes.touched[record.key] = record

    def _record_node(self, event: NodeNotice | NodeGone | NodeAdded, now: float) -> None:
        """A node told it will go (an event on each workload running there), gone or back."""
        events = self.state.notes.events
        if isinstance(event, NodeAdded):
            log.warning("node %s joined", event.node.name)
            events.append(
                StoredEvent(now, None, "Normal", "NodeJoined", f"node {event.node.name} joined")
            )
            return
        if isinstance(event, NodeGone):
            back_at = event.back_at
            back = "" if back_at is None else f"; back at {self.state.instants(back_at)}"
            message = f"node {event.node} is gone ({event.reason}){back}"
            log.warning("%s", message)
            events.append(StoredEvent(now, None, "Warning", "NodeLost", message))
            return
        when = self.state.instants(event.leaves_at)
        log.warning("node %s goes at %s (%s)", event.node, when, event.reason)
        saved = set(event.checkpointed)
        for key in event.told:
            record = self.state.record_of(key)
            if record is None or not record.active:
                continue
            name = record.pods[key].pod.name if key in record.pods else key
            did = "; it saved its progress now" if key in saved else ""
            events.append(
                StoredEvent(now, record.key, "Warning", "NodeNotice",
                            f"pod {name}: node {event.node} goes at {when} ({event.reason}); "
                            f"told to checkpoint{did}")
            )  # fmt: skip
            self.state.notes.touched[record.key] = record

    def _record_news(
        self,
        record: WorkloadRecord,
        pod_record: PodRecord,
        event: ClusterEvent,
        evicted_for: str | None,
        now: float,
    ) -> None:
        """One report of the world about a pod of ``record`` (or its job)."""
        events = self.state.notes.events
        key, name = pod_record.pod.key, pod_record.pod.name
        # When its current run started and the work it had left then (or has, waiting again).
        started, remaining = self.state.world.work_of(key) or (now, None)
        if isinstance(event, PodBound):
            pod_record.state, pod_record.placement = POD_RUNNING, event.placement
            pod_record.started = started
            self.book.store.set_pod(key, POD_RUNNING, event.placement, started, remaining)
            events.append(
                StoredEvent(now, record.key, "Normal", "Scheduled",
                            f"pod {name} bound to {placement_text(event.placement)}")
            )  # fmt: skip
            self.book.counters["bound"] += 1
        elif isinstance(event, BindFailed):
            events.append(
                StoredEvent(now, record.key, "Warning", "FailedBinding",
                            f"pod {name}: {event.reason or 'bind failed'}")
            )  # fmt: skip
        elif isinstance(event, PodRestarted) and event.completion is None:
            events.append(
                StoredEvent(now, record.key, "Warning", "BackOff",
                            f"pod {name}: its container failed and {event.message}")
            )  # fmt: skip
            self.book.counters["restarted"] += 1
        elif isinstance(event, PodRestarted):  # its Job's next completion, from when it began
            pod_record.started = started
            self.book.store.set_pod(key, POD_RUNNING, pod_record.placement, started, remaining)
            events.append(
                StoredEvent(now, record.key, "Normal", "Completed",
                            f"pod {name} completed; it {event.message}")
            )  # fmt: skip
        elif isinstance(event, JobEnded):
            failed = event.outcome == "Failed"
            events.append(
                StoredEvent(now, record.key, "Warning" if failed else "Normal",
                            event.reason or event.outcome, event.message)
            )  # fmt: skip
        elif isinstance(event, PodDeleted):
            self._record_end(record, pod_record, event, evicted_for, remaining, now)

    def _record_end(
        self,
        record: WorkloadRecord,
        pod_record: PodRecord,
        gone: PodDeleted,
        evicted_for: str | None,
        remaining: float | None,
        now: float,
    ) -> None:
        """A pod of ``record`` left its node: done, failed for good, evicted, or failed with a
        new pod to follow (the last two wait again, with the work they have left)."""
        events = self.state.notes.events
        key, name = pod_record.pod.key, pod_record.pod.name
        if gone.end is PodEnd.SUCCEEDED:
            pod_record.state = POD_SUCCEEDED
            self.book.store.set_pod_state(key, POD_SUCCEEDED)
            self.book.counters["finished"] += 1
        elif gone.end is PodEnd.FAILED:
            pod_record.state, pod_record.placement = POD_FAILED, None
            self.book.store.set_pod_state(key, POD_FAILED)
            if gone.message:
                events.append(
                    StoredEvent(now, record.key, "Warning", "Failed", f"pod {name} {gone.message}")
                )
        else:
            pod_record.state, pod_record.placement = POD_PENDING, None
            self.book.store.set_pod(key, POD_PENDING, remaining=remaining)
            if gone.end is PodEnd.EVICTED:
                preemptor, why = told_to_victim(gone.message, evicted_for, pod_record.pod.namespace)
                by = f" by {preemptor}" if preemptor else ""
                events.append(
                    StoredEvent(now, record.key, "Warning", "Preempted",
                                f"pod {name} evicted{by}: {why}")
                )  # fmt: skip
                self.book.counters["preempted"] += 1
            elif gone.end is PodEnd.LOST:
                events.append(
                    StoredEvent(now, record.key, "Warning", "Interrupted",
                                f"pod {name} {gone.message}")
                )  # fmt: skip
                self.book.counters["interrupted"] += 1
            else:  # REPLACED
                events.append(
                    StoredEvent(now, record.key, "Warning", "Failed",
                                f"pod {name} failed; {gone.message}")
                )  # fmt: skip
                self.book.counters["failed"] += 1

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        """What the scheduler decided (why pods wait, for whom pods are evicted), the state of
        each workload the turn touched, and the history, into the store."""
        notes, now = self.state.notes, turn.now
        for action in turn.actions:
            if isinstance(action, Evict):
                self.state.evicted_for[action.pod.key] = action.preemptor
                continue
            if not isinstance(action, MarkUnschedulable):
                continue
            record = self.state.record_of(action.pod.key)
            if record is None or record.told == action.message:
                continue
            record.told = action.message
            notes.events.append(
                StoredEvent(now, record.key, "Warning", "FailedScheduling", action.message)
            )
            notes.touched[record.key] = record
        for record in notes.touched.values():
            self._settle(record, now)
        for event in notes.events:
            record = self.book.records.get(event.workload or "")
            if record is not None:
                record.events.append(event)
        notes.events.extend(check_events(self.check_world))
        if notes.world_changed:
            notes.changes.append(Change(ChangeKind.CLUSTER, None, now, {}))
        if self.book.wall() - self.book.last_sample >= HISTORY_EVERY_S:
            self.book.sample(now)
            self.book.store.set_meta("clock", repr(now))
            save_usage(self.book.store, core)
        self.book.store.add_events(notes.events)

    def _settle(self, record: WorkloadRecord, now: float) -> None:
        """A workload whose pods changed: its jobs' progress and its state, recorded."""
        events = self.state.notes.events
        if record.timed.jobs:
            self.state.progress(record)
            self.book.store.set_job_states(record.key, self.state.world.jobs.states(record.key))
        before = record.state
        state = record.settle(now)
        if state is not before:
            if state in (WorkloadState.RUNNING, WorkloadState.ADMITTED) and record.told:
                record.told = None
            if state is WorkloadState.RUNNING and before is WorkloadState.PENDING:
                self.book.recent_delays.append(now - record.submitted)
            if state is WorkloadState.SUCCEEDED and not record.timed.jobs:
                events.append(
                    StoredEvent(now, record.key, "Normal", "Completed", "all pods finished")
                )
            self.book.store.set_workload_state(
                record.key, state.value, record.started, record.finished
            )
        self.state.notes.changes.append(
            Change(ChangeKind.WORKLOAD, record.key, now, {"state": state.value})
        )
