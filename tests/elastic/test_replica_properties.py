"""Invariants of the replica autoscaler over random runs (a world that sets each decided count
at once, with some replicas still loading): the count stays within its bounds, never moves
faster than the rate policies allow within any period, does not turn back inside a
stabilisation window, holds still within the tolerance, and goes to zero only after a
cooldown without activity."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.elastic.replicas import Outcome, ReplicaAutoscaler
from gpufleet.model.autoscaling import (
    AutoscalingSpec,
    Behavior,
    PolicyType,
    ScaleToZero,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
)
from gpufleet.testing.autoscaling_builders import (
    QUEUE,
    autoscaling_spec,
    per_replica,
    reading,
    workload_figure,
)

#: Decisions of the HPA's metric path (the others move to a bound, or are KEDA's).
METRIC_PATH = frozenset(
    {
        Outcome.WITHIN_RANGE, Outcome.SCALE_UP_LIMIT, Outcome.SCALE_DOWN_LIMIT,
        Outcome.TOO_MANY_REPLICAS, Outcome.TOO_FEW_REPLICAS, Outcome.SCALE_UP_STABILIZED,
        Outcome.SCALE_DOWN_STABILIZED,
    }
)  # fmt: skip

policies = st.lists(
    st.one_of(
        st.builds(
            ScalingPolicy,
            st.just(PolicyType.PODS),
            st.integers(1, 6),
            st.sampled_from([15, 30, 60]),
        ),
        st.builds(
            ScalingPolicy,
            st.just(PolicyType.PERCENT),
            st.integers(10, 200),
            st.sampled_from([15, 30, 60]),
        ),
    ),
    min_size=1,
    max_size=2,
).map(tuple)


def direction(windows: list[int]) -> st.SearchStrategy[ScalingRules]:
    return st.builds(
        ScalingRules,
        st.sampled_from(windows),
        policies,
        st.sampled_from([SelectPolicy.MAX, SelectPolicy.MIN]),
    )


behaviors = st.builds(Behavior, direction([0, 15, 60]), direction([0, 60, 300]))


@dataclass(frozen=True)
class Step:
    dt: float
    per_replica: float  # each ready replica's queue depth
    ready_share: float  # the share of replicas that serve


steps = st.lists(
    st.builds(
        Step,
        st.sampled_from([5.0, 15.0, 15.0, 30.0]),
        st.one_of(st.just(0.0), st.floats(0, 60, allow_nan=False)),
        st.sampled_from([1.0, 1.0, 0.5, 0.0]),
    ),
    min_size=1,
    max_size=40,
)


@dataclass(frozen=True)
class Move:
    at: float
    before: int
    after: int
    outcome: Outcome
    figure: float


def run(spec: AutoscalingSpec, start: int, plan: list[Step]) -> list[Move]:
    autoscaler = ReplicaAutoscaler(spec)
    current, now, moves = start, 0.0, []
    for step in plan:
        now += step.dt
        ready = math.floor(current * step.ready_share)
        figure = step.per_replica * max(current, 1)
        readings = {QUEUE: reading(*[step.per_replica] * ready, workload=figure)}
        decision = autoscaler.recommend(now, current, ready, readings)
        moves.append(Move(now, current, decision.desired, decision.outcome, figure))
        current = decision.desired
    return moves


def count_at(moves: list[Move], start: int, at: float) -> int:
    """The count after every decision made at ``at`` or before (``start`` before the first)."""
    count = start
    for move in moves:
        if move.at > at:
            break
        count = move.after
    return count


def allowance(rules: ScalingRules, moves: list[Move], start: int, at: float, up: bool) -> int:
    """The furthest count the policies allow at ``at``, from the counts a period earlier."""
    bounds = []
    for policy in rules.policies:
        base = count_at(moves, start, at - policy.period_s)
        if policy.type is PolicyType.PODS:
            bounds.append(base + policy.value if up else base - policy.value)
        elif up:
            bounds.append(math.ceil(base * (1 + policy.value / 100)))
        else:
            bounds.append(int(base * (1 - policy.value / 100)))
    most = rules.select_policy is SelectPolicy.MAX
    return (max if most == up else min)(bounds)


specs = st.builds(
    lambda behavior, low, extra, by_workload: autoscaling_spec(
        workload_figure(QUEUE, 10) if by_workload else per_replica(QUEUE, 10),
        behavior=behavior,
        min_replicas=low,
        max_replicas=low + extra,
    ),
    behaviors,
    st.integers(1, 4),
    st.integers(0, 20),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(specs, st.integers(1, 24), steps)
def test_within_bounds_and_rates(spec: AutoscalingSpec, start: int, plan: list[Step]) -> None:
    start = min(max(start, spec.min_replicas), spec.max_replicas)
    moves = run(spec, start, plan)
    for move in moves:
        assert spec.min_replicas <= move.after <= spec.max_replicas, move
        if move.outcome not in METRIC_PATH:
            continue
        if move.after > move.before:
            allowed = allowance(spec.behavior.scale_up, moves, start, move.at, up=True)
            assert move.after <= max(allowed, move.before), move
        elif move.after < move.before:
            allowed = allowance(spec.behavior.scale_down, moves, start, move.at, up=False)
            assert move.after >= min(allowed, move.before), move


@settings(max_examples=300, deadline=None)
@given(specs, st.integers(1, 24), steps)
def test_no_flapping_inside_a_stabilization_window(
    spec: AutoscalingSpec, start: int, plan: list[Step]
) -> None:
    start = min(max(start, spec.min_replicas), spec.max_replicas)
    moves = [m for m in run(spec, start, plan) if m.outcome in METRIC_PATH]
    up_window = spec.behavior.scale_up.stabilization_window_s
    down_window = spec.behavior.scale_down.stabilization_window_s
    for later in moves:
        for earlier in moves:
            if not earlier.at < later.at:
                continue
            if later.after < later.before and earlier.after > earlier.before:
                assert later.at - earlier.at >= down_window, (earlier, later)
            if later.after > later.before and earlier.after < earlier.before:
                assert later.at - earlier.at >= up_window, (earlier, later)


@settings(max_examples=200, deadline=None)
@given(
    behaviors,
    st.integers(1, 30),
    st.floats(9.0, 11.0, allow_nan=False),
    st.lists(st.sampled_from([5.0, 15.0, 30.0]), min_size=1, max_size=10),
)
def test_within_the_tolerance_nothing_moves(
    behavior: Behavior, replicas: int, value: float, gaps: list[float]
) -> None:
    spec = autoscaling_spec(per_replica(QUEUE, 10), behavior=behavior, max_replicas=30)
    autoscaler, now = ReplicaAutoscaler(spec), 0.0
    for gap in gaps:
        now += gap
        readings = {QUEUE: reading(*[value] * replicas)}
        assert autoscaler.recommend(now, replicas, replicas, readings).desired == replicas


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(0, 10),
    st.sampled_from([0.0, 60.0, 300.0]),
    st.sampled_from([0.0, 2.0]),
    steps,
)
def test_scale_to_zero_only_after_a_quiet_cooldown(
    low: int, extra: int, cooldown: float, activation: float, plan: list[Step]
) -> None:
    spec = autoscaling_spec(
        workload_figure(QUEUE, 10, activation=activation),
        min_replicas=low,
        max_replicas=low + extra,
        scale_to_zero=ScaleToZero(cooldown, cooldown, polling_interval_s=1.0),
    )
    moves = run(spec, 0, plan)
    for i, move in enumerate(moves):
        assert move.after == 0 or spec.min_replicas <= move.after <= spec.max_replicas, move
        if move.before == 0:
            assert move.after in (0, spec.min_replicas), move
            assert (move.after > 0) == (move.figure > activation), move
        if move.after == 0 and move.before > 0:
            assert move.outcome is Outcome.SCALED_TO_ZERO
            so_far = moves[: i + 1]
            assert all(m.figure <= activation for m in so_far if move.at - m.at <= cooldown), move
            if not any(m.figure > activation for m in so_far):  # never active: initial cooldown
                assert move.at - moves[0].at > cooldown, move
