"""Stabilisation windows, rate policies and bounds: cases mirrored from kubernetes/kubernetes
pkg/controller/podautoscaler/horizontal_test.go (TestScalingWithRules,
TestNormalizeDesiredReplicasWithBehavior, TestCalculateScaleUpLimitWithScalingRules,
TestCalculateScaleDownLimitWithBehaviors), each case id its name there, and the history kept."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpufleet.elastic.replica_behavior import (
    Limit,
    ScaleHistory,
    Timed,
    limit_rate,
    stabilize,
)
from gpufleet.model.autoscaling import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    Behavior,
    ScalingRules,
    SelectPolicy,
)
from gpufleet.testing.autoscaling_builders import rules, uniform_events

NOW = 10_000.0


@dataclass(frozen=True)
class RateCase:
    current: int
    desired: int
    min_replicas: int
    max_replicas: int
    expected: int
    limit: Limit
    up: ScalingRules = DEFAULT_SCALE_UP
    down: ScalingRules = DEFAULT_SCALE_DOWN
    ups: tuple[Timed, ...] = field(default=())
    downs: tuple[Timed, ...] = field(default=())


U = Limit.SCALE_UP_LIMIT
D = Limit.SCALE_DOWN_LIMIT
IN = Limit.WITHIN_RANGE
MANY = Limit.TOO_MANY_REPLICAS
FEW = Limit.TOO_FEW_REPLICAS
E159 = uniform_events([1, 5, 9], 120, NOW)
E8129 = uniform_events([8, 12, 9, 11], 120, NOW)

SCALING_WITH_RULES = {
    "prenormalized desired replicas within range": RateCase(5, 7, 3, 8, 7, IN),
    "prenormalized desired replicas < minReplicas": RateCase(3, 1, 2, 8, 2, FEW),
    "maxReplicas is the limit because maxReplicas < scaleUpLimit": RateCase(
        20, 1000, 1, 10, 10, MANY
    ),
    "desired replica count is more than the maximum replica count": RateCase(
        100, 1000, 100, 150, 150, MANY
    ),
    "scaleUpLimit is the limit because scaleUpLimit < maxReplicas with user policies": RateCase(
        3, 1000, 1, 2000, 4, U, up=rules(percent=1, percent_period=60)
    ),
    "scaleUp with default behavior": RateCase(10, 50, 1, 1000, 20, U),
    "scaleUp with pods policy larger than percent policy": RateCase(
        10, 500, 1, 1000, 110, U, up=rules(100, 60, 100, 60)
    ),
    "scaleUp with percent policy larger than pods policy": RateCase(
        10, 500, 1, 1000, 20, U, up=rules(2, 60, 100, 60)
    ),
    "scaleUp with spec MaxReplicas limitation with large pod policy": RateCase(
        10, 50, 1, 1000, 50, IN, up=rules(100, 60)
    ),
    "scaleUp with spec MaxReplicas limitation with large percent policy": RateCase(
        10, 50, 1, 1000, 50, IN, up=rules(10000, 60)
    ),
    "scaleUp with pod policy limitation": RateCase(10, 50, 1, 1000, 40, U, up=rules(30, 60)),
    "scaleUp with percent policy limitation": RateCase(
        10, 50, 1, 1000, 30, U, up=rules(percent=200, percent_period=60)
    ),
    "scaleDown with percent policy larger than pod policy": RateCase(
        100, 2, 1, 1000, 80, D, down=rules(20, 60, 1, 60, 300)
    ),
    "scaleDown with pod policy larger than percent policy": RateCase(
        100, 2, 1, 1000, 98, D, down=rules(2, 60, 1, 60, 300)
    ),
    "scaleDown with spec MinReplicas=nil limitation with large pod policy": RateCase(
        10, 0, 1, 1000, 1, FEW, down=rules(100, 60, window=300)
    ),
    "scaleDown with spec MinReplicas limitation with large percent policy": RateCase(
        10, 2, 5, 1000, 5, FEW, down=rules(percent=100, percent_period=60, window=300)
    ),
    "scaleDown with pod policy limitation": RateCase(
        10, 2, 1, 1000, 5, D, down=rules(5, 60, window=300)
    ),
    "scaleDown with percent policy limitation": RateCase(
        10, 5, 1, 1000, 5, IN, down=rules(percent=50, percent_period=60, window=300)
    ),
    "scaleUp with spec MaxReplicas limitation with large pod policy and events": RateCase(
        100, 500, 1, 200, 200, MANY, up=rules(300, 60), ups=E159
    ),
    "scaleUp with spec MaxReplicas limitation with large percent policy and events": RateCase(
        100, 500, 1, 200, 200, MANY, up=rules(percent=10000, percent_period=60), ups=E159
    ),
    (
        "scaleUp with currentReplicas limitation with rate.PeriodSeconds with a lot of "
        "recent scale up events"
    ): RateCase(
        100, 500, 1, 1000, 100, U, up=rules(5, 120), ups=E159
    ),
    "scaleUp with pod policy and previous scale up events": RateCase(
        100, 500, 1, 1000, 235, U, up=rules(150, 120), ups=E159
    ),
    "scaleUp with percent policy and previous scale up events": RateCase(
        100, 500, 1, 1000, 255, U, up=rules(percent=200, percent_period=120), ups=E159
    ),
    "scaleUp with percent policy and previous scale up and down events": RateCase(
        6, 24, 1, 1000, 16, U, up=rules(percent=300, percent_period=300),
        ups=uniform_events([4], 120, NOW), downs=uniform_events([2], 120, NOW),
    ),
    "scaleDown with default policy and previous events": RateCase(
        10, 5, 1, 1000, 5, IN, downs=E159
    ),
    (
        "scaleDown with spec MinReplicas=nil limitation with large pod policy and "
        "previous events"
    ): RateCase(
        100, 0, 1, 1000, 1, FEW, down=rules(115, 120, window=300), downs=E159
    ),
    (
        "scaleDown with spec MinReplicas limitation with large pod policy and previous "
        "events"
    ): RateCase(
        100, 0, 5, 1000, 5, FEW, down=rules(130, 120, window=300), downs=E159
    ),
    (
        "scaleDown with spec MinReplicas limitation with large percent policy and "
        "previous events"
    ): RateCase(
        100, 2, 5, 1000, 5, FEW, down=rules(percent=100, percent_period=120, window=300), downs=E159
    ),
    "scaleDown with pod policy limitation and previous events": RateCase(
        100, 2, 1, 1000, 100, D, down=rules(5, 120, window=300), downs=E159
    ),
    "scaleDown with percent policy limitation and previous events": RateCase(
        100, 0, 1, 1000, 56, D, down=rules(percent=50, percent_period=120, window=300),
        downs=uniform_events([2, 4, 6], 120, NOW),
    ),
    "scaleDown with percent policy and previous scale up and down events": RateCase(
        10, 1, 1, 1000, 6, D, down=rules(percent=50, percent_period=180),
        ups=uniform_events([2], 120, NOW), downs=uniform_events([4], 120, NOW),
    ),
    "scaleDown with previous events preventing further scale down": RateCase(
        100, 0, 1, 1000, 100, D, down=rules(percent=10, percent_period=120, window=300),
        downs=uniform_events([10, 10, 10], 120, NOW),
    ),
    "scaleDown with with previous events still allowing more scale down": RateCase(
        10, 5, 1, 1000, 5, IN, down=rules(percent=1000, percent_period=120, window=300),
        downs=uniform_events([10, 10, 10], 120, NOW),
    ),
    "check 'outdated' flag for events for one behavior for up": RateCase(
        100, 200, 1, 1000, 200, IN, up=rules(1000, 60), ups=E8129
    ),
    (
        "check that events were not marked 'outdated' for two different policies in the "
        "behavior for up"
    ): RateCase(
        100, 200, 1, 1000, 200, IN, up=rules(1000, 120, 100, 60), ups=E8129
    ),
    (
        "check that events were marked 'outdated' for two different policies in the "
        "behavior for up"
    ): RateCase(
        100, 200, 1, 1000, 200, IN, up=rules(1000, 30, 100, 60), ups=E8129
    ),
    "check 'outdated' flag for events for one behavior for down": RateCase(
        100, 5, 1, 1000, 5, IN, down=rules(1000, 60, window=300), downs=E8129
    ),
    (
        "check that events were not marked 'outdated' for two different policies in the "
        "behavior for down"
    ): RateCase(
        100, 5, 1, 1000, 5, IN, down=rules(1000, 120, 100, 60, 300), downs=E8129
    ),
    (
        "check that events were marked 'outdated' for two different policies in the "
        "behavior for down"
    ): RateCase(
        100, 5, 1, 1000, 5, IN, down=rules(1000, 30, 100, 60, 300), downs=E8129
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", SCALING_WITH_RULES.values(), ids=SCALING_WITH_RULES.keys())
def test_scaling_with_rules(case: RateCase) -> None:
    history = ScaleHistory(scale_ups=case.ups, scale_downs=case.downs)
    limited = limit_rate(
        case.desired, case.current, NOW, history, Behavior(case.up, case.down),
        case.min_replicas, case.max_replicas,
    )  # fmt: skip
    assert (limited.replicas, limited.limit) == (case.expected, case.limit)


@pytest.mark.parametrize(
    ("up", "current", "desired", "expected"),
    [
        # TestCalculateScaleUpLimitWithScalingRules: Min of Pods 2 (-> 3) and Percent 50 (-> 2).
        pytest.param(True, 1, 100, 2, id="TestCalculateScaleUpLimitWithScalingRules"),
        # TestCalculateScaleDownLimitWithBehaviors: Min of Pods 2 (-> 3) and Percent 50 (-> 2).
        pytest.param(False, 5, 0, 3, id="TestCalculateScaleDownLimitWithBehaviors"),
    ],
)
def test_select_policy_min(up: bool, current: int, desired: int, expected: int) -> None:
    least = rules(2, 60, 50, 60, 300, select=SelectPolicy.MIN)
    behavior = Behavior(least, DEFAULT_SCALE_DOWN) if up else Behavior(DEFAULT_SCALE_UP, least)
    limited = limit_rate(desired, current, NOW, ScaleHistory(), behavior, 0 if not up else 1, 1000)
    assert limited.replicas == expected


@pytest.mark.parametrize("up", [True, False], ids=["scale-up", "scale-down"])
def test_select_policy_disabled_keeps_the_count(up: bool) -> None:
    off = rules(4, 15, select=SelectPolicy.DISABLED)
    behavior = Behavior(off, DEFAULT_SCALE_DOWN) if up else Behavior(DEFAULT_SCALE_UP, off)
    limited = limit_rate(9 if up else 1, 5, NOW, ScaleHistory(), behavior, 1, 10)
    assert (limited.replicas, limited.policy) == (5, None)
    assert limited.limit is (U if up else D)


def recommendations(*pairs: tuple[int, float]) -> tuple[Timed, ...]:
    """(replicas, seconds ago) pairs."""
    return tuple(Timed(NOW - ago, replicas) for replicas, ago in pairs)


STABILIZATION = {
    "empty recommendations for scaling down": (recommendations(), 100, 5, 5, 0, 0),
    "simple scale down stabilization": (recommendations((4, 120), (5, 60)), 100, 3, 5, 0, 180),
    "simple scale up stabilization": (recommendations((4, 120), (5, 60)), 1, 7, 4, 300, 0),
    "no scale down stabilization": (recommendations((1, 120), (2, 60)), 100, 3, 3, 300, 0),
    "no scale up stabilization": (recommendations((4, 120), (5, 60)), 1, 3, 3, 0, 300),
    "no scale down stabilization, reuse recommendation element": (
        recommendations((10, 600), (9, 540)), 100, 3, 3, 0, 0
    ),
    "no scale up stabilization, reuse recommendation element": (
        recommendations((10, 600), (9, 540)), 1, 100, 100, 0, 0
    ),
    "scale down stabilization, reuse one of obsolete recommendation element": (
        recommendations((10, 600), (4, 60), (5, 120), (9, 540)), 100, 3, 5, 0, 180
    ),
    "scale up stabilization, reuse one of obsolete recommendation element": (
        recommendations((10, 6000), (6, 60), (5, 120), (9, 180)), 1, 100, 5, 300, 0
    ),
    "scale up and down stabilization, do not scale up when prenormalized rec goes down": (
        recommendations((2, 6000), (3, 180)), 2, 1, 2, 300, 300
    ),
    "scale up and down stabilization, do not scale down when prenormalized rec goes up": (
        recommendations((2, 6000), (1, 180)), 2, 3, 2, 300, 300
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    ("history", "current", "desired", "expected", "up_window", "down_window"),
    STABILIZATION.values(),
    ids=STABILIZATION.keys(),
)
def test_normalize_desired_replicas_with_behavior(
    history: tuple[Timed, ...],
    current: int,
    desired: int,
    expected: int,
    up_window: int,
    down_window: int,
) -> None:
    behavior = Behavior(rules(4, 15, window=up_window), rules(4, 15, window=down_window))
    stabilized = stabilize(desired, current, NOW, ScaleHistory(history), behavior)
    assert stabilized.replicas == expected


def test_a_recommendation_exactly_a_window_old_is_outside_it() -> None:
    behavior = Behavior(DEFAULT_SCALE_UP, rules(4, 15, window=300))
    history = ScaleHistory(recommendations((9, 300), (6, 299)))
    assert stabilize(2, 10, NOW, history, behavior).replicas == 6


def test_history_keeps_what_a_window_or_period_can_still_see() -> None:
    behavior = Behavior(rules(4, 60, window=120), rules(percent=50, percent_period=30, window=300))
    history = ScaleHistory(
        recommendations=recommendations((7, 301), (6, 299)),
        scale_ups=(Timed(NOW - 61, 2), Timed(NOW - 59, 3)),
        scale_downs=(Timed(NOW - 70, 1),),
    )
    kept = history.recommended(NOW, 5, behavior).scaled(NOW, 5, 4, behavior)
    assert kept.recommendations == (Timed(NOW - 299, 6), Timed(NOW, 5))
    # The longest period of either direction (60 s) keeps events for both directions.
    assert kept.scale_ups == (Timed(NOW - 59, 3),)
    assert kept.scale_downs == (Timed(NOW, 1),)


def test_a_scale_event_at_the_edge_of_a_period_no_longer_counts() -> None:
    up = rules(4, 15)
    history = ScaleHistory(scale_ups=(Timed(NOW - 15, 4),))
    assert limit_rate(20, 8, NOW, history, Behavior(up, DEFAULT_SCALE_DOWN), 1, 100).replicas == 12
    history = ScaleHistory(scale_ups=(Timed(NOW - 14.9, 4),))
    assert limit_rate(20, 8, NOW, history, Behavior(up, DEFAULT_SCALE_DOWN), 1, 100).replicas == 8
