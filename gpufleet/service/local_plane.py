"""The control plane of ``gpufleet serve --local``: this machine's GPUs, workloads as processes.

:class:`LocalControlPlane` is a :class:`~gpufleet.service.live_plane.LivePlane` (the loop, the
store, tokens, queues, the API's requests: read that module's docstring) over
:class:`~gpufleet.service.local_world.LiveLocalMachine`. What it adds to the shared plane:

* a submission's processes: each accepted workload's manifest (a Pod, or the pod template of a
  Job, Deployment, StatefulSet or ReplicaSet) is read into a
  :class:`~gpufleet.model.processes.ProcessSpec` (:func:`~gpufleet.io.kube.process_specs.
  process_spec_from_object`) in the tenant's root (``<state>/tenants/<tenant>/``), as the
  tenant's local user (:class:`~gpufleet.service.local_users.TenantUsers`), and checked
  against the machine, before anything is stored: a command that does not exist, a working
  directory outside the tenant's root or GPU needs larger than the machine are a 422 with
  nothing stored or started. The processes are stored with the workload.
* a restart: the runs are found again by the machine (:meth:`~gpufleet.backends.local.machine.
  LocalMachine.recover`, by PID and start time) for every pod the store says runs or waits;
  a run found running is running (even one the store had not yet seen start), and the rest
  wait again; the runs that ended meanwhile (or were lost: their shim vanished) are taken in
  by the machine as if the server had been up (:meth:`~gpufleet.backends.local.machine.
  LocalMachine.resume`: a Job's retries, a gang's failure stopping the rest): no run is
  started twice, and no gang is left part running.
* each pod's end as an ``Exited`` event: the exit code (or signal) and how long it ran; a lost
  run is a failure (retried only as a Job's failure is);
* the logs of each pod's runs (:meth:`LocalControlPlane.pod_log`: from an offset, or their
  last bytes), kept on disk after the run.
* time limits: each process carries its workload's ``activeDeadlineSeconds`` (a Pod's own, read
  with its process; a Job's, from the job rules the submission already read:
  the shorter), which the machine enforces; a workload stopped for it is failed with a job
  row ``Failed (DeadlineExceeded)`` in describe and a ``DeadlineExceeded`` event.
* retries: each process carries its Job's ``backoffLimit`` (from the same job rules), which
  the machine honours by starting a failed run again (a ``BackOff`` event); the job row in
  describe counts the failed pods and ends ``Failed (BackoffLimitExceeded)`` past the limit.
* restarts in place: each process carries its restart policy (a replica's ``Always``, a Pod's
  own), which the machine honours after the kubelet's back-off; each restart is a ``BackOff``
  event (how the run ended, the delay) and counts in the pods' restarts in describe; while it
  waits out the back-off the pod is ``CrashLoopBackOff`` (its reason in get and describe).
* completions: each process carries its Job's ``completions`` and ``completionMode`` (from the
  job rules), which the machine runs in turn on the Job's pods; the job row counts those done.

* its GPUs observed: given the machine's GPUs through NVML (``devices``: the node agent's
  :class:`~gpufleet.devices.nvml_source.NvmlDeviceSource` over the real or the fake NVML,
  kept open until :meth:`LocalControlPlane.stop`), ``telemetry`` is a
  :class:`~gpufleet.backends.local.telemetry.LocalTelemetry` (every GPU and MIG sample, the
  pod holding each device, what is allocated: ``/metrics`` and the node map read it), and the
  simulated plane's observatory (:class:`~gpufleet.service.live_observing.
  LiveObserving`) records it every ``observe_step_s`` (15 s) of the wall clock, evaluates
  the alert rules, feeds the idle policies and keeps the series in the store across restarts.
  Idle policies act through the shared plane: Stop cancels (SIGTERM, the grace, SIGKILL);
  Preemptible lowers the workload in the core, so waiting work may preempt it; ScaleToZero
  stops it (no replica controllers here, said in its event); Checkpoint is its event alone
  (a run has no annotation to read; one that checkpoints on SIGTERM does so when stopped).
  Its book starts when a server first ran on the database (``book_start``, kept in it): a cost
  window reaching further back starts there, so the GPUs are not idle cost from before.

* GPU health: a thread waits on NVML's health events (:class:`~gpufleet.backends.local.
  health.GpuHealthWatch`, the node agent's verdicts: a lost GPU, a critical XID, a
  double-bit ECC error); a failed GPU is withdrawn from scheduling (what runs on it runs on)
  and given back when NVML says it recovered, each change a ``GPUUnhealthy`` or
  ``GPUHealthy`` event of the machine (:meth:`LocalControlPlane.check_health`).

It has no job controllers: a pod that ends is over, save for a Job's retries and completions
and a restart policy's restarts, which the machine makes (no replica autoscaling).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from gpufleet.backends.local.health import GpuHealthWatch
from gpufleet.backends.local.machine import LocalMachine, SubmitRefusedError
from gpufleet.backends.local.run_state import EXIT_FILE
from gpufleet.backends.local.supervisor import RunStatus
from gpufleet.backends.local.telemetry import LocalTelemetry
from gpufleet.backends.local.terminal import ATTACH_SOCKET
from gpufleet.control.loop import Turn, sync
from gpufleet.devices.source import DeviceSource
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.alert_rules import builtin_alert_rules
from gpufleet.io.kube.job_rules import ARRAY_ANNOTATION, parse_array
from gpufleet.io.kube.pods import REPLICATED_KINDS
from gpufleet.io.kube.process_specs import PROCESS_KINDS, process_spec_from_object
from gpufleet.io.manifests import Manifest
from gpufleet.job_controller.decisions import BACKOFF_LIMIT_EXCEEDED
from gpufleet.metrics.scheduler import SchedulerMetrics
from gpufleet.model import Placement
from gpufleet.model.events import ClusterEvent, JobEnded, PodDeleted, PodEnd, PodRestarted
from gpufleet.model.jobs import RestartPolicy
from gpufleet.model.processes import ProcessSpec
from gpufleet.model.telemetry import HealthEvent
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.service.auth import ForbiddenError, Principal
from gpufleet.service.live_observing import LiveObserving
from gpufleet.service.live_plane import LivePlane
from gpufleet.service.local_users import TenantUsers, login_env
from gpufleet.service.local_world import LiveLocalMachine
from gpufleet.service.observatory import STEP_S, ObservatoryThread
from gpufleet.service.plane_book import (
    LOG_CHUNK,
    ConflictError,
    IdleOutcome,
    NotFoundError,
    ServeOptions,
)
from gpufleet.service.protocol import AttachPoint, PodLog
from gpufleet.service.records import (
    POD_FAILED,
    POD_PENDING,
    POD_RUNNING,
    POD_SUCCEEDED,
    POD_TERMINAL,
    JobProgress,
    PodRecord,
    WorkloadRecord,
)
from gpufleet.service.states import WorkloadState
from gpufleet.service.store import Store, StoredEvent
from gpufleet.service.submissions import SOURCE, Submitted

log = logging.getLogger(__name__)

#: How long the health thread waits on NVML's events per turn (also how soon it stops).
HEALTH_WAIT_S = 0.5

#: The restart policies that restart a process in place.
_IN_PLACE = (RestartPolicy.ALWAYS, RestartPolicy.ON_FAILURE)

#: The database's note of when a local server first ran on it (the plane's ``book_start``).
FIRST_START_META = "local_first_start"

#: The server's environment variables a manifest's process starts with (before its own env).
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


class LocalControlPlane(LivePlane):
    """See the module docstring."""

    backend_name = "local"
    simulated_clock = False  # the wall clock: Unix seconds
    world: LiveLocalMachine

    def __init__(
        self,
        store: Store,
        machine: LocalMachine,
        options: ServeOptions | None = None,
        users: TenantUsers | None = None,
        wall: Callable[[], float] = time.monotonic,
        devices: DeviceSource | None = None,
        observe_step_s: float = STEP_S,
    ) -> None:
        self.machine = machine
        self.users = users or TenantUsers()
        #: This machine's GPUs through NVML, open until :meth:`stop` (None: no samples).
        self.devices = devices
        self._prepared: dict[str, dict[str, ProcessSpec]] = {}
        #: When the runs of a workload that ended this turn ended (their shims' record).
        self._ended_at: dict[str, float] = {}
        super().__init__(
            store, LiveLocalMachine(machine), SchedulerMetrics(), options or ServeOptions(), wall
        )
        self.book_start = self._first_start()
        #: The GPUs NVML reports lost or failed, withdrawn from scheduling (None: no NVML).
        self.health: GpuHealthWatch | None = None
        if devices is not None:
            self.telemetry = LocalTelemetry(machine, devices, self.lock)
            self.health = GpuHealthWatch(machine, devices, self.lock)
        self._health_thread: threading.Thread | None = None
        rules = self.options.alert_rules
        self.observing = LiveObserving(
            self, builtin_alert_rules() if rules is None else rules, observe_step_s
        )
        # The GPUs' series and the alerts on them, on the wall clock (see live_observing).
        self.watch(self.observing.observatory)
        self._observe = ObservatoryThread(self.observing.round, observe_step_s)

    @property
    def speed(self) -> float | None:
        return None  # real time

    def start(self) -> None:
        """Run the scheduling loop and the observatory in threads (until :meth:`stop`)."""
        running = self.running
        super().start()
        if not running:
            self._observe.start()
            if self.health is not None:
                self._health_thread = threading.Thread(
                    target=self._watch_health, name="gpufleet-gpu-health", daemon=True
                )
                self._health_thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop scheduling and observing (the series saved, NVML shut down); the processes run
        on (a restarted server finds them again)."""
        self.stop_threads(timeout)
        self.observing.save()
        self.machine.close()
        if self.devices is not None:
            self.devices.close()

    def stop_threads(self, timeout: float = 10.0) -> None:
        """Stop the threads :meth:`start` started (the observatory's, the loop's, the health
        watch's), nothing else: the store, the machine and NVML stay open."""
        self._observe.stop(timeout)
        super().stop(timeout)
        if self._health_thread is not None:
            self._health_thread.join(timeout)
            self._health_thread = None

    def _first_start(self) -> float:
        """When a server first ran on this database (kept in it): before that, this machine's
        GPUs were not its to account for. A database from before it was kept: its first
        submission, if earlier than now."""
        kept = self.store.meta(FIRST_START_META)
        if kept is not None:
            return float(kept)
        first = min([self.now(), *(r.submitted for r in self.records.values())])
        self.store.set_meta(FIRST_START_META, repr(first))
        return first

    # ----------------------------------------------------------------------------- health
    def check_health(self, timeout_s: float = HEALTH_WAIT_S) -> list[StoredEvent]:
        """Wait up to ``timeout_s`` for GPUs to fail or recover; withdraw (or restore) them and
        record an event for each change (the health thread's turn; tests call it)."""
        if self.health is None:
            return []
        changes = self.health.poll(timeout_s)
        if not changes:
            return []
        with self.lock:
            now = self.now()
            events = [_health_event(now, change) for change in changes]
            with self.store.transaction():
                self.store.add_events(events)
        for event in events:
            log.warning("%s", event.message)
        self.publish([], events)
        return events

    def _watch_health(self) -> None:
        while not self._stopping.is_set():
            try:
                self.check_health()
            except Exception:
                log.exception("GPU health check failed; trying again")
                self._stopping.wait(HEALTH_WAIT_S)

    # ----------------------------------------------------------------------------- idle GPUs
    def request_checkpoint(self, key: str, at: float) -> IdleOutcome:
        """A process has no checkpoint annotation to set: the event is the request, and a
        program that checkpoints on SIGTERM does so when a later step stops it."""
        return IdleOutcome(
            note="no checkpoint request on the local machine: a run checkpoints on SIGTERM "
            "when it is stopped"
        )

    # ----------------------------------------------------------------------------- submit
    def default_runtime(self) -> float | None:
        """None: a process runs until it ends (its expected runtime is what it declares)."""
        return None

    def _prepare(
        self,
        principal: Principal,
        manifests: Sequence[Manifest],
        accepted: Sequence[Submitted],
        dry_run: bool,
    ) -> None:
        uid, gid = self.users.identity(principal.tenant)
        try:
            root = self.machine.tenant_root(principal.tenant, uid, gid)
        except SubmitRefusedError as error:
            raise InputError(SOURCE, str(error), field="tenant") from None
        base_env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
        base_env["HOME"] = str(root)
        base_env.update(login_env(uid))  # the run's user, which is the server's when uid is None
        by_name = {
            (
                str(m.get("kind")),
                str((m.get("metadata") or {}).get("namespace") or principal.default_namespace()),
                str((m.get("metadata") or {}).get("name")),
            ): m
            for m in manifests
        }
        self._prepared = {}
        for item in accepted:
            workload = item.timed.workload
            manifest = by_name.get((item.kind, workload.namespace, workload.name))
            if manifest is None and item.kind in REPLICATED_KINDS:
                # Each replica is a workload of its own, named <object>-<ordinal>.
                owner, _, ordinal = workload.name.rpartition("-")
                if ordinal.isdigit():
                    manifest = by_name.get((item.kind, workload.namespace, owner))
            if item.kind not in PROCESS_KINDS or manifest is None:
                raise InputError(
                    SOURCE,
                    f"expected one of {', '.join(PROCESS_KINDS)}: the local machine runs a "
                    f"pod's command, and reads no process from a {item.kind}",
                    manifest.location if manifest is not None else None,
                    "kind",
                )
            # As the workload was read: in the caller's namespace when it names none.
            metadata = {**(manifest.get("metadata") or {}), "namespace": workload.namespace}
            spec = process_spec_from_object(
                {**manifest, "metadata": metadata}, SOURCE, root, base_env, manifest.location,
                uid, gid,
            )  # fmt: skip
            limits = [j.active_deadline for j in item.timed.jobs if j.active_deadline is not None]
            if spec.deadline_s is not None:
                limits.append(spec.deadline_s)
            backoffs = [j.backoff_limit for j in item.timed.jobs if j.backoff_limit is not None]
            completions = [j.completions for j in item.timed.jobs if j.completions]
            per_index = [j.backoff_limit_per_index for j in item.timed.jobs]
            most_failed = [j.max_failed_indexes for j in item.timed.jobs]
            indexed = any(j.indexed for j in item.timed.jobs)
            spec = dataclasses.replace(
                spec,
                deadline_s=min(limits) if limits else None,
                backoff_limit=min(backoffs) if backoffs else None,
                completions=max(completions) if completions else None,
                indexed=indexed,
                backoff_limit_per_index=_least(per_index),
                max_failed_indexes=_least(most_failed),
                array_first=_array_first(manifest, indexed, completions),
            )
            env = {
                **spec.env,
                "GPUFLEET_WORKLOAD": workload.key,
                "GPUFLEET_TENANT": principal.tenant,
            }
            specs = {
                pod.key: spec.with_env({**env, "GPUFLEET_POD": pod.key}) for pod in workload.pods
            }
            try:
                self.machine.check(workload, specs)
            except SubmitRefusedError as error:
                raise InputError(SOURCE, str(error), manifest.location, "resources") from None
            self._prepared[workload.key] = specs

    def _keep_prepared(self, accepted: Sequence[Submitted]) -> None:
        for item in accepted:
            key = item.timed.workload.key
            specs = self._prepared.pop(key)
            self.store.set_processes(key, specs)
            self.world.give_processes(key, specs)

    # ----------------------------------------------------------------------------- restore
    def _restore(self) -> None:
        processes = self.store.processes()
        active: list[WorkloadRecord] = []
        for stored in self.store.workloads():
            if stored.key in processes:
                self.world.give_processes(stored.key, processes[stored.key])
            record = self._restored_record(stored)
            if record is None:
                continue
            if stored.key not in processes:
                self._fail_restored(record, "its processes were not stored")
                continue
            for stored_pod in stored.pods:
                pod_record = record.pods[stored_pod.key]
                pod_record.state = stored_pod.state
                pod_record.placement = stored_pod.placement
                pod_record.started = stored_pod.started
            active.append(record)
        waiting_or_running = {
            key: pod_record.pod
            for record in active
            for key, pod_record in record.pods.items()
            if pod_record.state not in POD_TERMINAL
        }
        found = self.machine.recover(waiting_or_running)
        placements = {pod.key: placement for pod, placement in self.machine.list_state().running}
        with self.store.transaction():
            for record in active:
                self._take_back(record, found, placements)
        sync(self.core, self.world.list_state(), self.world.clock.now(), self._ran_as)

    def _take_back(
        self,
        record: WorkloadRecord,
        found: Mapping[str, RunStatus],
        placements: Mapping[str, Placement],
    ) -> None:
        """Put one stored workload back: its running pods as found, the rest waiting again;
        the runs that ended meanwhile are taken in by the machine (retries, a gang's failure)
        as if the server had been up."""
        waiting = []
        alive = ended = False
        for key, pod_record in record.pods.items():
            if pod_record.state in POD_TERMINAL:
                continue
            status = found.get(key)
            if key in placements:
                if pod_record.state != POD_RUNNING:  # started before the store saw it
                    pod_record.state, pod_record.placement = POD_RUNNING, placements[key]
                    pod_record.started = pod_record.started or self.now()
                    self.store.set_pod(key, POD_RUNNING, placements[key], pod_record.started)
                alive = True
            elif status in (RunStatus.ENDED, RunStatus.LOST) and not (
                pod_record.state == POD_PENDING and self.machine.end_taken_in(key)
            ):
                ended = True  # what follows its end comes as events in the first turn
            else:
                if pod_record.state == POD_RUNNING:
                    log.warning("pod %s was running and has no run here: it waits again", key)
                pod_record.state, pod_record.placement = POD_PENDING, None
                self.store.set_pod(key, POD_PENDING)
                waiting.append(pod_record.pod)
        if not alive and not waiting and not ended:
            return
        specs = self.world.processes(record.key) or {}
        # Counted before the restart (those counted now come as events).
        failures = self.machine.failures_of(record.key)
        succeeded = [k for k, p in record.pods.items() if p.state == POD_SUCCEEDED]
        failed = [k for k, p in record.pods.items() if p.state == POD_FAILED]
        try:
            self.machine.resume(record.timed.workload, specs, waiting, succeeded, failed)
        except SubmitRefusedError as error:
            self._fail_restored(record, str(error))
            return
        if failures:
            self._job_row(record).failed_pods = failures
        failed_indexes = self.machine.failed_indexes_of(record.key)
        if failed_indexes:
            self._job_row(record).failed_indexes = failed_indexes
        done = self.machine.completions_done(record.key)
        if done:
            self._job_row(record).completed = done
        self._count_restarts(record)

    def _fail_restored(self, record: WorkloadRecord, why: str) -> None:
        now = self.now()
        event = StoredEvent(now, record.key, "Warning", "Failed", f"cannot run it again: {why}")
        with self.store.transaction():
            for pod_record in record.pods.values():
                if pod_record.state not in POD_TERMINAL:
                    pod_record.state, pod_record.placement = POD_FAILED, None
                    self.store.set_pod_state(pod_record.pod.key, POD_FAILED)
            record.state, record.finished = WorkloadState.FAILED, now
            self.store.set_workload_state(record.key, record.state.value, finished=now)
            self.store.add_events([event])
        record.events.append(event)
        log.error("workload %s: %s", record.key, event.message)

    # ----------------------------------------------------------------------------- ends
    def _record_news(
        self,
        record: WorkloadRecord,
        pod_record: PodRecord,
        event: ClusterEvent,
        evicted_for: str | None,
        now: float,
    ) -> None:
        """As the shared plane records it; a job the machine ended (its time limit passed, or
        its failures its backoff limit) or retried is kept as the workload's job row too (there
        are no job controllers here to keep it): its failed pods and how it ended. A restart
        in place (a restart policy's) is counted on the workload's pods, with a ``BackOff``
        event saying how the run ended and how long the back-off is."""
        if isinstance(event, PodRestarted) and self._restarts_in_place(record.key):
            self._count_restarts(record)
            self.counters["restarted"] += 1
            self._notes.events.append(
                StoredEvent(now, record.key, "Warning", "BackOff",
                            f"pod {pod_record.pod.name} {event.message}")
            )  # fmt: skip
            return
        if self._per_index(record.key):
            self._index_news(record, event)
        elif isinstance(event, PodRestarted) and event.completion is not None:
            self._job_row(record).completed = self.machine.completions_done(record.key)
        elif isinstance(event, PodRestarted) and event.completion is None:
            self._job_row(record).failed_pods += 1
        elif isinstance(event, JobEnded):
            row = self._job_row(record)
            if event.reason == BACKOFF_LIMIT_EXCEEDED:
                row.failed_pods += 1
            row.outcome, row.reason, row.message = event.outcome, event.reason, event.message
        super()._record_news(record, pod_record, event, evicted_for, now)

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        """As the shared plane records a turn; each pod that waits out the back-off of a
        restart in place is ``CrashLoopBackOff`` (get, describe), as kubectl shows it."""
        for record in self.records.values():
            for key, pod_record in record.pods.items():
                backing_off = record.active and self.machine.backing_off(key)
                pod_record.reason = "CrashLoopBackOff" if backing_off else ""
        super().turn_done(core, turn)

    def _per_index(self, workload_key: str) -> bool:
        """Whether the workload is an Indexed Job with a ``backoffLimitPerIndex``."""
        specs = self.world.processes(workload_key) or {}
        return any(spec.backoff_limit_per_index is not None for spec in specs.values())

    def _index_news(self, record: WorkloadRecord, event: ClusterEvent) -> None:
        """An Indexed Job's row with a limit per index: its failed runs and indexes as the
        machine counts them (an index retried is a failed pod too), and how it ended."""
        row = self._job_row(record)
        row.failed_pods = self.machine.failures_of(record.key)
        row.failed_indexes = self.machine.failed_indexes_of(record.key)
        if isinstance(event, PodRestarted) and event.completion is not None:
            row.completed = self.machine.completions_done(record.key)
        elif isinstance(event, JobEnded):
            row.outcome, row.reason, row.message = event.outcome, event.reason, event.message

    def _restarts_in_place(self, workload_key: str) -> bool:
        """Whether the workload's processes restart in place (``Always``, ``OnFailure``)."""
        specs = self.world.processes(workload_key) or {}
        return any(spec.restart_policy in _IN_PLACE for spec in specs.values())

    def _count_restarts(self, record: WorkloadRecord) -> None:
        """Each pod of the workload restarts with it: its count is the machine's."""
        restarts = self.machine.restarts_of(record.key)
        for pod_record in record.pods.values():
            pod_record.restarts = restarts

    def _job_row(self, record: WorkloadRecord) -> JobProgress:
        name = record.key.partition("/")[2] or record.key
        row = record.jobs.get(name)
        if row is None:
            specs = (self.world.processes(record.key) or {}).values()
            completions = max((s.completions or 0 for s in specs), default=0)
            completions = max(completions, len(record.pods))
            row = record.jobs[name] = JobProgress(record.kind, completions=completions)
        return row

    def _record_end(
        self,
        record: WorkloadRecord,
        pod_record: PodRecord,
        gone: PodDeleted,
        evicted_for: str | None,
        remaining: float | None,
        now: float,
    ) -> None:
        """A process that ended: as the shared plane records it, and an ``Exited`` event with
        its exit code and run time. A lost run is a failure here (one the machine retried or
        restarted in place is not reported as ended)."""
        if gone.end is PodEnd.LOST:
            gone = PodDeleted(gone.key, PodEnd.FAILED, gone.message)
        started = pod_record.started
        # When it ended as its shim recorded it: a run that ended while the server was down
        # is dated (and billed) to its end, not to the restart.
        at = now if gone.ended_at is None else min(now, gone.ended_at)
        if gone.ended_at is not None:
            self._ended_at[record.key] = max(at, self._ended_at.get(record.key, at))
        super()._record_end(record, pod_record, gone, evicted_for, remaining, now)
        if all(p.state == POD_SUCCEEDED for p in record.pods.values()):
            for row in record.jobs.values():  # retried, then done
                row.completed = row.completions
                row.outcome = row.outcome or "Succeeded"
        if gone.end in (PodEnd.SUCCEEDED, PodEnd.FAILED):
            self._exited(record, pod_record, gone, started, at)

    def _exited(
        self,
        record: WorkloadRecord,
        pod_record: PodRecord,
        gone: PodDeleted,
        started: float | None,
        at: float,
    ) -> None:
        """The ``Exited`` event of a pod's run that ended at ``at``: how, and how long it ran."""
        ran = "" if started is None else f" after {_duration(max(0.0, at - started))}"
        self._notes.events.append(
            StoredEvent(
                at,
                record.key,
                "Warning" if gone.end is PodEnd.FAILED else "Normal",
                "Exited",
                f"pod {pod_record.pod.name}: {gone.message or 'ended'}{ran}",
            )
        )

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        """As the shared plane takes them in; the end of a cancelled pod's run (recorded
        cancelled when asked, so the shared plane passes it over) is its ``Exited`` event."""
        super().events_in(events)
        for event in events:
            if not isinstance(event, PodDeleted) or event.end is not PodEnd.DELETED:
                continue
            if event.ended_at is None:  # no run had started (or it was lost)
                continue
            record = self.records.get(self._owner.get(event.key, ""))
            pod_record = None if record is None else record.pods.get(event.key)
            if record is None or pod_record is None:
                continue
            at = min(self.world.clock.now(), event.ended_at)
            self._exited(record, pod_record, event, pod_record.started, at)

    def _settle(self, record: WorkloadRecord, now: float) -> None:
        """As the shared plane settles it; a workload whose last run ended before ``now``
        (while the server was down) finished when that run did."""
        ended_at = self._ended_at.pop(record.key, None)
        if ended_at is not None and all(p.state in POD_TERMINAL for p in record.pods.values()):
            now = ended_at
        super()._settle(record, now)

    # ----------------------------------------------------------------------------- logs
    def pod_log(
        self,
        principal: Principal,
        key: str,
        pod: str | None = None,
        attempt: int | None = None,
        offset: int = 0,
        limit: int = LOG_CHUNK,
        tail: int | None = None,
    ) -> PodLog:
        """Output of one run of a pod of the workload ``key`` (its first pod, latest run by
        default), from byte ``offset``, or its last ``tail`` bytes (the log's size then)."""
        with self.lock:
            record = self.visible(principal, key)
            pods = list(record.pods.values())
            chosen = (
                pods[0]
                if pod is None
                else next((p for p in pods if p.pod.name == pod or p.pod.key == pod), None)
            )
            if chosen is None:
                names = ", ".join(p.pod.name for p in pods)
                raise NotFoundError(f"workload {key} has no pod {pod!r} (its pods: {names})")
            pod_key = chosen.pod.key
            runs = self.machine.runs_of(pod_key)
            running_run = self.machine.run_of(pod_key)
            finished = not record.active
        if not runs:
            return PodLog(chosen.pod.name, 0, 0, 0, 0, "", False, finished)
        number = len(runs) if attempt is None else attempt
        if not 1 <= number <= len(runs):
            raise NotFoundError(f"pod {chosen.pod.name} has runs 1 to {len(runs)}, not {number}")
        run = runs[number - 1]
        path = self.machine.supervisor.log_path(run)
        data = b""
        try:
            with open(path, "rb") as handle:
                if tail is not None:
                    offset = max(0, handle.seek(0, os.SEEK_END) - max(0, tail))
                handle.seek(max(0, offset))
                data = handle.read(max(0, min(limit, LOG_CHUNK)))
        except FileNotFoundError:
            pass
        return PodLog(
            chosen.pod.name,
            number,
            len(runs),
            offset,
            offset + len(data),
            data.decode("utf-8", errors="replace"),
            running_run == run,
            finished,
        )

    # ----------------------------------------------------------------------------- attach
    def attach_point(self, principal: Principal, key: str) -> AttachPoint:
        """The terminal of the workload ``key``'s first pod's running run (``gpufleet run
        -it``): for its own tenant only (typing into it acts as that tenant's user; an
        admin may cancel it, not type into it). ConflictError when there is none to attach
        to now: it has ended, was not started with a terminal, or waits for its GPUs."""
        namespace, _, rest = key.partition("/")
        shown = f"{namespace}/{rest.rpartition('/')[2]}"  # as gpufleet logs and attach take it
        with self.lock:
            record = self.visible(principal, key)
            if principal.tenant != record.tenant:
                raise ForbiddenError(
                    f"workload {shown}: only its own tenant ({record.tenant}) attaches to its "
                    "terminal (typing into it acts as that tenant's user)"
                )
            chosen = next(iter(record.pods.values()))
            if not record.active:
                raise ConflictError(
                    f"workload {shown} has ended ({record.state.value}): there is no terminal "
                    f"to attach to; its output: gpufleet logs {shown}"
                )
            spec = self.machine.spec_of(chosen.pod.key)
            if spec is None or not spec.tty:
                raise ConflictError(
                    f"workload {shown} has no terminal: it was not started with one (gpufleet "
                    "run -it; a container's stdin: true and tty: true)"
                )
            run = self.machine.run_of(chosen.pod.key)
            if run is None:
                raise ConflictError(
                    f"workload {shown} is not running yet ({record.state.value}): it waits for "
                    "its GPUs"
                )
        run_dir = self.machine.supervisor.run_dir(run)
        return AttachPoint(chosen.pod.name, str(run_dir / ATTACH_SOCKET), str(run_dir / EXIT_FILE))


def _health_event(now: float, change: HealthEvent) -> StoredEvent:
    """``GPUUnhealthy``: ``GPU 2 (GPU-...) withdrawn from scheduling: XID 79 ...``, or
    ``GPUHealthy`` when it is back."""
    gpu = f"GPU {change.gpu} ({change.uuid})"
    if change.healthy:
        return StoredEvent(now, None, "Normal", "GPUHealthy", f"{gpu} is back in service")
    why = change.reason or "unhealthy"
    return StoredEvent(
        now,
        None,
        "Warning",
        "GPUUnhealthy",
        f"{gpu} withdrawn from scheduling: {why} (what runs on it runs on)",
    )


def _duration(seconds: float) -> str:
    """``0.4s``, ``12s``, ``3m05s``, ``2h07m``."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _array_first(manifest: Manifest, indexed: bool, completions: list[int]) -> int | None:
    """A job array's first task id (``gpufleet run --array``'s annotation; None: none),
    checked against its Job: an Indexed Job of as many completions as the array has tasks."""
    metadata = manifest.get("metadata") or {}
    text = (metadata.get("annotations") or {}).get(ARRAY_ANNOTATION)
    if text is None:
        return None
    where = f"metadata.annotations.{ARRAY_ANNOTATION}"
    try:
        first, count, _ = parse_array(str(text))
    except ValueError as error:
        raise InputError(SOURCE, str(error), manifest.location, where) from None
    if manifest.get("kind") != "Job" or completions != [count] or not indexed:
        raise InputError(
            SOURCE,
            f"a job array of {count} tasks is an Indexed Job of {count} completions",
            manifest.location,
            where,
        )
    return first


def _least(limits: list[int | None]) -> int | None:
    """The smallest of the limits given (None: none is)."""
    given = [limit for limit in limits if limit is not None]
    return min(given) if given else None
