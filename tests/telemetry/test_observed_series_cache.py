"""The query view's cached holder labels follow the holders: a device changing hands between
rounds is answered with its new holder, never the cached one."""

from __future__ import annotations

from gpufleet.telemetry.observed_series import ObservedSeries
from gpufleet.telemetry.recording import SeriesRecorder
from gpufleet.telemetry.series import SeriesStore
from gpufleet.testing.readings import node_reading

UTIL = "DCGM_FI_DEV_GPU_UTIL"


def holders(series: ObservedSeries, now: float) -> dict[str, str]:
    found = series.query(UTIL, "last", 300, now)
    return {dict(k)["gpu"]: dict(k).get("pod", "") for k in found}


def test_a_device_changing_hands_is_answered_with_its_new_holder() -> None:
    recorder = SeriesRecorder(SeriesStore())
    series = ObservedSeries(recorder, dict)
    recorder.record(15.0, [node_reading("n1", [10.0, 20.0], {0: [("ml", "a")]})])
    assert holders(series, 15.0) == {"0": "a", "1": ""}
    assert holders(series, 15.0) == {"0": "a", "1": ""}  # from the cache
    recorder.record(30.0, [node_reading("n1", [10.0, 20.0], {0: [("ml", "b")], 1: [("ml", "a")]})])
    assert holders(series, 30.0) == {"0": "b", "1": "a"}
    recorder.record(45.0, [node_reading("n1", [10.0, 20.0], {})])
    assert holders(series, 45.0) == {"0": "", "1": ""}
    assert series.query(UTIL, "last", 300, 45.0, {"pod": "a"}) == {}
