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
and the loop. It is built of parts, each given the state they share (:class:`~gpufleet.
service.live_state.LiveState`: the book, the world, the core...), as the local machine is: the
book of workloads, tokens and changes (:class:`~gpufleet.service.plane_book.PlaneBook`), what
each turn writes down (:mod:`gpufleet.service.live_recording`), the world and the core kept in
step with the store and the catalog (:mod:`gpufleet.service.live_restore`), what an owner
changes of a waiting workload (:mod:`gpufleet.service.owner_changes`: ungate, resume,
suspend, the plane's ``waiting_changes``) and what the idle policies do
(:mod:`gpufleet.service.live_idle`, its ``idle_actions``). This module owns its life (start,
stop, each turn's scope: the lock, the transaction, publishing once committed), what it reads
out, and the API's requests (submit, cancel, Queue and PriorityClass objects). What a world
needs beyond that is given by the plane of that world: its recorder, how its start takes back
what the store holds, what a
submission carries beyond its model form (:class:`SubmissionReader`: this machine reads each
workload's processes), its telemetry, logs and terminals.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from gpufleet.control.loop import ControlLoop
from gpufleet.io.kinds import Skipped
from gpufleet.io.live_objects import LiveCatalog
from gpufleet.io.manifests import Manifest
from gpufleet.metrics.scheduler import SchedulerMetrics
from gpufleet.metrics.state import SchedulerState, read_state
from gpufleet.model import Node
from gpufleet.model.priorities import PriorityClass
from gpufleet.model.times import TimeFormat
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.framework import CheckWorld
from gpufleet.service.auth import Principal
from gpufleet.service.capabilities import PodLogs, Terminals
from gpufleet.service.live_idle import LiveIdleActions
from gpufleet.service.live_recording import TurnRecorder
from gpufleet.service.live_restore import LiveRestorer, TakesBack, new_core
from gpufleet.service.live_state import LiveState, TurnNotes
from gpufleet.service.live_world import LiveWorld
from gpufleet.service.observatory import Observatory
from gpufleet.service.owner_changes import OwnerChanges
from gpufleet.service.plane_book import (
    PRIORITY_CLASS,
    QUEUE,
    Change,
    PlaneBook,
    ServeOptions,
    Subscriber,
    object_name,
    require_admin,
)
from gpufleet.service.protocol import ExplainCache
from gpufleet.service.records import WorkloadRecord
from gpufleet.service.states import ChangeKind
from gpufleet.service.store import Store, StoredEvent, StoredToken
from gpufleet.service.submissions import Submitted, parse_body
from gpufleet.service.tokens import DEFAULT_LIFETIME_S
from gpufleet.service.usage_store import load_usage, save_usage
from gpufleet.telemetry.source import TelemetrySource

log = logging.getLogger(__name__)


class SubmissionReader(Protocol):
    """What a world needs of accepted workloads beyond their model form (this machine: each
    workload's processes)."""

    def prepare(
        self,
        principal: Principal,
        manifests: Sequence[Manifest],
        accepted: Sequence[Submitted],
        dry_run: bool,
    ) -> None:
        """Read and check it before anything is stored (raise InputError, ForbiddenError...:
        nothing is kept)."""
        ...

    def keep(self, accepted: Sequence[Submitted]) -> None:
        """Store what :meth:`prepare` read, in the submission's transaction, and hand it to the
        world (before the workloads arrive there)."""
        ...


#: How a plane makes its recorder from the state its parts share, and how its start takes back
#: what the store holds, given its restorer.
RecorderMaker = Callable[[LiveState, CheckWorld], TurnRecorder]
TakeBackMaker = Callable[[LiveRestorer], TakesBack]


class LivePlane:
    """See the module docstring."""

    def __init__(
        self,
        store: Store,
        world: LiveWorld,
        metrics: SchedulerMetrics,
        options: ServeOptions,
        instants: TimeFormat,
        wall: Callable[[], float] = time.monotonic,
        *,
        default_runtime: float | None,
        take_back: TakeBackMaker,
        recorder: RecorderMaker = TurnRecorder,
        submissions: SubmissionReader | None = None,
        checkpoint_note: str = "",
    ) -> None:
        self.book = book = PlaneBook(
            store,
            options,
            lambda: world.clock.now(),
            lambda: world.current_nodes(),
            wall,
            default_runtime=default_runtime,
            catalog_source=store.path,
            catalog_where="stored",
        )
        # The book's state, as the API reads it from the plane (the same objects).
        self.store, self.options, self.lock = store, options, book.lock
        self.history, self.counters, self.notifications = (
            book.history,
            book.counters,
            book.notifications,
        )
        self.turns = 0
        self.explained: ExplainCache | None = None
        #: Device telemetry for ``/metrics`` and the node map (None: this world has none).
        self.telemetry: TelemetrySource | None = None
        #: The GPUs' series and the alerts on them (None: this world observes nothing).
        self.observatory: Observatory | None = None
        #: The earliest instant the plane answers for: a cost window reaching before it starts
        #: there (an embedded plane's clock starts at 0; a local server's book at its first
        #: start).
        self.book_start = 0.0
        #: A run's output and terminal (None: this world keeps neither).
        self.logs: PodLogs | None = None
        self.terminals: Terminals | None = None
        self._thread: threading.Thread | None = None
        self.last_turn_wall = wall()
        self.world = world
        catalog = book.stored_catalog(store.objects(QUEUE), store.objects(PRIORITY_CLASS))
        self.state = LiveState(
            book, world, instants, catalog, new_core(world, options, catalog, instants)
        )
        for rejected in catalog.rejected:
            log.error(
                "stored %s %s is set aside: %s", rejected.kind, rejected.key, rejected.message
            )
        self._submissions = submissions
        #: The world's scheduler metrics, its core read under the lock.
        self.metrics = metrics
        self.metrics.read = self._read_state
        self.loop = ControlLoop(
            self.world, lambda: self.state.core, [metrics], guard=self._turn_scope
        )
        self.recorder = recorder(self.state, self.loop.check_world)
        self.loop.observers.append(self.recorder)
        self.restorer = LiveRestorer(self.state)
        #: An owner's changes to its waiting workloads (ungate, resume, suspend).
        self.waiting_changes = OwnerChanges(self.state)
        #: What the idle policies' steps do here.
        self.idle_actions = LiveIdleActions(self.state, checkpoint_note)
        take_back(self.restorer).restore()
        load_usage(store, self.core)
        self._next_seq = store.next_seq()

    # ----------------------------------------------------------------------------- the book
    @property
    def records(self) -> dict[str, WorkloadRecord]:
        return self.book.records

    @property
    def core(self) -> SchedulerCore:
        return self.state.core

    @property
    def catalog(self) -> LiveCatalog:
        return self.state.catalog

    @property
    def held(self) -> dict[str, str]:
        """Workloads waiting outside the world until their queue, set aside, is fixed."""
        return self.state.held

    @property
    def policy(self) -> str:
        return self.book.policy

    @property
    def stopping(self) -> bool:
        return self.book.stopping

    def recent_events(self, limit: int) -> list[StoredEvent]:
        return self.book.recent_events(limit)

    def gpu_totals(self) -> tuple[int, float]:
        return self.book.gpu_totals()

    def pod_owners(self) -> dict[tuple[str, str], str]:
        return self.book.pod_owners()

    def visible(self, principal: Principal, key: str) -> WorkloadRecord:
        return self.book.visible(principal, key)

    def find(
        self, principal: Principal, namespace: str, name: str, kind: str | None = None
    ) -> WorkloadRecord:
        return self.book.find(principal, namespace, name, kind)

    def authenticate(self, token: str) -> Principal:
        return self.book.authenticate(token)

    def throttle(self, principal: Principal) -> None:
        self.book.throttle(principal)

    def create_token(
        self,
        principal: Principal | None,
        tenant: str,
        role: str,
        queues: Sequence[str] = (),
        name: str = "",
        lifetime: float | None = DEFAULT_LIFETIME_S,
    ) -> tuple[str, StoredToken]:
        return self.book.create_token(principal, tenant, role, queues, name, lifetime)

    def list_tokens(self, principal: Principal) -> list[StoredToken]:
        return self.book.list_tokens(principal)

    def revoke_token(self, principal: Principal, token_id: str) -> StoredToken:
        return self.book.revoke_token(principal, token_id)

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        return self.book.subscribe(subscriber)

    def publish(self, changes: list[Change], events: Iterable[StoredEvent]) -> None:
        self.book.publish(changes, events)

    def record_event(
        self, key: str, type_: str, reason: str, message: str, at: float | None = None
    ) -> StoredEvent:
        return self.book.record_event(key, type_, reason, message, at)

    def watch(self, observatory: Observatory) -> None:
        """Observe with ``observatory``: its alerts' transitions go to the event stream."""
        self.observatory = observatory
        observatory.subscribe(self.book.publish_alerts)

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Run the scheduling loop in a thread (until :meth:`stop`)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpufleet-plane", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.book.stop_event.set()
        self.world.stop()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        with self.lock:
            save_usage(self.store, self.core)

    # ----------------------------------------------------------------------------- reading
    @property
    def speed(self) -> float | None:
        return self.options.speed

    def now(self) -> float:
        return self.world.clock.now()

    def cluster_nodes(self) -> Sequence[Node]:
        return self.world.current_nodes()

    def priority_classes(self) -> Mapping[str, PriorityClass]:
        return self.state.catalog.priority_classes

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def healthy(self, within: float = 30.0) -> bool:
        return self.running and self.book.wall() - self.last_turn_wall < within

    def _run(self) -> None:
        # The loop must survive a bug in one turn; it is logged.
        self.loop.run(stop=self.book.stop_event.is_set, survive=True)

    def turn(self) -> float:
        """One turn of the loop: events in, cycles, actions out, all recorded; returns the
        core's next timer."""
        return self.loop.turn()

    @contextmanager
    def _turn_scope(self) -> Iterator[None]:
        """A turn runs under the lock, in one store transaction; what it changed is published
        once committed."""
        with self.lock:
            notes = self.state.notes = TurnNotes()
            with self.store.transaction():
                yield
            self.turns += 1
            self.last_turn_wall = self.book.wall()
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
            accepted = self.book.accept(
                principal,
                manifests,
                self.state.catalog_builder,
                self.core.quotas.queues,
                self.state.owner,
                paused,
            )
            checked = [(item.kind, item.timed) for item in accepted]
            if self._submissions is not None:
                self._submissions.prepare(principal, manifests, accepted, dry_run)
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
                if self._submissions is not None:
                    self._submissions.keep(accepted)
            self._next_seq += len(records)
            for record, event in zip(records, events, strict=True):
                record.events.append(event)
                self.state.index(record)
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
                    self.state.owner.pop(pod_key, None)
                deleted = Change(ChangeKind.WORKLOAD, key, now, {"state": "Deleted"})
            else:
                deleted = None
        if deleted is not None:
            self.publish([deleted], [])
            return record
        self.state.cancel_active(record, f"by {principal.tenant}")
        return record

    # ----------------------------------------------------------------------------- admin
    def put_object(self, principal: Principal, kind: str, document: dict[str, Any]) -> str:
        """Create or replace a Queue or PriorityClass (admin only); the core is rebuilt with
        it. A document that does not fit the rest (a cycle, children above their parent...)
        is refused and nothing changes."""
        require_admin(principal)
        name = object_name(document, kind)
        with self.lock:
            catalog = self.book.changed_catalog(*self._documents(), kind, name, document)
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
            catalog = self.book.changed_catalog(*self._documents(), kind, name, None)
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
        self.state.use_catalog(catalog)
        self.restorer.rebuild_core()
        self.restorer.release_held()
