"""GFD labels from an inventory: names and value formats as GPU Feature Discovery writes them."""

from __future__ import annotations

import re

import pytest

from gpufleet.devices.discovery import Fabric, discover
from gpufleet.devices.labels import gfd_node_labels, gpu_family, nvlink_domain
from gpufleet.model.gpu import GpuDevice, GpuSharing, SharingStrategy
from gpufleet.model.node import GFD_LABELS, gfd_labels
from tests.devices.conftest import MakeNvml

H100_NODE = """
driver_version: "550.54.15"
cuda_driver_version: "12.4"
nvswitch: true
devices:
  - {product: NVIDIA H100 80GB HBM3, count: 3}
  - product: NVIDIA H100 80GB HBM3
    mig: {instances: [{profile: 3g.40gb}, {profile: 1g.10gb}, {profile: 1g.10gb}]}
"""

#: GFD's own expected-output patterns (k8s-device-plugin tests/expected-output-mig-mixed.txt).
GFD_FORMATS = {
    "nvidia.com/cuda.driver.major": r"[0-9]+",
    "nvidia.com/cuda.driver.minor": r"[0-9]+",
    "nvidia.com/cuda.driver.rev": r"[0-9]*",
    "nvidia.com/cuda.runtime.major": r"[0-9]+",
    "nvidia.com/cuda.runtime.minor": r"[0-9]+",
    "nvidia.com/cuda.driver-version.major": r"[0-9]+",
    "nvidia.com/cuda.driver-version.minor": r"[0-9]+",
    "nvidia.com/cuda.driver-version.revision": r"[0-9]*",
    "nvidia.com/cuda.driver-version.full": r"[0-9]+\.[0-9]+\.[0-9]+",
    "nvidia.com/cuda.runtime-version.major": r"[0-9]+",
    "nvidia.com/cuda.runtime-version.minor": r"[0-9]+",
    "nvidia.com/cuda.runtime-version.full": r"[0-9]+\.[0-9]+",
    "nvidia.com/gpu.count": r"[0-9]+",
    "nvidia.com/gpu.replicas": r"[0-9]+",
    "nvidia.com/gpu.sharing-strategy": r"none|mps|time-slicing",
    "nvidia.com/gpu.product": r"[A-Za-z0-9_.-]+",
    "nvidia.com/gpu.memory": r"[0-9]+",
    "nvidia.com/gpu.family": r"[a-z-]+",
    "nvidia.com/mig.capable": r"true|false",
    "nvidia.com/gpu.compute.major": r"[0-9]+",
    "nvidia.com/gpu.compute.minor": r"[0-9]+",
    "nvidia.com/mig.strategy": r"[a-z_-]+",
    "nvidia.com/mps.capable": r"true|false",
}


def test_every_gfd_label_in_gfd_format(make_nvml: MakeNvml) -> None:
    labels = gfd_node_labels(discover(make_nvml(H100_NODE)), node_name="dgx-1")
    for key, pattern in GFD_FORMATS.items():
        assert re.fullmatch(pattern, labels[key]), (key, labels.get(key))
    mig_keys = [k for k in labels if k.startswith("nvidia.com/mig-")]
    for key in mig_keys:
        assert re.fullmatch(
            r"nvidia\.com/mig-[0-9]+g\.[0-9]+gb\.(product|count|replicas|sharing-strategy)", key
        ), key


def test_h100_node_values(make_nvml: MakeNvml) -> None:
    labels = gfd_node_labels(discover(make_nvml(H100_NODE)), node_name="dgx-1")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == (
        "9",
        "0",
    )
    assert labels["nvidia.com/gpu.replicas"] == "1"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "2"
    assert labels["nvidia.com/mig-3g.40gb.count"] == "1"
    assert labels["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.54.15"
    assert labels["nvidia.com/cuda.driver.rev"] == "15"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.4"
    assert labels[GFD_LABELS.NVLINK_DOMAIN] == "dgx-1"
    assert "nvidia.com/gpu.clique" not in labels


def test_a_t4_node_without_nvlink_or_mig(make_nvml: MakeNvml) -> None:
    nvml = make_nvml("driver_version: '535.104'\ndevices: [{product: Tesla T4, count: 2}]")
    labels = gfd_node_labels(discover(nvml), node_name="t4-node")
    assert labels["nvidia.com/gpu.family"] == "turing"
    assert labels["nvidia.com/mig.capable"] == "false"
    assert labels["nvidia.com/cuda.driver.rev"] == ""
    assert "nvidia.com/mig.strategy" not in labels
    assert GFD_LABELS.NVLINK_DOMAIN not in labels


def test_time_slicing_marks_the_product_shared(make_nvml: MakeNvml) -> None:
    sharing = GpuSharing(SharingStrategy.TIME_SLICING, 4)
    nvml = make_nvml("devices: [{product: NVIDIA A100-SXM4-80GB, count: 2}]")
    labels = gfd_node_labels(discover(nvml), node_name="n", sharing=sharing)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"


@pytest.mark.parametrize(
    "sharing",
    [GpuSharing(), GpuSharing(SharingStrategy.TIME_SLICING, 4)],
    ids=["no-sharing", "time-slicing"],
)
def test_agrees_with_the_model_where_they_overlap(make_nvml: MakeNvml, sharing: GpuSharing) -> None:
    inventory = discover(make_nvml("devices: [{product: NVIDIA A100-SXM4-80GB, count: 2}]"))
    ours = gfd_node_labels(inventory, node_name="n", sharing=sharing)
    gpus = tuple(GpuDevice(d.index, d.product, d.memory_mib) for d in inventory.devices)
    model = gfd_labels(gpus, sharing)
    for key, value in model.items():
        assert ours[key] == value, key


def test_fabric_gives_the_clique_as_nvlink_domain(make_nvml: MakeNvml) -> None:
    inventory = discover(make_nvml("devices: [{product: NVIDIA B200, count: 4}]"))
    fabric = Fabric("0b3c6c1e-8a2f-4bd1-9a44-3c5e7d0f9a10", 7)
    labels = gfd_node_labels(inventory, node_name="gb200-rack1-n3", fabric=fabric)
    clique = "0b3c6c1e-8a2f-4bd1-9a44-3c5e7d0f9a10.7"
    assert labels["nvidia.com/gpu.clique"] == clique
    assert labels[GFD_LABELS.NVLINK_DOMAIN] == clique
    assert labels["nvidia.com/gpu.family"] == "blackwell"


def test_a_long_node_name_still_makes_a_valid_domain(make_nvml: MakeNvml) -> None:
    inventory = discover(make_nvml("nvswitch: true\ndevices: [{product: NVIDIA H200, count: 2}]"))
    name = "gpu-" + "x" * 80 + ".example.com"
    domain = nvlink_domain(inventory, name, None)
    assert domain is not None
    assert len(domain) <= 63
    assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?", domain)
    assert domain != nvlink_domain(inventory, name + "2", None)


@pytest.mark.parametrize(
    ("major", "minor", "family"),
    [
        (7, 0, "volta"),
        (7, 5, "turing"),
        (8, 0, "ampere"),
        (8, 9, "ada-lovelace"),
        (9, 0, "hopper"),
        (10, 0, "blackwell"),
        (12, 0, "blackwell"),
        (4, 0, "undefined"),
    ],
    ids=["v100", "t4", "a100", "l40s", "h100", "b200", "rtx50", "unknown"],
)
def test_gpu_family(major: int, minor: int, family: str) -> None:
    assert gpu_family(major, minor) == family


def test_no_devices_no_labels(make_nvml: MakeNvml) -> None:
    assert gfd_node_labels(discover(make_nvml("devices: []")), node_name="cpu") == {}
