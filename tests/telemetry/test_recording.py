"""The recorder feeds the store from readings; the observed view answers as Prometheus would."""

from __future__ import annotations

import math

import pytest

from gpufleet.model.alerts import WORKLOAD_START_TIME
from gpufleet.telemetry.observed_series import ObservedSeries
from gpufleet.telemetry.recording import PodTags, SeriesRecorder
from gpufleet.telemetry.series import SeriesStore
from gpufleet.testing.readings import MEMORY_MIB, gpu_uuid, node_reading

UTIL = "DCGM_FI_DEV_GPU_UTIL"
WORKLOAD_UTIL = "gpufleet_workload_gpu_util"


def recorded(*readings_at: tuple[float, list[float]]) -> tuple[SeriesRecorder, ObservedSeries]:
    recorder = SeriesRecorder(SeriesStore())
    for at, utils in readings_at:
        reading = node_reading("n1", utils, {0: [("ml", "nb-0")], 1: [("ml", "train-0")]})
        recorder.record(at, [reading], {("ml", "nb-0"): PodTags(queue="research", kind="Pod")})
    return recorder, ObservedSeries(recorder, lambda: {("ml", "nb-0"): 100.0})


def test_device_series_carry_the_holder_labels_of_dcgm_exporter() -> None:
    _, series = recorded((15.0, [10.0, 90.0, 0.0]))
    found = {dict(k)["gpu"]: dict(k) for k in series.query(UTIL, "last", 300, 30.0)}
    assert found["0"]["pod"] == "nb-0"
    assert found["0"]["namespace"] == "ml"
    assert found["0"]["container"] == "main"
    assert found["0"]["UUID"] == gpu_uuid("n1", 0)
    assert "pod" not in found["2"], "a device nobody holds has no pod labels"


@pytest.mark.parametrize(
    ("matchers", "gpus"),
    [
        pytest.param({"namespace": "ml"}, {"0", "1"}, id="namespace"),
        pytest.param({"pod": "train-0"}, {"1"}, id="pod"),
        pytest.param({"pod": ""}, {"2"}, id="absent-pod"),
        pytest.param({"gpu": "2"}, {"2"}, id="device-label"),
        pytest.param({"namespace": "ml", "gpu": "1"}, {"1"}, id="both"),
    ],
)
def test_matchers_on_holder_and_device_labels(matchers: dict[str, str], gpus: set[str]) -> None:
    _, series = recorded((15.0, [10.0, 90.0, 0.0]))
    found = series.query(UTIL, "last", 300, 30.0, matchers)
    assert {dict(k)["gpu"] for k in found} == gpus


def test_workload_utilisation_is_the_mean_of_its_devices_labelled_as_prometheus_does() -> None:
    recorder, series = recorded((15.0, [10.0, 90.0]), (30.0, [30.0, 70.0]))
    found = series.query(WORKLOAD_UTIL, "avg", 60, 45.0, {"pod": "nb-0"})
    ((labels, value),) = found.items()
    # ``avg by (namespace, pod)``: the store's tags are not labels (Prometheus has none).
    assert dict(labels) == {"namespace": "ml", "pod": "nb-0"}
    assert value == pytest.approx(20.0, abs=0.01)
    # They still select and group, and the raw samples keep them as recorded.
    assert list(series.query(WORKLOAD_UTIL, "avg", 60, 45.0, {"queue": "research"})) == [labels]
    by_queue = series.query(WORKLOAD_UTIL, "avg", 60, 45.0, by=("queue",), across="avg")
    assert by_queue == {
        (("queue", "research"),): pytest.approx(20.0, abs=0.01),
        (): pytest.approx(80.0, abs=0.01),  # train-0, untagged
    }
    [tagged] = series.samples(WORKLOAD_UTIL, 0.0, 45.0, {"pod": "nb-0"})
    assert dict(tagged) == {"namespace": "ml", "pod": "nb-0", "queue": "research", "kind": "Pod"}
    assert recorder.usage[("ml", "nb-0")].mean == pytest.approx(20.0)
    assert recorder.usage[("ml", "train-0")].samples == 2


def test_memory_percent_and_grouped_queries() -> None:
    recorder = SeriesRecorder(SeriesStore())
    recorder.record(15.0, [node_reading("n1", [50.0, 50.0], mem_used_mib=MEMORY_MIB // 2)])
    recorder.record(15.0, [node_reading("n1", [50.0, 50.0], mem_used_mib=MEMORY_MIB // 2)])
    series = ObservedSeries(recorder, dict)
    percent = series.query("gpufleet_gpu_memory_used_percent", "last", 300, 20.0)
    assert all(math.isclose(v, 50.0, abs_tol=0.01) for v in percent.values())
    by_node = series.query(UTIL, "avg", 300, 20.0, by=("Hostname",), across="sum")
    assert by_node == {(("Hostname", "n1"),): pytest.approx(100.0, abs=0.01)}


def test_start_times_come_from_the_world() -> None:
    _, series = recorded((15.0, [10.0, 90.0]))
    starts = series.query(WORKLOAD_START_TIME, "last", 300, 30.0, {"namespace": "ml"})
    assert starts == {(("namespace", "ml"), ("pod", "nb-0")): 100.0}
    assert series.query(WORKLOAD_START_TIME, "last", 300, 30.0, {"pod": "other"}) == {}


def test_ended_pods_lose_their_series_but_keep_their_usage() -> None:
    recorder, series = recorded((15.0, [10.0, 90.0]))
    recorder.record(100_000.0, [node_reading("n1", [5.0, 5.0])])
    assert recorder.forget_ended(100_000.0, keep_s=3_600) == 2
    assert series.query(WORKLOAD_UTIL, "last", 300, 100_000.0) == {}
    assert recorder.usage[("ml", "nb-0")].mean == pytest.approx(10.0)
    recorder.forget_ended(100_000.0, keep_s=3_600, usage_s=3_600)
    assert ("ml", "nb-0") not in recorder.usage


def test_a_restored_store_keeps_its_workload_series() -> None:
    recorder, _ = recorded((15.0, [10.0, 90.0]))
    again = SeriesRecorder(SeriesStore.from_bytes(recorder.store.to_bytes()))
    again.adopt()
    again.record(30.0, [node_reading("n1", [20.0, 80.0], {0: [("ml", "nb-0")]})])
    assert len(again.store.series(WORKLOAD_UTIL)) == 2, "no second series for the same pod"


def test_bad_across_is_refused() -> None:
    _, series = recorded((15.0, [10.0]))
    with pytest.raises(ValueError, match="across"):
        series.query(UTIL, "avg", 300, 20.0, by=("gpu",), across="median")


def test_usage_stays_in_the_order_of_last_samples_and_says_what_changed() -> None:
    recorder = SeriesRecorder(SeriesStore())
    both = node_reading("n1", [50.0, 50.0], {0: [("ml", "a")], 1: [("ml", "b")]})
    only_a = node_reading("n1", [50.0, 50.0], {0: [("ml", "a")]})
    recorder.record(0.0, [both])
    recorder.record(15.0, [only_a])
    assert list(recorder.usage) == [("ml", "b"), ("ml", "a")]
    assert recorder.take_changed() == {("ml", "a"), ("ml", "b")}
    assert recorder.take_changed() == set()
    # b was last seen at 0, a at 15: keeping summaries 20 s at 25 forgets b only.
    assert recorder.forget_ended(25.0, keep_s=10.0, usage_s=20.0) == 2
    assert list(recorder.usage) == [("ml", "a")]
    assert recorder.take_changed() == {("ml", "b")}
    assert recorder.store.series("gpufleet_workload_gpu_util") == {}


def test_a_dropped_device_series_is_made_again_at_its_next_reading() -> None:
    recorder = SeriesRecorder(SeriesStore())
    recorder.record(15.0, [node_reading("n1", [10.0, 20.0])])
    store = recorder.store
    dropped = store.series(UTIL, {"gpu": "1"})
    store.drop(next(iter(dropped.values())))
    store.add(WORKLOAD_UTIL, {"namespace": "ml", "pod": "takes-the-freed-id"})
    recorder.record(30.0, [node_reading("n1", [30.0, 40.0])])
    found = ObservedSeries(recorder, dict).query(UTIL, "last", 300, 30.0)
    assert sorted(found.values()) == pytest.approx([30.0, 40.0], abs=0.01)
    assert len(store.series(WORKLOAD_UTIL)) == 1, "the workload series kept its id"


def test_forgetting_usage_keeps_the_series_and_the_fresh_summaries() -> None:
    recorder = SeriesRecorder(SeriesStore())
    both = node_reading("n1", [50.0, 50.0], {0: [("ml", "a")], 1: [("ml", "b")]})
    recorder.record(0.0, [both])
    recorder.record(15.0, [node_reading("n1", [50.0, 50.0], {0: [("ml", "a")]})])
    recorder.take_changed()
    assert recorder.forget_usage(before=5.0) == 1  # b last sampled at 0, a at 15
    assert list(recorder.usage) == [("ml", "a")]
    assert recorder.take_changed() == {("ml", "b")}
    assert len(recorder.store.series("gpufleet_workload_gpu_util")) == 2  # a round drops them
    assert recorder.forget_usage(before=5.0) == 0
