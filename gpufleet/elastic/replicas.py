"""The replica autoscaler of one workload: how many replicas it should run now, and why.

Owns :func:`decide` (pure: a spec, the history, ``now`` and what the world sees -> a
:class:`ScaleDecision` and the next history), :class:`ReplicaAutoscaler` (the same, keeping the
history between calls: a world calls :meth:`ReplicaAutoscaler.recommend` every
``spec.sync_period_s`` with the metrics it has) and the decision's words, which ``explain`` and
events show: ``queue depth 42 per replica over target 10: 3 -> 7 (limited by scale-up policy
Pods 4 per 15s)``. It scales nothing: the world sets the count (and a count it could not set
shows as ``current`` next time).

Followed as the HorizontalPodAutoscaler controller does it (``horizontal.go``,
``reconcileAutoscaler`` and ``computeReplicasForMetrics``):

* a workload at zero replicas, without scale to zero, is left alone ("scaling is disabled");
  above ``maxReplicas`` it goes to the maximum, below ``minReplicas`` to the minimum, at once;
* otherwise every metric proposes a count (:mod:`~gpufleet.elastic.replica_metrics`), the
  highest wins; if no metric could propose one, or one could not and the others say scale down,
  nothing changes;
* the winner is stabilised and rate-limited (:mod:`~gpufleet.elastic.replica_behavior`),
  recorded as a recommendation, and a change recorded as a scale event.

And KEDA's activation (``pkg/scaling/executor/scale_scaledobjects.go``) for scale to zero: at
the first call and then every ``polling_interval_s`` (a call in between leaves a workload at
zero where it is), a metric is *active* when the workload's figure is above its activation
threshold; at zero replicas an active metric wakes the workload to ``min_replicas``; with
replicas and no active metric for longer than ``cooldown_s`` (since it was last active, or since
the first call and ``initial_cooldown_s`` when it never was), it goes to zero. Those two steps
are KEDA's, not the HPA's: they are neither stabilised nor rate-limited, nor recorded as scale
events.

Where gpufleet differs: without a ``behavior``, Kubernetes uses an older rule (at most
``max(2 x current, 4)`` per sync, a 5-minute scale-down window and no scale-down rate); here
the spec always has a behaviour, Kubernetes' documented defaults unless it says otherwise. A
ScaledObject whose scale target another autoscaler also scales is refused when read, as KEDA's
webhook refuses it, rather than fought over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from gpufleet.elastic.replica_behavior import (
    Limit,
    RateLimited,
    ScaleHistory,
    Stabilized,
    limit_rate,
    stabilize,
)
from gpufleet.elastic.replica_metrics import MetricProposal, Observation, Tolerance, propose
from gpufleet.model.autoscaling import AutoscalingSpec, InferenceMetric, MetricReading
from gpufleet.model.times import format_duration


class Outcome(StrEnum):
    """Why the count is what it is: Kubernetes' condition reasons where it has one."""

    WITHIN_RANGE = Limit.WITHIN_RANGE.value
    SCALE_UP_LIMIT = Limit.SCALE_UP_LIMIT.value
    SCALE_DOWN_LIMIT = Limit.SCALE_DOWN_LIMIT.value
    TOO_MANY_REPLICAS = Limit.TOO_MANY_REPLICAS.value
    TOO_FEW_REPLICAS = Limit.TOO_FEW_REPLICAS.value
    SCALE_UP_STABILIZED = "ScaleUpStabilized"
    SCALE_DOWN_STABILIZED = "ScaleDownStabilized"
    #: Zero replicas and no scale to zero: the HPA leaves the workload alone.
    SCALING_DISABLED = "ScalingDisabled"
    #: No metric could propose a count (or one could not, and the others say scale down).
    INVALID_METRICS = "FailedGetMetrics"
    BELOW_MIN = "BelowMinReplicas"
    ABOVE_MAX = "AboveMaxReplicas"
    #: KEDA: woken from zero; gone to zero after the cooldown; resting at zero.
    ACTIVATED = "Activated"
    SCALED_TO_ZERO = "ScaledToZero"
    IDLE = "Idle"


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """One decision for one workload: set ``desired`` replicas (it has ``current``).
    ``serving_from``: when replicas added now are expected to serve (their model loaded)."""

    at: float
    current: int
    desired: int
    outcome: Outcome
    reason: str
    proposals: tuple[MetricProposal, ...] = ()
    serving_from: float | None = None

    @property
    def change(self) -> int:
        return self.desired - self.current


def decide(
    spec: AutoscalingSpec,
    history: ScaleHistory,
    now: float,
    current: int,
    ready: int,
    readings: Mapping[InferenceMetric, MetricReading],
) -> tuple[ScaleDecision, ScaleHistory]:
    """What ``spec`` decides at ``now`` for a workload of ``current`` replicas, ``ready`` of
    them serving, whose metrics read ``readings``; and the history to give the next call."""
    seen = Observation(current, ready, dict(readings))
    if history.started is None:
        history = replace(history, started=now)
    settings = spec.scale_to_zero
    if settings is not None:
        last = history.last_polled
        if last is None or now - last >= settings.polling_interval_s:
            history = replace(history, last_polled=now)
            activity = _activity(spec, seen)
            if activity[0]:
                history = replace(history, last_active=now)
            woken = _scale_to_zero(spec, history, now, seen, activity)
            if woken is not None:
                return woken, history
        elif current == 0:
            due = format_duration(last + settings.polling_interval_s - now)
            return ScaleDecision(
                now, 0, 0, Outcome.IDLE, f"at 0 until the next activation poll in {due}"
            ), history
    return _autoscale(spec, history, now, seen)


@dataclass
class ReplicaAutoscaler:
    """:func:`decide` for one workload, keeping its history between calls."""

    spec: AutoscalingSpec
    history: ScaleHistory = field(default_factory=ScaleHistory)

    def recommend(
        self,
        now: float,
        current: int,
        ready: int,
        readings: Mapping[InferenceMetric, MetricReading],
    ) -> ScaleDecision:
        decision, self.history = decide(self.spec, self.history, now, current, ready, readings)
        return decision


def _activity(spec: AutoscalingSpec, seen: Observation) -> tuple[list[str], list[str]]:
    """The metrics above their activation thresholds and those not, in words (KEDA's
    IsActive: the figure strictly above the threshold)."""
    active: list[str] = []
    quiet: list[str] = []
    for target in spec.metrics:
        metric = target.metric
        reading = seen.readings.get(metric)
        figure = None if reading is None else reading.figure(metric, target.figure)
        threshold = metric.show(target.activation_threshold)
        if figure is None:
            quiet.append(f"{metric.words}: no value")
        elif figure > target.activation_threshold:
            active.append(
                f"{metric.words} {metric.show(figure)} above activation threshold {threshold}"
            )
        else:
            quiet.append(f"{metric.words} {metric.show(figure)} (threshold {threshold})")
    return active, quiet


def _scale_to_zero(
    spec: AutoscalingSpec,
    history: ScaleHistory,
    now: float,
    seen: Observation,
    activity: tuple[list[str], list[str]],
) -> ScaleDecision | None:
    """KEDA's part: wake from zero, go to zero, or rest there; None hands over to the HPA."""
    settings = spec.scale_to_zero
    assert settings is not None
    active, quiet = activity
    if seen.current == 0:
        if active:
            desired = spec.min_replicas
            return ScaleDecision(
                now, 0, desired, Outcome.ACTIVATED, f"{active[0]}: 0 -> {desired} (activated)",
                serving_from=now + spec.model_load_s,
            )  # fmt: skip
        return ScaleDecision(
            now, 0, 0, Outcome.IDLE,
            f"no metric above its activation threshold ({'; '.join(quiet)}): stays at 0",
        )  # fmt: skip
    if active:
        return None
    if history.last_active is None:
        assert history.started is not None
        quiet_since, wait = history.started, settings.initial_cooldown_s
    else:
        quiet_since, wait = history.last_active, settings.cooldown_s
    if quiet_since + wait < now:  # KEDA: LastActiveTime + cooldownPeriod before now
        return ScaleDecision(
            now, seen.current, 0, Outcome.SCALED_TO_ZERO,
            f"no metric above its activation threshold for {format_duration(now - quiet_since)}"
            f" (cooldown {format_duration(wait)}; {'; '.join(quiet)}): {seen.current} -> 0",
        )  # fmt: skip
    return None


def _autoscale(
    spec: AutoscalingSpec, history: ScaleHistory, now: float, seen: Observation
) -> tuple[ScaleDecision, ScaleHistory]:
    """The HorizontalPodAutoscaler's part."""
    current, behavior = seen.current, spec.behavior
    if current == 0:
        return ScaleDecision(
            now, 0, 0, Outcome.SCALING_DISABLED,
            "scaling is disabled since the replica count of the target is zero",
        ), history  # fmt: skip
    if current > spec.max_replicas or current < spec.min_replicas:
        above = current > spec.max_replicas
        desired = spec.max_replicas if above else spec.min_replicas
        words = f"above max replicas {desired}" if above else f"below min replicas {desired}"
        counted = f"{current} replica{'' if current == 1 else 's'}"
        decision = ScaleDecision(
            now, current, desired, Outcome.ABOVE_MAX if above else Outcome.BELOW_MIN,
            f"{counted}, {words}: {current} -> {desired}",
            serving_from=None if above else now + spec.model_load_s,
        )  # fmt: skip
        return decision, history.scaled(now, current, desired, behavior)
    tolerance = Tolerance.of(behavior.scale_up, behavior.scale_down)
    proposals = tuple(propose(target, seen, tolerance) for target in spec.metrics)
    best: MetricProposal | None = None
    for proposal in proposals:
        if proposal.replicas is not None and (best is None or proposal.replicas > _count(best)):
            best = proposal
    failed = [p for p in proposals if p.replicas is None]
    if best is None or (failed and _count(best) < current):
        what = "; ".join(p.describe(tolerance) for p in failed)
        why = "no metric could propose a count" if best is None else "cannot scale down"
        return ScaleDecision(
            now, current, current, Outcome.INVALID_METRICS,
            f"{why} ({what}): stays at {current}", proposals,
        ), history  # fmt: skip
    recommended = _count(best)
    stabilized = stabilize(recommended, current, now, history, behavior)
    limited = limit_rate(
        stabilized.replicas, current, now, history, behavior, spec.min_replicas, spec.max_replicas
    )
    desired = limited.replicas
    history = history.recommended(now, recommended, behavior)
    history = history.scaled(now, current, desired, behavior)
    outcome, note = _outcome(recommended, current, stabilized, limited, spec)
    change = f"{current} -> {desired}" if desired != current else f"stays at {current}"
    loading = f"; {seen.unready} of {current} not ready" if seen.unready else ""
    decision = ScaleDecision(
        now, current, desired, outcome,
        f"{best.describe(tolerance)}: {change}{note}{loading}", proposals,
        serving_from=now + spec.model_load_s if desired > current else None,
    )  # fmt: skip
    return decision, history


def _count(proposal: MetricProposal) -> int:
    assert proposal.replicas is not None
    return proposal.replicas


def _outcome(
    recommended: int,
    current: int,
    stabilized: Stabilized,
    limited: RateLimited,
    spec: AutoscalingSpec,
) -> tuple[Outcome, str]:
    """The outcome and its words: `` (limited by scale-up policy Pods 4 per 15s)``."""
    if limited.replicas != stabilized.replicas:
        direction = "scale-up" if limited.limit is Limit.SCALE_UP_LIMIT else "scale-down"
        if limited.limit is Limit.TOO_MANY_REPLICAS:
            note = f" (max replicas {spec.max_replicas})"
        elif limited.limit is Limit.TOO_FEW_REPLICAS:
            note = f" (min replicas {spec.min_replicas})"
        elif limited.policy is None:
            note = f" ({direction} disabled: selectPolicy Disabled)"
        else:
            note = f" (limited by {direction} policy {limited.policy.describe()})"
        return Outcome(limited.limit.value), note
    if stabilized.held_by is not None:
        bound, window = stabilized.held_by
        if recommended >= current:
            return Outcome.SCALE_UP_STABILIZED, (
                f" (recommended {recommended}; the lowest recommendation of the last "
                f"{format_duration(window)} is {bound}: scale-up stabilization)"
            )
        return Outcome.SCALE_DOWN_STABILIZED, (
            f" (recommended {recommended}; the highest recommendation of the last "
            f"{format_duration(window)} is {bound}: scale-down stabilization)"
        )
    return Outcome.WITHIN_RANGE, ""
