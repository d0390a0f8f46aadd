"""The control plane of ``gpufleet serve`` in embedded mode: core, live world, store, tenants.

:class:`ControlPlane` runs the scheduling loop in a thread over a :class:`LiveSimCluster` (the
simulated cluster on a scaled wall clock) and answers the API's calls from other threads,
all under one lock. Every change is written to the :class:`Store` in the same turn, inside
one transaction, before anyone is told: a submission is committed before it is acknowledged,
a bind is recorded with its devices, so a restarted plane (even after ``kill -9``) puts every
running pod back on the same devices and every accepted workload back in its queue. Changes
are published to subscribers (the API's event stream) after they are committed.

Read-only views for the API live in :mod:`gpufleet.service.views`; this module owns the
mutations and the loop.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.api.schemas import ChangeKind, EventView, WorkloadState
from gpufleet.backends.sim.live import LiveSimCluster, Outcome, OutcomeKind
from gpufleet.control.factory import build_core, target_of
from gpufleet.control.loop import sync
from gpufleet.io.errors import InputError
from gpufleet.io.live_objects import LiveCatalog
from gpufleet.model import MILLI_PER_GPU, Node
from gpufleet.model.actions import Action, Evict, MarkUnschedulable
from gpufleet.model.events import WorkloadAdded
from gpufleet.model.tenancy import PriorityClass
from gpufleet.model.workload import TimedWorkload
from gpufleet.scheduling.admission import AdmissionConfig
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.service.protocol import ExplainCache
from gpufleet.service.records import (
    POD_CANCELLED,
    POD_PENDING,
    POD_RUNNING,
    POD_SUCCEEDED,
    WorkloadRecord,
)
from gpufleet.service.store import Store, StoredEvent
from gpufleet.service.submissions import catalog_builder, parse_body, read_workloads
from gpufleet.service.tenants import (
    ADMIN,
    ROLES,
    AdmissionRules,
    ForbiddenError,
    Principal,
    check_workload,
    hash_token,
    new_token,
)

log = logging.getLogger(__name__)

QUEUE = "Queue"
PRIORITY_CLASS = "PriorityClass"
#: A history point every this many wall seconds; this many kept in memory.
HISTORY_EVERY_S = 1.0
HISTORY_POINTS = 3600
#: Queueing delays of the most recent starts, for the p50/p95 of the history.
RECENT_DELAYS = 200


class NotFoundError(Exception):
    """No such object (or not one the caller may see): a 404."""


class ConflictError(Exception):
    """The object exists already, or is in use: a 409."""


@dataclass(frozen=True, slots=True)
class ServeOptions:
    policy: str = "default"
    seed: int = 0
    speed: float = 60.0
    #: Simulated run time of a workload that declares none (Deployments run until deleted).
    default_runtime: float = 3600.0
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    rules: AdmissionRules = field(default_factory=AdmissionRules)


@dataclass(frozen=True, slots=True)
class Change:
    """What changed, for the event stream (the API turns it into its schema)."""

    kind: ChangeKind
    key: str | None
    time: float
    data: dict[str, object]


Subscriber = Callable[[Sequence[Change]], None]


class ControlPlane:
    """See the module docstring."""

    def __init__(
        self,
        store: Store,
        nodes: Sequence[Node],
        options: ServeOptions | None = None,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.nodes = list(nodes)
        self.options = options or ServeOptions()
        self._wall = wall
        self.lock = threading.RLock()
        self._subscribers: list[Subscriber] = []
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.turns = 0
        self.explained: ExplainCache | None = None
        self.last_turn_wall = wall()
        self.records: dict[str, WorkloadRecord] = {}
        self._owner: dict[str, str] = {}  # pod key -> workload key
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY_POINTS)
        self._recent_delays: deque[float] = deque(maxlen=RECENT_DELAYS)
        self.history.extend(point for _, point in store.history(HISTORY_POINTS))
        self._last_sample = -math.inf
        self.counters = {"submitted": 0, "bound": 0, "preempted": 0, "finished": 0}
        start = float(store.meta("clock") or 0.0)
        self.world = LiveSimCluster(self.nodes, target_of(()), self.options.speed, start, wall=wall)
        self.catalog = self._catalog(store.objects(QUEUE), store.objects(PRIORITY_CLASS))
        self._catalog_builder = catalog_builder(store.objects(QUEUE), store.objects(PRIORITY_CLASS))
        self.core = self._new_core()
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
    def policy(self) -> str:
        return self.options.policy

    @property
    def speed(self) -> float | None:
        return self.options.speed

    def now(self) -> float:
        return self.world.clock.now()

    def cluster_nodes(self) -> Sequence[Node]:
        return self.nodes

    def priority_classes(self) -> Mapping[str, PriorityClass]:
        return self.catalog.priority_classes

    def recent_events(self, limit: int) -> list[StoredEvent]:
        return self.store.events(limit=limit)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def healthy(self, within: float = 30.0) -> bool:
        return self.running and self._wall() - self.last_turn_wall < within

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                timer = self.turn()
            except Exception:  # the loop must survive a bug in one turn; it is logged
                log.exception("control plane turn failed")
                timer = self.world.clock.now() + 1.0
            self.world.wait(timer)

    def turn(self) -> float:
        """One turn of the loop: events in, cycles, actions out, all recorded; returns the
        core's next timer."""
        with self.lock:
            now = self.world.clock.now()
            self.core.handle_all(self.world.poll_events())
            actions = self.core.run_until_idle(now)
            if actions:
                self.world.apply(actions)
            outcomes = self.world.drain_outcomes()
            changes: list[Change] = []
            events: list[StoredEvent] = []
            with self.store.transaction():
                self._record(actions, outcomes, now, changes, events)
                if self._wall() - self._last_sample >= HISTORY_EVERY_S:
                    self._sample(now)
                    self.store.set_meta("clock", repr(now))
                self.store.add_events(events)
            self.turns += 1
            self.last_turn_wall = self._wall()
            timer = self.core.next_timer()
        self._publish(changes, events)
        return timer

    # ----------------------------------------------------------------------------- restore
    def _restore(self) -> None:
        """Take back what the store holds: every workload, running pods on their devices."""
        for stored in self.store.workloads():
            record = WorkloadRecord.new(
                stored.seq, stored.tenant, stored.kind, stored.timed, stored.submitted
            )
            record.state = WorkloadState(stored.state)
            record.started, record.finished = stored.started, stored.finished
            for event in self.store.events(stored.key, limit=50):
                record.events.append(_event_view(event))
            self._index(record)
            if not record.active:
                for pod_record in record.pods.values():
                    pod_record.state = next(
                        (p.state for p in stored.pods if p.key == pod_record.pod.key),
                        POD_SUCCEEDED,
                    )
                continue
            pending = []
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
                        )
                    except ValueError as error:
                        log.error("cannot put back %s (%s): it waits again", stored_pod.key, error)
                        pending.append((pod_record.pod, stored_pod.remaining))
                        continue
                    pod_record.state = POD_RUNNING
                    pod_record.placement = stored_pod.placement
                    pod_record.started = stored_pod.started
                elif stored_pod.state in (POD_SUCCEEDED, POD_CANCELLED):
                    pod_record.state = stored_pod.state
                else:
                    pending.append((pod_record.pod, stored_pod.remaining))
            if pending:
                self.world.submit(_remaining_part(record.timed, pending))
        sync(self.core, self.world.list_state())

    def _index(self, record: WorkloadRecord) -> None:
        self.records[record.key] = record
        for key in record.pods:
            self._owner[key] = record.key

    # ----------------------------------------------------------------------------- core
    def _catalog(
        self, queues: Sequence[dict[str, Any]], classes: Sequence[dict[str, Any]]
    ) -> LiveCatalog:
        return LiveCatalog(queues, classes)

    def _new_core(self) -> SchedulerCore:
        return build_core(
            self.nodes,
            self.options.policy,
            self.options.seed,
            queues=self.catalog.queues,
            config=self.options.admission,
        )

    def _rebuild_core(self) -> None:
        """A new core for new queues or classes, told everything again (under the lock)."""
        core = self._new_core()
        core.now = self.world.clock.now()
        sync(core, self.world.list_state())
        for record in sorted(self.records.values(), key=lambda r: r.seq):
            pods = record.pending_pods()
            if record.active and pods and record.key not in core.running:
                core.handle(
                    WorkloadAdded(_remaining_part(record.timed, [(p, None) for p in pods]).workload)
                )
        self.core = core

    # ----------------------------------------------------------------------------- submit
    def submit(
        self, principal: Principal, body: bytes, content_type: str, dry_run: bool = False
    ) -> list[WorkloadRecord]:
        """Read, check and accept the workloads of a request body: all or none. Raises
        InputError (422), ForbiddenError (403) or ConflictError (409)."""
        manifests = parse_body(body, content_type)
        with self.lock:
            submitted = read_workloads(
                manifests,
                self._catalog_builder,
                principal.default_namespace(),
                self.options.default_runtime,
                self._home_queue(principal),
            )
            queues = self.core.quotas.queues
            checked = []
            for item in submitted:
                workload = check_workload(
                    principal, self.options.rules, item.timed.workload, queues
                )
                if workload.key in self.records:
                    raise ConflictError(f"workload {workload.key} exists already")
                taken = [p.key for p in workload.pods if p.key in self._owner]
                if taken:
                    raise ConflictError(f"pod {taken[0]} belongs to another workload")
                checked.append((item.kind, dataclasses.replace(item.timed, workload=workload)))
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
                record.events.append(_event_view(event))
                self._index(record)
                self.world.submit(record.timed)
            self.counters["submitted"] += len(records)
        self._publish(
            [Change(ChangeKind.WORKLOAD, r.key, now, {"state": r.state.value}) for r in records],
            events,
        )
        return records

    def _home_queue(self, principal: Principal) -> str | None:
        """Where the caller's workloads go when they name no queue: the queue named like its
        tenant, else the first it may use (admins: none, they name one)."""
        if principal.is_admin:
            return None
        allowed = principal.allowed_queues(self.core.quotas.queues)
        if principal.tenant in allowed:
            return principal.tenant
        return allowed[0] if allowed else None

    def cancel(self, principal: Principal, key: str) -> WorkloadRecord:
        with self.lock:
            record = self.visible(principal, key)
            if not record.active:
                raise ConflictError(f"workload {key} is {record.state.value} already")
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
            record.events.append(_event_view(event))
            self.world.cancel(record.pods)
        self._publish([Change(ChangeKind.WORKLOAD, key, now, {"state": "Cancelled"})], [event])
        return record

    def visible(self, principal: Principal, key: str) -> WorkloadRecord:
        """The workload ``key`` if the caller may see it (else NotFoundError)."""
        record = self.records.get(key)
        if record is None or not principal.may_see(record.tenant):
            raise NotFoundError(f"workload {key} not found")
        return record

    # ----------------------------------------------------------------------------- admin
    def put_object(self, principal: Principal, kind: str, document: dict[str, Any]) -> str:
        """Create or replace a Queue or PriorityClass (admin only); the core is rebuilt with
        it. A document that does not fit the rest (a cycle, children above their parent...)
        is refused and nothing changes."""
        _require_admin(principal)
        name = _object_name(document, kind)
        with self.lock:
            queues = {q["metadata"]["name"]: q for q in self.store.objects(QUEUE)}
            classes = {c["metadata"]["name"]: c for c in self.store.objects(PRIORITY_CLASS)}
            (queues if kind == QUEUE else classes)[name] = document
            catalog = self._catalog(list(queues.values()), list(classes.values()))
            if catalog.rejected:
                first = catalog.rejected[0]
                raise InputError(f"{first.kind} {first.key}", first.message.split(": ", 1)[-1])
            if kind == QUEUE:
                self._check_queues_in_use(set(catalog.queues))
            with self.store.transaction():
                self.store.put_object(kind, name, document)
            self.catalog = catalog
            self._catalog_builder = catalog_builder(
                self.store.objects(QUEUE), self.store.objects(PRIORITY_CLASS)
            )
            self._rebuild_core()
            now = self.world.clock.now()
        self._publish([Change(ChangeKind.QUEUE, name, now, {"kind": kind})], [])
        self.world.wake()
        return name

    def delete_object(self, principal: Principal, kind: str, name: str) -> None:
        _require_admin(principal)
        with self.lock:
            documents = {o["metadata"]["name"]: o for o in self.store.objects(kind)}
            if name not in documents:
                raise NotFoundError(f"{kind} {name} not found")
            del documents[name]
            queues = self.store.objects(QUEUE) if kind != QUEUE else list(documents.values())
            classes = (
                self.store.objects(PRIORITY_CLASS) if kind != PRIORITY_CLASS
                else list(documents.values())
            )  # fmt: skip
            catalog = self._catalog(queues, classes)
            if catalog.rejected:
                first = catalog.rejected[0]
                raise ConflictError(f"{kind} {name} is needed: {first.message}")
            if kind == QUEUE:
                self._check_queues_in_use(set(catalog.queues) if queues else set())
            with self.store.transaction():
                self.store.delete_object(kind, name)
            self.catalog = catalog
            self._catalog_builder = catalog_builder(
                self.store.objects(QUEUE), self.store.objects(PRIORITY_CLASS)
            )
            self._rebuild_core()
            now = self.world.clock.now()
        self._publish([Change(ChangeKind.QUEUE, name, now, {"deleted": True})], [])

    def _check_queues_in_use(self, remaining: set[str]) -> None:
        if not remaining:
            remaining = {"default"}
        for record in self.records.values():
            if record.active and record.timed.workload.queue not in remaining:
                raise ConflictError(
                    f"queue {record.timed.workload.queue} is used by workload {record.key} "
                    f"({record.state.value})"
                )

    def create_token(
        self, principal: Principal | None, tenant: str, role: str, queues: Sequence[str] = ()
    ) -> str:
        """A new API token (only its hash is kept); ``principal`` None: from the host itself."""
        if principal is not None:
            _require_admin(principal)
        return create_token(self.store, tenant, role, queues)

    def authenticate(self, token: str) -> Principal | None:
        with self.lock:
            found = self.store.token(hash_token(token))
        if found is None:
            return None
        return Principal(
            found.tenant, found.role, found.queues, self.options.rules.for_tenant(found.tenant)
        )

    # ----------------------------------------------------------------------------- recording
    def _record(
        self,
        actions: Sequence[Action],
        outcomes: Sequence[Outcome],
        now: float,
        changes: list[Change],
        events: list[StoredEvent],
    ) -> None:
        preemptor = {a.pod.key: a for a in actions if isinstance(a, Evict)}
        touched: dict[str, WorkloadRecord] = {}
        for outcome in outcomes:
            record = self.records.get(self._owner.get(outcome.pod_key, ""))
            if record is None or not record.active:
                continue
            pod_record = record.pods[outcome.pod_key]
            if outcome.kind is OutcomeKind.BOUND:
                assert outcome.placement is not None
                pod_record.state, pod_record.placement = POD_RUNNING, outcome.placement
                pod_record.started = now
                self.store.set_pod(outcome.pod_key, POD_RUNNING, outcome.placement, now,
                                   outcome.remaining)  # fmt: skip
                events.append(
                    StoredEvent(now, record.key, "Normal", "Scheduled",
                                f"pod {pod_record.pod.name} bound to {_where(outcome)}")
                )  # fmt: skip
                self.counters["bound"] += 1
            elif outcome.kind is OutcomeKind.FINISHED:
                pod_record.state = POD_SUCCEEDED
                self.store.set_pod_state(outcome.pod_key, POD_SUCCEEDED)
                self.counters["finished"] += 1
            elif outcome.kind is OutcomeKind.EVICTED:
                pod_record.state, pod_record.placement = POD_PENDING, None
                self.store.set_pod(outcome.pod_key, POD_PENDING, remaining=outcome.remaining)
                action = preemptor.get(outcome.pod_key)
                by = f" by {action.preemptor}" if action and action.preemptor else ""
                events.append(
                    StoredEvent(now, record.key, "Warning", "Preempted",
                                f"pod {pod_record.pod.name} evicted{by}: {outcome.message}")
                )  # fmt: skip
                self.counters["preempted"] += 1
            else:
                events.append(
                    StoredEvent(now, record.key, "Warning", "FailedBinding",
                                f"pod {pod_record.pod.name}: {outcome.message or 'bind failed'}")
                )  # fmt: skip
            touched[record.key] = record
        for told in actions:
            if not isinstance(told, MarkUnschedulable):
                continue
            record = self.records.get(self._owner.get(told.pod.key, ""))
            if record is None or record.told == told.message:
                continue
            record.told = told.message
            events.append(StoredEvent(now, record.key, "Warning", "FailedScheduling", told.message))
            touched[record.key] = record
        for record in touched.values():
            before = record.state
            state = record.settle(now)
            if state is not before:
                if state in (WorkloadState.RUNNING, WorkloadState.ADMITTED) and record.told:
                    record.told = None
                if state is WorkloadState.RUNNING and before is WorkloadState.PENDING:
                    self._recent_delays.append(now - record.submitted)
                if state is WorkloadState.SUCCEEDED:
                    events.append(
                        StoredEvent(now, record.key, "Normal", "Completed", "all pods finished")
                    )
                self.store.set_workload_state(
                    record.key, state.value, record.started, record.finished
                )
            changes.append(Change(ChangeKind.WORKLOAD, record.key, now, {"state": state.value}))
        for event in events:
            record = self.records.get(event.workload or "")
            if record is not None:
                record.events.append(_event_view(event))
        if outcomes:
            changes.append(Change(ChangeKind.CLUSTER, None, now, {}))

    def gpu_totals(self) -> tuple[int, float]:
        """(GPUs in the cluster, GPUs allocated), counting a MIG slice as its share of its
        device, the same way the node map counts them."""
        total = sum(node.gpu_count for node in self.nodes)
        slots = {
            (node.name, gpu.index): len(gpu.mig_slices)
            for node in self.nodes
            for gpu in node.gpus
            if gpu.partitioned
        }
        allocated = 0.0
        for record in self.records.values():
            for pod in record.pods.values():
                placement = pod.placement
                if pod.state != POD_RUNNING or placement is None:
                    continue
                each = placement.gpu_milli_per_device or MILLI_PER_GPU
                allocated += len(placement.gpu_indices) * each / MILLI_PER_GPU
                for index, _slot in placement.mig_slices:
                    allocated += 1 / max(slots.get((placement.node, index), 1), 1)
        return total, allocated

    def _sample(self, now: float) -> None:
        self._last_sample = self._wall()
        total, allocated = self.gpu_totals()
        delays = sorted(self._recent_delays)
        point = {
            "time": round(now, 3),
            "gpu_allocation": round(min(allocated / total, 1.0), 4) if total else 0.0,
            "pending": sum(r.state is WorkloadState.PENDING for r in self.records.values()),
            "running": sum(
                r.state in (WorkloadState.RUNNING, WorkloadState.ADMITTED)
                for r in self.records.values()
            ),
            "queueing_delay_p50": round(statistics.median(delays), 3) if delays else None,
            "queueing_delay_p95": round(delays[int(0.95 * (len(delays) - 1))], 3)
            if delays
            else None,
        }
        self.history.append(point)
        self.store.add_history(now, point)

    # ----------------------------------------------------------------------------- stream
    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber`` (from the loop's thread) with each batch of changes; returns a
        function that unsubscribes."""
        with self.lock:
            self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            with self.lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)

        return unsubscribe

    def _publish(self, changes: list[Change], events: Iterable[StoredEvent]) -> None:
        changes = changes + [
            Change(ChangeKind.EVENT, e.workload, e.time,
                   {"reason": e.reason, "type": e.type, "message": e.message})
            for e in events
        ]  # fmt: skip
        if not changes:
            return
        with self.lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            try:
                subscriber(changes)
            except Exception:  # one broken subscriber must not stop the others
                log.exception("event stream subscriber failed")


def create_token(store: Store, tenant: str, role: str, queues: Sequence[str] = ()) -> str:
    """Make a token for ``tenant`` with ``role``; only its hash is stored. Returns it."""
    if role not in ROLES:
        raise InputError("token", f"role: expected one of {', '.join(ROLES)}, got {role!r}")
    if not tenant or not tenant.replace("-", "").replace("_", "").isalnum():
        raise InputError(
            "token", f"tenant: expected a name of letters, digits, - and _, got {tenant!r}"
        )
    token = new_token()
    store.add_token(hash_token(token), tenant, role, list(queues), time.time())
    return token


def _require_admin(principal: Principal) -> None:
    if principal.role != ADMIN:
        raise ForbiddenError(f"tenant {principal.tenant!r} is not an admin")


def _object_name(document: dict[str, Any], kind: str) -> str:
    if document.get("kind") != kind:
        raise InputError("request", f"kind: expected {kind}, got {document.get('kind')!r}")
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise InputError("request", "metadata.name: required, but missing")
    return name


def _where(outcome: Outcome) -> str:
    placement = outcome.placement
    assert placement is not None
    parts = [placement.node]
    if placement.gpu_indices:
        share = placement.gpu_milli_per_device
        gpus = ",".join(str(i) for i in placement.gpu_indices)
        parts.append(f"GPU {gpus}" + (f" ({share / 1000:g} each)" if 0 < share < 1000 else ""))
    if placement.mig_slices:
        parts.append("MIG " + ",".join(f"{g}:{s}" for g, s in placement.mig_slices))
    return " ".join(parts)


def _event_view(event: StoredEvent) -> EventView:
    return EventView(
        time=event.time,
        type=event.type,
        reason=event.reason,
        message=event.message,
        workload=event.workload,
    )


def _remaining_part(
    timed: TimedWorkload, pods: Sequence[tuple[Any, float | None]]
) -> TimedWorkload:
    """The part of a workload still to run: its waiting pods, with the work they have left."""
    workload = timed.workload
    chosen = tuple(pod for pod, _ in pods)
    left = [r for _, r in pods if r is not None]
    duration = max(left) if left else timed.duration
    if len(chosen) != len(workload.pods):
        workload = dataclasses.replace(
            workload, pods=chosen, min_member=min(workload.min_member, len(chosen))
        )
    return dataclasses.replace(timed, workload=workload, duration=duration)
