"""A rule's comparison pushed down to the source (``query_where``) keeps exactly the series the
plain query followed by the comparison keeps, in the store and in the embedded view."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from gpufleet.telemetry.observed_series import ObservedSeries
from gpufleet.telemetry.recording import SeriesRecorder
from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_window import COMPARISONS, filtered
from gpufleet.testing.readings import node_reading

METRICS = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_GPU_TEMP",
    "gpufleet_gpu_memory_used_percent",
    "gpufleet_workload_gpu_util",
]


@settings(max_examples=60, deadline=None)
@given(
    utils=st.lists(st.lists(st.floats(0, 100), min_size=4, max_size=4), min_size=1, max_size=6),
    metric=st.sampled_from(METRICS),
    fn=st.sampled_from(["avg", "max", "min", "last", "quantile"]),
    op=st.sampled_from(COMPARISONS),
    threshold=st.floats(0, 100),
)
def test_query_where_equals_query_then_filter(
    utils: list[list[float]], metric: str, fn: str, op: str, threshold: float
) -> None:
    recorder = SeriesRecorder(SeriesStore())
    holders = {0: [("ml", "a")], 1: [("ml", "a")], 2: [("ml", "b"), ("dev", "c")]}
    for step, values in enumerate(utils):
        reading = node_reading("n1", values, holders, mem_used_mib=int(values[0] * 800))
        recorder.record(15.0 * (step + 1), [reading])
    series = ObservedSeries(recorder, dict)
    now = 15.0 * len(utils)
    quantile = 0.9 if fn == "quantile" else None
    plain = series.query(metric, fn, 600, now, {}, quantile)
    pushed = series.query_where(metric, fn, 600, now, {}, quantile, (op, threshold))
    assert pushed == pytest.approx(filtered(plain, (op, threshold)))
    store = recorder.store
    if metric in store.metrics:
        direct = store.query(metric, fn, 600, now, {}, quantile)
        assert store.query_where(metric, fn, 600, now, {}, quantile, (op, threshold)) == (
            pytest.approx(filtered(direct, (op, threshold)))
        )


def test_an_unknown_comparison_is_refused() -> None:
    recorder = SeriesRecorder(SeriesStore())
    recorder.record(15.0, [node_reading("n1", [10.0])])
    with pytest.raises(ValueError, match="comparison '=~'"):
        ObservedSeries(recorder, dict).query_where(
            "DCGM_FI_DEV_GPU_UTIL", "last", 300, 15.0, {}, None, ("=~", 1.0)
        )
