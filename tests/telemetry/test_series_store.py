"""The series store: window queries per series and by label on known samples, which ring
answers, series added and dropped, and bad input refused whole with a message naming it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpufleet.model.alerts import AlertMetric
from gpufleet.telemetry.rules import SeriesQuery
from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_layout import (
    RULE_METRICS,
    MetricSpec,
    StoreShape,
    as_labels,
)
from gpufleet.telemetry.series_query import GroupedSeriesQuery, UnknownMetricError
from gpufleet.testing.series import SMALL_SHAPE, UTIL, filled_store

FINE_ERROR = 100.0 / (2 * 65534) + 1e-9
COARSE_ERROR = 100.0 / (2 * 254) + FINE_ERROR

# Two series over 8 fine steps (2 coarse buckets): gpu 0 ramps, gpu 1 has a gap.
RAMP = np.array(
    [[0, 50], [10, 50], [20, np.nan], [30, 70], [40, 70], [50, np.nan], [60, 90], [70, 90]],
    dtype=np.float64,
)
NOW = 7 * 15.0
GPU0, GPU1 = as_labels({"gpu": "0"}), as_labels({"gpu": "1"})


@pytest.mark.parametrize(
    ("fn", "window_s", "phi", "expected"),
    [
        ("avg", 60, 0.5, {GPU0: 55.0, GPU1: 250.0 / 3}),
        ("avg", 600, 0.5, {GPU0: 35.0, GPU1: 70.0}),
        ("max", 600, 0.5, {GPU0: 70.0, GPU1: 90.0}),
        ("min", 45, 0.5, {GPU0: 50.0, GPU1: 90.0}),
        ("last", 600, 0.5, {GPU0: 70.0, GPU1: 90.0}),
        ("count", 600, 0.5, {GPU0: 8.0, GPU1: 6.0}),
        ("count", 30, 0.5, {GPU0: 2.0, GPU1: 2.0}),
        ("quantile", 600, 0.5, {GPU0: 35.0, GPU1: 70.0}),
        ("quantile", 600, 1.0, {GPU0: 70.0, GPU1: 90.0}),
        ("quantile", 60, 0.25, {GPU0: 47.5, GPU1: 80.0}),
    ],
    ids=[
        "avg-1m",
        "avg-all",
        "max",
        "min-45s",
        "last",
        "count",
        "count-30s",
        "median",
        "q1",
        "q.25",
    ],
)
def test_fine_window_functions(
    fn: str, window_s: float, phi: float, expected: dict[tuple[tuple[str, str], ...], float]
) -> None:
    store, _ = filled_store(RAMP)
    got = store.query("util", fn, window_s, NOW, quantile=phi)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=FINE_ERROR)


def test_window_is_left_open_and_ends_at_now() -> None:
    store, _ = filled_store(RAMP)
    # (15, 45]: steps at 30 and 45 s only.
    assert store.query("util", "count", 30, 45.0)[GPU0] == 2
    # A window ending before the data has nothing in it: the series is left out.
    assert store.query("util", "avg", 10, -1.0) == {}


LABELLED = [
    {"gpu": "0", "node": "a", "queue": "train"},
    {"gpu": "1", "node": "a", "queue": "notebooks"},
    {"gpu": "0", "node": "b", "queue": "train"},
    {"gpu": "1", "node": "b"},
]
FLAT = np.tile(np.array([[10.0, 20.0, 30.0, 40.0]]), (4, 1))


@pytest.mark.parametrize(
    ("by", "across", "expected"),
    [
        (
            ("queue",),
            "sum",
            {(("queue", "train"),): 40.0, (("queue", "notebooks"),): 20.0, (): 40.0},
        ),
        (
            ("queue",),
            "avg",
            {(("queue", "train"),): 20.0, (("queue", "notebooks"),): 20.0, (): 40.0},
        ),
        (("node",), "max", {(("node", "a"),): 20.0, (("node", "b"),): 40.0}),
        (("node",), "min", {(("node", "a"),): 10.0, (("node", "b"),): 30.0}),
        (("node",), "count", {(("node", "a"),): 2.0, (("node", "b"),): 2.0}),
        ((), "sum", {(): 100.0}),
        (
            ("node", "gpu"),
            "sum",
            {
                as_labels({"node": n, "gpu": g}): v
                for n, g, v in [("a", "0", 10), ("a", "1", 20), ("b", "0", 30), ("b", "1", 40)]
            },
        ),
    ],
    ids=["sum-queue", "avg-queue", "max-node", "min-node", "count-node", "all", "two-labels"],
)
def test_aggregates_across_series_by_label(
    by: tuple[str, ...], across: str, expected: dict[tuple[tuple[str, str], ...], float]
) -> None:
    store, _ = filled_store(FLAT, labels=LABELLED)
    got = store.query("util", "avg", 60, 45.0, by=by, across=across)
    assert got == pytest.approx(expected, abs=4 * FINE_ERROR)


def test_matchers_select_series_and_empty_matches_absent_label() -> None:
    store, _ = filled_store(FLAT, labels=LABELLED)
    assert set(store.query("util", "last", 60, 45.0, {"node": "a"})) == {
        as_labels(LABELLED[0]),
        as_labels(LABELLED[1]),
    }
    assert list(store.query("util", "last", 60, 45.0, {"queue": ""})) == [as_labels(LABELLED[3])]
    assert store.query("util", "last", 60, 45.0, {"node": "c"}) == {}


def test_long_windows_use_the_coarse_ring_and_agree_with_the_fine() -> None:
    # 200 fine steps wrap the 40-step fine ring five times and the 20-bucket (80-step) coarse
    # ring twice: a 20-minute window reads the coarse ring's last 80 steps.
    values = (np.arange(200, dtype=np.float64) % 7 * 10.0)[:, None]
    store, ids = filled_store(values)
    now, window = 199 * 15.0, SMALL_SHAPE.coarse_span_s
    kept = values[-80:]
    assert store.query("util", "avg", window, now)[GPU0] == pytest.approx(
        kept.mean(), abs=COARSE_ERROR
    )
    assert store.query("util", "max", window, now)[GPU0] == pytest.approx(60, abs=COARSE_ERROR)
    assert store.query("util", "min", window, now)[GPU0] == pytest.approx(0, abs=COARSE_ERROR)
    assert store.query("util", "count", window, now)[GPU0] == 80
    assert store.query("util", "count", 10 * window, now)[GPU0] == 80
    # last over a long window is still the exact newest sample, from the fine ring.
    assert store.query("util", "last", window, now)[GPU0] == pytest.approx(
        values[-1, 0], abs=FINE_ERROR
    )
    times, _ = store.fine_points(int(ids[0]))
    assert times[0] == (200 - SMALL_SHAPE.fine_points) * 15.0
    assert times[-1] == now


def test_coarse_quantile_lies_between_quantiles_of_bucket_mins_and_maxes() -> None:
    rng = np.random.default_rng(3)
    values = rng.uniform(0, 100, (200, 1))
    store, ids = filled_store(values)
    coarse = store.coarse_points(int(ids[0]))
    got = store.query("util", "quantile", 200 * 15, 199 * 15.0, quantile=0.9)[GPU0]
    assert np.quantile(coarse.min, 0.9) - COARSE_ERROR <= got
    assert got <= np.quantile(coarse.max, 0.9) + COARSE_ERROR
    raw = np.quantile(values[-len(coarse.mean) * 4 :], 0.9)
    assert (
        np.quantile(coarse.min, 0.9) - COARSE_ERROR
        <= raw
        <= np.quantile(coarse.max, 0.9) + COARSE_ERROR
    )


def test_gap_in_appends_clears_the_steps_it_skips() -> None:
    store, ids = filled_store(np.full((40, 1), 50.0))
    # A day later the fine ring must hold only the new point, not last day's slots.
    store.append(86_400.0, ids, [10.0])
    assert store.query("util", "count", 600, 86_400.0) == {GPU0: 1.0}
    assert store.query("util", "avg", 600, 86_400.0)[GPU0] == pytest.approx(10, abs=FINE_ERROR)
    assert store.coarse_points(int(ids[0])).mean.tolist() == pytest.approx([10.0], abs=COARSE_ERROR)


def test_same_step_append_replaces_the_point() -> None:
    store, ids = filled_store([[10.0]])
    store.append(14.0, ids, [30.0])
    assert store.query("util", "count", 60, 14.0) == {GPU0: 1.0}
    assert store.query("util", "last", 60, 14.0)[GPU0] == pytest.approx(30, abs=FINE_ERROR)


def test_series_added_dropped_and_reused() -> None:
    store = SeriesStore([UTIL], SMALL_SHAPE, capacity=1)
    first = store.add("util", {"gpu": "0"})
    assert store.add("util", as_labels({"gpu": "0"})) == first
    second = store.add("util", {"gpu": "1"})  # grows past capacity 1
    store.append(0.0, [first, second], [10.0, 20.0])
    store.drop(first)
    assert store.query("util", "last", 60, 0.0) == {
        as_labels({"gpu": "1"}): pytest.approx(20.0, abs=FINE_ERROR)
    }
    again = store.add("util", {"gpu": "2"})
    assert again == first
    assert store.query("util", "count", 60, 0.0, {"gpu": "2"}) == {}  # no old points leak
    assert len(store) == 2
    with pytest.raises(KeyError, match="no series with id 99"):
        store.key_of(99)


def test_drop_idle_drops_series_without_recent_points() -> None:
    store, ids = filled_store([[10.0, 20.0]])
    store.append(600.0, ids[1:], [30.0])
    fresh = store.add("util", {"gpu": "new"})
    dropped = store.drop_idle(now=600.0, idle_s=300.0)
    assert dropped == [("util", GPU0)]
    assert set(store.series("util")) == {GPU1, as_labels({"gpu": "new"})}
    assert store.key_of(fresh)[1] == as_labels({"gpu": "new"})


def test_values_outside_the_range_are_clipped_and_counted() -> None:
    store, _ = filled_store([[150.0, -5.0]])
    assert store.clipped == 2
    assert store.query("util", "last", 60, 0.0) == pytest.approx({GPU0: 100.0, GPU1: 0.0})


@pytest.mark.parametrize(
    ("time", "ids", "values", "message"),
    [
        (0.0, [0], [1.0, 2.0], "1 ids but 2 values"),
        (math.nan, [0], [1.0], "must be finite"),
        (-15.0, [0], [1.0], "must be finite and not negative"),
        (30.0, [0, 0], [1.0, 2.0], "more than once"),
        (30.0, [7], [1.0], "live series ids"),
        (0.0, [0], [1.0], "before the newest step"),
    ],
    ids=["lengths", "nan-time", "negative-time", "duplicate-id", "unknown-id", "backwards"],
)
def test_bad_appends_are_refused_whole(
    time: float, ids: list[int], values: list[float], message: str
) -> None:
    store, _ = filled_store([[10.0, 20.0], [11.0, 21.0]])
    before = store.to_bytes()
    with pytest.raises(ValueError, match=message):
        store.append(time, ids, values)
    assert store.to_bytes() == before


def test_dropped_id_is_refused_in_append() -> None:
    store, ids = filled_store([[10.0, 20.0]])
    store.drop(int(ids[0]))
    with pytest.raises(ValueError, match="not live"):
        store.append(15.0, ids, [1.0, 2.0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fn": "median"}, "fn 'median'"),
        ({"across": "stddev"}, "across 'stddev'"),
        ({"fn": "quantile", "quantile": 1.5}, "got 1.5"),
        ({"fn": "quantile"}, "needs a quantile"),
        ({"window_s": 0}, "window 0"),
        ({"now": math.inf}, "finite"),
    ],
    ids=["fn", "across", "quantile", "no-quantile", "window", "now"],
)
def test_bad_queries_name_what_is_wrong(kwargs: dict[str, object], message: str) -> None:
    store, _ = filled_store([[10.0]])
    args: dict[str, object] = {"metric": "util", "fn": "avg", "window_s": 60, "now": 0.0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        store.query(**args)  # type: ignore[arg-type]


def test_unknown_metric_names_the_known_ones() -> None:
    store = SeriesStore()
    with pytest.raises(UnknownMetricError, match="DCGM_FI_DEV_GPU_TEMP"):
        store.query("DCGM_FI_DEV_NOPE", "avg", 60, 0.0)
    with pytest.raises(UnknownMetricError):
        store.add("nope", {})
    assert [spec.name for spec in RULE_METRICS] == list(store.metrics)
    assert {metric.value for metric in AlertMetric} == set(store.metrics)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: StoreShape(fine_step_s=15, coarse_step_s=100), "multiple of"),
        (lambda: StoreShape(fine_points=4, coarse_step_s=300), "at least one coarse step"),
        (lambda: StoreShape(fine_points=0), "1 or more"),
        (lambda: StoreShape(coarse_code="uint32"), "coarse_code"),
        (lambda: MetricSpec("m", 5.0, 5.0), "lo < hi"),
        (lambda: SeriesStore([UTIL, UTIL]), "given twice"),
        (lambda: as_labels([("a", "1"), ("a", "2")]), "more than once"),
    ],
    ids=["steps", "fine-too-short", "zero-points", "code", "range", "metric-twice", "label-twice"],
)
def test_bad_shapes_and_specs_are_refused(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


def test_store_answers_both_query_protocols() -> None:
    store = SeriesStore()
    grouped: GroupedSeriesQuery = store
    for_rules: SeriesQuery = store
    assert grouped.query("DCGM_FI_DEV_GPU_UTIL", "avg", 60, 0.0, by=()) == {}
    assert for_rules.query("DCGM_FI_DEV_GPU_UTIL", "quantile", 60, 0.0, {}, 0.5) == {}


def test_an_empty_store_holds_no_points() -> None:
    # Points live in time chunks made as they are written (see test_series_chunks).
    store = SeriesStore(capacity=10)
    assert store.nbytes == 10 * (8 * 4 + 1 + 8 * 2)  # lo, top, hi, last step; alive, born
