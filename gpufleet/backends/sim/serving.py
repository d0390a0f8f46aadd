"""What an inference service's requests meet in the simulator: queues, latency, the objective.

Owns :class:`ServingQueue`, one service's requests stepped through simulated time against the
replicas that serve now, and :class:`ServingRecord`, what the steps add up to per minute and
over a run (latency percentiles against the objective, queue depth, replicas, GPU-hours).

The model, and why. A replica serves ``throughput_rps`` requests per second, each taking
``service_time_s`` on its own, so it works on ``slots = throughput x service time`` requests at
once (continuous batching, by Little's law). ``n`` slots of ready replicas serve requests
arriving as a Poisson stream at the load's rate (times a per-step noise factor):

* below capacity, the wait is that of an M/M/n queue (Erlang's C formula: the chance a
  request waits, and the 95th percentile of its wait, ``ln(P(wait) / 0.05) / (n/s - lambda)``
  when that chance is above 5 %, else none), but no more than a queue can build in one step:
  near and at capacity the stationary queue grows without bound, while in a step it drifts by
  about the arrivals' spread, ``sqrt(lambda x step)`` requests (its mean; twice that over the
  capacity for the 95th percentile of the wait);
* above capacity, requests pile up in a backlog that grows by what arrives beyond capacity and
  drains at the spare capacity; a request arriving behind a backlog ``q`` waits ``q`` over the
  capacity on top (a fluid approximation: exact in the mean for a long overload);
* with no ready replica (scaled to zero, or the first model still loading) every request waits
  in the backlog; its latency is unbounded until a replica serves, and such a minute misses the
  objective if any request came.

A step's p95 latency is the service time plus both waits; a minute's is the worst of its steps
(conservative: the objective is judged per minute, as SLOs on p95 latency usually are), and a
minute without requests meets it. Erlang's C is computed with the Erlang B recursion, exact for
the integer number of slots (rounded from the replicas' fractional slots, at least one per
replica). What it deliberately leaves out: per-request service-time variance beyond the
exponential the formula assumes, request sizes, and a replica's warm-up beyond its model load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gpufleet.model.serving import InferenceService

#: The percentile of latency the objective is on.
QUANTILE = 0.95
MINUTE_S = 60.0


def erlang_c(servers: int, offered: float) -> float:
    """The chance a request waits in an M/M/``servers`` queue with ``offered`` Erlangs of load
    (1 when it is at or above capacity)."""
    if servers <= 0 or offered >= servers:
        return 1.0
    if offered <= 0:
        return 0.0
    blocking = 1.0  # Erlang B, built up one server at a time (stable for any size)
    for k in range(1, servers + 1):
        blocking = offered * blocking / (k + offered * blocking)
    return servers * blocking / (servers - offered * (1.0 - blocking))


@dataclass(frozen=True, slots=True)
class ServingStep:
    """One step of a service: what arrived, what could be served, and what requests met."""

    at: float
    arrival_rps: float
    ready_replicas: int
    capacity_rps: float
    #: Requests waiting (the backlog plus the queue's mean), and being served, at the end.
    waiting: float
    in_service: float
    #: The 95th percentile of a request's latency in this step (inf: no replica serves it).
    p95_latency_s: float
    #: The share of the ready replicas' capacity in use, 0..1.
    busy: float

    @property
    def rps_per_replica(self) -> float:
        return self.arrival_rps / self.ready_replicas if self.ready_replicas else self.arrival_rps


class ServingQueue:
    """One service's requests through time (see the module docstring); deterministic for
    the generator it is given."""

    def __init__(self, service: InferenceService, rng: np.random.Generator) -> None:
        self.service = service
        self._rng = rng
        self.backlog = 0.0

    def step(self, at: float, dt: float, ready_replicas: int) -> ServingStep:
        """The ``dt`` seconds ending at ``at`` with ``ready_replicas`` serving."""
        load, replica = self.service.load, self.service.service
        rate = load.rate(at - dt / 2)
        if load.noise > 0 and rate > 0:
            shape = 1.0 / (load.noise * load.noise)
            rate *= float(self._rng.gamma(shape, 1.0 / shape))
        arrived = float(self._rng.poisson(rate * dt)) if rate > 0 else 0.0
        arrival = arrived / dt
        capacity = ready_replicas * replica.throughput_rps
        service_time = replica.service_time_s
        if capacity <= 0:
            self.backlog += arrived
            waiting = self.backlog
            p95 = math.inf if waiting > 0 else service_time
            return ServingStep(at, arrival, 0, 0.0, waiting, 0.0, p95, 0.0)
        # The backlog takes what arrives beyond capacity and drains at the spare capacity.
        self.backlog = max(0.0, self.backlog + arrived - capacity * dt)
        slots = max(ready_replicas, round(ready_replicas * replica.slots))
        served_rate = min(arrival, capacity)
        offered = served_rate * service_time  # Erlangs
        chance = erlang_c(slots, offered)
        # How far a queue at capacity drifts in one step (the arrivals' spread over it): what
        # it can build in a step, where a stationary one would grow without bound.
        transient = math.sqrt(served_rate * dt)
        queue_wait, queue_mean = math.inf, math.inf
        if offered < slots:
            drain = slots / service_time - served_rate  # how fast the queue empties, per second
            queue_wait = math.log(chance / (1 - QUANTILE)) / drain if chance > 1 - QUANTILE else 0
            queue_mean = chance * offered / (slots - offered)
        queue_mean = min(queue_mean, transient)
        queue_wait = min(queue_wait, 2 * transient / capacity)
        p95 = service_time + queue_wait + self.backlog / capacity
        busy = min(1.0, arrival / capacity)
        return ServingStep(
            at, arrival, ready_replicas, capacity, self.backlog + queue_mean,
            min(offered, float(slots)), p95, busy,
        )  # fmt: skip


@dataclass(slots=True)
class ServingRecord:
    """A service's steps added up: per minute the worst p95 latency and whether it met the
    objective, and over the run the replicas and GPU-hours. ``gpus_per_replica``: what one
    replica holds (a share by its fraction)."""

    service: InferenceService
    gpus_per_replica: float
    minutes: dict[int, float] = field(default_factory=dict)
    requested: dict[int, float] = field(default_factory=dict)
    waiting: list[float] = field(default_factory=list)
    #: (time, replicas placed, replicas ready) at every step; per minute, at its last step.
    replicas: list[tuple[float, int, int]] = field(default_factory=list)
    minute_replicas: dict[int, tuple[int, int]] = field(default_factory=dict)
    gpu_seconds: float = 0.0

    def add(self, step: ServingStep, dt: float, placed_replicas: int) -> None:
        minute = int((step.at - dt / 2) // MINUTE_S)
        self.minutes[minute] = max(self.minutes.get(minute, 0.0), step.p95_latency_s)
        self.requested[minute] = self.requested.get(minute, 0.0) + step.arrival_rps * dt
        self.waiting.append(step.waiting)
        self.replicas.append((step.at, placed_replicas, step.ready_replicas))
        self.minute_replicas[minute] = (placed_replicas, step.ready_replicas)
        self.gpu_seconds += placed_replicas * self.gpus_per_replica * dt

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0

    def timeline(self) -> tuple[tuple[float, int, int, float, float | None], ...]:
        """Per minute: (its start, replicas placed and ready at its last step, requests per
        second over it, its p95 latency or None when unbounded)."""
        rows = []
        for minute in sorted(self.minutes):
            placed, ready = self.minute_replicas.get(minute, (0, 0))
            worst = self.minutes[minute]
            rows.append(
                (
                    minute * MINUTE_S,
                    placed,
                    ready,
                    self.requested.get(minute, 0.0) / MINUTE_S,
                    worst if math.isfinite(worst) else None,
                )
            )
        return tuple(rows)

    def minutes_meeting_slo(self) -> float:
        """The share of minutes whose p95 latency met the objective (a minute without requests
        meets it), 0..1 (1 with no minute)."""
        if not self.minutes:
            return 1.0
        objective = self.service.service.slo_p95_s
        met = sum(
            1
            for minute, worst in self.minutes.items()
            if self.requested.get(minute, 0.0) == 0 or worst <= objective
        )
        return met / len(self.minutes)

    def latency_percentiles(self) -> dict[str, float]:
        """p50, p95 and p99 of the minutes' p95 latency (inf where a minute had no replica)."""
        values = np.asarray(
            [v for m, v in self.minutes.items() if self.requested.get(m, 0.0) > 0], np.float64
        )
        if not values.size:
            return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
        found = np.percentile(values, [50, 95, 99], method="higher")
        return {"p50": float(found[0]), "p95": float(found[1]), "p99": float(found[2])}

    def queue_percentiles(self) -> dict[str, float]:
        if not self.waiting:
            return {"p50": 0.0, "p95": 0.0, "max": 0.0}
        values = np.asarray(self.waiting, np.float64)
        return {
            "p50": float(np.percentile(values, 50)),
            "p95": float(np.percentile(values, 95)),
            "max": float(values.max()),
        }
