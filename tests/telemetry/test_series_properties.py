"""Invariants of the series store over any samples: window reductions equal numpy's over the
raw samples the fine ring keeps; the rings keep exactly their window as they wrap; a coarse
point is the mean, max and min of the fine points it covers; the durable form round-trips."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_layout import as_labels
from gpufleet.testing.series import SMALL_SHAPE, filled_store

FINE_ERROR = 100.0 / (2 * 65534) + 1e-9
COARSE_ERROR = 100.0 / (2 * 254) + FINE_ERROR
STEP = SMALL_SHAPE.fine_step_s
PER = SMALL_SHAPE.fine_per_coarse

# Up to 150 steps (wrapping the 40-step fine ring and the 80-step coarse ring), 1-4 series,
# values in range or missing (NaN).
values = st.one_of(st.floats(0, 100, allow_nan=False), st.just(np.nan))
samples = st.integers(1, 150).flatmap(
    lambda steps: st.integers(1, 4).flatmap(
        lambda n: arrays(np.float64, (steps, n), elements=values)
    )
)


def raw_window(
    raw: npt.NDArray[np.float64], start: int, first: int, last: int
) -> npt.NDArray[np.float64]:
    """Raw rows of the fine steps ``first..last`` (absolute), those before ``start`` absent."""
    lo, hi = max(first - start, 0), max(last - start + 1, 0)
    return raw[lo:hi]


@settings(max_examples=60, deadline=None)
@given(raw=samples, start=st.integers(0, 5_000), back=st.integers(0, 60), width=st.integers(1, 45))
def test_fine_window_reductions_equal_numpy_over_the_raw_samples(
    raw: npt.NDArray[np.float64], start: int, back: int, width: int
) -> None:
    store, _ = filled_store(raw, start_step=start)
    newest = start + len(raw) - 1
    now_step = newest - back // 2
    window_steps = min(width, SMALL_SHAPE.fine_points - (newest - now_step))
    if window_steps < 1:
        return
    now = now_step * STEP + back % STEP  # anywhere within the step
    window_s = window_steps * STEP
    first = now_step - window_steps + 1
    kept = raw_window(raw, start, first, now_step)
    for fn, reduce in (("avg", np.nanmean), ("max", np.nanmax), ("min", np.nanmin)):
        got = store.query("util", fn, window_s, now)
        for s in range(raw.shape[1]):
            column = kept[:, s]
            key = as_labels({"gpu": str(s)})
            if np.isnan(column).all():
                assert key not in got
            else:
                assert got[key] == pytest.approx(reduce(column), abs=FINE_ERROR)
    counts = store.query("util", "count", window_s, now)
    medians = store.query("util", "quantile", window_s, now, quantile=0.5)
    for s in range(raw.shape[1]):
        column = kept[:, s][~np.isnan(kept[:, s])]
        key = as_labels({"gpu": str(s)})
        assert counts.get(key, 0) == len(column)
        if len(column):
            assert medians[key] == pytest.approx(np.quantile(column, 0.5), abs=FINE_ERROR)


@settings(max_examples=40, deadline=None)
@given(raw=samples, start=st.integers(0, 5_000))
def test_rings_keep_only_their_window_as_they_wrap(
    raw: npt.NDArray[np.float64], start: int
) -> None:
    store, ids = filled_store(raw, start_step=start)
    newest = start + len(raw) - 1
    for s, series_id in enumerate(ids):
        times, got = store.fine_points(int(series_id))
        expected_steps = [
            step
            for step in range(max(start, newest - SMALL_SHAPE.fine_points + 1), newest + 1)
            if not np.isnan(raw[step - start, s])
        ]
        assert (times / STEP).astype(int).tolist() == expected_steps
        assert got == pytest.approx(raw[np.array(expected_steps, int) - start, s], abs=FINE_ERROR)
        coarse = store.coarse_points(int(series_id))
        buckets = (coarse.times / SMALL_SHAPE.coarse_step_s).astype(int)
        assert buckets.size == 0 or buckets[0] > newest // PER - SMALL_SHAPE.coarse_points
        assert np.all(np.diff(buckets) > 0)


@settings(max_examples=40, deadline=None)
@given(raw=samples, start=st.integers(0, 5_000))
def test_coarse_points_roll_up_the_fine_points_they_cover(
    raw: npt.NDArray[np.float64], start: int
) -> None:
    store, ids = filled_store(raw, start_step=start)
    for s, series_id in enumerate(ids):
        coarse = store.coarse_points(int(series_id))
        present = {
            b
            for b in range(start // PER, (start + len(raw) - 1) // PER + 1)
            if not np.isnan(raw_window(raw, start, b * PER, b * PER + PER - 1)[:, s]).all()
        }
        newest_bucket = (start + len(raw) - 1) // PER
        kept = {b for b in present if b > newest_bucket - SMALL_SHAPE.coarse_points}
        buckets = (coarse.times / SMALL_SHAPE.coarse_step_s).astype(int)
        assert set(buckets.tolist()) == kept
        for i, bucket in enumerate(buckets):
            covered = raw_window(raw, start, bucket * PER, bucket * PER + PER - 1)[:, s]
            assert coarse.mean[i] == pytest.approx(np.nanmean(covered), abs=COARSE_ERROR)
            assert coarse.max[i] == pytest.approx(np.nanmax(covered), abs=COARSE_ERROR)
            assert coarse.min[i] == pytest.approx(np.nanmin(covered), abs=COARSE_ERROR)
            end = start + len(raw) - 1
            steps_with_a_snapshot = min(bucket * PER + PER - 1, end) - max(bucket * PER, start) + 1
            assert coarse.snapshots[i] == steps_with_a_snapshot


@settings(max_examples=25, deadline=None)
@given(raw=samples, start=st.integers(0, 5_000), compress=st.booleans(), drop=st.booleans())
def test_durable_form_round_trips(
    raw: npt.NDArray[np.float64], start: int, compress: bool, drop: bool
) -> None:
    store, ids = filled_store(raw, start_step=start)
    if drop:
        store.drop(int(ids[0]))
    restored = SeriesStore.from_bytes(store.to_bytes(compress=compress))
    now = (start + len(raw) - 1) * STEP
    for fn in ("avg", "max", "last", "count"):
        for window in (60, 10_000):
            expected = store.query("util", fn, window, now)
            assert restored.query("util", fn, window, now) == expected
    assert restored.to_bytes() == store.to_bytes()
    assert restored.newest_time == store.newest_time
    # The restored store goes on: ids stay, a dropped one is reused.
    again = restored.add("util", {"gpu": "again"})
    assert again == (int(ids[0]) if drop else len(ids))
    restored.append(now + STEP, [again], [42.0])
