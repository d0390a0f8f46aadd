"""Prometheus metrics of the control plane, read from it at scrape time, plus API latency.

One registry per app (several apps in one test process must not share counters). Cluster and
queue gauges are computed when ``/metrics`` is scraped, from the same views the API serves, so
the numbers agree with the API's.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpufleet.api import views
from gpufleet.api.schemas import WorkloadState
from gpufleet.service.protocol import Plane


class _PlaneCollector(Collector):
    def __init__(self, plane: Plane) -> None:
        self.plane = plane

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        plane = self.plane
        summary = views.cluster(plane)
        yield GaugeMetricFamily("gpufleet_gpus", "GPUs in the cluster", value=summary.gpus)
        yield GaugeMetricFamily(
            "gpufleet_gpus_allocated", "GPUs allocated to pods", value=summary.gpus_allocated
        )
        yield GaugeMetricFamily(
            "gpufleet_cluster_time_seconds", "the cluster's clock", value=summary.time
        )
        states = GaugeMetricFamily("gpufleet_workloads", "workloads by state", labels=["state"])
        with plane.lock:
            counts = dict.fromkeys(WorkloadState, 0)
            for record in plane.records.values():
                counts[record.state] += 1
            counters = dict(plane.counters)
        for state, count in counts.items():
            states.add_metric([state.value], count)
        yield states
        usage = GaugeMetricFamily(
            "gpufleet_queue_usage", "a queue's usage (its subtree's)", labels=["queue", "resource"]
        )
        nominal = GaugeMetricFamily(
            "gpufleet_queue_nominal", "a queue's nominal quota", labels=["queue", "resource"]
        )
        pending = GaugeMetricFamily(
            "gpufleet_queue_pending_workloads", "workloads waiting", labels=["queue"]
        )
        share = GaugeMetricFamily(
            "gpufleet_queue_share", "dominant-resource share", labels=["queue"]
        )
        for queue in views.queues(plane):
            for resource, amount in queue.usage.items():
                usage.add_metric([queue.name, resource], amount)
            for resource, amount in queue.nominal.items():
                nominal.add_metric([queue.name, resource], amount)
            pending.add_metric([queue.name], queue.pending)
            share.add_metric([queue.name], queue.share)
        yield from (usage, nominal, pending, share)
        for name, value in counters.items():
            yield CounterMetricFamily(
                f"gpufleet_{name}", f"pods or workloads {name} since start", value=value
            )


class ApiMetrics:
    """The app's registry: the plane's numbers and the latency of API requests."""

    def __init__(self, plane: Plane) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_PlaneCollector(plane))
        self.latency = Histogram(
            "gpufleet_api_request_seconds",
            "API request latency",
            ["method", "route", "status"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
