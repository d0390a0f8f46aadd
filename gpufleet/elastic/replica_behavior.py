"""From a recommendation to the replica count to set: the stabilisation windows, the rate
policies and the bounds, over the history of recent recommendations and scale events.

Owns :class:`ScaleHistory` (immutable: each step returns a new one), :func:`stabilize`
(Kubernetes' ``stabilizeRecommendationWithBehaviors``: the count moves up only as far as the
lowest recommendation of the scale-up window, down only as far as the highest of the scale-down
window) and :func:`limit_rate` (``convertDesiredReplicasWithBehaviorRate``: what the policies
allow given the scale events within each policy's period, ``selectPolicy`` picking the most
(``Max``) or least (``Min``) change or none (``Disabled``), then ``maxReplicas`` on the way up
and ``minReplicas`` on the way down), all from ``pkg/controller/podautoscaler/horizontal.go``.
Times are the caller's seconds; something at exactly the edge of a window or period is outside
it, as Kubernetes' ``After(cutoff)`` has it.

Where gpufleet differs: Kubernetes keeps a fixed slot per old entry and overwrites it lazily,
so an old scale-up event may be overwritten while a longer scale-down period would still count
it; here each list keeps exactly what any window or period can still see, and no more.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from gpufleet.model.autoscaling import (
    Behavior,
    PolicyType,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
)


@dataclass(frozen=True, slots=True)
class Timed:
    """A count at a time: a recommendation (replicas) or a scale event (replicas changed)."""

    at: float
    count: int


@dataclass(frozen=True, slots=True)
class ScaleHistory:
    """What an autoscaler remembers of one workload: its recent (unstabilised)
    recommendations, its scale-up and scale-down events; for scale to zero, when activity was
    last polled and a metric last active; and when it first decided (a ScaledObject's initial
    cooldown counts from then)."""

    recommendations: tuple[Timed, ...] = ()
    scale_ups: tuple[Timed, ...] = ()
    scale_downs: tuple[Timed, ...] = ()
    last_polled: float | None = None
    last_active: float | None = None
    started: float | None = None

    @classmethod
    def seeded(cls, now: float, replicas: int, behavior: Behavior) -> ScaleHistory:
        """The history of an autoscaler first met at ``now`` with ``replicas``: that count as
        its first recommendation (the HPA controller's ``recordInitialRecommendation``), so
        the count found holds for the scale-down window rather than dropping at the first
        sync."""
        return cls().recommended(now, replicas, behavior)

    def recommended(self, now: float, replicas: int, behavior: Behavior) -> ScaleHistory:
        """With ``replicas`` recommended at ``now``; those no window can see any more dropped."""
        cutoff = now - behavior.longest_window_s
        kept = tuple(r for r in self.recommendations if r.at > cutoff)
        return replace(self, recommendations=(*kept, Timed(now, replicas)))

    def scaled(self, now: float, before: int, after: int, behavior: Behavior) -> ScaleHistory:
        """With a scale event from ``before`` to ``after`` replicas at ``now``."""
        if after == before:
            return self
        cutoff = now - behavior.longest_period_s
        ups = tuple(e for e in self.scale_ups if e.at > cutoff)
        downs = tuple(e for e in self.scale_downs if e.at > cutoff)
        if after > before:
            ups = (*ups, Timed(now, after - before))
        else:
            downs = (*downs, Timed(now, before - after))
        return replace(self, scale_ups=ups, scale_downs=downs)


class Limit(StrEnum):
    """What set the count, by the reason Kubernetes gives its ``ScalingLimited`` condition."""

    WITHIN_RANGE = "DesiredWithinRange"
    SCALE_UP_LIMIT = "ScaleUpLimit"
    SCALE_DOWN_LIMIT = "ScaleDownLimit"
    TOO_MANY_REPLICAS = "TooManyReplicas"
    TOO_FEW_REPLICAS = "TooFewReplicas"


@dataclass(frozen=True, slots=True)
class Stabilized:
    replicas: int
    #: The window's bound that held the count back, when it did (replicas, window seconds).
    held_by: tuple[int, int] | None = None


def stabilize(
    desired: int, current: int, now: float, history: ScaleHistory, behavior: Behavior
) -> Stabilized:
    """``desired`` kept from moving further than the windows' recommendations allow."""
    up_window = behavior.scale_up.stabilization_window_s
    down_window = behavior.scale_down.stabilization_window_s
    up_bound = down_bound = desired
    for recommendation in history.recommendations:
        if recommendation.at > now - up_window:
            up_bound = min(up_bound, recommendation.count)
        if recommendation.at > now - down_window:
            down_bound = max(down_bound, recommendation.count)
    replicas = max(current, up_bound)
    replicas = min(replicas, down_bound)
    if replicas == desired:
        return Stabilized(replicas)
    if desired >= current:
        return Stabilized(replicas, (up_bound, up_window))
    return Stabilized(replicas, (down_bound, down_window))


@dataclass(frozen=True, slots=True)
class RateLimited:
    replicas: int
    limit: Limit
    #: The policy whose allowance set the count (ScaleUpLimit, ScaleDownLimit), or None when
    #: the direction is disabled.
    policy: ScalingPolicy | None = None


def limit_rate(
    desired: int,
    current: int,
    now: float,
    history: ScaleHistory,
    behavior: Behavior,
    min_replicas: int,
    max_replicas: int,
) -> RateLimited:
    """``desired`` within what the policies allow now and within the bounds."""
    if desired > current:
        allowed, policy = _allowance(current, now, history, behavior.scale_up, up=True)
        allowed = max(allowed, current)  # past events may leave no room: never below current
        if max_replicas > allowed:
            ceiling, limit = allowed, Limit.SCALE_UP_LIMIT
        else:
            ceiling, limit, policy = max_replicas, Limit.TOO_MANY_REPLICAS, None
        if desired > ceiling:
            return RateLimited(ceiling, limit, policy)
    elif desired < current:
        allowed, policy = _allowance(current, now, history, behavior.scale_down, up=False)
        allowed = min(allowed, current)
        if min_replicas < allowed:
            floor, limit = allowed, Limit.SCALE_DOWN_LIMIT
        else:
            floor, limit, policy = min_replicas, Limit.TOO_FEW_REPLICAS, None
        if desired < floor:
            return RateLimited(floor, limit, policy)
    return RateLimited(desired, Limit.WITHIN_RANGE)


def _allowance(
    current: int, now: float, history: ScaleHistory, rules: ScalingRules, up: bool
) -> tuple[int, ScalingPolicy | None]:
    """The furthest count the policies allow in one direction, and the policy that allows it
    (Kubernetes' ``calculateScaleUpLimitWithScalingRules`` and its scale-down twin)."""
    if rules.select_policy is SelectPolicy.DISABLED:
        return current, None
    # Max picks the policy allowing the most change: the highest count up, the lowest down.
    most_change = rules.select_policy is SelectPolicy.MAX
    better: Callable[[int, int], bool] = (
        (lambda a, b: a > b) if most_change == up else (lambda a, b: a < b)
    )
    best: tuple[int, ScalingPolicy | None] | None = None
    for policy in rules.policies:
        cutoff = now - policy.period_s
        added = sum(e.count for e in history.scale_ups if e.at > cutoff)
        removed = sum(e.count for e in history.scale_downs if e.at > cutoff)
        start = current - added + removed
        proposed = _proposed(start, policy, up)
        if best is None or better(proposed, best[0]):
            best = (proposed, policy)
    assert best is not None  # rules have at least one policy
    return best


def _proposed(start: int, policy: ScalingPolicy, up: bool) -> int:
    if policy.type is PolicyType.PODS:
        return start + policy.value if up else start - policy.value
    if up:
        # Rounded up, or a small count could never grow (Kubernetes' comment).
        return math.ceil(start * (1 + policy.value / 100))
    return int(start * (1 - policy.value / 100))
