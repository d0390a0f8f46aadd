"""Inference services in a simulated run: requests served by replicas that an autoscaler adds
and removes, each replica a workload like any other.

Owns :class:`InferenceTicking`, a :class:`~gpufleet.control.backend.ClusterBackend` around the
world (or around what already wraps it) that, every ``step_s`` of simulated time (15 s, the
HorizontalPodAutoscaler's sync period), steps each service's requests
(:class:`~gpufleet.backends.sim.serving.ServingQueue`) against its *ready* replicas (running,
and started at least the service's model-load time ago), records what they met
(:class:`~gpufleet.backends.sim.serving.ServingRecord`), and asks the service's autoscaler, if
it has one (:class:`~gpufleet.elastic.replicas.ReplicaAutoscaler`, every
``spec.sync_period_s``; its history seeded at the first sync with the replicas found, as
Kubernetes' is), how many replicas to run, with what the world measured: the requests
waiting and arriving (the router's figure), the p95 latency, each ready replica's GPU
utilisation (the share of its capacity in use).

A new replica is a copy of the one the scenario gave (its template: the first replica of the
Deployment, StatefulSet or ReplicaSet, also when it asked for none), named ``<name>-<n>``,
submitted to the world as a workload: the scheduler queues, admits and places it under its
queue's quota and priority like any other, so scaling up early matters (it waits, then loads
its model). Scaling down removes replicas as Kubernetes' ReplicaSet controller ranks them:
those not placed first, then those still loading, then the ready ones, newest first. A service
without an autoscaler keeps the replicas the scenario gave (a static baseline).

The world keeps running until the last service's requests stop (``RequestLoad.until``), even
when no other work is left. It decides nothing itself (the autoscaler does) and prices nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.backends.sim.cluster import SimulatedCluster
from gpufleet.backends.sim.serving import ServingQueue, ServingRecord, ServingStep
from gpufleet.control.backend import Clock, ClusterBackend, ClusterState
from gpufleet.elastic.replica_behavior import ScaleHistory
from gpufleet.elastic.replicas import ReplicaAutoscaler, ScaleDecision
from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.actions import Action
from gpufleet.model.autoscaling import AutoscalingSpec, InferenceMetric, MetricReading
from gpufleet.model.events import ClusterEvent
from gpufleet.model.serving import InferenceService
from gpufleet.model.workload import TimedWorkload

#: How often the requests are stepped and the autoscalers may be asked, in simulated seconds.
STEP_S = 15.0


def gpus_of(timed: TimedWorkload) -> float:
    """The GPUs one replica holds (a share by its fraction; a MIG slice counts none here)."""
    return sum(pod.gpu.count * pod.gpu.milli / MILLI_PER_GPU for pod in timed.workload.pods)


@dataclass(frozen=True, slots=True)
class InferenceSettings:
    """What a run serves: the services, the autoscaler of each that has one, one replica of
    each (to make more of) and, for every replica the scenario gave, whose it is (all by the
    key of the Deployment, StatefulSet or ReplicaSet: ``prod/Deployment/chat``)."""

    services: tuple[InferenceService, ...]
    autoscaling: Mapping[str, AutoscalingSpec] = field(default_factory=dict)
    templates: Mapping[str, TimedWorkload] = field(default_factory=dict)
    replica_owner: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServingReport:
    """What one service met in a run. Latencies are the minutes' p95 (None: unbounded, a
    minute with requests and no replica serving); replicas are those placed."""

    workload: str
    scaled_by: str
    slo_p95_s: float
    minutes: int
    minutes_met_pct: float
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    queue_p50: float
    queue_p95: float
    queue_max: float
    replicas_min: int
    replicas_mean: float
    replicas_max: int
    scale_changes: int
    gpu_hours: float
    #: Why the replica count changed, the first ones (``t=1h00m: 3 -> 5: queue depth ...``).
    changes: tuple[str, ...] = ()
    #: Per minute: (start, replicas placed at its end, ready, requests per second, p95
    #: latency or None), for the report's figures.
    timeline: tuple[tuple[float, int, int, float, float | None], ...] = ()


#: Changes of replica count a report lists in words, at most.
CHANGES_LISTED = 20


@dataclass(slots=True)
class ServedWorkload:
    """One service in a run: its requests, its replicas and what decided their number."""

    service: InferenceService
    template: TimedWorkload
    queue: ServingQueue
    record: ServingRecord
    autoscaler: ReplicaAutoscaler | None = None
    #: Replica workload key -> the replica, in the order they were made.
    replicas: dict[str, TimedWorkload] = field(default_factory=dict)
    made: int = 0
    last_sync: float | None = None
    decisions: list[ScaleDecision] = field(default_factory=list)

    @property
    def spec(self) -> AutoscalingSpec | None:
        return None if self.autoscaler is None else self.autoscaler.spec


class InferenceTicking:
    """See the module docstring. ``replicas``: each service's replicas the scenario gave
    (workload keys, by the service's ``workload``); ``templates``: one replica of each."""

    def __init__(
        self,
        inner: ClusterBackend,
        sim: SimulatedCluster,
        services: Sequence[InferenceService],
        autoscaling: Mapping[str, AutoscalingSpec],
        templates: Mapping[str, TimedWorkload],
        replicas: Mapping[str, Sequence[TimedWorkload]],
        seed: int = 0,
        step_s: float = STEP_S,
    ) -> None:
        if not step_s > 0:
            raise ValueError(f"a step must be above 0 seconds, got {step_s}")
        self.inner = inner
        self.sim = sim
        self.step_s = step_s
        self.served: list[ServedWorkload] = []
        #: Every replica an autoscaler made in the run (its queue, labels and kind are the
        #: template's: the cost report and the queues count them as the service's).
        self.made: list[TimedWorkload] = []
        for i, service in enumerate(services):
            template = templates[service.workload]
            spec = autoscaling.get(service.workload)
            given = list(replicas.get(service.workload, ()))
            self.served.append(
                ServedWorkload(
                    service,
                    template,
                    ServingQueue(service, np.random.default_rng([seed, i])),
                    ServingRecord(service, gpus_of(template)),
                    ReplicaAutoscaler(spec) if spec is not None else None,
                    {t.workload.key: t for t in given},
                    made=len(given),
                )
            )
        self.until = max((s.load.until for s in services), default=0.0)
        self.next_tick = sim.clock.now() + step_s

    # ------------------------------------------------------------------- ClusterBackend
    @property
    def clock(self) -> Clock:
        return self.inner.clock

    def list_state(self) -> ClusterState:
        return self.inner.list_state()

    def poll_events(self) -> Sequence[ClusterEvent]:
        now = self.clock.now()
        while now >= self.next_tick and self.next_tick <= self.until:
            self.tick(self.next_tick)
            self.next_tick += self.step_s
        return self.inner.poll_events()

    def apply(self, actions: Sequence[Action]) -> None:
        self.inner.apply(actions)

    def wait(self, deadline: float) -> None:
        tick = self.next_tick if self.next_tick <= self.until else math.inf
        self.inner.wait(min(deadline, tick))

    @property
    def done(self) -> bool:
        return self.inner.done and self.next_tick > self.until

    def finish(self, time_format: Callable[[float], str]) -> tuple[ServingReport, ...]:
        """What every service met in the run."""
        return tuple(report_of(served, time_format) for served in self.served)

    # ----------------------------------------------------------------------------- ticks
    def tick(self, now: float) -> None:
        """Step every service's requests to ``now``, then let its autoscaler decide."""
        for served in self.served:
            ready, placed = self._replicas_serving(served, now)
            step = served.queue.step(now, self.step_s, ready)
            served.record.add(step, self.step_s, placed)
            spec = served.spec
            if served.autoscaler is None or spec is None:
                continue
            if served.last_sync is not None and now - served.last_sync < spec.sync_period_s:
                continue
            if served.last_sync is None:
                # As the HPA controller's recordInitialRecommendation (and `serve`'s): the
                # count found is the first recommendation, held for the scale-down window.
                served.autoscaler.history = ScaleHistory.seeded(
                    now, len(served.replicas), spec.behavior
                )
            served.last_sync = now
            decision = served.autoscaler.recommend(now, len(served.replicas), ready, readings(step))
            if decision.desired != len(served.replicas):
                served.decisions.append(decision)
                self._scale(served, decision.desired, now)

    def _replicas_serving(self, served: ServedWorkload, now: float) -> tuple[int, int]:
        """(ready replicas, placed replicas) of ``served`` at ``now``."""
        load_time = served.service.service.load_time_s
        ready = placed = 0
        for timed in served.replicas.values():
            keys = [pod.key for pod in timed.workload.pods]
            if not all(self.sim.holds(key) for key in keys):
                continue
            placed += 1
            starts = [work[0] for key in keys if (work := self.sim.work_of(key)) is not None]
            if starts and now - max(starts) >= load_time:
                ready += 1
        return ready, placed

    def _scale(self, served: ServedWorkload, desired: int, now: float) -> None:
        current = len(served.replicas)
        for _ in range(desired - current):
            replica = self._new_replica(served, now)
            served.replicas[replica.workload.key] = replica
            self.made.append(replica)
            self.sim.arrive(replica, now)
        if desired < current:
            for key in self._to_remove(served, current - desired, now):
                replica = served.replicas.pop(key)
                self.sim.remove(pod.key for pod in replica.workload.pods)

    def _new_replica(self, served: ServedWorkload, now: float) -> TimedWorkload:
        """A copy of the template named ``<owner name>-<n>`` (n after every replica made)."""
        owner = served.service.workload.rsplit("/", 1)[-1]
        name = f"{owner}-{served.made}"
        served.made += 1
        template = served.template
        pods = tuple(dataclasses.replace(pod, name=name) for pod in template.workload.pods)
        workload = dataclasses.replace(template.workload, name=name, pods=pods)
        return dataclasses.replace(template, workload=workload, created=now, duration=None)

    def _to_remove(self, served: ServedWorkload, count: int, now: float) -> list[str]:
        """The ``count`` replicas Kubernetes' ReplicaSet controller would delete first: not
        placed, then still loading, then ready; newest first within each."""
        load_time = served.service.service.load_time_s
        ranked: list[tuple[int, int, str]] = []
        for order, (key, timed) in enumerate(served.replicas.items()):
            pods = [pod.key for pod in timed.workload.pods]
            if not all(self.sim.holds(pod) for pod in pods):
                rank = 0
            else:
                starts = [w[0] for pod in pods if (w := self.sim.work_of(pod)) is not None]
                rank = 1 if not starts or now - max(starts) < load_time else 2
            ranked.append((rank, -order, key))
        return [key for _, _, key in sorted(ranked)[:count]]


def report_of(served: ServedWorkload, time_format: Callable[[float], str]) -> ServingReport:
    """What ``served`` met, in a report (``time_format``: how instants read)."""
    record = served.record
    latency = record.latency_percentiles()
    queue = record.queue_percentiles()
    placed = [p for _, p, _ in record.replicas] or [0]
    spec = served.spec
    changes = tuple(
        f"{time_format(d.at)}: {d.current} -> {d.desired}: {d.reason}"
        for d in served.decisions[:CHANGES_LISTED]
    )
    return ServingReport(
        workload=served.service.workload,
        scaled_by=spec.declared_by if spec is not None else "static",
        slo_p95_s=served.service.service.slo_p95_s,
        minutes=len(record.minutes),
        minutes_met_pct=100.0 * record.minutes_meeting_slo(),
        latency_p50_s=_bounded(latency["p50"]),
        latency_p95_s=_bounded(latency["p95"]),
        latency_p99_s=_bounded(latency["p99"]),
        queue_p50=queue["p50"],
        queue_p95=queue["p95"],
        queue_max=queue["max"],
        replicas_min=min(placed),
        replicas_mean=float(np.mean(placed)),
        replicas_max=max(placed),
        scale_changes=len(served.decisions),
        gpu_hours=record.gpu_hours,
        changes=changes,
        timeline=record.timeline(),
    )


def _bounded(value: float) -> float | None:
    return value if math.isfinite(value) else None


def readings(step: ServingStep) -> dict[InferenceMetric, MetricReading]:
    """What the world measured in ``step``, as the autoscaler reads metrics: the workload's
    requests outstanding (waiting or being served) and arriving (the router's figures), split
    evenly over the ready replicas, its p95 latency (none while no replica serves), and each
    ready replica's GPU utilisation (the share of its capacity in use)."""
    ready = step.ready_replicas

    def share(total: float) -> tuple[float, ...]:
        return (total / ready,) * ready if ready else ()

    latency = step.p95_latency_s if math.isfinite(step.p95_latency_s) else None
    outstanding = step.waiting + step.in_service
    return {
        InferenceMetric.QUEUE_DEPTH: MetricReading(share(outstanding), outstanding),
        InferenceMetric.REQUESTS_PER_SECOND: MetricReading(
            share(step.arrival_rps), step.arrival_rps
        ),
        InferenceMetric.LATENCY_P95: MetricReading((), latency),
        InferenceMetric.GPU_UTILIZATION: MetricReading((100.0 * step.busy,) * ready),
    }
