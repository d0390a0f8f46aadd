"""A whole GPU's and a MIG instance's series carry the labels dcgm-exporter gives them, in every
place gpufleet writes them: serve's exposition (``metrics.dcgm``), the node agent's
(``metrics.dcgm_text``), the series store's (``recording.device_series_labels``, so gpufleet's
own alerts carry them) and the fake GPU exporter the real-Prometheus tests scrape.

What dcgm-exporter emits (NVIDIA/dcgm-exporter, pkg/dcgmexporter): its GPU template writes
``gpu``, ``UUID``, ``device``, ``modelName``, then ``GPU_I_PROFILE`` and ``GPU_I_ID`` only on a
MIG instance, then ``Hostname`` and the label fields (``DCGM_FI_DRIVER_VERSION``)
(render_metrics.go, ``gpuMetricsFormat``); ``UUID``, ``gpu`` and ``device`` come from the
monitored entity's device info (collector/gpu_collector.go, ``ToMetric``: ``GPUUUID: d.UUID``,
``GPUDevice: nvidia<d.GPU>``, ``GPUInstanceID: instanceInfo.Info.NvmlInstanceId``), and a GPU
instance's entity carries its parent GPU's device info (sysinfo/system_info.go,
``AddAllGPUInstances``: ``sysInfo.GPU(i).DeviceInfo`` with ``&GPUInstances[j]``). So a MIG
instance's series has its GPU's ``UUID`` (``GPU-...``, not the instance's ``MIG-...``), index and
``device``, told apart from its siblings by ``GPU_I_ID`` (NVML's GPU instance id).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.metrics.dcgm import families
from gpufleet.metrics.dcgm_text import render
from gpufleet.model.alerts import AlertMetric, AlertRule, Comparison
from gpufleet.model.telemetry import DeviceSample, DeviceUser
from gpufleet.telemetry.observed_series import ObservedSeries
from gpufleet.telemetry.recording import SeriesRecorder, device_series_labels
from gpufleet.telemetry.rules import RuleEngine
from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.source import NodeTelemetry
from gpufleet.testing.prometheus import FakeGpuExporter

GPU_UUID = "GPU-5d1b0a43-8f0e-4c2a-9b1e-1f2d3c4b5a69"
MIG_UUID = "MIG-9a8b7c6d-5e4f-5a3b-8c2d-1e0f9a8b7c6d"
MODEL = "NVIDIA A100-SXM4-40GB"
BUS = "00000000:4E:00.0"
DRIVER = "550.54.15"

#: GPU 3 of node-m in MIG mode, and its instance with GPU instance id 13 (profile 1g.5gb).
PARENT = DeviceSample(3, GPU_UUID, MODEL, gpu_util=20, fb_used_mib=9000, fb_free_mib=31960,
                      temperature_c=40, power_w=120)  # fmt: skip
INSTANCE = DeviceSample(3, MIG_UUID, MODEL, gpu_util=60, fb_used_mib=4000, fb_free_mib=864,
                        mig_profile="1g.5gb", gpu_instance_id=13)  # fmt: skip


@dataclass(frozen=True)
class Case:
    sample: DeviceSample
    driver: str
    buses: dict[int, str]
    #: dcgm-exporter's labels of its series (no holder), as its template orders them.
    labels: dict[str, str]


CASES = [
    pytest.param(
        Case(PARENT, DRIVER, {3: BUS},
             {"gpu": "3", "UUID": GPU_UUID, "pci_bus_id": BUS, "device": "nvidia3",
              "modelName": MODEL, "Hostname": "node-m", "DCGM_FI_DRIVER_VERSION": DRIVER}),
        id="whole-gpu",
    ),
    pytest.param(
        Case(INSTANCE, DRIVER, {3: BUS},
             {"gpu": "3", "UUID": GPU_UUID, "pci_bus_id": BUS, "device": "nvidia3",
              "modelName": MODEL, "GPU_I_PROFILE": "1g.5gb", "GPU_I_ID": "13",
              "Hostname": "node-m", "DCGM_FI_DRIVER_VERSION": DRIVER}),
        id="mig-instance",
    ),
    pytest.param(
        Case(INSTANCE, "", {},
             {"gpu": "3", "UUID": GPU_UUID, "device": "nvidia3", "modelName": MODEL,
              "GPU_I_PROFILE": "1g.5gb", "GPU_I_ID": "13", "Hostname": "node-m"}),
        id="mig-instance-no-driver-or-bus-known",
    ),
]  # fmt: skip


def reading(case: Case, users: tuple[DeviceUser, ...] = ()) -> NodeTelemetry:
    return NodeTelemetry("node-m", [PARENT, INSTANCE], users, {}, case.buses, case.driver)


def fb_used_series(exposition: str) -> list[dict[str, str]]:
    """The label sets of ``DCGM_FI_DEV_FB_USED`` in an exposition text (empty labels dropped,
    as Prometheus stores them)."""
    return [
        {k: v for k, v in sample.labels.items() if v}
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == AlertMetric.FB_USED.value
    ]


def mine(series: list[dict[str, str]], sample: DeviceSample) -> dict[str, str]:
    (found,) = [s for s in series if s.get("GPU_I_ID") == ("13" if sample.mig_profile else None)]
    return found


@pytest.mark.parametrize("case", CASES)
def test_the_store_labels_a_device_as_dcgm_exporter_does(case: Case) -> None:
    assert dict(device_series_labels(reading(case), case.sample)) == case.labels


@pytest.mark.parametrize("case", CASES)
def test_serve_and_the_agent_expose_a_device_as_dcgm_exporter_does(case: Case) -> None:
    [family] = [f for f in families([reading(case)]) if f.name == AlertMetric.FB_USED.value]
    served = [{k: v for k, v in s.labels.items() if v} for s in family.samples]
    assert mine(served, case.sample) == case.labels
    assert list(mine(served, case.sample)) == list(case.labels)  # dcgm-exporter's order
    assert mine(fb_used_series(render([reading(case)])), case.sample) == case.labels


@pytest.mark.parametrize("case", CASES)
def test_an_alert_on_a_device_carries_its_labels_and_its_own_holder(case: Case) -> None:
    # The instance is held by a pod; its GPU (in MIG mode) by nobody.
    holder = DeviceUser(MIG_UUID, "serve-0", "web", "server")
    recorder = SeriesRecorder(SeriesStore())
    recorder.record(0.0, [reading(case, (holder,))])
    engine = RuleEngine([AlertRule("fb", AlertMetric.FB_USED, Comparison.GT, 0)])
    engine.evaluate(ObservedSeries(recorder, dict), 0.0)
    alerts = {a.label("GPU_I_ID"): dict(a.labels) for a in engine.alerts()}
    got = alerts["13" if case.sample.mig_profile else ""]
    held = {"container": "server", "namespace": "web", "pod": "serve-0"}
    expected = {**case.labels, **(held if case.sample.mig_profile else {})}
    assert {k: v for k, v in got.items() if k not in ("alertname", "severity")} == expected


def test_memory_in_percent_of_an_instance_is_of_its_own_memory() -> None:
    recorder = SeriesRecorder(SeriesStore())
    recorder.record(0.0, [NodeTelemetry("node-m", [PARENT, INSTANCE])])
    series = ObservedSeries(recorder, dict)
    found = series.query(AlertMetric.FB_USED_PERCENT.value, "last", 300.0, 0.0)
    percent = {dict(labels).get("GPU_I_ID"): value for labels, value in found.items()}
    assert percent == {
        None: pytest.approx(100 * 9000 / 40960, rel=1e-3),
        "13": pytest.approx(100 * 4000 / 4864, rel=1e-3),
    }


def test_the_fake_gpu_exporter_labels_a_mig_instance_with_its_gpus_uuid() -> None:
    spec = {
        "node": "n1",
        "driver_version": DRIVER,
        "devices": [{
            "product": "NVIDIA A100-SXM4-40GB",
            "mig": {"enabled": True, "instances": [
                {"profile": "3g.20gb", "gpu_instance_id": 2},
                {"profile": "1g.5gb", "gpu_instance_id": 13, "fb_used_mib": 1000},
            ]},
        }],
    }  # fmt: skip
    exporter = FakeGpuExporter("n1", spec)
    try:
        series = fb_used_series(exporter.text())
    finally:
        exporter.close()
    (gpu,) = [s for s in series if "GPU_I_ID" not in s]
    assert gpu["UUID"].startswith("GPU-")
    instances = {s["GPU_I_ID"]: s for s in series if "GPU_I_ID" in s}
    assert set(instances) == {"2", "13"}
    for instance in instances.values():
        assert {k: v for k, v in instance.items() if not k.startswith("GPU_I_")} == gpu
    assert instances["13"]["GPU_I_PROFILE"] == "1g.5gb"
