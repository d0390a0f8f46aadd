"""The control plane of ``gpufleet serve`` in embedded mode: core, live world, store, tenants.

:class:`EmbeddedControlPlane` runs the control loop (:class:`~gpufleet.control.loop.ControlLoop`)
in a thread over a :class:`LiveSimCluster` (the simulated cluster on a scaled wall clock) and
answers the API's calls from other threads, all under one lock: each turn runs under it, in
one store transaction. What the world reports (a bind done or refused, a pod finished, evicted,
failed or restarted, a job ended: its events) and what the scheduler decided (why a pod waits,
for whom it was evicted: its actions) are written to the :class:`Store` in the turn that sees
them, before anyone is told: a submission is committed before it is acknowledged, a bind is
recorded with its devices, so a restarted plane (even after ``kill -9``) puts every running pod
back on the same devices and every accepted workload back in its queue. Changes are published
to subscribers (the API's event stream) after they are committed.

The API reads its records through :mod:`gpufleet.api.views`; this module owns the
mutations and the loop.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpufleet.backends.sim.live import LiveSimCluster, health_message
from gpufleet.backends.sim.telemetry import LockedTelemetry, SimTelemetry
from gpufleet.control.factory import build_core, target_of
from gpufleet.control.loop import ControlLoop, Turn, sync
from gpufleet.io.kinds import Skipped
from gpufleet.io.live_objects import LiveCatalog
from gpufleet.metrics.state import SchedulerState, read_state
from gpufleet.model import Node
from gpufleet.model.actions import Evict, MarkUnschedulable
from gpufleet.model.events import (
    BindFailed,
    ClusterEvent,
    DeviceHealthChanged,
    JobEnded,
    PodBound,
    PodDeleted,
    PodEnd,
    PodRestarted,
    WorkloadAdded,
)
from gpufleet.model.priorities import PriorityClass
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.service.auth import (
    Principal,
)
from gpufleet.service.base import (
    HISTORY_EVERY_S,
    PRIORITY_CLASS,
    QUEUE,
    Change,
    PlaneBase,
    ServeOptions,
    object_name,
    require_admin,
)
from gpufleet.service.records import (
    POD_CANCELLED,
    POD_FAILED,
    POD_PENDING,
    POD_RUNNING,
    POD_SUCCEEDED,
    POD_TERMINAL,
    PodRecord,
    WorkloadRecord,
)
from gpufleet.service.sim_records import (
    placement_text,
    pod_key,
    progress_of,
    remaining_part,
    telemetry_seed,
)
from gpufleet.service.states import ChangeKind, WorkloadState
from gpufleet.service.store import Store, StoredEvent
from gpufleet.service.submissions import parse_body

log = logging.getLogger(__name__)

#: The world's reports of what happened to pods and jobs (a pod deleted on request is not one).
POD_NEWS = (PodBound, BindFailed, PodDeleted, PodRestarted, JobEnded)


@dataclass(slots=True)
class _TurnNotes:
    """What one turn wrote down: changes and events to publish once committed, and the
    workloads whose pods it changed (settled at the end of the turn)."""

    changes: list[Change] = field(default_factory=list)
    events: list[StoredEvent] = field(default_factory=list)
    touched: dict[str, WorkloadRecord] = field(default_factory=dict)
    world_changed: bool = False


class EmbeddedControlPlane(PlaneBase):
    """See the module docstring."""

    def __init__(
        self,
        store: Store,
        nodes: Sequence[Node],
        options: ServeOptions | None = None,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(store, options or ServeOptions(), wall)
        self.nodes = list(nodes)
        self._thread: threading.Thread | None = None
        self.last_turn_wall = wall()
        self._owner: dict[str, str] = {}  # pod key -> workload key
        start = float(store.meta("clock") or 0.0)
        self.world = LiveSimCluster(
            self.nodes, target_of(()), self.options.speed, start, wall, self.options.faults
        )
        self.catalog_source = store.path
        self.catalog_where = "stored"
        self.catalog = self.stored_catalog(store.objects(QUEUE), store.objects(PRIORITY_CLASS))
        self._catalog_builder = self.catalog.request_builder()
        #: Workloads whose queue is set aside (a bad stored Queue): they wait, outside the
        #: world, until the queue is fixed. Key -> their queue.
        self.held: dict[str, str] = {}
        self.core = self._new_core()
        for rejected in self.catalog.rejected:
            log.error(
                "stored %s %s is set aside: %s", rejected.kind, rejected.key, rejected.message
            )
        #: Who each pod evicted and not yet gone was evicted for (its workload's key).
        self._evicted_for: dict[str, str | None] = {}
        self._notes = _TurnNotes()
        #: The simulated world's scheduler metrics, its core read under the lock.
        self.metrics = self.world.recorder.metrics
        self.metrics.read = self._read_state
        #: Every simulated GPU's samples, from the usage profiles of the pods on it.
        self.telemetry = LockedTelemetry(
            SimTelemetry(self.world, telemetry_seed(self.options), self.options.usage_profile),
            self.lock,
        )
        self.loop = ControlLoop(
            self.world, lambda: self.core, [self.metrics, self], guard=self._turn_scope
        )
        self._restore()
        self._next_seq = store.next_seq()

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Run the scheduling loop in a thread (until :meth:`stop`)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpufleet-plane", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self.world.stop()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        with self.lock:
            self.store.set_meta("clock", repr(self.world.clock.now()))

    # ----------------------------------------------------------------------------- reading
    backend_name = "simulated"

    @property
    def speed(self) -> float | None:
        return self.options.speed

    def now(self) -> float:
        return self.world.clock.now()

    def cluster_nodes(self) -> Sequence[Node]:
        return self.world.current_nodes()

    def priority_classes(self) -> Mapping[str, PriorityClass]:
        return self.catalog.priority_classes

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def healthy(self, within: float = 30.0) -> bool:
        return self.running and self._wall() - self.last_turn_wall < within

    def _run(self) -> None:
        # The loop must survive a bug in one turn; it is logged.
        self.loop.run(stop=self._stopping.is_set, survive=True)

    def turn(self) -> float:
        """One turn of the loop: events in, cycles, actions out, all recorded; returns the
        core's next timer."""
        return self.loop.turn()

    @contextmanager
    def _turn_scope(self) -> Iterator[None]:
        """A turn runs under the lock, in one store transaction; what it changed is published
        once committed."""
        with self.lock:
            notes = self._notes = _TurnNotes()
            with self.store.transaction():
                yield
            self.turns += 1
            self.last_turn_wall = self._wall()
        self.publish(notes.changes, notes.events)

    def _read_state(self) -> SchedulerState:
        with self.lock:
            return read_state(self.core)

    # ----------------------------------------------------------------------------- restore
    def _restore(self) -> None:
        """Take back what the store holds: every workload, running pods on their devices, and
        how far their jobs were."""
        job_states = self.store.job_states()
        for stored in self.store.workloads():
            record = WorkloadRecord.new(
                stored.seq, stored.tenant, stored.kind, stored.timed, stored.submitted
            )
            record.state = WorkloadState(stored.state)
            record.started, record.finished = stored.started, stored.finished
            for event in self.store.events(stored.key, limit=50):
                record.events.append(event)
            self._index(record)
            if record.active and record.timed.workload.queue not in self.core.quotas.queues:
                self._hold(record)
                continue
            if not record.active:
                for pod_record in record.pods.values():
                    pod_record.state = next(
                        (p.state for p in stored.pods if p.key == pod_record.pod.key),
                        POD_SUCCEEDED,
                    )
                continue
            pending = []
            self.world.jobs.adopt(stored.timed, job_states.get(stored.key, {}))
            for stored_pod in stored.pods:
                pod_record = record.pods[stored_pod.key]
                if stored_pod.state == POD_RUNNING and stored_pod.placement is not None:
                    try:
                        self.world.restore(
                            pod_record.pod,
                            stored_pod.placement,
                            stored_pod.remaining,
                            stored.timed.workload.checkpoint_interval,
                            len(record.pods) > 1,
                            stored_pod.started or 0.0,
                            stored.timed,
                        )
                    except ValueError as error:
                        log.error("cannot put back %s (%s): it waits again", stored_pod.key, error)
                        pending.append((pod_record.pod, stored_pod.remaining))
                        continue
                    pod_record.state = POD_RUNNING
                    pod_record.placement = stored_pod.placement
                    pod_record.started = stored_pod.started
                elif stored_pod.state in POD_TERMINAL:
                    pod_record.state = stored_pod.state
                else:
                    pending.append((pod_record.pod, stored_pod.remaining))
            if pending:
                self.world.submit(remaining_part(record.timed, pending))
            self._progress(record)
        sync(self.core, self.world.list_state())

    def _hold(self, record: WorkloadRecord) -> None:
        """Keep a workload whose queue is set aside out of the world (its pods wait, stored as
        waiting) until the queue is fixed; say why in its events."""
        queue = record.timed.workload.queue
        why = next(
            (r.error.reason for r in self.catalog.rejected if r.kind == QUEUE and r.key == queue),
            "it is not defined",
        )
        now = self.world.clock.now()
        event = StoredEvent(
            now, record.key, "Warning", "QueueInvalid",
            f"queue {queue} is set aside ({why}); the workload waits until it is fixed",
        )  # fmt: skip
        with self.store.transaction():
            for pod_record in record.pods.values():
                pod_record.state, pod_record.placement = POD_PENDING, None
                self.store.set_pod(pod_record.pod.key, POD_PENDING, remaining=record.timed.duration)
            record.state = WorkloadState.PENDING
            self.store.set_workload_state(record.key, record.state.value)
            self.store.add_events([event])
        record.events.append(event)
        self.held[record.key] = queue
        log.error("workload %s waits: %s", record.key, event.message)

    def _release_held(self) -> None:
        """Give the world the held workloads whose queue is good again."""
        for key, queue in list(self.held.items()):
            if queue in self.core.quotas.queues:
                del self.held[key]
                record = self.records[key]
                self.world.jobs.adopt(record.timed, self.store.job_states().get(key, {}))
                self.world.submit(record.timed)

    def _index(self, record: WorkloadRecord) -> None:
        self.records[record.key] = record
        for key in record.pods:
            self._owner[key] = record.key

    # ----------------------------------------------------------------------------- core
    def _new_core(self) -> SchedulerCore:
        core = build_core(
            self.world.current_nodes(),  # with the GPUs a fault withholds now
            self.options.policy,
            self.options.seed,
            queues=self.catalog.queues,
            config=self.options.admission,
            profile=self.options.profile,
        )
        for message in core.quota_warnings():
            log.warning("%s", message)
        return core

    def _rebuild_core(self) -> None:
        """A new core for new queues or classes, told everything again (under the lock)."""
        core = self._new_core()
        core.now = self.world.clock.now()
        sync(core, self.world.list_state())
        waiting = self.world.pending
        for record in sorted(self.records.values(), key=lambda r: r.seq):
            # (a failed pod waiting out its back-off is not waiting yet: it comes as a new pod)
            pods = [p for p in record.pending_pods() if p.key in waiting]
            if record.active and pods and record.key not in core.running:
                core.handle(
                    WorkloadAdded(remaining_part(record.timed, [(p, None) for p in pods]).workload)
                )
        self.core = core

    # ----------------------------------------------------------------------------- submit
    def submit(
        self,
        principal: Principal,
        body: bytes,
        content_type: str,
        dry_run: bool = False,
        skipped: Skipped | None = None,
    ) -> list[WorkloadRecord]:
        """Read, check and accept the workloads of a request body: all or none. Raises
        InputError (422), ForbiddenError (403) or ConflictError (409)."""
        manifests = parse_body(body, content_type, skipped)
        with self.lock:
            accepted = self.accept(
                principal, manifests, self._catalog_builder, self.core.quotas.queues, self._owner
            )
            checked = [(item.kind, item.timed) for item in accepted]
            if dry_run:
                now = self.world.clock.now()
                return [WorkloadRecord.new(0, principal.tenant, k, t, now) for k, t in checked]
            now = self.world.clock.now()
            records = []
            seq = self._next_seq
            events: list[StoredEvent] = []
            with self.store.transaction():
                for i, (kind, timed) in enumerate(checked):
                    timed = dataclasses.replace(timed, created=now)
                    self.store.add_workload(seq + i, principal.tenant, kind, timed, now)
                    record = WorkloadRecord.new(seq + i, principal.tenant, kind, timed, now)
                    records.append(record)
                    events.append(
                        StoredEvent(
                            now, record.key, "Normal", "Submitted",
                            f"{kind} by tenant {principal.tenant} to queue {timed.workload.queue}",
                        )
                    )  # fmt: skip
                self.store.add_events(events)
            self._next_seq += len(records)
            for record, event in zip(records, events, strict=True):
                record.events.append(event)
                self._index(record)
                self.world.submit(record.timed)
            self.counters["submitted"] += len(records)
        self.publish(
            [Change(ChangeKind.WORKLOAD, r.key, now, {"state": r.state.value}) for r in records],
            events,
        )
        return records

    def cancel(self, principal: Principal, key: str) -> WorkloadRecord:
        """Stop a waiting or running workload (it stays listed, Cancelled); a finished one is
        deleted, which frees its name, as deleting a completed Job does."""
        with self.lock:
            record = self.visible(principal, key)
            if not record.active:
                now = self.world.clock.now()
                with self.store.transaction():
                    self.store.delete_workload(key)
                del self.records[key]
                self.world.jobs.forget(key)
                for pod_key in record.pods:
                    self._owner.pop(pod_key, None)
                deleted = Change(ChangeKind.WORKLOAD, key, now, {"state": "Deleted"})
            else:
                deleted = None
        if deleted is not None:
            self.publish([deleted], [])
            return record
        with self.lock:
            now = self.world.clock.now()
            event = StoredEvent(now, key, "Normal", "Cancelled", f"by {principal.tenant}")
            with self.store.transaction():
                for pod_record in record.pods.values():
                    if pod_record.state in (POD_PENDING, POD_RUNNING):
                        pod_record.state = POD_CANCELLED
                        self.store.set_pod_state(pod_record.pod.key, POD_CANCELLED)
                record.state = WorkloadState.CANCELLED
                record.finished = now
                self.store.set_workload_state(key, record.state.value, finished=now)
                self.store.add_events([event])
            record.events.append(event)
            self.world.cancel(record.pods)
            self.held.pop(key, None)
        self.publish([Change(ChangeKind.WORKLOAD, key, now, {"state": "Cancelled"})], [event])
        return record

    # ----------------------------------------------------------------------------- admin
    def put_object(self, principal: Principal, kind: str, document: dict[str, Any]) -> str:
        """Create or replace a Queue or PriorityClass (admin only); the core is rebuilt with
        it. A document that does not fit the rest (a cycle, children above their parent...)
        is refused and nothing changes."""
        require_admin(principal)
        name = object_name(document, kind)
        with self.lock:
            catalog = self.changed_catalog(*self._documents(), kind, name, document)
            with self.store.transaction():
                self.store.put_object(kind, name, document)
            self._use_catalog(catalog)
            now = self.world.clock.now()
        self.publish([Change(ChangeKind.QUEUE, name, now, {"kind": kind})], [])
        self.world.wake()
        return name

    def delete_object(self, principal: Principal, kind: str, name: str) -> None:
        require_admin(principal)
        with self.lock:
            catalog = self.changed_catalog(*self._documents(), kind, name, None)
            with self.store.transaction():
                self.store.delete_object(kind, name)
            self._use_catalog(catalog)
            now = self.world.clock.now()
        self.publish([Change(ChangeKind.QUEUE, name, now, {"deleted": True})], [])

    def _documents(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        return (
            {q["metadata"]["name"]: q for q in self.store.objects(QUEUE)},
            {c["metadata"]["name"]: c for c in self.store.objects(PRIORITY_CLASS)},
        )

    def _use_catalog(self, catalog: LiveCatalog) -> None:
        """Schedule under ``catalog`` from now on (the store holds its objects already)."""
        self.catalog = catalog
        self._catalog_builder = catalog.request_builder()
        self._rebuild_core()
        self._release_held()

    # ----------------------------------------------------------------------------- recording
    def _progress(self, record: WorkloadRecord) -> None:
        """The record's jobs and pods as their controllers in the world see them."""
        for run in self.world.jobs.of(record.key):
            record.jobs[run.spec.name] = progress_of(run)
            for name in run.spec.pod_names:
                pod_record = record.pods.get(f"{run.namespace}/{name}")
                if pod_record is not None:
                    pod_record.restarts = run.restarts_of(name)
                    pod_record.index = run.task(name) if run.spec.indexed else None

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        """What the world reports happened to pods and jobs, into their records and the store
        (in the turn's transaction)."""
        notes = self._notes
        now = self.world.clock.now()
        for event in events:
            if isinstance(event, DeviceHealthChanged):
                notes.world_changed = True
                log.warning("%s", health_message(event))
            if not isinstance(event, POD_NEWS):
                continue
            if isinstance(event, PodDeleted):
                evicted_for = self._evicted_for.pop(event.key, None)
                if event.end is PodEnd.DELETED:
                    continue  # cancelled here: recorded then
            else:
                evicted_for = None
            notes.world_changed = True
            key = pod_key(event)
            record = self.records.get(self._owner.get(key, ""))
            if record is None or not record.active:
                continue
            self._record_news(record, record.pods[key], event, evicted_for, now)
            notes.touched[record.key] = record

    def _record_news(
        self,
        record: WorkloadRecord,
        pod_record: PodRecord,
        event: ClusterEvent,
        evicted_for: str | None,
        now: float,
    ) -> None:
        """One report of the world about a pod of ``record`` (or its job)."""
        events = self._notes.events
        key, name = pod_record.pod.key, pod_record.pod.name
        # When its current run started and the work it had left then (or has, waiting again).
        started, remaining = self.world.work_of(key) or (now, None)
        if isinstance(event, PodBound):
            pod_record.state, pod_record.placement = POD_RUNNING, event.placement
            pod_record.started = started
            self.store.set_pod(key, POD_RUNNING, event.placement, started, remaining)
            events.append(
                StoredEvent(now, record.key, "Normal", "Scheduled",
                            f"pod {name} bound to {placement_text(event.placement)}")
            )  # fmt: skip
            self.counters["bound"] += 1
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
            self.counters["restarted"] += 1
        elif isinstance(event, PodRestarted):  # its Job's next completion, from when it began
            pod_record.started = started
            self.store.set_pod(key, POD_RUNNING, pod_record.placement, started, remaining)
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
        events = self._notes.events
        key, name = pod_record.pod.key, pod_record.pod.name
        if gone.end is PodEnd.SUCCEEDED:
            pod_record.state = POD_SUCCEEDED
            self.store.set_pod_state(key, POD_SUCCEEDED)
            self.counters["finished"] += 1
        elif gone.end is PodEnd.FAILED:
            pod_record.state, pod_record.placement = POD_FAILED, None
            self.store.set_pod_state(key, POD_FAILED)
        else:
            pod_record.state, pod_record.placement = POD_PENDING, None
            self.store.set_pod(key, POD_PENDING, remaining=remaining)
            if gone.end is PodEnd.EVICTED:
                by = f" by {evicted_for}" if evicted_for else ""
                events.append(
                    StoredEvent(now, record.key, "Warning", "Preempted",
                                f"pod {name} evicted{by}: {gone.message}")
                )  # fmt: skip
                self.counters["preempted"] += 1
            else:  # REPLACED
                events.append(
                    StoredEvent(now, record.key, "Warning", "Failed",
                                f"pod {name} failed; {gone.message}")
                )  # fmt: skip
                self.counters["failed"] += 1

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        """What the scheduler decided (why pods wait, for whom pods are evicted), the state of
        each workload the turn touched, and the history, into the store."""
        notes, now = self._notes, turn.now
        for action in turn.actions:
            if isinstance(action, Evict):
                self._evicted_for[action.pod.key] = action.preemptor
                continue
            if not isinstance(action, MarkUnschedulable):
                continue
            record = self.records.get(self._owner.get(action.pod.key, ""))
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
            record = self.records.get(event.workload or "")
            if record is not None:
                record.events.append(event)
        if notes.world_changed:
            notes.changes.append(Change(ChangeKind.CLUSTER, None, now, {}))
        if self._wall() - self._last_sample >= HISTORY_EVERY_S:
            self.sample(now)
            self.store.set_meta("clock", repr(now))
        self.store.add_events(notes.events)

    def _settle(self, record: WorkloadRecord, now: float) -> None:
        """A workload whose pods changed: its jobs' progress and its state, recorded."""
        events = self._notes.events
        if record.timed.jobs:
            self._progress(record)
            self.store.set_job_states(record.key, self.world.jobs.states(record.key))
        before = record.state
        state = record.settle(now)
        if state is not before:
            if state in (WorkloadState.RUNNING, WorkloadState.ADMITTED) and record.told:
                record.told = None
            if state is WorkloadState.RUNNING and before is WorkloadState.PENDING:
                self._recent_delays.append(now - record.submitted)
            if state is WorkloadState.SUCCEEDED and not record.timed.jobs:
                events.append(
                    StoredEvent(now, record.key, "Normal", "Completed", "all pods finished")
                )
            self.store.set_workload_state(record.key, state.value, record.started, record.finished)
        self._notes.changes.append(
            Change(ChangeKind.WORKLOAD, record.key, now, {"state": state.value})
        )
