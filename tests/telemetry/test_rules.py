"""The rule engine: conditions over the query protocol, and Prometheus' ``for`` semantics,
checked case by case and against a reference simulation written plainly here."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.alerts import (
    WORKLOAD_START_TIME,
    Aggregation,
    AlertMetric,
    AlertRule,
    AlertScope,
    AlertState,
    Comparison,
    label_set,
)
from gpufleet.telemetry.rules import RuleEngine, matching_series
from gpufleet.testing.fake_series import FakeSeries

TEMP = AlertMetric.GPU_TEMP.value
GPU0 = {"gpu": "0", "Hostname": "n1"}
GPU1 = {"gpu": "1", "Hostname": "n1"}
P, F, INACT, R = AlertState.PENDING, AlertState.FIRING, AlertState.INACTIVE, AlertState.RESOLVED


def hot(for_s: float = 300.0, **changes: object) -> AlertRule:
    fields: dict[str, object] = {
        "name": "gpu-hot",
        "metric": AlertMetric.GPU_TEMP,
        "comparison": Comparison.GT,
        "threshold": 85.0,
        "for_s": for_s,
    }
    fields.update(changes)
    return AlertRule(**fields)  # type: ignore[arg-type]


def moves(engine: RuleEngine, series: FakeSeries, now: float) -> list[tuple[str, str, str]]:
    return [
        (dict(t.labels)["gpu"], t.before.value, t.after.value) for t in engine.evaluate(series, now)
    ]


def test_pending_then_firing_after_for_then_resolved() -> None:
    series, engine = FakeSeries(), RuleEngine([hot(for_s=120)])
    series.add(TEMP, GPU0, 0, 90)
    assert moves(engine, series, 0) == [("0", "inactive", "pending")]
    series.add(TEMP, GPU0, 60, 91)
    assert moves(engine, series, 60) == []
    series.add(TEMP, GPU0, 120, 92)
    assert moves(engine, series, 120) == [("0", "pending", "firing")]
    [alert] = engine.alerts()
    assert (alert.state, alert.value, alert.active_at, alert.fired_at) == (F, 92, 0, 120)
    assert alert.label("alertname") == "GpuHot"
    assert alert.label("severity") == "warning"
    series.add(TEMP, GPU0, 180, 70)
    assert moves(engine, series, 180) == [("0", "firing", "resolved")]
    assert engine.alerts()[0].resolved_at == 180
    assert engine.active() == []


def test_pending_that_stops_returns_to_inactive_and_starts_over() -> None:
    series, engine = FakeSeries(), RuleEngine([hot(for_s=120)])
    series.add(TEMP, GPU0, 0, 90)
    series.add(TEMP, GPU0, 60, 80)
    series.add(TEMP, GPU0, 120, 90)
    series.add(TEMP, GPU0, 180, 90)
    assert moves(engine, series, 0) == [("0", "inactive", "pending")]
    assert moves(engine, series, 60) == [("0", "pending", "inactive")]
    assert engine.alerts() == []
    assert moves(engine, series, 120) == [("0", "inactive", "pending")]
    assert moves(engine, series, 180) == []  # active since 120, not 0
    assert engine.alerts()[0].active_at == 120


def test_for_zero_fires_in_the_round_it_first_holds() -> None:
    series, engine = FakeSeries(), RuleEngine([hot(for_s=0)])
    series.add(TEMP, GPU0, 10, 99)
    assert moves(engine, series, 10) == [("0", "inactive", "pending"), ("0", "pending", "firing")]


def test_a_series_that_disappears_resolves_its_alert() -> None:
    series, engine = FakeSeries(), RuleEngine([hot(for_s=0)])
    series.add(TEMP, GPU0, 0, 90)
    series.add(TEMP, GPU1, 0, 90)
    series.add(TEMP, GPU1, 400, 90)
    engine.evaluate(series, 0)
    # GPU 0's last sample is older than the 5m lookback at t=400: it is gone.
    assert moves(engine, series, 400) == [("0", "firing", "resolved")]
    assert [a.state for a in engine.alerts()] == [R, F]


def test_resolved_alerts_are_kept_for_the_retention_then_dropped() -> None:
    series, engine = FakeSeries(), RuleEngine([hot(for_s=0)], resolved_retention_s=100)
    series.add(TEMP, GPU0, 0, 90)
    engine.evaluate(series, 0)
    engine.evaluate(series, 400)
    engine.evaluate(series, 500)
    assert [a.state for a in engine.alerts()] == [R]
    engine.evaluate(series, 501)
    assert engine.alerts() == []


def test_rounds_must_go_forward() -> None:
    engine = RuleEngine([hot()])
    engine.evaluate(FakeSeries(), 10)
    with pytest.raises(ValueError, match="forward"):
        engine.evaluate(FakeSeries(), 9)


def test_two_rules_of_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="gpu-hot"):
        RuleEngine([hot(), hot()])


@pytest.mark.parametrize(
    ("aggregation", "quantile", "expected"),
    [
        (Aggregation.AVG, None, 50.0),
        (Aggregation.MAX, None, 90.0),
        (Aggregation.MIN, None, 10.0),
        (Aggregation.LAST, None, 90.0),
        (Aggregation.QUANTILE, 0.5, 50.0),
    ],
    ids=["avg", "max", "min", "last", "median"],
)
def test_the_query_asks_for_the_rules_aggregation_window_and_scope(
    aggregation: Aggregation, quantile: float | None, expected: float
) -> None:
    rule = hot(
        aggregation=aggregation,
        window_s=3600.0,
        quantile=quantile,
        threshold=0.0,
        scope=AlertScope(namespace="ml", labels=label_set({"modelName": "a"})),
    )
    series = FakeSeries()
    for at, value in ((0, 99), (1000, 10), (2000, 50), (3000, 90)):  # t=0 is outside (0, 3600]
        series.add(TEMP, {**GPU0, "namespace": "ml", "modelName": "a"}, at, value)
    series.add(TEMP, {**GPU1, "namespace": "other", "modelName": "a"}, 3000, 99)
    assert list(matching_series(rule, series, 3600).values()) == [expected]
    assert series.queries[0][1:] == (
        aggregation.value,
        3600.0,
        3600,
        {"modelName": "a", "namespace": "ml"},
    )


def test_a_workload_rule_waits_until_the_workload_has_run_long_enough() -> None:
    rule = AlertRule(
        "workload-gpu-idle",
        AlertMetric.WORKLOAD_GPU_UTIL,
        Comparison.LT,
        40.0,
        Aggregation.AVG,
        window_s=300.0,
        for_s=3600.0,
        min_running_s=3600.0,
    )
    series, engine = FakeSeries(), RuleEngine([rule])
    notebook = {"namespace": "ml", "pod": "notebook"}
    busy = {"namespace": "ml", "pod": "train"}
    history: list[tuple[int, str, str]] = []
    for minute in range(0, 181, 5):
        at = minute * 60.0
        series.add(WORKLOAD_START_TIME, notebook, at, 0.0)
        series.add(WORKLOAD_START_TIME, busy, at, 0.0)
        series.add(AlertMetric.WORKLOAD_GPU_UTIL.value, notebook, at, 3.0)
        series.add(AlertMetric.WORKLOAD_GPU_UTIL.value, busy, at, 95.0)
        history += [
            (minute, dict(t.labels)["pod"], t.after.value) for t in engine.evaluate(series, at)
        ]
    # Pending once it has run an hour, firing an hour later: never for the busy one.
    assert history == [(60, "notebook", "pending"), (120, "notebook", "firing")]


def test_a_workload_without_a_known_start_never_matches() -> None:
    rule = AlertRule("idle", AlertMetric.WORKLOAD_GPU_UTIL, Comparison.LT, 40.0, min_running_s=60.0)
    series = FakeSeries()
    series.add(AlertMetric.WORKLOAD_GPU_UTIL.value, {"namespace": "a", "pod": "p"}, 100, 1.0)
    assert matching_series(rule, series, 100) == {}


# --------------------------------------------------------------------- against a reference


@dataclass
class Reference:
    """Prometheus' ``for`` in plain words: at each round, a label set is firing when its
    condition has held in every round of an unbroken run that began at least ``for`` ago,
    pending when the run is younger; a run that breaks after firing is a resolution."""

    for_s: float

    def states(self, rounds: list[tuple[float, set[str]]]) -> list[dict[str, AlertState]]:
        out: list[dict[str, AlertState]] = []
        run_start: dict[str, float] = {}
        fired: set[str] = set()
        for now, holding in rounds:
            seen: dict[str, AlertState] = {}
            for key in list(run_start):
                if key not in holding:
                    del run_start[key]
                    if key in fired:
                        fired.discard(key)
                        seen[key] = AlertState.RESOLVED
                    else:
                        seen[key] = AlertState.INACTIVE
            for key in holding:
                run_start.setdefault(key, now)
                if now - run_start[key] >= self.for_s:
                    fired.add(key)
                seen[key] = AlertState.FIRING if key in fired else AlertState.PENDING
            out.append(seen)
        return out


rounds_strategy = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=120),  # seconds since the previous round
        st.dictionaries(
            st.sampled_from(["0", "1", "2"]), st.floats(min_value=0, max_value=100), max_size=3
        ),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(for_s=st.sampled_from([0.0, 30.0, 60.0, 125.0]), steps=rounds_strategy)
def test_for_semantics_match_the_reference(
    for_s: float, steps: list[tuple[int, dict[str, float]]]
) -> None:
    rule = hot(for_s=for_s, threshold=50.0, aggregation=Aggregation.LAST, window_s=1.0)
    engine = RuleEngine([rule], resolved_retention_s=1e9)
    series = FakeSeries()
    now = 0.0
    rounds: list[tuple[float, set[str]]] = []
    got: list[dict[str, AlertState]] = []
    for gap, values in steps:
        now += gap
        for gpu, value in values.items():
            series.add(TEMP, {"gpu": gpu}, now, value)
        holding = {gpu for gpu, value in values.items() if value > 50.0}
        rounds.append((now, holding))
        states: dict[str, AlertState] = {}
        for transition in engine.evaluate(series, now):
            states[dict(transition.labels)["gpu"]] = transition.after
        for alert in engine.active():
            states.setdefault(alert.label("gpu"), alert.state)
        got.append(states)
        # Every transition is one of the machine's edges, and the alerts agree with it.
        assert {a.label("gpu") for a in engine.active()} == holding
    assert got == Reference(for_s).states(rounds)


@settings(max_examples=100, deadline=None)
@given(steps=rounds_strategy)
def test_transitions_follow_the_state_machine(steps: list[tuple[int, dict[str, float]]]) -> None:
    edges = {(INACT, P), (P, F), (P, INACT), (F, R)}
    engine = RuleEngine([hot(for_s=60.0, threshold=50.0, window_s=1.0)])
    series, now = FakeSeries(), 0.0
    last: dict[str, AlertState] = {}
    for gap, values in steps:
        now += gap
        for gpu, value in values.items():
            series.add(TEMP, {"gpu": gpu}, now, value)
        for t in engine.evaluate(series, now):
            gpu = dict(t.labels)["gpu"]
            # A resolved alert that holds again is a new alert: it starts from inactive.
            before = last.get(gpu, INACT)
            assert t.before is (INACT if before is R else before)
            assert (t.before, t.after) in edges
            last[gpu] = t.after


UTIL = AlertMetric.GPU_UTIL.value
HELD = {"gpu": "0", "Hostname": "n1", "namespace": "ml", "pod": "train-0", "container": "c"}
UNHELD = {"gpu": "1", "Hostname": "n1"}
EMPTY_POD = {"gpu": "2", "Hostname": "n1", "pod": ""}


@pytest.mark.parametrize(
    ("allocated", "fired"),
    [(True, ["0"]), (False, ["0", "1", "2"])],
    ids=["allocated-only-held-gpus", "every-gpu"],
)
def test_an_allocated_scope_looks_only_at_gpus_a_pod_holds(
    allocated: bool, fired: list[str]
) -> None:
    """Issue 29 item 7: an idle-GPU rule on every GPU fired on each one nobody holds."""
    series = FakeSeries()
    for labels in (HELD, UNHELD, EMPTY_POD):
        series.add(UTIL, labels, 0, 0.0)
    rule = AlertRule(
        "idle", AlertMetric.GPU_UTIL, Comparison.LT, 20, scope=AlertScope(allocated=allocated)
    )
    assert sorted(dict(labels)["gpu"] for labels in matching_series(rule, series, 0)) == fired


def test_the_built_in_idle_gpu_rule_is_about_allocated_gpus() -> None:
    """The guard: the seeds' idle rule is about GPUs paid for and idle, so it says so."""
    from gpufleet.io.fleet.alert_rules import builtin_alert_rules

    [low] = [rule for rule in builtin_alert_rules() if rule.alert_name == "GpuUtilisationLow"]
    assert low.scope.allocated
    series = FakeSeries()
    for labels in (HELD, UNHELD):
        series.add(UTIL, labels, t := 0.0, 0.0)
    assert [dict(labels)["gpu"] for labels in matching_series(low, series, t)] == ["0"]
