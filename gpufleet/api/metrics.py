"""The app's ``/metrics``: the scheduler's families, the control plane's book, API latency.

One registry per app (several apps in one test process must not share counters). It serves the
plane's :class:`~gpufleet.metrics.scheduler.SchedulerMetrics` (the families every world serves,
read from the plane's core; on Kubernetes also leadership and API calls) and adds what only
the control plane has: its workloads by state, its clock, what its book counted since start,
the latency of API requests, its observatory's rounds (evaluated, caught up, skipped), what
its workloads cost (:class:`~gpufleet.service.cost_meter.CostMeter`, and up to when), and its
world's device telemetry under dcgm-exporter's names (:mod:`gpufleet.metrics.dcgm`, where the
world has telemetry: the simulated cluster, this machine's GPUs under ``serve --local``), with
each running pod's start beside them as kube-state-metrics' ``kube_pod_start_time`` (what the
exported rules' ``minRunning`` joins on; on Kubernetes kube-state-metrics serves it). Every
name comes from :mod:`gpufleet.metrics.families`.

The API latency's labels take only values the server chose, never what a caller sent: a
method outside HTTP's standard ones is ``other``, a path no route matched is ``unmatched``
(else the route's template, ``/api/v1/workloads/{namespace}/{name}``, not the path itself), so
that nobody can grow ``/metrics`` (and the server's memory) by sending made-up methods or paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.api.cost_views import plane_series, plane_step
from gpufleet.economics import PriceList
from gpufleet.metrics import families as f
from gpufleet.metrics.dcgm import DcgmCollector
from gpufleet.service.cost_meter import CostMeter
from gpufleet.service.protocol import Plane
from gpufleet.service.records import pods_of
from gpufleet.service.states import WorkloadState


class _Registry(Collector):
    """Another registry's families, served through this one."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        return self.registry.collect()


class _PlaneCollector(Collector):
    """The control plane's book, read at each scrape."""

    def __init__(self, plane: Plane) -> None:
        self.plane = plane

    def collect(self) -> Iterator[Metric]:
        plane = self.plane
        with plane.lock:
            counts = dict.fromkeys(WorkloadState, 0)
            for record in plane.records.values():
                counts[record.state] += 1
            counters = dict(plane.counters)
            now = plane.now()
        states = GaugeMetricFamily(f.WORKLOADS.name, f.WORKLOADS.help, labels=f.WORKLOADS.labels)
        for state, count in counts.items():
            states.add_metric([state.value], count)
        yield states
        yield GaugeMetricFamily(f.CLUSTER_TIME.name, f.CLUSTER_TIME.help, value=now)
        for key, family in f.PLANE_COUNTERS.items():
            yield CounterMetricFamily(family.name, family.help, value=counters.get(key, 0))


class _CostCollector(Collector):
    """What the workloads cost since the plane started (:class:`CostMeter`), brought up to
    the plane's clock at each scrape."""

    def __init__(self, meter: CostMeter) -> None:
        self.meter = meter

    def collect(self) -> Iterator[Metric]:
        self.meter.advance()
        dollars, idle_hours = self.meter.totals()
        cost = CounterMetricFamily(
            f.COST_DOLLARS.name, f.COST_DOLLARS.help, labels=f.COST_DOLLARS.labels
        )
        for labels, value in sorted(dollars.items()):
            cost.add_metric(list(labels), value)
        yield cost
        idle = CounterMetricFamily(
            f.IDLE_GPU_HOURS.name, f.IDLE_GPU_HOURS.help, labels=f.IDLE_GPU_HOURS.labels
        )
        for owner, hours in sorted(idle_hours.items()):
            idle.add_metric(list(owner), hours)
        yield idle
        until = self.meter.priced_until
        if until is not None:
            family = f.COST_PRICED_UNTIL
            yield GaugeMetricFamily(family.name, family.help, value=until)


class _ObservatoryCollector(Collector):
    """The observatory's rounds: evaluated, caught up late, skipped (families without a
    sample where the plane observes nothing)."""

    def __init__(self, plane: Plane) -> None:
        self.plane = plane

    def collect(self) -> Iterator[Metric]:
        observatory = self.plane.observatory
        counts: tuple[int, int, int] | None = None
        if observatory is not None:
            with observatory.lock:
                counts = (
                    observatory.rounds,
                    observatory.rounds_caught_up,
                    observatory.rounds_skipped,
                )
        for index, family in enumerate(f.OBSERVING):
            metric = CounterMetricFamily(family.name, family.help)
            if counts is not None:
                metric.add_metric([], counts[index])
            yield metric


class _PodStartCollector(Collector):
    """Each running pod's start in Unix seconds, as kube-state-metrics' ``kube_pod_start_time``
    (``namespace``, ``pod``): the same starts gpufleet's own engine judges ``minRunning`` by
    (``records.pods_of``), at the wall time of that instant of the plane's clock (the
    observatory's ``wall_time``: the simulated cluster's clock counts from 0), so that
    Prometheus' ``time() - kube_pod_start_time`` is the engine's time run. Not truncated to
    whole seconds as Kubernetes' ``status.startTime`` is: the simulated start is exact, and the
    two engines would part by up to a second."""

    def __init__(self, plane: Plane) -> None:
        self.plane = plane

    def collect(self) -> Iterator[Metric]:
        plane = self.plane
        with plane.lock:
            _, starts = pods_of(plane.records)
        wall = plane.observatory.wall_time if plane.observatory is not None else None
        family = f.KUBE_POD_START_TIME
        metric = GaugeMetricFamily(family.name, family.help, labels=family.labels)
        for (namespace, pod), start in sorted(starts.items()):
            metric.add_metric([namespace, pod], wall(start) if wall is not None else start)
        yield metric


#: The methods the API latency names; any other is counted as :data:`OTHER_METHOD`.
KNOWN_METHODS = frozenset(
    ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")
)
OTHER_METHOD = "other"
#: The route label of a request no route matched (404s, probes of random paths).
UNMATCHED_ROUTE = "unmatched"


def request_labels(method: str, route: str | None, status: int) -> tuple[str, str, str]:
    """The API latency's labels for a request: its method if standard, else ``other``; the
    template of the route that matched it, else ``unmatched``; its status code."""
    known = method if method in KNOWN_METHODS else OTHER_METHOD
    return known, route or UNMATCHED_ROUTE, str(status)


class ApiMetrics:
    """The app's registry (see the module docstring); ``prices`` prices the cost counters
    (called at the first scrape, so that an app nobody scrapes reads no price file)."""

    def __init__(self, plane: Plane, prices: Callable[[], PriceList]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_Registry(plane.metrics.registry))
        self.registry.register(_PlaneCollector(plane))
        self.registry.register(
            _CostCollector(
                CostMeter(plane, prices, lambda: plane_series(plane), lambda: plane_step(plane))
            )
        )
        self.registry.register(plane.notifications)
        self.registry.register(_ObservatoryCollector(plane))
        if plane.telemetry is not None:
            self.registry.register(DcgmCollector(plane.telemetry))
            self.registry.register(_PodStartCollector(plane))
        family = f.API_REQUEST_SECONDS
        self.latency = Histogram(
            family.name,
            family.help,
            family.labels,
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )

    def observe_request(self, method: str, route: str | None, status: int, seconds: float) -> None:
        """One API request into the latency histogram, under :func:`request_labels`."""
        self.latency.labels(*request_labels(method, route, status)).observe(seconds)
