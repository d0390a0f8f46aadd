"""Prometheus metrics of the scheduler, and the HTTP endpoint that serves them with health.

Owns the metric definitions (prometheus-client) and a small HTTP server for ``/metrics``,
``/healthz`` (the loop has turned recently) and ``/readyz`` (the caches are synced). The
standard library's server is enough for three GET routes; FastAPI would add a dependency and
an event loop to a process that has neither.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.backends.kube.backend import KubeBackend
from gpufleet.backends.kube.reporting import ApiReporter
from gpufleet.model.actions import Action, Bind, Evict
from gpufleet.scheduling.core import SchedulerCore

#: Seconds between two counts of the pods waiting in the core.
COUNT_EVERY_S = 1.0


class _Outcomes(Collector):
    """What the backend and reporter count as they go, read at each scrape."""

    def __init__(self, backend: KubeBackend, reporter: ApiReporter) -> None:
        self.backend, self.reporter = backend, reporter

    def collect(self) -> Iterable[Metric]:
        counters = self.backend.counters
        for name, text, value in (
            ("gpufleet_bind_calls_succeeded", "Bindings the API server took", counters.binds),
            (
                "gpufleet_bind_calls_failed",
                "Bindings the API server refused",
                counters.bind_failures,
            ),
            (
                "gpufleet_eviction_calls_succeeded",
                "Evictions the API server took",
                counters.evictions,
            ),
            (
                "gpufleet_eviction_calls_blocked",
                "Evictions refused (a PodDisruptionBudget)",
                counters.evictions_blocked,
            ),
            (
                "gpufleet_invalid_objects",
                "Objects reported as InvalidSpec",
                counters.invalid_objects,
            ),
            (
                "gpufleet_reports_dropped",
                "Conditions and Events dropped on a full backlog",
                self.reporter.dropped,
            ),
        ):
            yield CounterMetricFamily(name, text, value=value)


class SchedulerMetrics:
    """The scheduler's metrics, in a registry of their own (several schedulers in one test
    process must not collide)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.binds = Counter("gpufleet_binds", "Pods the scheduler asked to bind", registry=r)
        self.evictions = Counter(
            "gpufleet_evictions", "Pods the scheduler asked to evict", registry=r
        )
        self.ignored_events = Counter(
            "gpufleet_ignored_events",
            "Cluster changes the core could not take (a pod bound beyond a node's capacity)",
            registry=r,
        )
        self.pending_pods = Gauge(
            "gpufleet_pending_pods", "Pods waiting in the scheduling core", registry=r
        )
        self.running_workloads = Gauge(
            "gpufleet_running_workloads", "Workloads admitted and placed", registry=r
        )
        self.leader = Gauge("gpufleet_leader", "1 while this replica leads", registry=r)
        self.turn_seconds = Histogram(
            "gpufleet_scheduling_turn_seconds",
            "Time of one loop turn: events in, cycles, actions out",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )
        self._counted_at = -math.inf

    def watch(self, backend: KubeBackend, reporter: ApiReporter) -> None:
        """Also expose what ``backend`` and ``reporter`` count (API calls taken or refused)."""
        self.registry.register(_Outcomes(backend, reporter))

    def observe_turn(
        self,
        seconds: float,
        actions: Sequence[Action],
        backend: KubeBackend,
        core: SchedulerCore,
    ) -> None:
        self.turn_seconds.observe(seconds)
        if actions:
            self.binds.inc(sum(isinstance(a, Bind) for a in actions))
            self.evictions.inc(sum(isinstance(a, Evict) for a in actions))
        now = time.monotonic()
        # Counting the waiting pods walks every pod the core knows: once a second, not once
        # per turn (a turn per answered bind while a backlog drains).
        if now - self._counted_at >= COUNT_EVERY_S:
            self._counted_at = now
            self.pending_pods.set(backend.waiting_pods())
        self.running_workloads.set(len(core.running))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class HealthServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0 picks one)."""

    def __init__(
        self,
        metrics: SchedulerMetrics,
        healthy: Callable[[], bool],
        ready: Callable[[], bool],
        port: int,
        host: str = "0.0.0.0",
        sock: socket.socket | None = None,
    ) -> None:
        """``sock``: a socket already bound (the command line binds it first, to tell a busy
        port before it starts anything); else ``host:port`` is bound here."""
        routes: dict[str, Callable[[], tuple[int, bytes, str]]] = {
            "/metrics": lambda: (200, metrics.exposition(), CONTENT_TYPE_LATEST),
            "/healthz": lambda: _check(healthy()),
            "/readyz": lambda: _check(ready()),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                status, body, kind = route() if route else (404, b"not found\n", "text/plain")
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # probes every few seconds would drown the log

        self.server = ThreadingHTTPServer((host, port), Handler, bind_and_activate=sock is None)
        if sock is not None:
            self.server.socket.close()
            self.server.socket = sock
            self.server.server_address = sock.getsockname()
            self.server.server_activate()
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _check(ok: bool) -> tuple[int, bytes, str]:
    return (200, b"ok\n", "text/plain") if ok else (503, b"not ok\n", "text/plain")
