"""gpufleet's alerts carry the labels Prometheus' alerts carry for the same rule on serve's own
dcgm-exporter exposition (issue 29 item 3): ``device``, ``pci_bus_id``,
``DCGM_FI_DRIVER_VERSION``, the holder's, and ``err_code``/``err_msg`` on XIDs; on a workload's
utilisation, ``namespace`` and ``pod`` (``avg by (namespace, pod)``), whatever the store tagged
its series with. The expected labels are read from the exposition itself
(``gpufleet.metrics.dcgm``), not written here."""

from __future__ import annotations

import pytest

from gpufleet.metrics.dcgm import families
from gpufleet.model.alerts import (
    WORKLOAD_LABELS,
    Aggregation,
    AlertMetric,
    AlertRule,
    AlertScope,
    Comparison,
    label_set,
)
from gpufleet.model.telemetry import DeviceSample, DeviceUser
from gpufleet.telemetry.observed_series import ObservedSeries
from gpufleet.telemetry.recording import PodKey, PodTags, SeriesRecorder
from gpufleet.telemetry.rules import RuleEngine
from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.source import NodeTelemetry

HELD = DeviceSample(0, "GPU-aaa", "NVIDIA H100", 3.0, 0, 1000, 80000, 90.0, 300.0, 1400, 79)
FREE = DeviceSample(1, "GPU-bbb", "NVIDIA H100", 3.0, 0, 1000, 80000, 90.0, 300.0, 1400, 13)
USER = DeviceUser("GPU-aaa", "train-0", "ml", "main")


def node(driver: str, buses: dict[int, str]) -> NodeTelemetry:
    return NodeTelemetry("node-a", (HELD, FREE), (USER,), {}, buses, driver)


def exposed(reading: NodeTelemetry, metric: str) -> set[tuple[tuple[str, str], ...]]:
    """The label sets of ``metric``'s series on the exposition (empty labels are absent, as
    Prometheus stores them)."""
    [family] = [f for f in families([reading]) if f.name == metric]
    return {label_set({k: v for k, v in s.labels.items() if v}) for s in family.samples}


@pytest.mark.parametrize(
    ("metric", "comparison", "threshold"),
    [
        (AlertMetric.XID_ERRORS, Comparison.GT, 0),
        (AlertMetric.XID_ERRORS, Comparison.EQ, 79),
        (AlertMetric.GPU_TEMP, Comparison.GE, 90),
        (AlertMetric.GPU_UTIL, Comparison.LT, 20),
        (AlertMetric.POWER_USAGE, Comparison.GE, 300),
        (AlertMetric.FB_USED, Comparison.GT, 500),
    ],
    ids=["xid-any", "xid-79", "temperature", "utilisation", "power", "memory-mib"],
)
@pytest.mark.parametrize(
    ("driver", "buses"),
    [("550.54.15", {0: "00000000:0A:00.0", 1: "00000000:0B:00.0"}), ("", {})],
    ids=["driver-and-bus-known", "unknown"],
)
def test_an_alert_has_the_labels_of_the_exposed_series(
    metric: AlertMetric,
    comparison: Comparison,
    threshold: float,
    driver: str,
    buses: dict[int, str],
) -> None:
    reading = node(driver, buses)
    recorder = SeriesRecorder(SeriesStore())
    recorder.record(0.0, [reading])
    rule = AlertRule("r", metric, comparison, threshold)
    engine = RuleEngine([rule])
    engine.evaluate(ObservedSeries(recorder, dict), 0.0)
    got = {
        tuple((k, v) for k, v in a.labels if k not in ("alertname", "severity"))
        for a in engine.alerts()
    }
    expected = {
        labels
        for labels in exposed(reading, metric.value)
        if comparison.holds(float(dict(labels).get("err_code", "nan")), threshold)
        or metric is not AlertMetric.XID_ERRORS
    }
    assert got == expected


def test_a_scope_on_the_xid_labels_selects_by_them() -> None:
    recorder = SeriesRecorder(SeriesStore())
    recorder.record(0.0, [node("", {})])
    scope = AlertScope(labels=label_set({"err_msg": "GPU has fallen off the bus"}))
    rule = AlertRule("off-the-bus", AlertMetric.XID_ERRORS, Comparison.GT, 0, scope=scope)
    engine = RuleEngine([rule])
    engine.evaluate(ObservedSeries(recorder, dict), 0.0)
    assert [(a.label("gpu"), a.label("err_code")) for a in engine.alerts()] == [("0", "79")]


#: What the plane's records tell of the pod holding GPU 0 (``live_observing``).
TAGS = {("ml", "train-0"): PodTags(queue="research", tenant="ml", workload="ml/Pod/train-0",
                                   kind="Pod")}  # fmt: skip


@pytest.mark.parametrize(
    "tags_by_round",
    [
        # The round that first sees the pod comes after its record says it runs (a late
        # round, or a quick loop): its series is tagged. The flake of the differential test.
        pytest.param([TAGS, TAGS], id="tagged-when-first-seen"),
        # It comes between the bind and the record's update: untagged for good.
        pytest.param([{}, TAGS], id="untagged-when-first-seen"),
        pytest.param([{}, {}], id="never-tagged"),
    ],
)
@pytest.mark.parametrize(
    ("aggregation", "window_s"),
    [(Aggregation.LAST, 0.0), (Aggregation.AVG, 30.0)],
    ids=["instant", "window"],
)
def test_a_workload_alert_has_the_labels_of_prometheus_avg_by_namespace_pod(
    tags_by_round: list[dict[PodKey, PodTags]], aggregation: Aggregation, window_s: float
) -> None:
    reading = node("", {})
    recorder = SeriesRecorder(SeriesStore())
    for at, tags in zip((15.0, 30.0), tags_by_round, strict=True):
        recorder.record(at, [reading], tags)
    rule = AlertRule(
        "busy", AlertMetric.WORKLOAD_GPU_UTIL, Comparison.GE, 1.0, aggregation, window_s
    )
    engine = RuleEngine([rule])
    engine.evaluate(ObservedSeries(recorder, dict), 30.0)
    got = {
        tuple((k, v) for k, v in a.labels if k not in ("alertname", "severity"))
        for a in engine.alerts()
    }
    # ``avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""})`` on the exposition.
    expected = {
        tuple((k, v) for k, v in labels if k in WORKLOAD_LABELS)
        for labels in exposed(reading, AlertMetric.GPU_UTIL.value)
        if dict(labels).get("pod")
    }
    assert got == expected == {(("namespace", "ml"), ("pod", "train-0"))}
