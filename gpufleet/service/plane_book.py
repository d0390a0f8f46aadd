"""What every control plane shares, whatever world it runs on: tokens and tenants, the book of
workloads with its history, and the stream of changes.

:class:`PlaneBook` holds the state the API reads (records, history, counters) under one lock,
authenticates callers, reads and checks a request's workloads and queue objects, samples the
cluster's history and publishes changes to subscribers. It is a part, not a base: each plane
(the live planes of :mod:`gpufleet.service.live_plane`, the simulated cluster's and this
machine's, and the Kubernetes plane of :mod:`gpufleet.service.kube_plane`) holds one, given
its world's clock and nodes, shares it with its other parts, and adds how workloads are
accepted, run and recorded.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.io.assembly import DEFAULT_QUEUE, ScenarioBuilder
from gpufleet.io.errors import InputError, quoted, shorten
from gpufleet.io.fleet.catalog import check_change, object_key
from gpufleet.io.live_objects import LiveCatalog, live_manifest
from gpufleet.io.manifests import Manifest, describe
from gpufleet.io.names import name_problem, rule_of
from gpufleet.model import MILLI_PER_GPU, Node
from gpufleet.model.alerts import AlertRule
from gpufleet.model.faults import GpuFault
from gpufleet.model.node_faults import NodeFault
from gpufleet.model.queues import Queue
from gpufleet.scheduling.admission import AdmissionConfig
from gpufleet.scheduling.profile import DEFAULT_PROFILE, Profile
from gpufleet.service.alert_webhooks import NotificationMetrics
from gpufleet.service.auth import (
    ADMIN,
    AdmissionRules,
    ForbiddenError,
    Principal,
    check_workload,
    refuse_by_queue,
)
from gpufleet.service.limits import TenantLimits, WriteBuckets, check_active
from gpufleet.service.observatory import STEP_S, ObservedRound
from gpufleet.service.records import POD_RUNNING, WorkloadRecord
from gpufleet.service.states import ChangeKind, WorkloadState
from gpufleet.service.store import Store, StoredEvent, StoredToken
from gpufleet.service.submissions import SOURCE, Submitted, read_workloads
from gpufleet.service.tenant_identity import TenantIdentity
from gpufleet.service.tokens import (
    DEFAULT_LIFETIME_S,
    UnknownTokenError,
    check_token,
    make_token,
    revoke_token,
)
from gpufleet.service.tokens import create_token as create_token
from gpufleet.telemetry.profiles import UsageProfile

log = logging.getLogger(__name__)

QUEUE = "Queue"
PRIORITY_CLASS = "PriorityClass"
#: A history point every this many wall seconds; this many kept in memory.
HISTORY_EVERY_S = 1.0
HISTORY_POINTS = 3600
#: Queueing delays of the most recent starts, for the p50/p95 of the history.
RECENT_DELAYS = 200
#: The most of a log one request returns.
LOG_CHUNK = 1 << 20


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
    #: Which plugin at each extension point (``--profile``).
    profile: Profile = DEFAULT_PROFILE
    rules: AdmissionRules = field(default_factory=AdmissionRules)
    #: The usage profile of simulated pods that name none (None: from each pod's shape).
    usage_profile: UsageProfile | None = None
    #: The seed of the simulated GPUs' usage profiles (None: ``seed``).
    telemetry_seed: int | None = None
    #: GPU faults the simulated cluster plays (a scenario's ``GpuFault`` objects), their times
    #: counted from the plane's start.
    faults: tuple[GpuFault, ...] = ()
    #: Nodes the simulated cluster loses (a scenario's ``SpotInterruption`` and ``NodeFailure``
    #: objects), their times counted from the plane's start, random ones drawn from ``seed``.
    node_faults: tuple[NodeFault, ...] = ()
    #: The alert rules the plane evaluates (None: gpufleet's built-in rules).
    alert_rules: tuple[AlertRule, ...] | None = None
    #: Seconds of the simulated cluster's clock between observatory rounds (readings of its
    #: GPUs and evaluations of the alert rules): Prometheus' ``evaluation_interval``.
    observe_step_s: float = STEP_S
    #: On Kubernetes, the identity a tenant's objects are written as (impersonated); None
    #: writes them with the plane's own credentials (``--no-impersonation``: one tenant only).
    tenant_identity: TenantIdentity | None = field(default_factory=TenantIdentity)
    #: What one tenant may hold and how fast it may write.
    limits: TenantLimits = field(default_factory=TenantLimits)


@dataclass(frozen=True, slots=True)
class Change:
    """What changed, for the event stream (the API turns it into its schema)."""

    kind: ChangeKind
    key: str | None
    time: float
    data: dict[str, object]


Subscriber = Callable[[Sequence[Change]], None]


@dataclass(frozen=True, slots=True)
class IdleOutcome:
    """What a plane did for an idle policy's step (:mod:`gpufleet.service.idle_actions`):
    ``done`` False asks for the step again next round (an eviction a PodDisruptionBudget
    refused); ``note`` is added to the step's event."""

    done: bool = True
    note: str = ""


class PlaneBook:
    """See the module docstring."""

    def __init__(
        self,
        store: Store,
        options: ServeOptions,
        clock: Callable[[], float],
        nodes: Callable[[], Sequence[Node]],
        wall: Callable[[], float] = time.monotonic,
        *,
        default_runtime: float | None,
        catalog_source: str = "kubernetes",
        catalog_where: str | None = None,
    ) -> None:
        self.store = store
        self.options = options
        #: The world's clock (its instants) and its nodes now, as the plane reads them.
        self.now = clock
        self.cluster_nodes = nodes
        #: The wall clock the history's sampling and the write rates count in.
        self.wall = wall
        #: How long a workload that declares no run time runs (a simulated pod runs for it;
        #: the API shows it as the workload's expected runtime); None where a workload runs
        #: until its processes end.
        self.default_runtime = default_runtime
        #: How this plane's objects are named in errors (``kubernetes`` with each object's
        #: resourceVersion; an embedded plane: its database file, "stored").
        self.catalog_source = catalog_source
        self.catalog_where = catalog_where
        self.lock = threading.RLock()
        self._subscribers: list[Subscriber] = []
        #: Set when the plane stops: its threads end.
        self.stop_event = threading.Event()
        self.records: dict[str, WorkloadRecord] = {}
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY_POINTS)
        self.history.extend(point for _, point in store.history(HISTORY_POINTS))
        self.recent_delays: deque[float] = deque(maxlen=RECENT_DELAYS)
        self.last_sample = -math.inf
        self.counters = dict.fromkeys(
            ("submitted", "bound", "preempted", "finished", "restarted", "failed", "interrupted"),
            0,
        )
        #: Alert notifications delivered and failed (served on /metrics, counted by whichever
        #: notifier sends this plane's alerts).
        self.notifications = NotificationMetrics()
        self._writes = WriteBuckets(options.limits, wall)

    @property
    def policy(self) -> str:
        return self.options.policy

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    def recent_events(self, limit: int) -> list[StoredEvent]:
        return self.store.events(limit=limit)

    def visible(self, principal: Principal, key: str) -> WorkloadRecord:
        """The workload ``key`` if the caller may see it (else NotFoundError)."""
        record = self.records.get(key)
        if record is None or not principal.may_see(record.tenant):
            raise NotFoundError(f"workload {key} not found")
        return record

    def find(
        self, principal: Principal, namespace: str, name: str, kind: str | None = None
    ) -> WorkloadRecord:
        """The workload ``name`` of ``namespace`` the caller may see, of ``kind`` when given
        (any case: ``job`` is ``Job``). Names are unique per kind and namespace: a name that
        several kinds use needs a kind (ConflictError listing them); none, NotFoundError."""
        found = [
            record
            for record in self.records.values()
            if record.timed.workload.namespace == namespace
            and record.timed.workload.name == name
            and (kind is None or record.kind.lower() == kind.lower())
            and principal.may_see(record.tenant)
        ]
        what = f"{kind} {namespace}/{name}" if kind else f"workload {namespace}/{name}"
        if not found:
            raise NotFoundError(f"{what} not found")
        if len(found) > 1:
            kinds = sorted(record.kind for record in found)
            raise ConflictError(
                f"{what} is ambiguous: it names a {' and a '.join(kinds)}; give the kind "
                f"(?kind={kinds[0]}, or on the command line {kinds[0].lower()}/{name} or "
                f"--kind {kinds[0]})"
            )
        return found[0]

    def check_queues_in_use(self, gone: set[str]) -> None:
        """ConflictError if a workload not finished is in one of the queues ``gone``."""
        for record in self.records.values():
            if record.active and record.timed.workload.queue in gone:
                raise ConflictError(
                    f"queue {record.timed.workload.queue} is used by workload {record.key} "
                    f"({record.state.value})"
                )

    def stored_catalog(
        self, queues: Iterable[Mapping[str, Any]], classes: Iterable[Mapping[str, Any]]
    ) -> LiveCatalog:
        """The catalog of the Queue and PriorityClass objects this plane holds (bad ones set
        aside), named in errors as this plane names them."""
        return LiveCatalog(queues, classes, source=self.catalog_source, where=self.catalog_where)

    def changed_catalog(
        self,
        queues: Mapping[str, Mapping[str, Any]],
        classes: Mapping[str, Mapping[str, Any]],
        kind: str,
        name: str,
        document: dict[str, Any] | None,
    ) -> LiveCatalog:
        """The Queues and PriorityClasses with ``document`` put as ``kind`` ``name`` (None: that
        one deleted), checked as every path checks them (:func:`~gpufleet.io.fleet.catalog.
        check_change`): InputError for a put that is bad or that sets aside an object that
        was good (a queue tree it breaks), ConflictError for a delete that others need or a
        queue still in use, NotFoundError for a delete of nothing. Objects that were bad
        already stay set aside and do not count against the change. Nothing is changed here."""
        current = {QUEUE: dict(queues), PRIORITY_CLASS: dict(classes)}
        after = {k: dict(v) for k, v in current.items()}
        put: Manifest | None = None
        if document is not None:
            put = Manifest({**document, "kind": kind}, 1, 1)
            after[kind][name] = put
        elif after[kind].pop(name, None) is None:
            raise NotFoundError(f"{kind} {name} not found")
        change = check_change(
            self._catalog_objects(current), self._catalog_objects(after, put), {(kind, name)}
        )
        if change.problems:
            first = change.problems[0]
            if document is not None:
                raise first.error
            raise ConflictError(
                f"cannot delete {kind} {name}: it would set aside {first.kind} {first.key} "
                f"({first.error.field}: {first.error.reason}); change or delete that first"
            )
        if kind == QUEUE:
            self.check_queues_in_use(set(change.before.queues) - set(change.after.queues))
        return self.stored_catalog(after[QUEUE].values(), after[PRIORITY_CLASS].values())

    def _catalog_objects(
        self, objects: Mapping[str, Mapping[str, Mapping[str, Any]]], put: Manifest | None = None
    ) -> list[tuple[Manifest, str]]:
        """Every object as the catalog reads it, in name order (as a LiveCatalog reads them);
        ``put`` (a request's) named as the request."""
        out: list[tuple[Manifest, str]] = []
        for kind in (QUEUE, PRIORITY_CLASS):
            for obj in sorted(objects[kind].values(), key=object_key):
                if obj is put:
                    out.append((put, SOURCE))
                else:
                    manifest = live_manifest({"kind": kind, **obj}, self.catalog_where)
                    out.append((manifest, self.catalog_source))
        return out

    def create_token(
        self,
        principal: Principal | None,
        tenant: str,
        role: str,
        queues: Sequence[str] = (),
        name: str = "",
        lifetime: float | None = DEFAULT_LIFETIME_S,
    ) -> tuple[str, StoredToken]:
        """A new API token (only its hash is kept) and what is stored of it; ``principal``
        None: from the host itself."""
        if principal is not None:
            require_admin(principal)
        return make_token(self.store, tenant, role, queues, name=name, lifetime=lifetime)

    def authenticate(self, token: str) -> Principal:
        """The caller a token stands for, or :class:`~gpufleet.service.tokens.
        TokenRefusedError` (unknown, expired, revoked). Its row is read on every request
        (on the store's token connection, without the plane's lock): a token revoked by any
        process is refused at once."""
        found = check_token(self.store, token)
        return Principal(
            found.tenant, found.role, found.queues, self.options.rules.for_tenant(found.tenant)
        )

    def list_tokens(self, principal: Principal) -> list[StoredToken]:
        """Every token as stored (never a token itself), for an admin."""
        require_admin(principal)
        return self.store.tokens()

    def revoke_token(self, principal: Principal, token_id: str) -> StoredToken:
        """Revoke the token named by ``token_id`` (its id or a longer part of its hash's
        start), for an admin: NotFoundError or ConflictError (an id several tokens share)."""
        require_admin(principal)
        try:
            return revoke_token(self.store, token_id)
        except UnknownTokenError as error:
            raise (ConflictError if error.ambiguous else NotFoundError)(str(error)) from None

    def throttle(self, principal: Principal) -> None:
        """Count a write of the caller against its tenant's rate (RateLimitedError over it)."""
        self._writes.take(principal)

    def accept(
        self, principal: Principal, manifests: Sequence[Manifest], catalog: ScenarioBuilder,
        queues: Mapping[str, Queue], taken_pods: Container[str] = (),
        paused: list[str] | None = None,
    ) -> list[Submitted]:  # fmt: skip
        """The workloads of a request read against ``catalog`` (queues, priority classes) and
        checked for ``principal`` (tenancy and admission rules; a pod's GPU models may be
        narrowed; its tenant's limits on unfinished workloads and pods): all or an
        InputError, ForbiddenError (QuotaExceededError) or ConflictError (under the lock).
        Each Job of ``parallelism: 0`` (valid, no workload) is said in ``paused``."""
        submitted = read_workloads(
            manifests,
            catalog,
            principal.default_namespace(),
            self.default_runtime,
            self.home_queue(principal, queues),
            paused=paused,
        )
        checked = []
        for item in submitted:
            workload = check_workload(principal, self.options.rules, item.timed.workload, queues)
            refuse_by_queue(workload, queues)
            if workload.key in self.records:
                raise ConflictError(f"workload {workload.key} exists already")
            taken = [p.key for p in workload.pods if p.key in taken_pods]
            if taken:
                raise ConflictError(f"pod {taken[0]} belongs to another workload")
            checked.append(Submitted(item.kind, replace(item.timed, workload=workload)))
        new_pods = sum(len(item.timed.workload.pods) for item in checked)
        check_active(self.options.limits, principal, self.records.values(), len(checked), new_pods)
        return checked

    def home_queue(self, principal: Principal, queues: Mapping[str, Queue]) -> str | None:
        """Where the caller's workloads go when they name no queue and their namespace is no
        queue's default: the queue named like its tenant, else the first it may use; an
        admin's go to the implicit ``default`` queue, as the scheduler puts any pod that names
        no queue (it has no quota of its own: it runs on what the queues leave idle)."""
        if principal.is_admin:
            return DEFAULT_QUEUE
        allowed = principal.allowed_queues(queues)
        if principal.tenant in allowed:
            return principal.tenant
        return allowed[0] if allowed else None

    def gpu_totals(self) -> tuple[int, float]:
        """(GPUs in the cluster, GPUs allocated), counting a MIG slice as its share of its
        device, the same way the node map counts them."""
        total = sum(node.gpu_count for node in self.cluster_nodes())
        slots = {
            (node.name, gpu.index): len(gpu.mig_slices)
            for node in self.cluster_nodes()
            for gpu in node.gpus
            if gpu.partitioned
        }
        allocated = 0.0
        for record in self.records.values():
            for pod in record.pods.values():
                placement = pod.placement
                if pod.state != POD_RUNNING or placement is None:
                    continue
                allocated += placement.gpu_milli / MILLI_PER_GPU
                for index, _slot in placement.mig_slices:
                    allocated += 1 / max(slots.get((placement.node, index), 1), 1)
        return total, allocated

    def sample(self, now: float) -> None:
        """A point of the history at ``now`` (kept in memory and stored)."""
        self.last_sample = self.wall()
        total, allocated = self.gpu_totals()
        delays = sorted(self.recent_delays)
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

    # ----------------------------------------------------------------------------- events
    def record_event(
        self, key: str, type_: str, reason: str, message: str, at: float | None = None
    ) -> StoredEvent:
        """Record an event on workload ``key`` (stored, kept with its record) and publish it,
        as the plane's own events are."""
        with self.lock:
            event = StoredEvent(self.now() if at is None else at, key, type_, reason, message)
            with self.store.transaction():
                self.store.add_events([event])
            record = self.records.get(key)
            if record is not None:
                record.events.append(event)
        self.publish([], [event])
        return event

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

    def pod_owners(self) -> dict[tuple[str, str], str]:
        """The workload key of every known pod, by (namespace, pod name)."""
        with self.lock:
            return {
                (p.pod.namespace, p.pod.name): record.key
                for record in self.records.values()
                for p in record.pods.values()
            }

    def publish_alerts(self, observed: ObservedRound) -> None:
        """An observatory round's alert transitions, to the event stream (a plane watching an
        observatory subscribes this)."""
        if not observed.transitions:
            return
        owners = self.pod_owners()
        changes = []
        for moved in observed.transitions:
            labels = dict(moved.labels)
            owner = owners.get((labels.get("namespace", ""), labels.get("pod", "")))
            data: dict[str, object] = {
                "rule": moved.rule,
                "state": moved.after.value,
                "before": moved.before.value,
                "value": moved.value,
                "labels": labels,
            }
            changes.append(Change(ChangeKind.ALERT, owner, moved.at, data))
        self.publish(changes, [])

    def publish(self, changes: list[Change], events: Iterable[StoredEvent]) -> None:
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


def require_admin(principal: Principal) -> None:
    if principal.role != ADMIN:
        raise ForbiddenError(f"tenant {principal.tenant!r} is not an admin")


def object_name(document: dict[str, Any], kind: str) -> str:
    """The name of a Queue or PriorityClass put through the API, checked as Kubernetes (and
    for a Queue, its label) checks it."""
    if document.get("kind") != kind:
        raise InputError(
            "request", f"expected {kind}, got {describe(document.get('kind'))}", field="kind"
        )
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise InputError("request", "required, but missing", field="metadata.name")
    problem = name_problem(name, rule_of(kind), kind)
    if problem is not None:
        raise InputError(
            "request",
            f"{problem}; got {quoted(name)}",
            f"{kind} {shorten(name, 100)}",
            "metadata.name",
        )
    return name
