"""The control plane on a Kubernetes cluster: ``gpufleet serve --kubeconfig``.

The scheduler is :class:`~gpufleet.backends.kube.scheduler.KubeScheduler` (the same as
``gpufleet scheduler``), run in a thread, each turn under this plane's lock; the API server is
the store of workloads. A submission is checked exactly as in embedded mode (same reader, same
tenant and admission rules) and then written to the cluster (the objects as
:mod:`gpufleet.service.kube_writes` makes them):

* every pod template gets ``schedulerName`` (this scheduler), the tenant label
  (``gpufleet.dev/tenant``) and the workload's name and kind as annotations;
* a gang (a Job with parallelism above one, a PyTorchJob, an MPIJob, a RayCluster or RayJob)
  also gets a gpufleet PodGroup of its name with its minMember, and its pod templates the
  pod-group label, so that it is admitted all or nothing as the simulator admits it (the Job
  controller and the operators copy the label onto the pods they make; a pod made after the
  gang runs, such as a Job's next completion or a replacement for a failed pod, is admitted
  on its own; a RayJob's submitter, made once the cluster is up, is not in minMember, as with
  Volcano, and without a ``submitterPodTemplate`` it is KubeRay's own, placed by the default
  scheduler);
* a Job's templates also carry its completions (``gpufleet.dev/completions``), so that the
  book shows completions done of those to do;
* nothing is half-applied: if one object is refused, those already written are deleted;
* a tenant's objects are written, rolled back and cancelled impersonating the tenant
  (:meth:`KubeControlPlane.writer_for`; who that is: :mod:`gpufleet.service.tenant_identity`),
  so that the API server's RBAC and Pod Security Admission judge them, not the plane's rights
  (a refusal is a 403); a pod or template that names its node or another scheduler is refused
  (:func:`~gpufleet.service.kube_writes.refuse_placement`). Admins' Queues and PriorityClasses,
  the scheduler's calls and the idle actions use the plane's own identity.

Each object written is recorded in the local SQLite file with the UID the API server gave it,
the tenant and the workload (:class:`~gpufleet.service.store.CreatedObject`). The book of
workloads is rebuilt from the pods the informers hold (:meth:`refresh`, every second and after
each change), each filed under its workload and tenant by :mod:`gpufleet.service.kube_identity`
(the pod's namespace, its controller's ownerReference and that record: never a label or an
annotation anyone may write); their state comes from the pods' phase and node, their devices
from the scheduler's annotations, a job's progress from its pods (succeeded and failed pods,
container restarts; the Job and operator objects themselves are not read). Cancelling deletes
the objects recorded for the workload, each only if its UID is still the recorded one (its pods
go with it); a workload gpufleet did not create cannot be cancelled through it. Tokens, events
of our own (Submitted, Scheduled, Cancelled) and the history stay in the local SQLite file.
With :meth:`KubeControlPlane.autoscale_replicas`, the Deployments, StatefulSets and ReplicaSets
annotated for gpufleet's autoscaling are scaled after every observatory round
(:mod:`gpufleet.service.kube_autoscaling`).

The plane holds its parts: the book of workloads, tokens and changes every plane has
(:class:`~gpufleet.service.plane_book.PlaneBook`, given the wall clock and the nodes the
scheduler reads), what the idle policies do here (:class:`~gpufleet.service.kube_idle.
KubeIdleActions`) and the admins' Queues and PriorityClasses (:class:`~gpufleet.service.
kube_catalog.KubeCatalogWrites`). It keeps no logs or terminals and makes no owner's changes
(its ``logs``, ``terminals`` and ``waiting_changes`` are None: kubectl has them).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar

from gpufleet.backends.kube.pods import pod_group
from gpufleet.backends.kube.scheduler import KubeScheduler, SchedulerOptions
from gpufleet.control.factory import build_core
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.alert_rules import builtin_alert_rules
from gpufleet.io.kinds import Skipped
from gpufleet.kube_client.api import (
    NODES,
    PODS,
    ApiError,
    Impersonation,
    KubeApi,
)
from gpufleet.kube_client.writer import ObjectWriter
from gpufleet.model import Node
from gpufleet.model.priorities import PriorityClass
from gpufleet.model.times import time_format
from gpufleet.model.workload import TimedWorkload, split_workload_key
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.service import kube_book
from gpufleet.service.alert_state import AlertStateKeeper
from gpufleet.service.auth import ForbiddenError, Principal
from gpufleet.service.capabilities import PodLogs, Terminals, WaitingChanges
from gpufleet.service.check_events import check_events
from gpufleet.service.kube_autoscaling import KubeReplicaScaler, WorkloadMetrics
from gpufleet.service.kube_catalog import KubeCatalogWrites
from gpufleet.service.kube_identity import CreatedIndex, PodIdentity
from gpufleet.service.kube_idle import KubeIdleActions
from gpufleet.service.kube_writes import (
    CONTROLLED_KINDS,
    created_record,
    objects_to_write,
    refusal_message,
    refuse_own_marks,
    refuse_placement,
    submission_of,
)
from gpufleet.service.observatory import STEP_S, Observatory, ObservatoryThread
from gpufleet.service.plane_book import (
    HISTORY_EVERY_S,
    Change,
    ConflictError,
    PlaneBook,
    ServeOptions,
    Subscriber,
)
from gpufleet.service.protocol import ExplainCache
from gpufleet.service.records import (
    POD_CANCELLED,
    POD_FAILED,
    POD_PENDING,
    POD_RUNNING,
    WorkloadRecord,
    pods_of,
)
from gpufleet.service.states import ChangeKind, WorkloadState
from gpufleet.service.store import CreatedObject, Store, StoredEvent, StoredToken
from gpufleet.service.submissions import parse_body
from gpufleet.service.tokens import DEFAULT_LIFETIME_S
from gpufleet.telemetry.observed_series import WithStartTimes
from gpufleet.telemetry.series_query import GroupedSeriesQuery
from gpufleet.telemetry.source import TelemetrySource

log = logging.getLogger(__name__)

Obj = dict[str, Any]

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
REFRESH_EVERY_S = 1.0
#: A submitted object whose pods have not appeared yet is listed this long as Pending.
SUBMITTED_GRACE_S = 120.0


class KubeControlPlane:
    """See the module docstring."""

    backend_name = "kubernetes"
    simulated_clock: ClassVar[bool] = False  # the wall clock: Unix seconds

    def __init__(
        self,
        api: KubeApi,
        store: Store,
        options: ServeOptions | None = None,
        scheduler: SchedulerOptions | None = None,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        options = options or ServeOptions()
        self.book = book = PlaneBook(
            store,
            options,
            self.now,
            self.cluster_nodes,
            wall,
            default_runtime=options.default_runtime,
        )
        # The book's state, as the API reads it from the plane (the same objects).
        self.store, self.options, self.lock = store, options, book.lock
        self.history, self.counters = book.history, book.counters
        self.notifications = book.notifications
        self.turns = 0
        self.explained: ExplainCache | None = None
        # No device telemetry (Prometheus holds the GPUs' series: :meth:`observe_with`), no
        # logs, terminals or owner's changes through gpufleet here (kubectl has them).
        self.telemetry: TelemetrySource | None = None
        self.observatory: Observatory | None = None
        self.book_start = 0.0
        self.logs: PodLogs | None = None
        self.terminals: Terminals | None = None
        self.waiting_changes: WaitingChanges | None = None
        self.scheduler_options = scheduler or SchedulerOptions(
            policy=options.policy,
            leader_elect=False,
            admission=options.admission,
            profile=options.profile,
        )
        # Each turn of the scheduler runs under this plane's lock.
        self.scheduler = KubeScheduler(api, self.scheduler_options, lock=self.lock)
        self.metrics = self.scheduler.metrics
        #: Writes as the plane itself (admins' Queues and PriorityClasses, idle actions);
        #: tenants' objects go through :meth:`writer_for`.
        self.writer = ObjectWriter(api)
        #: Admins' Queues and PriorityClasses, written as the plane itself.
        self.catalog_writes = KubeCatalogWrites(book, self.writer, self.scheduler)
        #: What the idle policies' steps do here (as the plane itself, through the API server).
        self.idle_actions = KubeIdleActions(
            book, self.writer, lambda: self.scheduler.backend.objects[PODS]
        )
        #: The objects this plane created, and the tenant of each namespace of the admin's map.
        self.created = CreatedIndex(store.created_objects())
        self._namespace_tenants = options.rules.namespace_tenants()
        #: The submission (its key) each workload of the book comes from, where gpufleet made it.
        self._submissions: dict[str, str] = {}
        if options.tenant_identity is None:
            log.warning(
                "impersonation is off (--no-impersonation): every tenant's objects are written "
                "with this plane's own credentials, so any tenant may create whatever those "
                "allow, in any namespace gpufleet lets it use; keep this to single-tenant setups"
            )
        #: Workloads submitted whose pods are not in the cache yet, with when.
        self._submitted: dict[str, tuple[WorkloadRecord, float]] = {}
        self._threads: list[threading.Thread] = []
        self._placeholder: tuple[int, SchedulerCore] | None = None
        self._nodes: tuple[tuple[str, ...], list[Node]] | None = None
        self._observe: ObservatoryThread | None = None
        #: Scales the workloads annotated for it (:meth:`autoscale_replicas`), if asked to.
        self.replica_scaler: KubeReplicaScaler | None = None

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        for target, name in ((self.scheduler.run, "gpufleet-scheduler"),
                             (self._refresh_loop, "gpufleet-refresh")):  # fmt: skip
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        if self._observe is not None:
            self._observe.start()

    def observe_with(self, series: GroupedSeriesQuery, step_s: float = STEP_S) -> Observatory:
        """Observe the GPUs through ``series`` (a Prometheus server's): the alert rules are
        evaluated over it every ``step_s`` wall seconds once started; pods' start times come
        from this plane's records where the series have none."""
        rules = self.options.alert_rules
        starts: dict[tuple[str, str], float] = {}
        observatory = Observatory(
            WithStartTimes(series, lambda: starts),
            builtin_alert_rules() if rules is None else rules,
            self.now,
            step_s=step_s,
        )

        def round_() -> None:
            with self.lock:
                fresh = pods_of(self.records)[1]
            starts.clear()
            starts.update(fresh)
            for at in observatory.catch_up(self.now()):  # fixed instants, missed ones too
                observatory.observe(at)

        AlertStateKeeper.attach(self.store, observatory, self.lock)  # kept across restarts
        self.watch(observatory)
        self._observe = ObservatoryThread(round_, step_s)
        return observatory

    def autoscale_replicas(self, metrics: WorkloadMetrics) -> KubeReplicaScaler:
        """Scale the Deployments, StatefulSets and ReplicaSets that carry gpufleet's
        autoscaling annotations after every observatory round (so :meth:`observe_with`
        first), on the metrics ``metrics`` reads; its informers start now."""
        if self.observatory is None:
            raise ValueError("replica autoscaling runs each observatory round: observe first")
        scaler = KubeReplicaScaler(self, self.writer.api, metrics)
        scaler.start()
        self.observatory.subscribe(scaler.on_round)
        self.replica_scaler = scaler
        return scaler

    def pod_objects(self, namespaces: Collection[str]) -> list[Obj]:
        """Copies of the cached pods of ``namespaces``."""
        with self.lock:
            cached = self.scheduler.backend.objects[PODS]
            return [dict(o) for k, o in cached.items() if k.partition("/")[0] in namespaces]

    def tell(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        """A Kubernetes Event about ``obj``, sent as the scheduler sends its own."""
        self.scheduler.reporter.event(obj, type_, reason, message)

    def stop(self, timeout: float = 10.0) -> None:
        self.book.stop_event.set()
        if self._observe is not None:
            self._observe.stop(timeout)
        if self.replica_scaler is not None:
            self.replica_scaler.stop(timeout)
        self.scheduler.stop()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    @property
    def running(self) -> bool:
        # Ready once the scheduler's core is built from the synced caches: before, the
        # queues and priority classes a submission is judged against are not read yet.
        synced = self.scheduler.ready and self.scheduler.core is not None
        return bool(self._threads) and synced and not self.stopping

    def healthy(self, within: float = 30.0) -> bool:
        return self.running and time.monotonic() - self.scheduler.heartbeat < within

    def _refresh_loop(self) -> None:
        while not self.book.stop_event.wait(REFRESH_EVERY_S):
            try:
                self.refresh()
            except Exception:  # the API keeps answering from the last good book
                log.exception("refreshing the workloads from the cluster failed")

    # ----------------------------------------------------------------------------- the book
    @property
    def records(self) -> dict[str, WorkloadRecord]:
        return self.book.records

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

    def record_event(
        self, key: str, type_: str, reason: str, message: str, at: float | None = None
    ) -> StoredEvent:
        return self.book.record_event(key, type_, reason, message, at)

    def watch(self, observatory: Observatory) -> None:
        """Observe with ``observatory``: its alerts' transitions go to the event stream."""
        self.observatory = observatory
        observatory.subscribe(self.book.publish_alerts)

    # ----------------------------------------------------------------------------- reading
    @property
    def speed(self) -> float | None:
        return None

    @property
    def core(self) -> SchedulerCore:
        """The scheduler's core; before it has one (not synced yet), an empty one."""
        core = self.scheduler.core
        if core is not None:
            return core
        version = self.scheduler.backend.config_version
        if self._placeholder is None or self._placeholder[0] != version:
            catalog = self.scheduler.backend.catalog
            empty = build_core(
                [],
                self.options.policy,
                queues=catalog.queues,
                time_format=time_format(self.simulated_clock),
                profile=self.options.profile,
            )
            self._placeholder = (version, empty)
        return self._placeholder[1]

    def now(self) -> float:
        return time.time()

    def cluster_nodes(self) -> Sequence[Node]:
        """The GPU nodes as the scheduler reads them (parsed again only when one changed)."""
        backend = self.scheduler.backend
        objects = list(backend.objects[NODES].values())
        versions = tuple(str((o.get("metadata") or {}).get("resourceVersion")) for o in objects)
        if self._nodes is None or self._nodes[0] != versions:
            parsed = (backend.parse_node(obj) for obj in objects)
            self._nodes = (versions, [node for node in parsed if node is not None])
        return self._nodes[1]

    def priority_classes(self) -> Mapping[str, PriorityClass]:
        return self.scheduler.backend.catalog.priority_classes

    # ----------------------------------------------------------------------------- the book
    def refresh(self) -> None:
        """Rebuild the workloads from the pods in the cache; record and publish what changed."""
        events: list[StoredEvent] = []
        changes: list[Change] = []
        with self.lock:
            self.scheduler.backend.drain()
            now = self.now()
            groups: dict[str, list[Obj]] = {}
            identities: dict[str, PodIdentity] = {}
            for obj in list(self.scheduler.backend.objects[PODS].values()):
                identity = self._identify(obj)
                if identity is not None:
                    groups.setdefault(identity.key, []).append(obj)
                    identities.setdefault(identity.key, identity)
            records: dict[str, WorkloadRecord] = {}
            submissions: dict[str, str] = {}
            for key, pods in groups.items():
                identity = identities[key]
                record = self._record(
                    key, identity.tenant, pods, self.records.get(key), now, events
                )
                if record is not None:
                    records[key] = record
                    if identity.submission is not None:
                        submissions[key] = identity.submission
            self._submissions = submissions
            for key, (record, at) in list(self._submitted.items()):
                if key in records or now - at > SUBMITTED_GRACE_S:
                    del self._submitted[key]
                else:
                    records[key] = record
            for key, record in records.items():
                old = self.records.get(key)
                if old is None or old.state is not record.state:
                    changes.append(
                        Change(ChangeKind.WORKLOAD, key, now, {"state": record.state.value})
                    )
            for key in self.records.keys() - records.keys():
                changes.append(Change(ChangeKind.WORKLOAD, key, now, {"state": "Deleted"}))
            events.extend(check_events(self.scheduler.loop.check_world))
            self.book.records = records
            self.turns += 1
            with self.store.transaction():
                self.store.add_events(events)
                if self.book.wall() - self.book.last_sample >= HISTORY_EVERY_S:
                    self.book.sample(now)
            if changes:
                changes.append(Change(ChangeKind.CLUSTER, None, now, {}))
        self.book.publish(changes, events)

    def _identify(self, obj: Obj) -> PodIdentity | None:
        """The workload and tenant of a pod this scheduler places or this plane created; None
        for any other pod."""
        spec = obj.get("spec") or {}
        ours = (spec.get("schedulerName") or "") == self.scheduler_options.scheduler_name
        if not ours and self.created.creator(obj) is None:
            return None
        return self.created.identify(obj, self._namespace_tenants)

    def _record(
        self,
        key: str,
        tenant: str,
        pods: list[Obj],
        old: WorkloadRecord | None,
        now: float,
        events: list[StoredEvent],
    ) -> WorkloadRecord | None:
        pods.sort(key=lambda o: str((o.get("metadata") or {}).get("name")))
        group = pod_group(pods[0])
        try:
            workload = self.scheduler.backend.catalog.workload(pods, group)
        except (InputError, ValueError) as error:
            log.warning("workload %s cannot be read: %s", key, error)
            return None
        core_key = workload.key  # the scheduler's: its pod group's, or its lone pod's
        namespace, kind, name = split_workload_key(key)
        workload = dataclasses.replace(workload, name=name, namespace=namespace, kind=kind)
        submitted = min(kube_book.created(o) for o in pods)
        record = WorkloadRecord.new(
            old.seq if old else 0, tenant, kind,
            TimedWorkload(workload, submitted, workload.expected_runtime), submitted,
        )  # fmt: skip
        record.core_key = core_key
        if old is not None:
            record.events = old.events
            record.started = old.started
            record.told = old.told
        for obj, pod in zip(pods, workload.pods, strict=True):
            pod_record = record.pods[pod.key]
            pod_record.state, pod_record.placement = kube_book.pod_state(obj)
            pod_record.restarts = kube_book.restarts(obj)
            index = ((obj.get("metadata") or {}).get("annotations") or {}).get(INDEX_ANNOTATION)
            pod_record.index = int(str(index)) if str(index).isdigit() else None
            before = old.pods.get(pod.key) if old else None
            if pod_record.state == POD_RUNNING and (before is None or before.state != POD_RUNNING):
                where = kube_book.where(pod_record)
                events.append(
                    StoredEvent(now, key, "Normal", "Scheduled", f"pod {pod.name} on {where}")
                )
                self.counters["bound"] += 1
        if kind in CONTROLLED_KINDS:
            record.jobs[name] = kube_book.progress(kind, pods, record)
        record.settle(now)
        progress = record.jobs.get(name)
        done = progress is not None and 0 < progress.completions <= progress.completed
        if any(p.state == POD_FAILED for p in record.pods.values()) and not any(
            p.state in (POD_RUNNING, POD_PENDING) for p in record.pods.values()
        ):
            # A Job whose completions all succeeded succeeded, whatever pods failed on the way.
            record.state = WorkloadState.SUCCEEDED if done else WorkloadState.FAILED
        if progress is not None and not record.active:
            progress.outcome = record.state.value
        if record.state is WorkloadState.PENDING:
            message = kube_book.unschedulable_message(pods)
            if message and message != record.told:
                record.told = message
                events.append(StoredEvent(now, key, "Warning", "FailedScheduling", message))
        if record.state is WorkloadState.RUNNING and (old is None or old.state is not record.state):
            self.book.recent_delays.append(max(0.0, now - submitted))
        for event in events:
            if event.workload == key:
                record.events.append(event)
        return record

    # ----------------------------------------------------------------------------- submit
    def identity_of(self, tenant: str) -> Impersonation | None:
        """Who ``tenant`` is to the API server (None: impersonation is off)."""
        found = self.options.tenant_identity
        if found is None:
            return None
        return Impersonation(found.user_of(tenant), found.groups_of(tenant))

    def writer_for(self, tenant: str) -> ObjectWriter:
        """The writer of ``tenant``'s objects: each request impersonates the tenant, so that
        the API server's RBAC and Pod Security Admission judge it, not the plane's rights."""
        return self.writer.acting_as(self.identity_of(tenant))

    def submit(
        self,
        principal: Principal,
        body: bytes,
        content_type: str,
        dry_run: bool = False,
        skipped: Skipped | None = None,
        paused: list[str] | None = None,
    ) -> list[WorkloadRecord]:
        manifests = parse_body(body, content_type, skipped)
        refuse_placement(manifests, self.scheduler_options.scheduler_name)
        with self.lock:
            backend = self.scheduler.backend
            builder = backend.catalog.request_builder()
            accepted = self.book.accept(
                principal, manifests, builder, self.core.quotas.queues, paused=paused
            )
            refuse_own_marks(manifests)
            checked = [(item.kind, item.timed.workload) for item in accepted]
            jobs = {item.timed.workload.key: item.timed.jobs for item in accepted}
            now = self.now()
            records = [
                WorkloadRecord.new(0, principal.tenant, kind, TimedWorkload(w, now), now)
                for kind, w in checked
            ]
            if dry_run:
                return records
        workloads = {w.key: (kind, w, jobs[w.key]) for kind, w in checked}
        objects = objects_to_write(
            manifests, principal, self.scheduler_options.scheduler_name, workloads
        )
        writer = self.writer_for(principal.tenant)
        written: list[Obj] = []
        try:
            for obj in objects:
                written.append(writer.create(obj))
        except ApiError as error:
            refused = objects[len(written)]
            for obj in reversed(written):
                metadata = obj.get("metadata") or {}
                writer.delete(str(obj.get("kind")), metadata.get("namespace"),
                              str(metadata.get("name")))  # fmt: skip
            if error.status == 403:
                raise ForbiddenError(refusal_message(principal, refused, writer, error)) from None
            if error.status == 409:
                raise ConflictError(f"the cluster refused it: {error.message}") from None
            raise InputError("cluster", f"the API server refused it: {error.message}") from None
        events = [
            StoredEvent(now, r.key, "Normal", "Submitted",
                        f"{r.kind} by tenant {principal.tenant} to queue {r.timed.workload.queue}")
            for r in records
        ]  # fmt: skip
        created = [
            created_record(obj, answer, principal.tenant, submission_of(obj, workloads))
            for obj, answer in zip(objects, written, strict=True)
        ]
        with self.lock:
            self.store.add_created(created)
            for found in created:
                self.created.add(found)
            self.store.add_events(events)
            for record, event in zip(records, events, strict=True):
                record.events.append(event)
                self._submitted[record.key] = (record, now)
                self.records.setdefault(record.key, record)
            self.counters["submitted"] += len(records)
        self.book.publish(
            [Change(ChangeKind.WORKLOAD, r.key, now, {"state": r.state.value}) for r in records],
            events,
        )
        return records

    def cancel(self, principal: Principal, key: str) -> WorkloadRecord:
        """Delete the objects this plane created for the workload (a replica's: its
        Deployment, StatefulSet or ReplicaSet), each only while its UID is the one recorded;
        ForbiddenError for a workload gpufleet did not create, ConflictError for an object
        replaced since (a new one of that name is not deleted)."""
        with self.lock:
            record = self.visible(principal, key)
            finished = not record.active  # deleting it frees its name; it leaves the list
            objects = self.created.of_submission(self._submissions.get(key, key))
        if not objects:
            raise ForbiddenError(
                f"workload {key} was not created through gpufleet: gpufleet deletes only "
                "what it created (delete it with kubectl, as whoever created it)"
            )
        for obj in objects:  # a gang's PodGroup last
            writer = self.writer_for(obj.tenant)  # as whoever it was created for
            try:
                writer.delete(obj.kind, obj.namespace, obj.name, obj.api_version, obj.uid)
            except ApiError as error:
                if error.status != 409:
                    raise
                self._forget(obj)
                raise ConflictError(
                    f"{obj.kind} {obj.namespace}/{obj.name} is no longer the one gpufleet "
                    f"created (its UID changed): not deleted ({error.message})"
                ) from None
            self._forget(obj)
        now = self.now()
        if finished:
            self.refresh()
            return record
        event = StoredEvent(now, key, "Normal", "Cancelled", f"by {principal.tenant}")
        with self.lock:
            self.store.add_events([event])
            record.events.append(event)
            record.state = WorkloadState.CANCELLED
            record.finished = now
            for pod_record in record.pods.values():
                pod_record.state = POD_CANCELLED
            self._submitted.pop(key, None)
        self.book.publish([Change(ChangeKind.WORKLOAD, key, now, {"state": "Cancelled"})], [event])
        return record

    def _forget(self, obj: CreatedObject) -> None:
        with self.lock:
            self.store.forget_created(obj.namespace, obj.kind, obj.name, obj.uid)
            self.created.forget(obj)

    # ----------------------------------------------------------------------------- admin
    def put_object(self, principal: Principal, kind: str, document: dict[str, Any]) -> str:
        return self.catalog_writes.put_object(principal, kind, document)

    def delete_object(self, principal: Principal, kind: str, name: str) -> None:
        self.catalog_writes.delete_object(principal, kind, name)
