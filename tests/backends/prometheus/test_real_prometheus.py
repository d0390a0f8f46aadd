"""PrometheusSeries against a real Prometheus (Debian's) scraping the node agent's /metrics
over fake GPUs every second: the answers equal what the agent served, the rule engine runs
over it, and a stopped Prometheus is a PrometheusUnavailableError."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.backends.prometheus import PrometheusSeries, PrometheusUnavailableError
from gpufleet.io.fleet.alert_rules import builtin_alert_rules
from gpufleet.model.alerts import AlertState
from gpufleet.telemetry.rules import RuleEngine
from gpufleet.telemetry.series_layout import Labels, as_labels
from gpufleet.testing.prometheus import FakeGpuExporter, PrometheusProcess, prometheus_binary
from tests.backends.prometheus.conftest import HOLDERS

#: Labels Prometheus adds to every scraped series.
SCRAPE_LABELS = ("instance", "job")


def served(exporter: FakeGpuExporter, family: str) -> dict[Labels, float]:
    """What the agent serves for ``family`` now, keyed as the reader keys it."""
    found: dict[Labels, float] = {}
    for metric in text_string_to_metric_families(exporter.text()):
        for sample in metric.samples:
            if sample.name == family:
                found[as_labels(sample.labels)] = sample.value
    return found


def without_scrape_labels(values: dict[Labels, float]) -> dict[Labels, float]:
    return {
        tuple(pair for pair in labels if pair[0] not in SCRAPE_LABELS): value
        for labels, value in values.items()
    }


@pytest.fixture
def series(prometheus: PrometheusProcess) -> Iterator[PrometheusSeries]:
    with PrometheusSeries(prometheus.url) as reader:
        yield reader


def test_utilisation_is_what_the_agent_served(
    series: PrometheusSeries, gpu_exporter: FakeGpuExporter
) -> None:
    expected = served(gpu_exporter, "DCGM_FI_DEV_GPU_UTIL")
    now = time.time()
    for fn in ("last", "avg", "max", "min"):
        got = series.query("DCGM_FI_DEV_GPU_UTIL", fn, 300, now)
        assert without_scrape_labels(got) == expected, fn
    assert {dict(labels)["job"] for labels in got} == {"gpufleet-test"}


def test_memory_percent_is_what_the_agent_served(
    series: PrometheusSeries, gpu_exporter: FakeGpuExporter
) -> None:
    used = served(gpu_exporter, "DCGM_FI_DEV_FB_USED")
    free = served(gpu_exporter, "DCGM_FI_DEV_FB_FREE")
    expected = {labels: 100 * used[labels] / (used[labels] + free[labels]) for labels in used}
    assert expected[next(iter(expected))] > 0  # GPU 0 holds memory: not a test of zeros
    got = series.query("gpufleet_gpu_memory_used_percent", "last", 300, time.time())
    assert without_scrape_labels(got) == pytest.approx(expected)
    windowed = series.query("gpufleet_gpu_memory_used_percent", "max", 60, time.time())
    assert without_scrape_labels(windowed) == pytest.approx(expected)


def test_workload_utilisation_and_groups(series: PrometheusSeries) -> None:
    now = time.time()
    got = series.query("gpufleet_workload_gpu_util", "last", 300, now)
    assert got == {
        (("namespace", "team-a"), ("pod", "train-0")): pytest.approx((91 + 87) / 2),
        (("namespace", "team-b"), ("pod", "notebook-0")): 4.0,
    }
    held = series.query(
        "DCGM_FI_DEV_GPU_UTIL", "avg", 60, now, {"pod": ""}, by=["Hostname"], across="count"
    )
    assert held == {(("Hostname", "gpu-node-1"),): 1.0}  # GPU 3: nobody holds it
    total = series.query("DCGM_FI_DEV_POWER_USAGE", "last", 300, now, by=(), across="sum")
    assert total == {(): 610 + 590 + 95 + 69}
    assert series.query("DCGM_FI_DEV_GPU_UTIL", "count", 60, now, {"gpu": "0"}) != {}
    median = series.query("DCGM_FI_DEV_GPU_UTIL", "quantile", 60, now, {"gpu": "2"}, 0.5)
    assert list(median.values()) == [4.0]


def test_pod_start_and_label_values(series: PrometheusSeries) -> None:
    starts = series.query("kube_pod_start_time", "last", 300, time.time(), {"pod": "train-0"})
    assert list(starts.values()) == [1_700_000_000]
    assert series.label_values("DCGM_FI_DEV_GPU_UTIL", "namespace") == sorted(
        {namespace for namespace, _ in HOLDERS.values()}
    )
    assert series.healthy()


def test_rule_engine_over_prometheus(series: PrometheusSeries) -> None:
    """The built-in rules evaluated by gpufleet over Prometheus' series: the notebook (4%,
    started long ago) holds its GPU idle; nothing is hot, full or failing."""
    engine = RuleEngine(builtin_alert_rules())
    engine.evaluate(series, time.time())
    active = {(alert.rule, alert.label("pod"), alert.state) for alert in engine.active()}
    assert ("workload-gpu-idle", "notebook-0", AlertState.PENDING) in active
    assert ("gpu-utilisation-low", "notebook-0", AlertState.PENDING) in active
    assert {rule for rule, _, _ in active} <= {"workload-gpu-idle", "gpu-utilisation-low"}
    assert not any(pod == "train-0" for _, pod, _ in active)


@pytest.mark.skipif(prometheus_binary() is None, reason="no prometheus binary")
def test_a_stopped_prometheus_is_unavailable(tmp_path: Path) -> None:
    with PrometheusProcess(tmp_path, []) as server:
        series = PrometheusSeries(server.url, timeout_s=2)
        assert series.healthy()
        assert series.query("DCGM_FI_DEV_GPU_UTIL", "avg", 60, time.time()) == {}
    assert not series.healthy()
    with pytest.raises(PrometheusUnavailableError, match="unreachable") as error:
        series.query("DCGM_FI_DEV_GPU_UTIL", "avg", 60, time.time())
    assert server.url in str(error.value)
