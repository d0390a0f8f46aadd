"""The ``gpufleet scheduler`` process: the scheduling core driving a Kubernetes cluster.

Owns the loop that joins them: informers fill the backend's view; while this replica leads
(or when leader election is off), each turn polls the backend's changes into the core, runs
cycles until the core is idle, carrying out each cycle's actions as soon as it ends (the
cycles are the simulator's ``run_until_idle``, so the decisions are too; only the first binds
of a backlog leave sooner), publishes Queue and PodGroup status every few seconds, and sleeps
until the next change or timer. Conditions, Events and status go through a rate limit of their
own, as kube-scheduler's Events do, so that telling users never holds a bind back. A core is
built when this replica starts leading and again whenever Queues, PriorityClasses or
ResourceQuotas change; each new core is told the whole cluster again (``KubeBackend.resync``),
which is also how a restarted scheduler picks up where the last one stopped. A replica that is
not leading keeps its caches warm and acts on nothing.
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

from gpufleet.backends.kube.api import NODES, PODS, KubeApi
from gpufleet.backends.kube.backend import KubeBackend
from gpufleet.backends.kube.informer import Informers
from gpufleet.backends.kube.leader import LeaderElector
from gpufleet.backends.kube.metrics import SchedulerMetrics
from gpufleet.backends.kube.reporting import ApiReporter, StatusPublisher
from gpufleet.control.allocation import long_lived_burst, thaw
from gpufleet.control.factory import build_core, target_of
from gpufleet.model.events import ClusterEvent
from gpufleet.model.times import wall_clock_time
from gpufleet.scheduling.config import AdmissionConfig
from gpufleet.scheduling.core import SchedulerCore

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
    ) -> None:
        self.api = api
        self.options = options = options or SchedulerOptions()
        #: Conditions, Events and status writes: ``api``'s client under a limit of their own.
        self.reporting_api = reporting_api or api.with_own_limit()
        self.reporter = ApiReporter(self.reporting_api, options.scheduler_name, options.identity)
        self.backend = KubeBackend(
            api, options.scheduler_name, self.reporter, options.binders, watch_timeout_s, informers
        )
        self.publisher = StatusPublisher(self.reporting_api)
        self.metrics = metrics or SchedulerMetrics()
        self.metrics.watch(self.backend, self.reporter)
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
        self.cores_built = 0
        self.heartbeat = time.monotonic()
        self.stop_event = threading.Event()
        self._core_config = -1
        self._published_at = 0.0

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
            while not self.stop_event.is_set():
                self.heartbeat = time.monotonic()
                self.metrics.leader.set(1 if self.is_leader() else 0)
                if not self.is_leader():
                    if self.core is not None:
                        log.warning("%s lost leadership; standing by", self.options.identity)
                        self._drop_core()
                    backend.read_ahead()
                    self.stop_event.wait(0.5)
                    continue
                self.turn()
                core = self.core
                assert core is not None
                backend.wait(core.next_timer())
        finally:
            self._shutdown()

    def turn(self) -> None:
        """One turn of the loop while leading (tests drive it directly)."""
        backend = self.backend
        if self.core is None or backend.config_version != self._core_config:
            # A new core is told the whole cluster: a burst of long-lived objects.
            self._drop_core()
            with long_lived_burst():
                self._build_core()
                assert self.core is not None
                self._handle(self.core, backend.poll_events())
        core = self.core
        assert core is not None
        started = time.perf_counter()
        self._handle(core, backend.poll_events())
        # Each cycle's binds leave as it ends: with thousands pending, binding starts after
        # the first cycle, not the last. Nothing the API answers meanwhile reaches the core
        # before the next poll, so the decisions are run_until_idle's.
        actions = core.run_until_idle(backend.clock.now(), on_cycle=backend.apply)
        self.metrics.observe_turn(time.perf_counter() - started, actions, backend, core)
        now = time.monotonic()
        if now - self._published_at >= self.options.status_every_s:
            self._published_at = now
            self.publisher.publish(core, backend)

    def _drop_core(self) -> None:
        """Let go of the last core, and collect it now: it was frozen with the burst that
        built it, and reference cycles among its objects would outlive it otherwise."""
        if self.core is None:
            return
        self.core = None
        thaw()
        gc.collect()

    def _build_core(self) -> None:
        started = time.monotonic()
        backend = self.backend
        self._core_config = backend.config_version
        nodes = backend.resync()
        pods, counts = backend.known_pods()
        catalog = backend.catalog
        self.core = build_core(
            nodes,
            self.options.policy,
            self.options.seed,
            catalog.queues,
            catalog.resource_quotas,
            self.options.admission,
            target_of(pods, counts),
            time_format=wall_clock_time,  # the clock here is the wall clock (Unix seconds)
        )
        self.cores_built += 1
        for message in self.core.quota_warnings():
            log.warning("%s", message)
        log.info(
            "scheduling core built in %.2f s: %d nodes, %d queues, policy %s",
            time.monotonic() - started,
            len(nodes),
            len(catalog.queues),
            self.options.policy,
        )

    def _handle(self, core: SchedulerCore, events: Sequence[ClusterEvent]) -> None:
        for event in events:
            try:
                core.handle(event)
            except ValueError as error:
                # A pod bound by another scheduler beyond what the node has left, a workload
                # naming a queue that vanished: report it and keep scheduling everything else.
                log.warning("ignored %s: %s", type(event).__name__, error)
                self.metrics.ignored_events.inc()

    def _shutdown(self) -> None:
        if self.elector is not None:
            self.elector.stop()
        self.backend.close()
        self.reporter.close()
