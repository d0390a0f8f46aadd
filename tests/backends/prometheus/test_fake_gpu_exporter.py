"""The fake node agent's /metrics that the real-Prometheus tests scrape: its clock stays put
until the test moves it, and then serves the spec's next usage point and the XID of a fault due
by then (no Prometheus needed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.testing.prometheus import FakeGpuExporter

SPEC = {
    "node": "n1",
    "devices": [
        {
            "product": "NVIDIA H100 80GB HBM3",
            "utilization": [{"at": 0, "temperature_c": 70}, {"at": 50, "temperature_c": 40}],
        },
        {"product": "NVIDIA H100 80GB HBM3"},
    ],
    "faults": [{"at": 10, "gpu": 1, "xid": 79}],
}


@pytest.fixture
def exporter() -> Iterator[FakeGpuExporter]:
    served = FakeGpuExporter("n1", SPEC)
    try:
        yield served
    finally:
        served.close()


def gauge(exporter: FakeGpuExporter, family: str) -> dict[str, tuple[float, str]]:
    """GPU -> (value, err_code label or "") of ``family`` as served now."""
    return {
        sample.labels["gpu"]: (sample.value, sample.labels.get("err_code", ""))
        for metric in text_string_to_metric_families(exporter.text())
        for sample in metric.samples
        if sample.name == family
    }


def test_the_clock_moves_only_when_told(exporter: FakeGpuExporter) -> None:
    assert gauge(exporter, "DCGM_FI_DEV_GPU_TEMP")["0"][0] == 70
    assert gauge(exporter, "DCGM_FI_DEV_XID_ERRORS") == {"0": (0, "0"), "1": (0, "0")}

    exporter.advance_to(10)
    assert gauge(exporter, "DCGM_FI_DEV_GPU_TEMP")["0"][0] == 70
    assert gauge(exporter, "DCGM_FI_DEV_XID_ERRORS") == {"0": (0, "0"), "1": (79, "79")}

    exporter.advance_to(50)
    assert gauge(exporter, "DCGM_FI_DEV_GPU_TEMP")["0"][0] == 40
    assert gauge(exporter, "DCGM_FI_DEV_XID_ERRORS")["1"] == (79, "79")  # the last XID stays
    with pytest.raises(ValueError, match="goes forward: 20 is before 50"):
        exporter.advance_to(20)
