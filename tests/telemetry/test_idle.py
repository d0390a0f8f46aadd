"""The idle-policy engine: steps in order after their delays, grace, exemption, scope, recovery,
unknown telemetry; and as invariants (hypothesis): never an exempt or out-of-scope workload,
never a skipped step, never before the grace."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.idle import (
    EXEMPT_LABEL,
    IdleAction,
    IdleCandidate,
    IdleDecision,
    IdlePolicy,
    IdleScope,
    IdleStep,
)
from gpufleet.telemetry.idle import WORKLOAD_UTIL, IdleEngine
from gpufleet.testing.fake_series import FakeSeries

MIN = 60.0
STEPS = (
    IdleStep(IdleAction.NOTIFY),
    IdleStep(IdleAction.CHECKPOINT, 10 * MIN),
    IdleStep(IdleAction.STOP, 20 * MIN),
)


def policy(**changes: object) -> IdlePolicy:
    base = IdlePolicy("p", STEPS, window_s=10 * MIN, grace_s=30 * MIN)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def notebook(**changes: object) -> IdleCandidate:
    base = IdleCandidate(
        key="dev/nb", namespace="dev", name="nb", queue="research", kind="Pod",
        pods=("nb",), started_at=0.0, gpus=1.0, labels={"team": "vision"},
    )  # fmt: skip
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def feed(series: FakeSeries, pod: str, start: float, end: float, util: float) -> None:
    t = start
    while t <= end:
        series.add(WORKLOAD_UTIL, {"namespace": "dev", "pod": pod}, t, util)
        t += 15.0


Taken = list[tuple[float, IdleAction, IdleDecision]]


def run(
    engine: IdleEngine, series: FakeSeries, candidates: list[IdleCandidate], until: float
) -> Taken:
    """Rounds every minute from 0 to ``until``: (time, action) of each decision."""
    taken: Taken = []
    t = 0.0
    while t <= until:
        for d in engine.decide(t, candidates, series):
            taken.append((t, d.action, d))
        t += MIN
    return taken


def test_steps_follow_their_delays_in_order() -> None:
    series = FakeSeries()
    feed(series, "nb", 0, 3 * 3600, 2.0)
    taken = run(IdleEngine([policy()]), series, [notebook()], 3 * 3600)
    assert [(t, a) for t, a, _ in taken] == [
        (30 * MIN, IdleAction.NOTIFY),
        (40 * MIN, IdleAction.CHECKPOINT),
        (60 * MIN, IdleAction.STOP),
    ]
    stop = taken[-1][2]
    assert (stop.mean_util_pct, stop.idle_for_s, stop.gpus, stop.window_s) == (
        2.0,
        1800.0,
        1.0,
        600.0,
    )
    assert stop.reason == "IdleReclaimStop"
    assert "mean GPU utilisation 2.0%" in stop.message
    assert "threshold 10%" in stop.message


@pytest.mark.parametrize(
    ("candidate", "scope"),
    [
        (notebook(labels={EXEMPT_LABEL: "true"}), IdleScope()),
        (notebook(namespace="prod"), IdleScope(namespaces=frozenset({"dev"}))),
        (notebook(), IdleScope(queues=frozenset({"other"}))),
        (notebook(), IdleScope(labels=(("team", "nlp"),))),
        (notebook(), IdleScope(workload_kinds=frozenset({"StatefulSet"}))),
        (notebook(kind="PyTorchJob", training=True), IdleScope()),
        (notebook(kind="Job", training=True), IdleScope(namespaces=frozenset({"dev"}))),
    ],
    ids=["exempt", "namespace", "queue", "label", "kind", "training", "training-job"],
)
def test_out_of_scope_or_exempt_is_never_touched(
    candidate: IdleCandidate, scope: IdleScope
) -> None:
    series = FakeSeries()
    feed(series, "nb", 0, 3 * 3600, 0.0)
    assert run(IdleEngine([policy(scope=scope)]), series, [candidate], 3 * 3600) == []


def test_training_is_touched_when_its_kind_is_named() -> None:
    series = FakeSeries()
    feed(series, "nb", 0, 3600, 0.0)
    scope = IdleScope(workload_kinds=frozenset({"PyTorchJob"}))
    taken = run(
        IdleEngine([policy(scope=scope)]),
        series,
        [notebook(kind="PyTorchJob", training=True)],
        3600,
    )
    assert [a for _, a, _ in taken] == [IdleAction.NOTIFY, IdleAction.CHECKPOINT, IdleAction.STOP]


def test_recovery_resets_and_unknown_changes_nothing() -> None:
    series = FakeSeries()
    feed(series, "nb", 0, 35 * MIN, 1.0)  # idle: notified at 30 min
    feed(series, "nb", 35 * MIN + 15, 50 * MIN, 90.0)  # busy again: forgotten
    feed(series, "nb", 50 * MIN + 15, 3 * 3600, 1.0)  # idle again
    engine = IdleEngine([policy()])
    taken = run(engine, series, [notebook()], 3 * 3600)
    actions = [(t, a) for t, a, _ in taken]
    assert actions[0] == (30 * MIN, IdleAction.NOTIFY)
    assert actions[1][1] is IdleAction.NOTIFY  # starts again from the first step
    assert [a for _, a in actions[1:]] == [
        IdleAction.NOTIFY,
        IdleAction.CHECKPOINT,
        IdleAction.STOP,
    ]


def test_no_telemetry_is_unknown_not_idle() -> None:
    taken = run(IdleEngine([policy()]), FakeSeries(), [notebook()], 3 * 3600)
    assert taken == []


def test_first_policy_by_name_wins_and_dry_run_says_so() -> None:
    series = FakeSeries()
    feed(series, "nb", 0, 3600, 0.0)
    engine = IdleEngine(
        [policy(name="b-stop"), policy(name="a-notify", steps=(IdleStep(IdleAction.NOTIFY),))],
        dry_run=True,
    )
    taken = run(engine, series, [notebook()], 3600)
    assert [(d.policy, d.action, d.dry_run) for _, _, d in taken] == [
        ("a-notify", IdleAction.NOTIFY, True)
    ]
    assert taken[0][2].message.startswith("dry run: would notify")


# ------------------------------------------------------------------------------ invariants
candidates = st.builds(
    notebook,
    started_at=st.sampled_from([0.0, 600.0, 3000.0]),
    labels=st.sampled_from([{}, {EXEMPT_LABEL: "true"}, {"team": "vision"}]),
    namespace=st.sampled_from(["dev", "prod"]),
    training=st.booleans(),
    kind=st.sampled_from(["Pod", "PyTorchJob"]),
)
step_lists = st.lists(st.sampled_from([0.0, 120.0, 900.0]), min_size=1, max_size=3).map(
    lambda delays: tuple(
        IdleStep(action, delay)
        for action, delay in zip(
            [IdleAction.NOTIFY, IdleAction.CHECKPOINT, IdleAction.STOP][-len(delays) :],
            delays,
            strict=True,
        )
    )
)


@settings(max_examples=60, deadline=None)
@given(
    candidate=candidates,
    steps=step_lists,
    grace=st.sampled_from([0.0, 600.0, 1800.0]),
    namespaces=st.sampled_from([frozenset(), frozenset({"dev"})]),
    utils=st.lists(st.sampled_from([0.0, 5.0, 50.0]), min_size=1, max_size=8),
)
def test_invariants(
    candidate: IdleCandidate,
    steps: tuple[IdleStep, ...],
    grace: float,
    namespaces: frozenset[str],
    utils: list[float],
) -> None:
    series = FakeSeries()
    span = 2 * 3600.0
    piece = span / len(utils)
    for i, util in enumerate(utils):
        t = i * piece
        while t < (i + 1) * piece:
            series.add(WORKLOAD_UTIL, {"namespace": candidate.namespace, "pod": "nb"}, t, util)
            t += 30.0
    chosen = policy(steps=steps, grace_s=grace, scope=IdleScope(namespaces=namespaces))
    taken = run(IdleEngine([chosen]), series, [candidate], span)
    if not chosen.applies_to(candidate):
        assert taken == []
    expected = 0
    for t, action, decision in taken:
        assert t - candidate.started_at >= grace
        assert decision.mean_util_pct < chosen.threshold_pct
        if decision.step == 0:
            expected = 0  # a reset starts again from the first step
        assert decision.step == expected, "a step was skipped"
        assert action is steps[decision.step].action
        expected += 1
