"""What one metric proposes: the replica count that would bring it to its target.

Owns :func:`propose`, Kubernetes' replica calculator
(``pkg/controller/podautoscaler/replica_calculator.go``) for one metric of an
:class:`~gpufleet.model.autoscaling.AutoscalingSpec`, and :class:`MetricProposal`, what it
found (the value compared, the usage ratio, the proposal, or why there is none). The
stabilisation, the rate limits and the bounds are :mod:`gpufleet.elastic.replica_behavior`'s;
putting the proposals together is :mod:`gpufleet.elastic.replicas`'.

Followed as Kubernetes does it:

* the usage ratio is value / target; within the tolerance (``1 - scaleDown.tolerance <= ratio
  <= 1 + scaleUp.tolerance``, 10% by default) the proposal is the current count;
* a per-replica metric (``Pods``, and GPU utilisation): ``ceil(ratio x replicas with a value)``;
  when some ready replicas have no value (*missing*), or some replicas are not ready and the
  ratio says scale up, the ratio is computed again with the missing ones at the target on a
  scale-down (at ``max(100, target)`` for a utilisation, as for a Resource metric), at 0 on a
  scale-up (left out at a ratio of exactly 1), and the unready ones at 0 on a scale-up; a
  recomputed ratio within the tolerance, or on the other side of 1, or a count that moves the
  other way, keeps the current count;
* a workload figure against a ``Value`` target (Object, External): ``ceil(ratio x ready
  replicas)``; against an ``AverageValue`` target: ``ceil(figure / target)`` unless
  figure / (target x replicas) is within the tolerance.

Where gpufleet differs, on purpose:

* a replica that is not ready is one not yet placed or still loading its model: it is left
  out of a per-replica average for every metric, where Kubernetes leaves out pending pods for
  every metric but running, unready pods for CPU only (a loading replica's queue, rate or
  utilisation says nothing about serving);
* a ``Value`` target with no ready replica keeps the current count, where Kubernetes proposes
  ``ceil(ratio x 0) = 0`` and scales down while every new replica is still starting;
* values are floats; Kubernetes works in integer milli-units and truncates an average.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.model.autoscaling import (
    InferenceMetric,
    MetricReading,
    MetricTarget,
    ScalingRules,
    TargetType,
)


@dataclass(frozen=True, slots=True)
class Observation:
    """The workload at one moment: its replicas (``current``, what its scale says), how many
    of them serve (``ready``), and the readings of its metrics."""

    current: int
    ready: int
    readings: Mapping[InferenceMetric, MetricReading]

    def __post_init__(self) -> None:
        if self.current < 0 or not 0 <= self.ready <= self.current:
            raise ValueError(
                f"expected 0 <= ready ({self.ready}) <= current ({self.current}) replicas"
            )
        for metric, reading in self.readings.items():
            if len(reading.replicas) > self.ready:
                raise ValueError(
                    f"{metric.words}: {len(reading.replicas)} replica values, but only "
                    f"{self.ready} replicas are ready"
                )

    @property
    def unready(self) -> int:
        return self.current - self.ready


@dataclass(frozen=True, slots=True)
class Tolerance:
    """The band around a usage ratio of 1 in which nothing changes."""

    down: float
    up: float

    @classmethod
    def of(cls, scale_up: ScalingRules, scale_down: ScalingRules) -> Tolerance:
        return cls(scale_down.tolerance, scale_up.tolerance)

    def holds(self, ratio: float) -> bool:
        return 1.0 - self.down <= ratio <= 1.0 + self.up


@dataclass(frozen=True, slots=True)
class MetricProposal:
    """What one metric proposes. ``value`` is what was compared with the target (a
    per-replica average, or the workload's figure), ``replicas`` the proposal (None when there
    is none, and ``problem`` says why)."""

    target: MetricTarget
    replicas: int | None
    value: float | None = None
    ratio: float | None = None
    problem: str | None = None

    def describe(self, tolerance: Tolerance) -> str:
        """``queue depth 42 per replica over target 10``; or the problem."""
        if self.problem is not None or self.value is None or self.ratio is None:
            return self.problem or f"no value of {self.target.metric.words}"
        metric = self.target.metric
        per_replica = "" if self.target.target_type is TargetType.VALUE else " per replica"
        if tolerance.holds(self.ratio):
            relation = "within tolerance of"
        else:
            relation = "over" if self.ratio > 1 else "under"
        return (
            f"{metric.words} {metric.show(self.value)}{per_replica} {relation} target "
            f"{metric.show(self.target.value)}"
        )


def propose(target: MetricTarget, seen: Observation, tolerance: Tolerance) -> MetricProposal:
    """The replica count ``target`` proposes for the workload ``seen`` (which has replicas)."""
    reading = seen.readings.get(target.metric)
    if reading is None:
        return MetricProposal(target, None, problem=f"no reading of {target.metric.words}")
    if target.source.per_replica:
        return _per_replica(target, reading, seen, tolerance)
    figure = reading.figure(target.metric, target.figure)
    if figure is None:
        return MetricProposal(
            target, None, problem=f"no {target.figure} of {target.metric.words} to compare"
        )
    if target.target_type is TargetType.VALUE:
        ratio = figure / target.value
        if tolerance.holds(ratio):
            return MetricProposal(target, seen.current, figure, ratio)
        if seen.ready == 0:
            return MetricProposal(target, seen.current, figure, ratio)
        return MetricProposal(target, math.ceil(ratio * seen.ready), figure, ratio)
    ratio = figure / (target.value * seen.current)
    replicas = seen.current if tolerance.holds(ratio) else math.ceil(figure / target.value)
    return MetricProposal(target, replicas, figure / seen.current, ratio)


def _per_replica(
    target: MetricTarget, reading: MetricReading, seen: Observation, tolerance: Tolerance
) -> MetricProposal:
    values = reading.replicas
    if not values:
        why = "no ready replica" if seen.ready == 0 else "no replica"
        return MetricProposal(
            target, None, problem=f"{why} reported {target.metric.words} (replicas may be loading)"
        )
    average = math.fsum(values) / len(values)
    ratio = average / target.value
    missing = seen.ready - len(values)
    scale_up_with_unready = seen.unready > 0 and ratio > 1.0
    if not scale_up_with_unready and missing == 0:
        if tolerance.holds(ratio):
            return MetricProposal(target, seen.current, average, ratio)
        return MetricProposal(target, math.ceil(ratio * len(values)), average, ratio)
    filled = list(values)
    if missing:
        utilization = target.target_type is TargetType.UTILIZATION
        if ratio < 1.0:
            filled += [max(100.0, target.value) if utilization else target.value] * missing
        elif ratio > 1.0:
            filled += [0.0] * missing
    if scale_up_with_unready:
        filled += [0.0] * seen.unready
    new_ratio = math.fsum(filled) / len(filled) / target.value
    if tolerance.holds(new_ratio) or (ratio < 1.0 < new_ratio) or (new_ratio < 1.0 < ratio):
        return MetricProposal(target, seen.current, average, ratio)
    replicas = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and replicas > seen.current) or (
        new_ratio > 1.0 and replicas < seen.current
    ):
        return MetricProposal(target, seen.current, average, ratio)
    return MetricProposal(target, replicas, average, ratio)
