"""The local machine's telemetry: who holds which device (whole GPUs, shares, MIG instances)
and how much of it, and one read over NVML: the fake one here, the real one where a GPU
exists (skipped otherwise)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gpufleet.backends.local.machine import LocalMachine
from gpufleet.backends.local.telemetry import LocalTelemetry, allocated_fractions, device_users
from gpufleet.devices.fake import make_fake_nvml
from gpufleet.devices.nvml import NvmlUnavailableError, load_nvml
from gpufleet.devices.nvml_source import NvmlDeviceSource
from gpufleet.model import Placement
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.telemetry import DeviceUser
from gpufleet.testing.builders import make_pod
from tests.backends.local.conftest import DGX_EXAMPLE


@pytest.mark.parametrize(
    ("placements", "expected"),
    [
        pytest.param([Placement("box", (0, 3))], {(0, None): 1.0, (3, None): 1.0}, id="whole"),
        pytest.param(
            [Placement("box", (1,), 250), Placement("box", (1,), 500)],
            {(1, None): 0.75},
            id="two-shares-of-one",
        ),
        pytest.param([Placement("box", mig_slices=((7, 3),))], {(7, 3): 1.0}, id="a-mig-instance"),
        pytest.param([Placement("box", (9,))], {}, id="a-device-it-lacks"),
    ],
)
def test_allocated_fractions_name_each_device_by_uuid(
    dgx: NodeInventory,
    placements: list[Placement],
    expected: dict[tuple[int, int | None], float],
) -> None:
    uuid: dict[tuple[int, int | None], str] = {(d.index, None): d.uuid for d in dgx.devices}
    uuid |= {(d.index, m.slot): m.uuid for d in dgx.devices for m in d.mig}
    assert allocated_fractions(placements, dgx) == {uuid[k]: v for k, v in expected.items()}


def test_each_device_is_labelled_with_the_pods_holding_it(dgx: NodeInventory) -> None:
    first, second = make_pod("a", namespace="team"), make_pod("b", namespace="team")
    users = device_users(
        [
            (first, Placement("box", (0, 1)), "main"),
            (second, Placement("box", mig_slices=((7, 3),)), "worker"),
        ],
        dgx,
    )
    mig = next(m.uuid for m in dgx.devices[7].mig if m.slot == 3)
    assert users == [
        DeviceUser(dgx.devices[0].uuid, "a", "team", "main"),
        DeviceUser(dgx.devices[1].uuid, "a", "team", "main"),
        DeviceUser(mig, "b", "team", "worker"),
    ]


def read_once(devices: NvmlDeviceSource, state_root: Path) -> None:
    """One read of a machine with nothing running: a sample per GPU and MIG instance, nobody
    holding them."""
    inventory = devices.inventory()
    machine = LocalMachine(inventory, state_root, allow_root=True)
    try:
        (reading,) = LocalTelemetry(machine, devices, threading.RLock()).read()
    finally:
        machine.close()
    expected = {d.uuid for d in inventory.devices if d.healthy} | {
        m.uuid for d in inventory.devices if d.healthy for m in d.mig
    }
    assert {s.uuid for s in reading.samples} == expected
    assert reading.hostname == machine.node.name
    assert (list(reading.users), dict(reading.allocated)) == ([], {})
    assert reading.driver_version == inventory.driver_version


def test_one_read_of_the_fake_gpus(state_root: Path) -> None:
    devices = NvmlDeviceSource(make_fake_nvml(DGX_EXAMPLE, clock=lambda: 0))
    try:
        read_once(devices, state_root)
    finally:
        devices.close()


@pytest.mark.gpu
def test_one_read_of_the_real_gpus(state_root: Path) -> None:
    try:
        nvml = load_nvml()
    except NvmlUnavailableError as error:
        pytest.skip(str(error))
    devices = NvmlDeviceSource(nvml)
    try:
        read_once(devices, state_root)
    finally:
        devices.close()
