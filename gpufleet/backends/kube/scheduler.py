"""The ``gpufleet scheduler`` process: the scheduling core driving a Kubernetes cluster.

Owns what Kubernetes adds to the control loop (:class:`~gpufleet.control.loop.ControlLoop`,
the simulator's and the control plane's too): the start (informers synced before anything is
decided, pods read as their listing arrives), leader election (a replica that is not leading
keeps its caches warm and acts on nothing), the core of each turn, status and metrics. While
this replica leads (or when leader election is off), each turn of the loop polls the backend's
changes into the core, runs cycles until the core is idle, carrying out each cycle's actions as
soon as it ends (the cycles are the simulator's ``run_until_idle``, so the decisions are too;
only the first binds of a backlog leave sooner), publishes Queue and PodGroup status every few
seconds, and sleeps until the next change or timer. Conditions, Events and status go through a
rate limit of their own, as kube-scheduler's Events do, so that telling users never holds a
bind back, and are sent from the reporter's thread, so that a turn (and the metrics' scrape,
which waits for the turn's lock) never waits on the API server. A core is built when this
replica starts leading and again whenever Queues, PriorityClasses or ResourceQuotas change;
each new core is told the whole cluster again (``KubeBackend.resync``), which is also how a
restarted scheduler picks up where the last one stopped. Each turn runs under
:attr:`KubeScheduler.lock`, which the metrics' scrape and the control plane on Kubernetes take
too.

Leadership is asked before each turn, before a cycle's actions are carried out and just before
each bind and eviction is sent (the backend's fence); a replica that finds it no longer leads ends
the backend's term (everything queued is dropped) and builds a new core when it leads again. A
pod the core refuses because it is bound beyond what its node has free (bound by another
scheduler, or by a leader paused past its lease) gets a Warning ``Overcommitted`` Event and is
counted in ``gpufleet_overcommitted_pods``.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.backends.kube.backend import KubeBackend
from gpufleet.backends.kube.leader import LeaderElector
from gpufleet.backends.kube.metrics import KubeMetrics
from gpufleet.backends.kube.reporting import ApiReporter, StatusPublisher
from gpufleet.control.factory import build_core, target_of
from gpufleet.control.gc_bursts import long_lived_burst, thaw
from gpufleet.control.loop import ControlLoop, Turn
from gpufleet.io.kube.binding_signature import BindingKey
from gpufleet.kube_client.api import NODES, PODS, KubeApi
from gpufleet.kube_client.informer import Informers
from gpufleet.metrics.scheduler import SchedulerMetrics
from gpufleet.metrics.state import SchedulerState, read_state
from gpufleet.model.events import ClusterEvent, PodBound, PodDeleted
from gpufleet.model.times import wall_clock_time
from gpufleet.scheduling.config import AdmissionConfig
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.profile import DEFAULT_PROFILE, Profile
from gpufleet.scheduling.usage_history import UsageSnapshot

log = logging.getLogger(__name__)


def default_identity() -> str:
    """The pod's name in a cluster (downward API), else host and process id."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"


@dataclass(slots=True)
class SchedulerOptions:
    scheduler_name: str = "gpufleet"
    policy: str = "default"
    seed: int = 0
    leader_elect: bool = True
    lease_namespace: str = "gpufleet-system"
    lease_name: str = "gpufleet-scheduler"
    identity: str = field(default_factory=default_identity)
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    status_every_s: float = 5.0
    binders: int = 64
    sync_timeout_s: float = 60.0
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    #: Which plugin at each extension point (``--profile``).
    profile: Profile = DEFAULT_PROFILE
    #: Write the autoscalers' do-not-disrupt annotations on the gangs' pods it binds.
    guard_gangs: bool = True
    #: Sign each binding's device annotations (``--binding-key-file``); None: unsigned.
    binding_key: BindingKey | None = None


class KubeScheduler:
    """See the module docstring."""

    def __init__(
        self,
        api: KubeApi,
        options: SchedulerOptions | None = None,
        metrics: SchedulerMetrics | None = None,
        watch_timeout_s: int = 300,
        reporting_api: KubeApi | None = None,
        informers: Informers | None = None,
        lock: threading.RLock | None = None,
    ) -> None:
        """``lock``: what each turn runs under (a control plane's, to share it); else one of
        its own."""
        self.api = api
        self.lock = lock or threading.RLock()
        self.options = options = options or SchedulerOptions()
        #: Conditions, Events and status writes: ``api``'s client under a limit of their own.
        self.reporting_api = reporting_api or api.with_own_limit()
        self.reporter = ApiReporter(self.reporting_api, options.scheduler_name, options.identity)
        self.backend = KubeBackend(
            api,
            options.scheduler_name,
            self.reporter,
            options.binders,
            watch_timeout_s,
            informers,
            guard_gangs=options.guard_gangs,
            binding_key=options.binding_key,
        )
        self.publisher = StatusPublisher(self.reporting_api, self.reporter.submit)
        self.metrics = metrics or SchedulerMetrics()
        self.metrics.read = self._read_state
        self.kube_metrics = KubeMetrics(self.metrics, self.backend, self.reporter)
        self.backend.leading = self.is_leader
        self.elector = (
            LeaderElector(
                api,
                options.lease_namespace,
                options.lease_name,
                options.identity,
                options.lease_duration_s,
                options.renew_deadline_s,
                options.retry_period_s,
            )
            if options.leader_elect
            else None
        )
        self.core: SchedulerCore | None = None
        #: Fair sharing's usage history, from the last core to the next one.
        self._kept_usage: UsageSnapshot | None = None
        self.cores_built = 0
        self.heartbeat = time.monotonic()
        self.stop_event = threading.Event()
        self._core_config = -1
        self._core_term = -1
        self._published_at = 0.0
        self.loop = ControlLoop(
            self.backend,
            self._core_for_turn,
            [self.metrics, self],
            guard=lambda: self.lock,
            refused=self._refused,
        )

    # ----------------------------------------------------------------------------- state
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    @property
    def ready(self) -> bool:
        return self.backend.synced

    def stop(self) -> None:
        self.stop_event.set()

    # ----------------------------------------------------------------------------- loop
    def run(self) -> None:
        """Until :meth:`stop`; the caches are synced before anything is decided."""
        backend = self.backend
        started = time.monotonic()
        with long_lived_burst():
            backend.start()
            # Pods are read as their listing arrives, not after every informer has synced.
            while not backend.wait_synced(0.0 if backend.read_ahead() else 0.02):
                if self.stop_event.is_set():
                    self._shutdown()
                    return
                self.heartbeat = time.monotonic()
        log.info(
            "caches synced in %.2f s: %d nodes, %d pods",
            time.monotonic() - started,
            len(backend.objects[NODES]),
            len(backend.objects[PODS]),
        )
        if self.elector is not None:
            self.elector.start()
        try:
            self.loop.run(stop=self.stop_event.is_set, standby=self._standing_by)
        finally:
            self._shutdown()

    def turn(self) -> None:
        """One turn of the loop while leading (tests drive it directly)."""
        self.loop.turn()

    def _standing_by(self) -> bool:
        """Before each turn: whether this replica does not lead, and has waited instead."""
        self.heartbeat = time.monotonic()
        leading = self.is_leader()
        self.kube_metrics.leader.set(1 if leading else 0)
        if leading:
            return False
        if self.core is not None:
            log.warning("%s lost leadership; standing by", self.options.identity)
            with self.lock:
                self.backend.abandon("leadership lost")
                self._drop_core()
        self.backend.read_ahead()
        self.stop_event.wait(0.5)
        return True

    def _core_for_turn(self) -> SchedulerCore:
        """The core of this turn: a new one when there is none or Queues, PriorityClasses or
        ResourceQuotas changed."""
        backend = self.backend
        if (
            self.core is None
            or backend.config_version != self._core_config
            or backend.term != self._core_term  # its term ended: what it decided is dropped
        ):
            # A new core is told the whole cluster: a burst of long-lived objects.
            self._drop_core()
            with long_lived_burst():
                core = self._build_core()
                self.loop.handle(core, backend.poll_events())
        assert self.core is not None
        return self.core

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        """Pods gone are no longer overcommitted. (Status is published from the core, after
        the turn.)"""
        overcommitted = self.kube_metrics.overcommitted
        if overcommitted:
            for event in events:
                if isinstance(event, PodDeleted):
                    overcommitted.discard(event.key)

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        now = time.monotonic()
        if now - self._published_at >= self.options.status_every_s:
            self._published_at = now
            self.publisher.publish(core, self.backend)

    def _drop_core(self) -> None:
        """Let go of the last core, and collect it now: it was frozen with the burst that
        built it, and reference cycles among its objects would outlive it otherwise."""
        if self.core is None:
            return
        history = self.core.state.usage_history
        if history is not None:  # fair sharing's usage outlives the core (not the process)
            self._kept_usage = history.snapshot()
        self.core = None
        thaw()
        gc.collect()

    def _build_core(self) -> SchedulerCore:
        started = time.monotonic()
        backend = self.backend
        self._core_config = backend.config_version
        nodes = backend.resync()
        self._core_term = backend.term
        self.kube_metrics.overcommitted.clear()  # the new core is told every pod again
        pods, counts = backend.known_pods()
        catalog = backend.catalog
        self.core = core = build_core(
            nodes,
            self.options.policy,
            self.options.seed,
            catalog.queues,
            catalog.resource_quotas,
            self.options.admission,
            target_of(pods, counts),
            time_format=wall_clock_time,  # the clock here is the wall clock (Unix seconds)
            profile=self.options.profile,
        )
        self.cores_built += 1
        if self._kept_usage is not None and core.state.usage_history is not None:
            core.state.usage_history.restore(self._kept_usage)
        for message in core.quota_warnings():
            log.warning("%s", message)
        log.info(
            "scheduling core built in %.2f s: %d nodes, %d queues, policy %s",
            time.monotonic() - started,
            len(nodes),
            len(catalog.queues),
            self.options.policy,
        )
        return core

    def _refused(self, event: ClusterEvent, error: Exception) -> None:
        # A pod bound by another scheduler (or an earlier leader) beyond what the node has
        # left, a workload naming a queue that vanished, an object whose contents the core
        # cannot take: report it and keep scheduling everything else (a crash would crash
        # every replica that leads next).
        if isinstance(error, ValueError):
            log.warning("ignored %s: %s", type(event).__name__, error)
        else:
            log.error(
                "ignored %s the core failed on: %s: %s (%r)",
                type(event).__name__,
                type(error).__name__,
                error,
                event,
                exc_info=error,
            )
        self.metrics.refused()
        if isinstance(event, PodBound) and isinstance(error, ValueError):
            key = event.pod.key
            self.kube_metrics.overcommitted.add(key)
            obj = self.backend.objects[PODS].get(key)
            if obj is not None:
                self.reporter.event(
                    obj,
                    "Warning",
                    "Overcommitted",
                    f"bound to {event.placement.node} beyond what the node has free "
                    f"(its devices may be shared with another pod): {error}",
                )

    def _read_state(self) -> SchedulerState | None:
        """The core's state for a scrape (under the lock: the loop's thread changes it)."""
        with self.lock:
            return None if self.core is None else read_state(self.core)

    def _shutdown(self) -> None:
        if self.elector is not None:
            self.elector.stop()
        self.backend.close()
        self.reporter.close()
