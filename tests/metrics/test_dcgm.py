# ruff: noqa: E501  (the golden sample is dcgm-exporter's exposition, one series per line)
"""The device families in dcgm-exporter's format: a golden sample written from dcgm-exporter's
own exposition (its Prometheus template: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, MIG labels, ``Hostname``, the driver label, then the Kubernetes attributes),
label sets per pod, MIG instances, XIDs and the cost of a scrape."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.metrics import families as f
from gpufleet.metrics.dcgm import DcgmCollector
from gpufleet.metrics.dcgm_text import render
from gpufleet.model.telemetry import DeviceSample, DeviceUser
from gpufleet.telemetry.source import NodeTelemetry

UUID0 = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
UUID1 = "GPU-1fb3a1f4-8e55-4b2c-9c34-3a52d2a0c111"
MIG1 = "MIG-9c3e2b5d-5d0a-5b8f-8b0e-0f8f4c1a2e33"

# Written as dcgm-exporter 4.x in Kubernetes mode writes it (label order, spacing and number
# format as its template has them; the parser below compares names, types, help, labels and
# values, which is what Prometheus and Grafana read).
GOLDEN = f"""\
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="ml",pod="train-0"}} 1980
DCGM_FI_DEV_SM_CLOCK{{gpu="1",UUID="{UUID1}",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} 345
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="ml",pod="train-0"}} 64
DCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="{UUID1}",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} 33
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="ml",pod="train-0"}} 612.551000
DCGM_FI_DEV_POWER_USAGE{{gpu="1",UUID="{UUID1}",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} 71.000000
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="ml",pod="train-0"}} 93
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="{UUID1}",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} 0
# HELP DCGM_FI_DEV_MEM_COPY_UTIL Memory utilization (in %).
# TYPE DCGM_FI_DEV_MEM_COPY_UTIL gauge
DCGM_FI_DEV_MEM_COPY_UTIL{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="ml",pod="train-0"}} 41
DCGM_FI_DEV_MEM_COPY_UTIL{{gpu="1",UUID="{UUID1}",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} 0
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="ml",pod="train-0"}} 4096
DCGM_FI_DEV_FB_FREE{{gpu="1",UUID="{UUID1}",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} 81559
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="ml",pod="train-0"}} 77463
DCGM_FI_DEV_FB_USED{{gpu="1",UUID="{UUID1}",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} 0
# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="ml",pod="train-0"}} 0.930000
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="1",UUID="{UUID1}",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} 0.000000
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",err_code="0",err_msg="No Error",namespace="ml",pod="train-0"}} 0
DCGM_FI_DEV_XID_ERRORS{{gpu="1",UUID="{UUID1}",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",err_code="79",err_msg="GPU has fallen off the bus"}} 79
# HELP gpufleet_gpu_allocated {f.GPU_ALLOCATED.help}
# TYPE gpufleet_gpu_allocated gauge
gpufleet_gpu_allocated{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} 1
gpufleet_gpu_allocated{{gpu="1",UUID="{UUID1}",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} 0
"""

MODEL = "NVIDIA H100 80GB HBM3"


class Fixed:
    def __init__(self, *nodes: NodeTelemetry) -> None:
        self.nodes = nodes

    def read(self) -> tuple[NodeTelemetry, ...]:
        return self.nodes


def scrape(*nodes: NodeTelemetry) -> str:
    registry = CollectorRegistry()
    registry.register(DcgmCollector(Fixed(*nodes)))
    return generate_latest(registry).decode()


Parsed = dict[str, tuple[str, str, set[tuple[tuple[tuple[str, str], ...], float]]]]


def parsed(text: str) -> Parsed:
    return {
        family.name: (
            family.type,
            family.documentation,
            {(tuple(sorted(s.labels.items())), s.value) for s in family.samples},
        )
        for family in text_string_to_metric_families(text)
    }


def two_gpus(
    users: tuple[DeviceUser, ...] = (DeviceUser(UUID0, "train-0", "ml", "main"),),
) -> NodeTelemetry:
    busy = DeviceSample(
        0, UUID0, MODEL, gpu_util=93, mem_copy_util=41, fb_used_mib=77463, fb_free_mib=4096,
        temperature_c=64, power_w=612.551, sm_clock_mhz=1980,
    )  # fmt: skip
    idle = DeviceSample(
        1, UUID1, MODEL, fb_free_mib=81559, temperature_c=33, power_w=71, sm_clock_mhz=345, xid=79
    )
    return NodeTelemetry(
        "node-1",
        [busy, idle],
        users,
        {UUID0: 1.0},
        {0: "00000000:18:00.0", 1: "00000000:28:00.0"},
        "550.54.15",
    )


def test_exposition_matches_dcgm_exporters() -> None:
    assert parsed(scrape(two_gpus())) == parsed(GOLDEN)


def test_every_device_family_is_served_with_its_names() -> None:
    got = parsed(scrape(two_gpus()))
    for family in f.DEVICES:
        kind, help_text, samples = got[family.name]
        assert (kind, help_text) == (str(family.kind), family.help)
        for labels, _ in samples:
            assert {k for k, _ in labels} <= set(family.labels)


def test_a_shared_device_has_one_series_per_pod_with_the_devices_value() -> None:
    users = tuple(DeviceUser(UUID0, f"nb-{i}", "ml", "main") for i in range(3))
    _, _, samples = parsed(scrape(two_gpus(users)))["DCGM_FI_DEV_GPU_UTIL"]
    on_gpu0 = [dict(labels) for labels, value in samples if dict(labels)["gpu"] == "0"]
    assert sorted(s["pod"] for s in on_gpu0) == ["nb-0", "nb-1", "nb-2"]
    assert {value for labels, value in samples if dict(labels)["gpu"] == "0"} == {93.0}
    _, _, allocated = parsed(scrape(two_gpus(users)))["gpufleet_gpu_allocated"]
    assert len(allocated) == 2  # per device, not per pod


def test_mig_instances_carry_their_profile_and_instance_and_the_gpus_uuid() -> None:
    parent = DeviceSample(0, UUID0, "A100", gpu_util=20, power_w=120, temperature_c=40)
    instance = DeviceSample(
        0, MIG1, "A100", gpu_util=60, fb_used_mib=9000, fb_free_mib=728,
        mig_profile="1g.10gb", gpu_instance_id=13,
    )  # fmt: skip
    node = NodeTelemetry(
        "node-2", [parent, instance], [DeviceUser(MIG1, "serve-0", "web", "server")], {MIG1: 1.0}
    )
    got = parsed(scrape(node))
    used = {dict(labels).get("pod", ""): (dict(labels), v)
            for labels, v in got["DCGM_FI_DEV_FB_USED"][2]}  # fmt: skip
    labels, value = used["serve-0"]
    assert value == 9000
    assert labels["GPU_I_PROFILE"] == "1g.10gb"
    assert labels["GPU_I_ID"] == "13"
    assert labels["UUID"] == UUID0
    assert labels["device"] == "nvidia0"
    assert "DCGM_FI_DRIVER_VERSION" not in labels  # no driver known, no label
    # DCGM reports no power per MIG instance: only the GPU's series.
    power = got["DCGM_FI_DEV_POWER_USAGE"][2]
    assert [dict(labels).get("GPU_I_PROFILE") for labels, _ in power] == [None]
    allocated = {
        dict(labels).get("GPU_I_ID", "gpu"): v for labels, v in got["gpufleet_gpu_allocated"][2]
    }
    assert allocated == {"gpu": 0.0, "13": 1.0}


@pytest.mark.parametrize(
    ("xid", "message"),
    [(0, "No Error"), (48, "Double Bit ECC Error"), (79, "GPU has fallen off the bus"),
     (999, "Unknown Error")],
    ids=["none", "dbe", "off-the-bus", "unknown"],
)  # fmt: skip
def test_xid_carries_its_code_and_nvidias_name(xid: int, message: str) -> None:
    node = NodeTelemetry("n", [DeviceSample(0, UUID0, MODEL, xid=xid)])
    ((labels, value),) = parsed(scrape(node))["DCGM_FI_DEV_XID_ERRORS"][2]
    assert value == xid
    assert dict(labels)["err_code"] == str(xid)
    assert dict(labels)["err_msg"] == message


def eight_gpus_64_pods() -> NodeTelemetry:
    samples = [DeviceSample(i, f"GPU-{i}", MODEL, gpu_util=50, fb_used_mib=1000) for i in range(8)]
    users = [DeviceUser(f"GPU-{i % 8}", f"pod-{i}", "ml", "main") for i in range(64)]
    return NodeTelemetry("node", samples, users, {f"GPU-{i}": 1.0 for i in range(8)})


def test_8_gpus_and_64_pods_give_every_pod_on_every_pod_family() -> None:
    text = scrape(eight_gpus_64_pods())
    assert text.count('pod="pod-') == 64 * 9  # 9 DCGM families carry pods (not allocation)


def mig_node() -> NodeTelemetry:
    parent = DeviceSample(0, UUID0, "A100", gpu_util=20, power_w=120, temperature_c=40, xid=48)
    instance = DeviceSample(
        0, MIG1, "A100", fb_used_mib=9000, fb_free_mib=728, mig_profile="1g.10gb",
        gpu_instance_id=13,
    )  # fmt: skip
    odd = DeviceUser(MIG1, 'we"ird\\pod', "web", "line\nbreak")
    return NodeTelemetry("node-2", [parent, instance], [odd], {MIG1: 1.0}, {}, "550.54.15")


@pytest.mark.parametrize(
    "nodes",
    [
        pytest.param((two_gpus(),), id="two-gpus"),
        pytest.param(
            (two_gpus(tuple(DeviceUser(UUID0, f"nb-{i}", "ml", "main") for i in range(3))),),
            id="shared",
        ),
        pytest.param((mig_node(),), id="mig-xid-escaping"),
        pytest.param((two_gpus(), mig_node(), eight_gpus_64_pods()), id="three-nodes"),
        pytest.param((), id="nothing"),
    ],
)
def test_the_agents_direct_text_is_the_collectors(nodes: tuple[NodeTelemetry, ...]) -> None:
    """The node agent writes the text itself (dcgm_text.render); it must say exactly what the
    prometheus-client collector says: same families, help, types, labels and values, in the
    same order."""
    direct = render(list(nodes))
    assert parsed(direct) == parsed(scrape(*nodes))
    names = [line.split()[2] for line in direct.splitlines() if line.startswith("# TYPE")]
    expected = [
        line.split()[2] for line in scrape(*nodes).splitlines() if line.startswith("# TYPE")
    ]
    assert names == expected
