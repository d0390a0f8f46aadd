"""Devices and gangs as environment variables; this machine as the scheduler's node."""

from __future__ import annotations

import platform
import socket

import pytest

from gpufleet.backends.local.devices_env import (
    free_port,
    placement_env,
    rendezvous_env,
)
from gpufleet.backends.local.node import machine_node, machine_resources
from gpufleet.devices.visibility import DeviceNotFoundError
from gpufleet.model import GFD_LABELS, Placement
from gpufleet.model.inventory import NodeInventory


def uuid(inventory: NodeInventory, index: int) -> str:
    device = inventory.device(index)
    assert device is not None
    return device.uuid


def mig(inventory: NodeInventory, gpu: int, slot: int) -> str:
    device = inventory.device(gpu)
    assert device is not None
    return next(m.uuid for m in device.mig if m.slot == slot)


@pytest.mark.parametrize(
    ("placement", "mps", "expected"),
    [
        pytest.param(
            Placement("box", (2,)),
            False,
            lambda i: {
                "CUDA_VISIBLE_DEVICES": uuid(i, 2),
                "NVIDIA_VISIBLE_DEVICES": uuid(i, 2),
                "GPUFLEET_GPU_MILLI": "1000",
            },
            id="one-gpu",
        ),
        pytest.param(
            Placement("box", (5, 1)),
            False,
            lambda i: {
                "CUDA_VISIBLE_DEVICES": f"{uuid(i, 5)},{uuid(i, 1)}",
                "NVIDIA_VISIBLE_DEVICES": f"{uuid(i, 5)},{uuid(i, 1)}",
                "GPUFLEET_GPU_MILLI": "1000",
            },
            id="two-gpus-in-the-schedulers-order",
        ),
        pytest.param(
            Placement("box", (3,), 250),
            False,
            lambda i: {
                "CUDA_VISIBLE_DEVICES": uuid(i, 3),
                "NVIDIA_VISIBLE_DEVICES": uuid(i, 3),
                "GPUFLEET_GPU_MILLI": "250",
            },
            id="share-without-mps",
        ),
        pytest.param(
            Placement("box", (3,), 250),
            True,
            lambda i: {
                "CUDA_VISIBLE_DEVICES": uuid(i, 3),
                "NVIDIA_VISIBLE_DEVICES": uuid(i, 3),
                "GPUFLEET_GPU_MILLI": "250",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20389M",  # a quarter of 81,559 MiB
            },
            id="share-with-mps",
        ),
        pytest.param(
            Placement("box", (3,)),
            True,
            lambda i: {
                "CUDA_VISIBLE_DEVICES": uuid(i, 3),
                "NVIDIA_VISIBLE_DEVICES": uuid(i, 3),
                "GPUFLEET_GPU_MILLI": "1000",
            },
            id="whole-gpu-with-mps-has-no-limits",
        ),
        pytest.param(
            Placement("box", mig_slices=((7, 1),)),
            True,
            lambda i: {
                "CUDA_VISIBLE_DEVICES": mig(i, 7, 1),
                "NVIDIA_VISIBLE_DEVICES": mig(i, 7, 1),
            },
            id="mig-slice-by-its-uuid",
        ),
        pytest.param(
            Placement("box"),
            False,
            lambda i: {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "none"},
            id="cpu-only-sees-no-gpu",
        ),
    ],
)
def test_placement_env(
    dgx: NodeInventory, placement: Placement, mps: bool, expected: object
) -> None:
    assert callable(expected)
    assert placement_env(placement, dgx, mps) == expected(dgx)


def test_the_fake_gpus_have_distinct_uuids(dgx: NodeInventory) -> None:
    uuids = {d.uuid for d in dgx.devices}
    assert len(uuids) == 8
    assert all(u.startswith("GPU-") for u in uuids)
    assert mig(dgx, 7, 0).startswith("MIG-")


@pytest.mark.parametrize(
    "placement",
    [
        pytest.param(Placement("box", (8,)), id="no-such-gpu"),
        pytest.param(Placement("box", (7,)), id="mig-enabled-gpu-whole"),
        pytest.param(Placement("box", mig_slices=((7, 9),)), id="no-such-slot"),
    ],
)
def test_devices_the_machine_lacks(dgx: NodeInventory, placement: Placement) -> None:
    with pytest.raises(DeviceNotFoundError):
        placement_env(placement, dgx)


@pytest.mark.parametrize(("rank", "world"), [(0, 1), (0, 2), (1, 2), (3, 4)])
def test_rendezvous_env(rank: int, world: int) -> None:
    env = rendezvous_env(rank, world, 29500)
    assert env == {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": str(world),
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": str(rank),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
    }


@pytest.mark.parametrize(("rank", "world", "port"), [(2, 2, 1), (-1, 2, 1), (0, 1, 0)])
def test_rendezvous_env_refuses_nonsense(rank: int, world: int, port: int) -> None:
    with pytest.raises(ValueError, match=r"rank|port"):
        rendezvous_env(rank, world, port)


def test_free_port_can_be_listened_on() -> None:
    port = free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen()


def test_machine_node_from_the_inventory(eight_gpus: NodeInventory) -> None:
    node = machine_node(eight_gpus, "box", 16_000, 65_536)
    assert node.name == "box"
    assert (node.cpu_milli, node.memory_mib) == (16_000, 65_536)
    assert [g.index for g in node.gpus] == list(range(8))
    assert [g.uuid for g in node.gpus] == [d.uuid for d in eight_gpus.devices]
    assert node.gpus[0].model == "NVIDIA-H100-80GB-HBM3"
    assert node.labels[GFD_LABELS.COUNT] == "8"
    assert node.labels[GFD_LABELS.HOSTNAME] == "box"
    assert node.labels[GFD_LABELS.OS] == platform.system().lower()
    assert node.labels[GFD_LABELS.ARCH] in ("amd64", "arm64")


def test_machine_node_with_mig_has_slices(dgx: NodeInventory) -> None:
    node = machine_node(dgx, "dgx", 1000, 1024)
    assert [s.profile for s in node.gpus[7].mig_slices] == [
        "2g.20gb",
        "1g.10gb",
        "1g.10gb",
        "3g.40gb",
    ]


def test_machine_resources_are_this_machines() -> None:
    cpu_milli, memory_mib = machine_resources()
    assert cpu_milli >= 1000
    assert memory_mib > 0
    assert machine_node(NodeInventory(), "cpu-box").cpu_milli == cpu_milli
