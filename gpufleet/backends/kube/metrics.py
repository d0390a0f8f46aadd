"""What only a scheduler on Kubernetes counts, in the scheduler's registry: leadership, and
the API calls the backend and the reporter made, those that failed (by verb and code), and
the pods seen bound beyond their node's capacity.

Owns :class:`KubeMetrics`, which adds the :data:`~gpufleet.metrics.families.KUBERNETES`
families to a :class:`~gpufleet.metrics.scheduler.SchedulerMetrics` registry (names from
there, like every world's) and times each Binding call into its bind histogram. The counts
themselves are kept by the backend and the reporter as they go and read at each scrape.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Gauge
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.backends.kube.backend import KubeBackend
from gpufleet.backends.kube.reporting import ApiReporter
from gpufleet.metrics import families as f
from gpufleet.metrics.scheduler import SchedulerMetrics


class KubeMetrics:
    """See the module docstring."""

    def __init__(
        self, metrics: SchedulerMetrics, backend: KubeBackend, reporter: ApiReporter
    ) -> None:
        self.leader = Gauge(f.LEADER.name, f.LEADER.help, registry=metrics.registry)
        #: Pods seen bound beyond what their node has free (kept by the scheduler).
        self.overcommitted: set[str] = set()
        metrics.registry.register(_ApiCalls(backend, reporter, self.overcommitted))
        backend.bind_answered = metrics.observe_bind


class _ApiCalls(Collector):
    """What the backend and reporter count as they go, read at each scrape."""

    def __init__(
        self, backend: KubeBackend, reporter: ApiReporter, overcommitted: set[str]
    ) -> None:
        self.backend, self.reporter, self.overcommitted = backend, reporter, overcommitted

    def collect(self) -> Iterable[Metric]:
        counters = self.backend.counters
        for family, value in (
            (f.BIND_CALLS_SUCCEEDED, counters.binds),
            (f.BIND_CALLS_FAILED, counters.bind_failures),
            (f.EVICTION_CALLS_SUCCEEDED, counters.evictions),
            (f.EVICTION_CALLS_BLOCKED, counters.evictions_blocked),
            (f.INVALID_OBJECTS, counters.invalid_objects),
            (f.REPORTS_DROPPED, self.reporter.dropped),
        ):
            yield CounterMetricFamily(family.name, family.help, value=value)
        family = f.OVERCOMMITTED_PODS
        yield GaugeMetricFamily(family.name, family.help, value=len(self.overcommitted))
        # The reporter's client shares the backend's Reachability (KubeApi.with_own_limit).
        errors = CounterMetricFamily(
            f.API_ERRORS.name, f.API_ERRORS.help, labels=list(f.API_ERRORS.labels)
        )
        for (verb, code), count in sorted(self.backend.api.reachability.error_counts().items()):
            errors.add_metric([verb, code], count)
        yield errors
        withdrawn = f.PODS_ON_WITHDRAWN_DEVICES
        yield GaugeMetricFamily(
            withdrawn.name, withdrawn.help, value=len(self.backend.on_withdrawn_devices)
        )
