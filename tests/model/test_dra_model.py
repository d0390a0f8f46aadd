"""DRA's plain data (issue 32 item 1): a GPU of the device-plugin path is the device NVIDIA's DRA
driver would list for it, so the core sees one kind of GPU; qualified names and versions behave
as Kubernetes defines them."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpufleet.model import GpuDevice
from gpufleet.model.device_cel import compile_selector, device_matches, parse_semver
from gpufleet.model.dra import (
    NVIDIA_GPU_DRIVER,
    DeviceTaint,
    DeviceTaintEffect,
    DeviceToleration,
    gpu_device,
    qualified,
)
from gpufleet.testing.builders import make_node
from gpufleet.testing.dra import GPU_CLASS


def test_a_device_plugin_gpu_is_the_device_nvidias_driver_lists() -> None:
    node = make_node("node-a", gpus=2, model="H100")
    device = gpu_device(node.gpus[1], node.name, product="NVIDIA-H100-80GB-HBM3")
    assert device.id.driver == NVIDIA_GPU_DRIVER
    assert (device.pool, device.name) == ("node-a", "gpu-1")
    assert device.attribute("index") == 1
    assert device.attribute("productName") == "NVIDIA-H100-80GB-HBM3"
    assert device.capacity[f"{NVIDIA_GPU_DRIVER}/memory"] == Fraction(node.gpus[1].memory_mib << 20)
    (selector,) = GPU_CLASS.selectors
    assert device_matches(compile_selector(selector.expression), device)
    assert device.taints == ()


def test_an_unhealthy_gpu_is_a_tainted_device() -> None:
    sick = gpu_device(GpuDevice(0, "H100", 81920, healthy=False), "node-a")
    assert [t.effect for t in sick.taints] == [DeviceTaintEffect.NO_SCHEDULE]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("index", "gpu.nvidia.com/index", id="driver-domain"),
        pytest.param("resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/pcieRoot",
                     id="own-domain"),
    ],
)  # fmt: skip
def test_a_name_without_a_domain_is_the_drivers(name: str, expected: str) -> None:
    assert qualified(name, NVIDIA_GPU_DRIVER) == expected


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        pytest.param("1.0.0-alpha", "1.0.0-alpha.1", id="shorter-prerelease-first"),
        pytest.param("1.0.0-alpha.1", "1.0.0-alpha.beta", id="numbers-before-text"),
        pytest.param("1.0.0-beta.2", "1.0.0-beta.11", id="numbers-as-numbers"),
        pytest.param("1.0.0-rc.1", "1.0.0", id="release-after-prerelease"),
        pytest.param("1.9.0", "1.10.0", id="minor-as-number"),
    ],
)
def test_semver_precedence(lower: str, higher: str) -> None:
    assert parse_semver(lower).sort_key() < parse_semver(higher).sort_key()


def test_build_metadata_does_not_change_a_version() -> None:
    assert parse_semver("1.2.3+build.5") == parse_semver("1.2.3")
    assert str(parse_semver("1.2.3-rc.1+b")) == "1.2.3-rc.1+b"


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        pytest.param(DeviceToleration("xid", "Exists"), True, id="exists"),
        pytest.param(DeviceToleration("xid", "Equal", "79"), True, id="equal"),
        pytest.param(DeviceToleration("xid", "Equal", "48"), False, id="other-value"),
        pytest.param(DeviceToleration(None, "Exists"), True, id="everything"),
        pytest.param(DeviceToleration("xid", "Exists", effect=DeviceTaintEffect.NO_EXECUTE),
                     False, id="other-effect"),
    ],
)  # fmt: skip
def test_device_tolerations(toleration: DeviceToleration, tolerated: bool) -> None:
    assert toleration.tolerates(DeviceTaint("xid", "79")) is tolerated
