"""The control plane of ``gpufleet serve`` over a live world: core, world, store, tenants.

:class:`LivePlane` runs the control loop (:class:`~gpufleet.control.loop.ControlLoop`) in a
thread over a :class:`~gpufleet.service.live_world.LiveWorld` (the simulated cluster on a
scaled wall clock: :class:`~gpufleet.service.embedded_plane.EmbeddedControlPlane`; this
machine's GPUs, workloads run as processes: :class:`~gpufleet.service.local_plane.
LocalControlPlane`) and answers the API's calls from other threads, all under one lock: each
turn runs under it, in one store transaction. What the world reports (a bind done or refused,
a pod finished, evicted, failed or restarted, a job ended: its events) and what the scheduler
decided (why a pod waits, for whom it was evicted: its actions) are written to the
:class:`Store` in the turn that sees them, before anyone is told: a submission is committed
before it is acknowledged, a bind is recorded with its devices, so a restarted plane (even
after ``kill -9``) finds every running pod again and puts every accepted workload back in its
queue. Changes are published to subscribers (the API's event stream) after they are committed.

The API reads its records through :mod:`gpufleet.api.views`; the plane owns the mutations
and the loop. This module owns its life (start, stop, each turn's scope: the lock, the
transaction, publishing once committed), what it reads out, and the API's requests (submit,
cancel, Queue and PriorityClass objects); the layers it is built on own writing down each turn
(:mod:`gpufleet.service.live_recording`), keeping the world and the core in step with
the store and the catalog (:mod:`gpufleet.service.live_restore`) and what an owner
changes of a waiting workload (:mod:`gpufleet.service.owner_changes`: ungate, resume,
suspend). What a world needs beyond the protocol (telemetry, what a submission carries) is its
plane's subclass's.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from gpufleet.control.loop import ControlLoop
from gpufleet.io.kinds import Skipped
from gpufleet.io.live_objects import LiveCatalog
from gpufleet.io.manifests import Manifest
from gpufleet.metrics.scheduler import SchedulerMetrics
from gpufleet.metrics.state import SchedulerState, read_state
from gpufleet.model import Node
from gpufleet.model.priorities import LOWEST_PRIORITY, PriorityClass
from gpufleet.service.auth import Principal
from gpufleet.service.live_recording import TurnNotes
from gpufleet.service.live_world import LiveWorld
from gpufleet.service.owner_changes import OwnerChangesPlane
from gpufleet.service.plane_book import (
    PRIORITY_CLASS,
    QUEUE,
    Change,
    IdleOutcome,
    ServeOptions,
    object_name,
    require_admin,
)
from gpufleet.service.records import POD_CANCELLED, POD_PENDING, POD_RUNNING, WorkloadRecord
from gpufleet.service.states import ChangeKind, WorkloadState
from gpufleet.service.store import Store, StoredEvent
from gpufleet.service.submissions import Submitted, parse_body
from gpufleet.service.usage_store import load_usage, save_usage

log = logging.getLogger(__name__)


class LivePlane(OwnerChangesPlane):
    """See the module docstring."""

    def __init__(
        self,
        store: Store,
        world: LiveWorld,
        metrics: SchedulerMetrics,
        options: ServeOptions,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(store, options, wall)
        self._thread: threading.Thread | None = None
        self.last_turn_wall = wall()
        self._owner = {}
        self.world = world
        self.catalog_source = store.path
        self.catalog_where = "stored"
        self.catalog = self.stored_catalog(store.objects(QUEUE), store.objects(PRIORITY_CLASS))
        self._catalog_builder = self.catalog.request_builder()
        self.held = {}
        self.core = self._new_core()
        for rejected in self.catalog.rejected:
            log.error(
                "stored %s %s is set aside: %s", rejected.kind, rejected.key, rejected.message
            )
        self._evicted_for = {}
        self._notes = TurnNotes()
        #: The world's scheduler metrics, its core read under the lock.
        self.metrics = metrics
        self.metrics.read = self._read_state
        self.loop = ControlLoop(
            self.world, lambda: self.core, [self.metrics, self], guard=self._turn_scope
        )
        self._restore()
        load_usage(store, self.core)
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
            save_usage(self.store, self.core)

    # ----------------------------------------------------------------------------- reading
    backend_name = "live"

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
            notes = self._notes = TurnNotes()
            with self.store.transaction():
                yield
            self.turns += 1
            self.last_turn_wall = self._wall()
        self.publish(notes.changes, notes.events)

    def _read_state(self) -> SchedulerState:
        with self.lock:
            return read_state(self.core)

    # ----------------------------------------------------------------------------- submit
    def submit(
        self,
        principal: Principal,
        body: bytes,
        content_type: str,
        dry_run: bool = False,
        skipped: Skipped | None = None,
        paused: list[str] | None = None,
    ) -> list[WorkloadRecord]:
        """Read, check and accept the workloads of a request body: all or none. Raises
        InputError (422), ForbiddenError (403) or ConflictError (409)."""
        manifests = parse_body(body, content_type, skipped)
        with self.lock:
            accepted = self.accept(
                principal,
                manifests,
                self._catalog_builder,
                self.core.quotas.queues,
                self._owner,
                paused,
            )
            checked = [(item.kind, item.timed) for item in accepted]
            self._prepare(principal, manifests, accepted, dry_run)
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
                self._keep_prepared(accepted)
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

    def _prepare(
        self,
        principal: Principal,
        manifests: Sequence[Manifest],
        accepted: Sequence[Submitted],
        dry_run: bool,
    ) -> None:
        """What the world needs of accepted workloads beyond their model form, checked before
        anything is stored (raise InputError, ForbiddenError...: nothing is kept). The
        simulated world needs nothing; the local machine reads each workload's process."""

    def _keep_prepared(self, accepted: Sequence[Submitted]) -> None:
        """Store what :meth:`_prepare` read, in the submission's transaction, and hand it to
        the world (before the workloads arrive there)."""

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
        self._cancel_active(record, f"by {principal.tenant}")
        return record

    def stop_idle(self, key: str, by: str) -> IdleOutcome:
        """Cancel the running workload ``key`` for the idle policy ``by``, as a cancel through
        the API does (its Cancelled event names the policy)."""
        with self.lock:
            record = self.records.get(key)
        if record is None or not self._cancel_active(record, f"by IdlePolicy {by} (idle GPUs)"):
            return IdleOutcome(note="it had ended already")
        return IdleOutcome()

    def demote(self, key: str) -> IdleOutcome:
        """Lower the running workload ``key`` to preemptible at the lowest priority: the
        simulated world tells the core, which may let waiting work preempt it."""
        with self.lock:
            record = self.records.get(key)
            running = (
                []
                if record is None
                else [pod_key for pod_key, pod in record.pods.items() if pod.state == POD_RUNNING]
            )
            if not running or not self.world.demote(running, "idle policy: Preemptible"):
                return IdleOutcome(False, "it has no running pods")
        return IdleOutcome(note=f"lowered to preemptible at priority {LOWEST_PRIORITY}")

    def _cancel_active(self, record: WorkloadRecord, who: str) -> bool:
        """Cancel a waiting or running workload: its pods leave the world, it stays listed.
        False when it had ended meanwhile."""
        key = record.key
        with self.lock:
            if not record.active:
                return False
            now = self.world.clock.now()
            event = StoredEvent(now, key, "Normal", "Cancelled", who)
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
        return True

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
