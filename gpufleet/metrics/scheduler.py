"""The scheduler's metrics in a Prometheus registry: counted as the control loop turns, the
core's state read at each scrape.

Owns :class:`SchedulerMetrics`, one registry (several schedulers in one test process must not
share counters) holding every :data:`~gpufleet.metrics.families.SCHEDULER` family. It observes
the control loop (:class:`~gpufleet.control.loop.TurnObserver`): each turn's actions count the
workloads admitted, preempted and evicted and the pods scheduled, its events the binds refused,
its time the turn histogram. The gauges are read from the core when they are scraped (through
``read``, which a world gives under its own lock), so a turn never walks every pod. Every
world serves this registry: ``gpufleet scheduler`` and ``gpufleet serve`` on ``/metrics``, a
simulation in its report (:meth:`SchedulerMetrics.samples`). Families only one world has are
registered into the same registry by that world.

The ``_created`` series of prometheus-client are turned off for the process: they are not
gpufleet's names, and a scrape has no use for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.control.loop import Turn
from gpufleet.metrics import families as f
from gpufleet.metrics.state import SchedulerState
from gpufleet.model.actions import Bind, Evict
from gpufleet.model.events import BindFailed, ClusterEvent
from gpufleet.scheduling.core import SchedulerCore

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

TURN_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BIND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: What a world gives to read its core's state (None while it has no core).
StateReader = Callable[[], SchedulerState | None]


def _counter(family: f.Family, registry: CollectorRegistry) -> Counter:
    return Counter(family.name, family.help, family.labels, registry=registry)


class SchedulerMetrics:
    """See the module docstring."""

    def __init__(
        self, read: StateReader | None = None, registry: CollectorRegistry | None = None
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.read: StateReader = read or (lambda: None)
        r = self.registry
        self.admitted = _counter(f.ADMITTED_WORKLOADS, r)
        self.preempted = _counter(f.PREEMPTED_WORKLOADS, r)
        self.evicted = _counter(f.EVICTED_WORKLOADS, r)
        self.scheduled_pods = _counter(f.SCHEDULED_PODS, r)
        self.bind_failures = _counter(f.BIND_FAILURES, r)
        self.ignored_events = _counter(f.IGNORED_EVENTS, r)
        self.turn_seconds = Histogram(
            f.TURN_SECONDS.name, f.TURN_SECONDS.help, buckets=TURN_BUCKETS, registry=r
        )
        self.bind_seconds = Histogram(
            f.BIND_SECONDS.name, f.BIND_SECONDS.help, buckets=BIND_BUCKETS, registry=r
        )
        r.register(_CoreState(self))

    # ----------------------------------------------------------------------------- the loop
    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        refused = sum(isinstance(event, BindFailed) for event in events)
        if refused:
            self.bind_failures.inc(refused)

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        self.turn_seconds.observe(turn.seconds)
        if not turn.actions:
            return
        binds = 0
        admitted: dict[str, str] = {}
        evicted: dict[str, tuple[str, bool]] = {}
        for action in turn.actions:
            if not isinstance(action, Bind | Evict):
                continue
            owner = core.owner.get(action.pod.key, "")
            # Bound and evicted in the same turn, a workload is already among the evicting.
            running = core.running.get(owner) or core.evicting.get(owner)
            queue = running.workload.queue if running is not None else ""
            if isinstance(action, Bind):
                binds += 1
                admitted[owner] = queue
            else:
                evicted[owner] = (queue, action.preemptor is not None)
        if binds:
            self.scheduled_pods.inc(binds)
        for queue in admitted.values():
            self.admitted.labels(queue).inc()
        for queue, preempted in evicted.values():
            self.evicted.labels(queue).inc()
            if preempted:
                self.preempted.labels(queue).inc()

    def refused(self) -> None:
        """An event the core could not take."""
        self.ignored_events.inc()

    def observe_bind(self, seconds: float) -> None:
        """A bind answered ``seconds`` after it was sent."""
        self.bind_seconds.observe(seconds)

    # ----------------------------------------------------------------------------- reading
    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def samples(self) -> dict[str, float]:
        """Every sample of the registry, named as a scrape shows it (``name{label="v"}``)."""
        out: dict[str, float] = {}
        for metric in self.registry.collect():
            for sample in metric.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sample.labels.items())
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return out


class _CoreState(Collector):
    """The gauges, read from the core at each scrape."""

    def __init__(self, metrics: SchedulerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return _gauges(SchedulerState())

    def collect(self) -> Iterable[Metric]:
        return _gauges(self.metrics.read() or SchedulerState())


def _gauges(state: SchedulerState) -> Iterator[Metric]:
    yield _gauge(f.PENDING_WORKLOADS, state.pending_workloads)
    yield _gauge(f.PENDING_PODS, state.pending_pods)
    yield _gauge(f.RUNNING_WORKLOADS, state.running_workloads)
    yield _gauge(f.ALLOCATED_GPUS, state.allocated_gpus)
    yield _gauge(f.CLUSTER_GPUS, state.cluster_gpus)
    yield _gauge(f.QUEUE_NOMINAL_QUOTA, state.nominal_quota)
    yield _gauge(f.QUEUE_RESOURCE_USAGE, state.usage)
    yield _gauge(f.QUEUE_BORROWED_RESOURCES, state.borrowed)
    yield _gauge(f.QUEUE_WEIGHTED_SHARE, state.weighted_share)


#: A gauge's samples: by its one label's value, or by its label values in order.
Samples = Mapping[str, float] | Mapping[tuple[str, str], float]


def _gauge(family: f.Family, values: Samples) -> Metric:
    gauge = GaugeMetricFamily(family.name, family.help, labels=family.labels)
    for key, value in sorted(values.items()):
        gauge.add_metric([key] if isinstance(key, str) else list(key), value)
    return gauge
