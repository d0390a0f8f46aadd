"""The control plane of ``gpufleet serve --local``: this machine's GPUs, workloads as processes.

:class:`LocalControlPlane` is a :class:`~gpufleet.service.live_plane.LivePlane` (the loop, the
store, tokens, queues, the API's requests: read that module's docstring) over
:class:`~gpufleet.service.local_world.LiveLocalMachine`, given the parts of this world:

* a submission's processes (:mod:`~gpufleet.service.local_submissions`): each accepted
  workload's manifest is read into the processes it runs, as the tenant's local user, and
  checked against the machine, before anything is stored (a 422 with nothing stored or
  started); the processes carry its Job's rules: time limits (``activeDeadlineSeconds``),
  retries (``backoffLimit``, per index), completions and restart policies, which the machine
  enforces.
* a restart (:mod:`~gpufleet.service.local_restore`): the runs are found again by the machine
  for every pod the store says runs or waits, the rest wait again, and the runs that ended
  meanwhile are taken in as if the server had been up: no run is started twice, and no gang is
  left part running.
* what each turn writes down beyond every live plane's (:mod:`~gpufleet.service.
  local_recording`): each pod's end as an ``Exited`` event, the job rows the machine keeps
  (no job controllers here: a Job's deadline, retries, completions), restarts in place as
  ``BackOff`` events and ``CrashLoopBackOff``.
* the logs of each pod's runs and the terminal of a run started with one (``logs`` and
  ``terminals``: :mod:`~gpufleet.service.local_logs`), kept on disk after the run.
* idle policies act through every live plane's actions (:mod:`~gpufleet.service.live_idle`):
  Stop cancels (SIGTERM, the grace, SIGKILL); Preemptible lowers the workload in the core;
  ScaleToZero stops it (no replica controllers here, said in its event); Checkpoint is its
  event alone (a run has no annotation to read; one that checkpoints on SIGTERM does so when
  stopped).

What it owns itself:

* its GPUs observed: given the machine's GPUs through NVML (``devices``: the node agent's
  :class:`~gpufleet.devices.nvml_source.NvmlDeviceSource` over the real or the fake NVML,
  kept open until :meth:`LocalControlPlane.stop`), ``telemetry`` is a
  :class:`~gpufleet.backends.local.telemetry.LocalTelemetry` (every GPU and MIG sample, the
  pod holding each device, what is allocated: ``/metrics`` and the node map read it), and the
  simulated plane's observatory (:class:`~gpufleet.service.live_observing.
  LiveObserving`) records it every ``observe_step_s`` (15 s) of the wall clock, evaluates
  the alert rules, feeds the idle policies and keeps the series in the store across restarts.
  Its book starts when a server first ran on the database (``book_start``, kept in it): a cost
  window reaching further back starts there, so the GPUs are not idle cost from before.
* GPU health: a thread waits on NVML's health events (:class:`~gpufleet.backends.local.
  health.GpuHealthWatch`, the node agent's verdicts: a lost GPU, a critical XID, a
  double-bit ECC error); a failed GPU is withdrawn from scheduling (what runs on it runs on)
  and given back when NVML says it recovered, each change a ``GPUUnhealthy`` or
  ``GPUHealthy`` event of the machine (:meth:`LocalControlPlane.check_health`).
* its threads: the loop's, the observatory's and the health watch's, all stopped by
  :meth:`LocalControlPlane.stop_threads`.

It has no job controllers: a pod that ends is over, save for a Job's retries and completions
and a restart policy's restarts, which the machine makes (no replica autoscaling).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import ClassVar

from gpufleet.backends.local.health import GpuHealthWatch
from gpufleet.backends.local.machine import LocalMachine
from gpufleet.backends.local.telemetry import LocalTelemetry
from gpufleet.devices.source import DeviceSource
from gpufleet.io.fleet.alert_rules import builtin_alert_rules
from gpufleet.metrics.scheduler import SchedulerMetrics
from gpufleet.model.telemetry import HealthEvent
from gpufleet.model.times import time_format
from gpufleet.service.live_observing import LiveObserving
from gpufleet.service.live_plane import LivePlane
from gpufleet.service.local_logs import LocalRunOutput
from gpufleet.service.local_recording import LocalTurnRecorder
from gpufleet.service.local_restore import LocalRunsTakenBack
from gpufleet.service.local_submissions import LocalSubmissions
from gpufleet.service.local_users import TenantUsers
from gpufleet.service.local_world import LiveLocalMachine
from gpufleet.service.observatory import STEP_S, ObservatoryThread
from gpufleet.service.plane_book import ServeOptions
from gpufleet.service.store import Store, StoredEvent

log = logging.getLogger(__name__)

#: How long the health thread waits on NVML's events per turn (also how soon it stops).
HEALTH_WAIT_S = 0.5

#: The database's note of when a local server first ran on it (the plane's ``book_start``).
FIRST_START_META = "local_first_start"

#: What an idle policy's Checkpoint step says here: a process has no checkpoint annotation to
#: set, so the event is the request, and a program that checkpoints on SIGTERM does so when a
#: later step stops it.
CHECKPOINT_NOTE = (
    "no checkpoint request on the local machine: a run checkpoints on SIGTERM when it is stopped"
)


class LocalControlPlane(LivePlane):
    """See the module docstring."""

    backend_name = "local"
    simulated_clock: ClassVar[bool] = False  # the wall clock: Unix seconds
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
        world = LiveLocalMachine(machine)
        super().__init__(
            store,
            world,
            SchedulerMetrics(),
            options or ServeOptions(),
            time_format(self.simulated_clock),
            wall,
            default_runtime=None,  # a process runs until it ends
            recorder=lambda state, checks: LocalTurnRecorder(state, checks, machine, world),
            take_back=lambda restorer: LocalRunsTakenBack(restorer, machine, world),
            submissions=LocalSubmissions(store, machine, world, self.users),
            checkpoint_note=CHECKPOINT_NOTE,
        )
        self.logs = self.terminals = LocalRunOutput(self.book, machine)
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
        stopping = self.book.stop_event
        while not stopping.is_set():
            try:
                self.check_health()
            except Exception:
                log.exception("GPU health check failed; trying again")
                stopping.wait(HEALTH_WAIT_S)


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
