"""The app's ``/metrics``: the scheduler's families, the control plane's book, API latency.

One registry per app (several apps in one test process must not share counters). It serves the
plane's :class:`~gpufleet.metrics.scheduler.SchedulerMetrics` (the families every world serves,
read from the plane's core; on Kubernetes also leadership and API calls) and adds what only
the control plane has: its workloads by state, its clock, what its book counted since start,
the latency of API requests, and its world's device telemetry under dcgm-exporter's names
(:mod:`gpufleet.metrics.dcgm`, where the world has telemetry: the simulated cluster). Every
name comes from :mod:`gpufleet.metrics.families`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.metrics import families as f
from gpufleet.metrics.dcgm import DcgmCollector
from gpufleet.service.protocol import Plane
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


class ApiMetrics:
    """The app's registry (see the module docstring)."""

    def __init__(self, plane: Plane) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_Registry(plane.metrics.registry))
        self.registry.register(_PlaneCollector(plane))
        if plane.telemetry is not None:
            self.registry.register(DcgmCollector(plane.telemetry))
        family = f.API_REQUEST_SECONDS
        self.latency = Histogram(
            family.name,
            family.help,
            family.labels,
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
