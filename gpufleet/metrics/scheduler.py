"""The scheduler's metrics in a Prometheus registry: counted as the control loop turns, the
core's state read at each scrape.

Owns :class:`SchedulerMetrics`, one registry (several schedulers in one test process must not
share counters) holding every :data:`~gpufleet.metrics.families.SCHEDULER` family. It observes
the control loop (:class:`~gpufleet.control.loop.TurnObserver`): each turn's actions count the
workloads admitted, preempted and evicted and the pods scheduled, its events the binds refused,
its time the turn histogram; these are plain numbers the loop's thread adds to without a lock
(a simulation turns thousands of times a second) and a scrape copies. The gauges are read from
the core when they are scraped (through ``read``, which a world gives under its own lock), so
a turn never walks every pod. Every world serves this registry: ``gpufleet scheduler`` and
``gpufleet serve`` on ``/metrics``, a simulation in its report
(:meth:`SchedulerMetrics.samples`). Families only one world has are registered into the same
registry by that world.

The ``_created`` series of prometheus-client are turned off for the process: they are not
gpufleet's names, and a scrape has no use for them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import accumulate

import prometheus_client
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
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


class Durations:
    """A histogram of durations that one thread adds to without a lock; a scrape copies it."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        #: Observations per bucket (not cumulative), the last one above every bound.
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def family(self, family: f.Family) -> Metric:
        total, cumulative = self.sum, list(accumulate(list(self.counts)))
        buckets = [(str(float(b)), n) for b, n in zip(self.bounds, cumulative, strict=False)]
        buckets.append(("+Inf", cumulative[-1]))
        return HistogramMetricFamily(family.name, family.help, buckets=buckets, sum_value=total)


class SchedulerMetrics:
    """See the module docstring."""

    def __init__(
        self, read: StateReader | None = None, registry: CollectorRegistry | None = None
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.read: StateReader = read or (lambda: None)
        #: Workloads admitted, preempted and evicted, by queue.
        self.admitted: Counter[str] = Counter()
        self.preempted: Counter[str] = Counter()
        self.evicted: Counter[str] = Counter()
        self.scheduled_pods = 0
        self.bind_failures = 0
        self.ignored_events = 0
        self.turn_seconds = Durations(TURN_BUCKETS)
        # Observed from the binder threads: prometheus-client's histogram takes a lock.
        self.bind_seconds = Histogram(
            f.BIND_SECONDS.name, f.BIND_SECONDS.help, buckets=BIND_BUCKETS, registry=self.registry
        )
        self.registry.register(_Counts(self))
        self.registry.register(_CoreState(self))

    # ----------------------------------------------------------------------------- the loop
    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        """(Counted with the turn.)"""

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        self.turn_seconds.observe(turn.seconds)
        for event in turn.events:
            if isinstance(event, BindFailed):
                self.bind_failures += 1
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
        self.scheduled_pods += binds
        for queue in admitted.values():
            self.admitted[queue] += 1
        for queue, preempted in evicted.values():
            self.evicted[queue] += 1
            if preempted:
                self.preempted[queue] += 1

    def refused(self) -> None:
        """An event the core could not take."""
        self.ignored_events += 1

    def observe_bind(self, seconds: float) -> None:
        """A bind answered ``seconds`` after it was sent."""
        self.bind_seconds.observe(seconds)

    # ----------------------------------------------------------------------------- reading
    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def samples(self) -> dict[str, dict[str, float]]:
        """Every family of the registry by its name as a scrape shows it, with its samples as
        a scrape names them (``name{label="value"}``); a family without samples is there,
        empty."""
        out: dict[str, dict[str, float]] = {}
        for metric in self.registry.collect():
            name = f"{metric.name}_total" if metric.type == "counter" else metric.name
            found = out[name] = {}
            for sample in metric.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return out


class _Counts(Collector):
    """The counters and the turn histogram, copied at each scrape (the loop's thread adds to
    them meanwhile)."""

    def __init__(self, metrics: SchedulerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        for family, by_queue in (
            (f.ADMITTED_WORKLOADS, m.admitted),
            (f.PREEMPTED_WORKLOADS, m.preempted),
            (f.EVICTED_WORKLOADS, m.evicted),
        ):
            counter = CounterMetricFamily(family.name, family.help, labels=family.labels)
            for queue, count in sorted(dict(by_queue).items()):
                counter.add_metric([queue], count)
            yield counter
        for family, value in (
            (f.SCHEDULED_PODS, m.scheduled_pods),
            (f.BIND_FAILURES, m.bind_failures),
            (f.IGNORED_EVENTS, m.ignored_events),
        ):
            yield CounterMetricFamily(family.name, family.help, value=value)
        yield m.turn_seconds.family(f.TURN_SECONDS)


class _CoreState(Collector):
    """The gauges, read from the core at each scrape."""

    def __init__(self, metrics: SchedulerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return _gauges(self.metrics.read() or SchedulerState())


def _gauges(state: SchedulerState) -> Iterator[Metric]:
    yield _gauge(f.PENDING_WORKLOADS, state.pending_workloads)
    yield _gauge(f.PENDING_PODS, state.pending_pods)
    yield _gauge(f.RUNNING_WORKLOADS, state.running_workloads)
    yield _gauge(f.ALLOCATED_GPUS, state.allocated_gpus)
    yield _gauge(f.CLUSTER_GPUS, state.cluster_gpus)
    yield _gauge(f.UNHEALTHY_GPUS, state.unhealthy_gpus)
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
