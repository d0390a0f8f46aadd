"""Inference services in the simulator: the requests a service gets over time and what one
replica of it serves.

Owns :class:`RequestLoad` (requests per second over simulated time: a daily wave between a
trough and a peak, bursts on top, or the points of a file), :class:`ReplicaService` (what one
replica serves: its throughput, a request's own time, how long a new replica loads its model
before it serves, and the latency objective) and :class:`InferenceService` (the two for one
workload). Plain data; :mod:`gpufleet.io.fleet.serving` reads them from ``InferenceLoad`` objects,
:mod:`gpufleet.backends.sim.serving` turns them into queues and latencies.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from itertools import pairwise

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class Burst:
    """``factor`` times the rate from ``at_s`` for ``duration_s`` seconds (simulated)."""

    at_s: float
    duration_s: float
    factor: float

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.factor <= 0 or self.at_s < 0:
            raise ValueError(f"a burst needs at >= 0, a duration and a factor above 0, got {self}")


@dataclass(frozen=True, slots=True)
class RequestLoad:
    """Requests per second at each simulated second.

    Without ``points``: a daily wave, ``trough_rps`` twelve hours from ``peak_at_s`` (seconds
    after midnight of the simulated clock) and ``peak_rps`` at it, a cosine between (the shape
    of the diurnal traffic the Azure LLM inference and Alibaba serving traces show). With
    ``points`` ((seconds, rps), times increasing): the rate between them, linearly
    interpolated, held flat before the first and after the last. Bursts multiply either.
    Requests come for ``duration_s`` (:attr:`until`).
    ``noise`` is the coefficient of variation of the per-step random factor the simulator
    draws around the rate (0: the rate exactly; requests still arrive as a Poisson stream).
    """

    trough_rps: float = 0.0
    peak_rps: float = 0.0
    peak_at_s: float = 14 * 3600.0
    bursts: tuple[Burst, ...] = ()
    noise: float = 0.0
    points: tuple[tuple[float, float], ...] = ()
    #: How long requests come, from the simulation's start (None: a day for a wave, until the
    #: last point for points).
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if self.duration_s is not None and not self.duration_s > 0:
            raise ValueError(f"a duration must be above 0 seconds, got {self.duration_s}")
        if self.trough_rps < 0 or self.peak_rps < self.trough_rps:
            raise ValueError(
                f"rates need 0 <= trough <= peak, got {self.trough_rps} and {self.peak_rps}"
            )
        if not 0 <= self.noise <= 1:
            raise ValueError(f"noise is a coefficient of variation in 0..1, got {self.noise}")
        times = [t for t, _ in self.points]
        if any(b <= a for a, b in pairwise(times)):
            raise ValueError("the points' times must increase")
        if any(rps < 0 or not math.isfinite(rps) for _, rps in self.points):
            raise ValueError("a point's rate must be a finite number >= 0")

    def rate(self, at_s: float) -> float:
        """Requests per second at ``at_s``, bursts included, before noise."""
        base = self._points_rate(at_s) if self.points else self._wave_rate(at_s)
        for burst in self.bursts:
            if burst.at_s <= at_s < burst.at_s + burst.duration_s:
                base *= burst.factor
        return base

    def _wave_rate(self, at_s: float) -> float:
        phase = 2 * math.pi * (at_s - self.peak_at_s) / DAY_S
        middle = (self.peak_rps + self.trough_rps) / 2
        return middle + (self.peak_rps - middle) * math.cos(phase)

    def _points_rate(self, at_s: float) -> float:
        times = [t for t, _ in self.points]
        i = bisect.bisect_right(times, at_s)
        if i == 0:
            return self.points[0][1]
        if i == len(self.points):
            return self.points[-1][1]
        (t0, r0), (t1, r1) = self.points[i - 1], self.points[i]
        return r0 + (r1 - r0) * (at_s - t0) / (t1 - t0)

    @property
    def until(self) -> float:
        """When requests stop coming (seconds of simulated time)."""
        if self.duration_s is not None:
            return self.duration_s
        return self.points[-1][0] if self.points else DAY_S

    @property
    def peak(self) -> float:
        """The highest rate without bursts (what static provisioning sizes for, bursts aside)."""
        return max(r for _, r in self.points) if self.points else self.peak_rps


@dataclass(frozen=True, slots=True)
class ReplicaService:
    """What one ready replica serves: ``throughput_rps`` requests per second at most (its GPU
    or GPU share, batching included), each request taking ``service_time_s`` on its own (the
    latency floor), once ``load_time_s`` has passed since it started (its model loaded);
    ``slo_p95_s``: the objective on the 95th percentile of request latency."""

    throughput_rps: float
    service_time_s: float
    load_time_s: float = 60.0
    slo_p95_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.throughput_rps > 0 or not self.service_time_s > 0:
            raise ValueError("a replica's throughput and service time must be above 0")
        if self.load_time_s < 0:
            raise ValueError(f"load time must be >= 0, got {self.load_time_s}")
        if not self.slo_p95_s > self.service_time_s:
            raise ValueError(
                f"the p95 objective ({self.slo_p95_s}s) must exceed a request's own time "
                f"({self.service_time_s}s)"
            )

    @property
    def slots(self) -> float:
        """Requests one replica works on at once at full throughput (Little's law)."""
        return self.throughput_rps * self.service_time_s


@dataclass(frozen=True, slots=True)
class InferenceService:
    """The request load and replica service of one inference workload: ``workload`` is the
    key of what makes its replicas (``prod/Deployment/chat``)."""

    workload: str
    load: RequestLoad
    service: ReplicaService
