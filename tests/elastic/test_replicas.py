"""The replica autoscaler of one workload, call after call: the HPA's path (min/max, metrics,
stabilisation, policies, tolerance), KEDA's scale to zero and activation, model-load
readiness, and the words a decision says."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from gpufleet.elastic.replica_behavior import ScaleHistory
from gpufleet.elastic.replicas import Outcome, ReplicaAutoscaler, ScaleDecision, decide
from gpufleet.model.autoscaling import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    Behavior,
    InferenceMetric,
    MetricReading,
    PolicyType,
    ScaleToZero,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
)
from gpufleet.testing.autoscaling_builders import (
    GPU_UTIL,
    LATENCY,
    QUEUE,
    RPS,
    autoscaling_spec,
    per_replica,
    reading,
    rules,
    workload_figure,
)

Readings = Mapping[InferenceMetric, MetricReading]


def queue(*per_replica_values: float, waiting: float | None = None) -> Readings:
    return {QUEUE: reading(*per_replica_values, workload=waiting)}


def test_kubernetes_defaults() -> None:
    spec = autoscaling_spec()
    assert spec.behavior.scale_up == DEFAULT_SCALE_UP
    assert DEFAULT_SCALE_UP.stabilization_window_s == 0
    assert DEFAULT_SCALE_UP.policies == (
        ScalingPolicy(PolicyType.PODS, 4, 15),
        ScalingPolicy(PolicyType.PERCENT, 100, 15),
    )
    assert DEFAULT_SCALE_DOWN.stabilization_window_s == 300
    assert DEFAULT_SCALE_DOWN.policies == (ScalingPolicy(PolicyType.PERCENT, 100, 15),)
    assert DEFAULT_SCALE_UP.select_policy is SelectPolicy.MAX
    assert (DEFAULT_SCALE_UP.tolerance, DEFAULT_SCALE_DOWN.tolerance) == (0.1, 0.1)
    assert (spec.min_replicas, spec.sync_period_s, spec.floor) == (1, 15.0, 1)


def test_scale_up_is_limited_by_the_default_policies() -> None:
    autoscaler = ReplicaAutoscaler(autoscaling_spec(max_replicas=50))
    decision = autoscaler.recommend(0, 3, 3, queue(42, 42, 42))
    # ceil(4.2 x 3) = 13; the most of Pods 4 (-> 7) and Percent 100 (-> 6) per 15 s.
    assert (decision.desired, decision.outcome) == (7, Outcome.SCALE_UP_LIMIT)
    assert decision.reason == (
        "queue depth 42 per replica over target 10: 3 -> 7 (limited by scale-up policy Pods 4 "
        "per 15s)"
    )
    # Within the same 15 s, the 4 replicas added leave no room.
    assert autoscaler.recommend(10, 7, 3, queue(42, 42, 42)).desired == 7
    # A period later, 7 + max(4, 7) = 14 > 13 wanted.
    later = autoscaler.recommend(15, 7, 7, queue(*[42] * 7))
    assert (later.desired, later.outcome) == (14, Outcome.SCALE_UP_LIMIT)


def test_scale_down_waits_for_the_stabilization_window() -> None:
    autoscaler = ReplicaAutoscaler(autoscaling_spec())
    assert autoscaler.recommend(0, 5, 5, queue(*[10] * 5)).desired == 5
    calm = queue(*[2] * 5)
    held = autoscaler.recommend(15, 5, 5, calm)
    assert (held.desired, held.outcome) == (5, Outcome.SCALE_DOWN_STABILIZED)
    assert held.reason == (
        "queue depth 2 per replica under target 10: stays at 5 (recommended 1; the highest "
        "recommendation of the last 5m00s is 5: scale-down stabilization)"
    )
    assert autoscaler.recommend(299, 5, 5, calm).desired == 5
    # The recommendation of 5 at t=0 is out of the window at t=300.
    down = autoscaler.recommend(300, 5, 5, calm)
    assert (down.desired, down.outcome, down.reason) == (
        1, Outcome.WITHIN_RANGE, "queue depth 2 per replica under target 10: 5 -> 1",
    )  # fmt: skip


def test_scale_up_stabilization_takes_the_lowest_recent_recommendation() -> None:
    behavior = Behavior(rules(100, 15, window=60), DEFAULT_SCALE_DOWN)
    autoscaler = ReplicaAutoscaler(autoscaling_spec(behavior=behavior, max_replicas=20))
    assert autoscaler.recommend(0, 2, 2, queue(10, 10)).desired == 2
    spike = autoscaler.recommend(15, 2, 2, queue(50, 50))
    assert (spike.desired, spike.outcome) == (2, Outcome.SCALE_UP_STABILIZED)
    # The recommendation of 2 made at t=0 leaves the 60 s window at t=60.
    assert autoscaler.recommend(59, 2, 2, queue(50, 50)).desired == 2
    assert autoscaler.recommend(60, 2, 2, queue(50, 50)).desired == 10


@pytest.mark.parametrize(
    ("up", "down", "current", "values", "expected", "outcome"),
    [
        pytest.param(
            rules(2, 60), DEFAULT_SCALE_DOWN, 4, [30] * 4, 6, Outcome.SCALE_UP_LIMIT, id="pods-up"
        ),
        pytest.param(
            rules(percent=50, percent_period=60), DEFAULT_SCALE_DOWN, 4, [30] * 4, 6,
            Outcome.SCALE_UP_LIMIT, id="percent-up-rounds-up",
        ),
        pytest.param(
            DEFAULT_SCALE_UP, rules(1, 60), 4, [1] * 4, 3, Outcome.SCALE_DOWN_LIMIT, id="pods-down"
        ),
        pytest.param(
            DEFAULT_SCALE_UP, rules(percent=30, percent_period=60), 10, [1] * 10, 7,
            Outcome.SCALE_DOWN_LIMIT, id="percent-down-rounds-down",
        ),
        pytest.param(
            rules(1, 60, 100, 60, select=SelectPolicy.MIN), DEFAULT_SCALE_DOWN, 4, [30] * 4, 5,
            Outcome.SCALE_UP_LIMIT, id="select-min-up",
        ),
        pytest.param(
            rules(1, 60, 100, 60, select=SelectPolicy.MAX), DEFAULT_SCALE_DOWN, 4, [30] * 4, 8,
            Outcome.SCALE_UP_LIMIT, id="select-max-up",
        ),
        pytest.param(
            rules(4, 15, select=SelectPolicy.DISABLED), DEFAULT_SCALE_DOWN, 4, [30] * 4, 4,
            Outcome.SCALE_UP_LIMIT, id="scale-up-disabled",
        ),
        pytest.param(
            DEFAULT_SCALE_UP, rules(4, 15, select=SelectPolicy.DISABLED), 4, [1] * 4, 4,
            Outcome.SCALE_DOWN_LIMIT, id="scale-down-disabled",
        ),
    ],
)  # fmt: skip
def test_each_policy(
    up: ScalingRules,
    down: ScalingRules,
    current: int,
    values: list[float],
    expected: int,
    outcome: Outcome,
) -> None:
    spec = autoscaling_spec(behavior=Behavior(up, down), max_replicas=100)
    decision, _ = decide(spec, ScaleHistory(), 0, current, current, queue(*values))
    assert (decision.desired, decision.outcome) == (expected, outcome)


def test_disabled_direction_says_so() -> None:
    spec = autoscaling_spec(behavior=Behavior(rules(4, 15, select=SelectPolicy.DISABLED)))
    decision, _ = decide(spec, ScaleHistory(), 0, 2, 2, queue(30, 30))
    assert decision.reason.endswith("stays at 2 (scale-up disabled: selectPolicy Disabled)")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(10.9, 4, id="within-10%-above"),
        pytest.param(9.0, 4, id="within-10%-below"),
        pytest.param(11.5, 5, id="beyond"),
    ],
)
def test_tolerance(value: float, expected: int) -> None:
    decision, _ = decide(autoscaling_spec(), ScaleHistory(), 0, 4, 4, queue(*[value] * 4))
    assert decision.desired == expected


@pytest.mark.parametrize(
    ("current", "expected", "outcome", "words"),
    [
        pytest.param(
            12, 10, Outcome.ABOVE_MAX, "12 replicas, above max replicas 10: 12 -> 10",
            id="above-max",
        ),
        pytest.param(
            1, 2, Outcome.BELOW_MIN, "1 replica, below min replicas 2: 1 -> 2", id="below-min"
        ),
    ],
)  # fmt: skip
def test_out_of_bounds_goes_to_the_bound_at_once(
    current: int, expected: int, outcome: Outcome, words: str
) -> None:
    spec = autoscaling_spec(min_replicas=2, max_replicas=10)
    decision, history = decide(spec, ScaleHistory(), 0, current, current, queue(*[10] * current))
    assert (decision.desired, decision.outcome, decision.reason) == (expected, outcome, words)
    # Kubernetes records the move as a scale event: it counts against the policies.
    assert history.scale_ups or history.scale_downs


def test_the_metrics_never_go_beyond_max_replicas() -> None:
    spec = autoscaling_spec(max_replicas=6)
    decision, _ = decide(spec, ScaleHistory(), 0, 4, 4, queue(*[50] * 4))
    assert (decision.desired, decision.outcome) == (6, Outcome.TOO_MANY_REPLICAS)
    assert decision.reason.endswith("4 -> 6 (max replicas 6)")


def test_zero_replicas_without_scale_to_zero_is_left_alone() -> None:
    decision, _ = decide(autoscaling_spec(), ScaleHistory(), 0, 0, 0, queue(waiting=50))
    assert (decision.desired, decision.outcome) == (0, Outcome.SCALING_DISABLED)


def test_the_highest_proposal_wins() -> None:
    spec = autoscaling_spec(per_replica(QUEUE, 10), workload_figure(LATENCY, 0.5, average=False))
    readings = {QUEUE: reading(5, 5, 5, 5), LATENCY: reading(workload=1.0)}
    decision, _ = decide(spec, ScaleHistory(), 0, 4, 4, readings)
    assert decision.desired == 8
    assert decision.reason == "p95 latency 1s over target 0.5s: 4 -> 8"


def test_scale_up_one_metric_empty() -> None:
    """TestScaleUpOneMetricEmpty: one metric fails, the other says scale up: scale up."""
    spec = autoscaling_spec(per_replica(QUEUE, 10), workload_figure(RPS, 100, average=False))
    decision, _ = decide(spec, ScaleHistory(), 0, 3, 3, queue(13, 13, 14))
    assert decision.desired == 4


def test_no_scale_down_one_metric_empty() -> None:
    """TestNoScaleDownOneMetricEmpty: one metric fails, the other says scale down: no change,
    and no recommendation is recorded."""
    spec = autoscaling_spec(per_replica(QUEUE, 10), workload_figure(RPS, 100, average=False))
    decision, history = decide(spec, ScaleHistory(), 0, 5, 5, queue(1, 1, 1, 1, 1))
    assert (decision.desired, decision.outcome) == (5, Outcome.INVALID_METRICS)
    assert decision.reason == ("cannot scale down (no reading of requests per second): stays at 5")
    assert history.recommendations == ()


def test_no_metric_at_all_changes_nothing() -> None:
    decision, _ = decide(autoscaling_spec(), ScaleHistory(), 0, 3, 3, {})
    assert (decision.desired, decision.outcome) == (3, Outcome.INVALID_METRICS)
    assert (
        decision.reason == "no metric could propose a count (no reading of queue depth): stays at 3"
    )


# ---------------------------------------------------------------------- scale to zero (KEDA)
def to_zero(
    cooldown: float = 300,
    initial: float = 0,
    poll: float = 15,
    activation: float = 0.0,
    min_replicas: int = 1,
) -> ReplicaAutoscaler:
    """A workload that idles at zero, scaled on its queue's total (10 per replica)."""
    spec = autoscaling_spec(
        workload_figure(QUEUE, 10, activation=activation),
        scale_to_zero=ScaleToZero(cooldown, initial, poll),
        min_replicas=min_replicas,
        model_load_s=90,
    )
    return ReplicaAutoscaler(spec)


def test_idle_at_zero_until_the_first_request() -> None:
    autoscaler = to_zero()
    assert autoscaling_spec(scale_to_zero=ScaleToZero()).floor == 0
    idle = autoscaler.recommend(0, 0, 0, queue(waiting=0))
    assert (idle.desired, idle.outcome) == (0, Outcome.IDLE)
    assert idle.reason == (
        "no metric above its activation threshold (queue depth 0 (threshold 0)): stays at 0"
    )
    woken = autoscaler.recommend(15, 0, 0, queue(waiting=1))
    assert (woken.desired, woken.outcome, woken.serving_from) == (1, Outcome.ACTIVATED, 105)
    assert woken.reason == "queue depth 1 above activation threshold 0: 0 -> 1 (activated)"


def test_activation_wakes_to_min_replicas() -> None:
    decision = to_zero(min_replicas=3).recommend(0, 0, 0, queue(waiting=1))
    assert decision.desired == 3


@pytest.mark.parametrize(
    ("waiting", "active"),
    [pytest.param(5, False, id="at-the-threshold"), pytest.param(5.5, True, id="above-it")],
)
def test_activation_threshold_is_strictly_above(waiting: float, active: bool) -> None:
    decision = to_zero(activation=5).recommend(0, 0, 0, queue(waiting=waiting))
    assert decision.desired == (1 if active else 0)


def test_activity_is_polled_every_polling_interval() -> None:
    autoscaler = to_zero(poll=30)
    assert autoscaler.recommend(0, 0, 0, queue(waiting=0)).desired == 0
    waiting = autoscaler.recommend(15, 0, 0, queue(waiting=3))
    assert (waiting.desired, waiting.reason) == (0, "at 0 until the next activation poll in 15s")
    assert autoscaler.recommend(30, 0, 0, queue(waiting=3)).desired == 1


def test_scaled_to_zero_after_the_cooldown_without_activity() -> None:
    autoscaler = to_zero(cooldown=300)
    autoscaler.recommend(0, 0, 0, queue(waiting=4))
    # Replicas serve; the queue empties at t=100 (last active at t=90).
    for t in range(15, 100, 15):
        autoscaler.recommend(t, 1, 1, queue(4, waiting=4))
    for t in range(105, 391, 15):
        decision = autoscaler.recommend(t, 1, 1, queue(0, waiting=0))
        assert decision.desired == 1, t
    gone = autoscaler.recommend(405, 1, 1, queue(0, waiting=0))
    assert (gone.desired, gone.outcome) == (0, Outcome.SCALED_TO_ZERO)
    assert gone.reason == (
        "no metric above its activation threshold for 5m15s (cooldown 5m00s; queue depth 0 "
        "(threshold 0)): 1 -> 0"
    )


def test_never_active_goes_to_zero_after_the_initial_cooldown() -> None:
    # 20 waiting is at the target for 2 replicas, and below the activation threshold.
    autoscaler = to_zero(initial=60, activation=100)
    assert autoscaler.recommend(0, 2, 2, queue(10, 10)).desired == 2
    assert autoscaler.recommend(60, 2, 2, queue(10, 10)).desired == 2
    assert autoscaler.recommend(75, 2, 2, queue(10, 10)).desired == 0


def test_at_zero_the_hpa_never_runs() -> None:
    autoscaler = to_zero()
    autoscaler.recommend(0, 0, 0, queue(waiting=0))
    assert autoscaler.history.recommendations == ()


# ---------------------------------------------------------------------- model-load readiness
def test_new_replicas_serve_after_their_model_load_time() -> None:
    spec = autoscaling_spec(workload_figure(QUEUE, 10), model_load_s=120, max_replicas=20)
    decision, _ = decide(spec, ScaleHistory(), 1000, 2, 2, queue(20, 20, waiting=60))
    assert (decision.desired, decision.serving_from) == (6, 1120)
    down, _ = decide(spec, ScaleHistory(), 1000, 6, 6, queue(waiting=0))
    assert down.serving_from is None


def test_traffic_targets_keep_scaling_while_replicas_load() -> None:
    """The queue's total against the target per replica (External AverageValue): 80 waiting
    for 2 replicas, 1 of them still loading, asks for 8 at once."""
    spec = autoscaling_spec(workload_figure(QUEUE, 10), max_replicas=20)
    decision, _ = decide(spec, ScaleHistory(), 0, 2, 1, queue(40, waiting=80))
    assert decision.desired == 6  # 2 + max(Pods 4, Percent 100%) per 15 s
    assert decision.reason.endswith("(limited by scale-up policy Pods 4 per 15s); 1 of 2 not ready")


def test_loading_replicas_count_as_idle_on_a_per_replica_scale_up() -> None:
    """GPU utilisation of the ready replicas only; the loading ones count 0 on a scale-up."""
    spec = autoscaling_spec(per_replica(GPU_UTIL, 50, utilization=True), max_replicas=20)
    util = {GPU_UTIL: reading(100, 100)}
    # Ready ones at 2x target; with 2 loading at 0: (100+100+0+0)/4 = 50%: no change.
    decision, _ = decide(spec, ScaleHistory(), 0, 4, 2, util)
    assert decision.desired == 4
    # Had they been ready at that load, 8 would be asked for.
    decision, _ = decide(spec, ScaleHistory(), 0, 4, 4, {GPU_UTIL: reading(100, 100, 100, 100)})
    assert decision.desired == 8


def test_decide_is_pure() -> None:
    spec = autoscaling_spec()
    history = ScaleHistory()
    first: tuple[ScaleDecision, ScaleHistory] = decide(spec, history, 0, 3, 3, queue(30, 30, 30))
    again = decide(spec, history, 0, 3, 3, queue(30, 30, 30))
    assert first == again
    assert history == ScaleHistory()
