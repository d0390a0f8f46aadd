"""Discovery from fake NVMLs: versions, products, MIG slots by placement, NVLink peers, fabric."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpufleet.devices.discovery import (
    cuda_version,
    discover,
    discover_fabric,
    gfd_product,
    normalise_bus_id,
)
from gpufleet.devices.fake import make_fake_nvml
from gpufleet.devices.mig import mig_profile, parse_mig_profile
from gpufleet.model.inventory import NodeInventory
from tests.devices.conftest import EXAMPLE, MakeNvml, SetClock


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    products: tuple[str, ...]
    cuda: str = "12.4"
    #: (gpu, [(profile, placement start, gpu instance id) in slot order])
    mig: tuple[tuple[int, tuple[tuple[str, int, int], ...]], ...] = ()
    peers: tuple[tuple[int, ...], ...] = field(default=())


CASES = [
    Case(
        "two-t4-pcie",
        "cuda_driver_version: '12.2'\ndevices: [{product: Tesla T4, count: 2}]",
        ("Tesla-T4", "Tesla-T4"),
        cuda="12.2",
        peers=((), ()),
    ),
    Case(
        "a100-direct-nvlink",
        "devices:\n"
        "  - {product: NVIDIA A100-SXM4-40GB, nvlink_peers: [1]}\n"
        "  - {product: NVIDIA A100-SXM4-40GB, nvlink_peers: [2]}\n"
        "  - {product: NVIDIA A100-SXM4-40GB}\n",
        ("NVIDIA-A100-SXM4-40GB",) * 3,
        peers=((1,), (0, 2), (1,)),
    ),
    Case(
        "h100-nvswitch-mixed-mig",
        "nvswitch: true\ndevices:\n"
        "  - {product: NVIDIA H100 80GB HBM3}\n"
        "  - product: NVIDIA H100 80GB HBM3\n"
        "    mig: {instances: [{profile: 4g.40gb, placement_start: 4, gpu_instance_id: 1},\n"
        "                      {profile: 1g.20gb, placement_start: 2, gpu_instance_id: 9},\n"
        "                      {profile: 1g.10gb, placement_start: 0, gpu_instance_id: 7},\n"
        "                      {profile: 1g.10gb+me, placement_start: 1, gpu_instance_id: 8}]}\n",
        ("NVIDIA-H100-80GB-HBM3",) * 2,
        mig=(
            (
                1,
                (
                    ("1g.10gb", 0, 7),
                    ("1g.10gb+me", 1, 8),
                    ("1g.20gb", 2, 9),
                    ("4g.40gb", 4, 1),
                ),
            ),
        ),
        peers=((1,), (0,)),
    ),
    Case(
        "a100-40gb-compute-instance",
        "devices:\n"
        "  - product: NVIDIA A100-SXM4-40GB\n"
        "    mig: {instances: [{profile: 1c.3g.20gb}, {profile: 2g.10gb}]}\n",
        ("NVIDIA-A100-SXM4-40GB",),
        mig=((0, (("1c.3g.20gb", 0, 1), ("2g.10gb", 4, 2))),),
        peers=((),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_discovery(make_nvml: MakeNvml, case: Case) -> None:
    inventory = discover(make_nvml(case.text))
    assert tuple(d.product for d in inventory.devices) == case.products
    assert inventory.cuda_driver_version == case.cuda
    assert inventory.driver_version == "550.54.15"
    assert tuple(d.nvlink_peers for d in inventory.devices) == case.peers
    for gpu, instances in case.mig:
        device = inventory.devices[gpu]
        assert device.mig_enabled
        found = tuple((m.profile, m.placement_start, m.gpu_instance_id) for m in device.mig)
        assert found == instances
        assert [m.slot for m in device.mig] == list(range(len(instances)))
    for device in inventory.devices:
        if all(gpu != device.index for gpu, _ in case.mig):
            assert not device.mig_enabled
            assert device.mig == ()


def test_the_example_node(clock: SetClock) -> None:
    inventory = discover(make_fake_nvml(EXAMPLE, clock=clock))
    assert len(inventory.devices) == 8
    assert {d.memory_mib for d in inventory.devices} == {81559}
    assert all(
        d.nvlink_peers == tuple(j for j in range(8) if j != d.index) for d in inventory.devices
    )
    mig = inventory.devices[7].mig
    assert [(m.slot, m.profile, m.placement_start, m.placement_size) for m in mig] == [
        (0, "2g.20gb", 0, 2),
        (1, "1g.10gb", 2, 1),
        (2, "1g.10gb", 3, 1),
        (3, "3g.40gb", 4, 4),
    ]
    assert len({d.uuid for d in inventory.devices} | {m.uuid for m in mig}) == 12


def test_uuids_are_stable_per_node_and_index(make_nvml: MakeNvml) -> None:
    def uuids(node: str) -> list[str]:
        nvml = make_nvml(f"node: {node}\ndevices: [{{product: Tesla T4, count: 2}}]")
        return [d.uuid for d in discover(nvml).devices]

    assert uuids("a") == uuids("a")
    assert uuids("a") != uuids("b")
    assert all(u.startswith("GPU-") for u in uuids("a"))


def test_a_device_lost_at_discovery_is_listed_unhealthy(make_nvml: MakeNvml) -> None:
    nvml = make_nvml("devices: [{product: Tesla T4, count: 2}]")
    nvml.lose(1)
    inventory: NodeInventory = discover(nvml)
    assert inventory.unhealthy == (1,)
    assert "GPU is lost" in inventory.devices[1].reason
    assert inventory.devices[1].uuid == nvml.gpus[1].uuid


def test_fabric_clique(make_nvml: MakeNvml) -> None:
    fabric = "{cluster_uuid: 0b3c6c1e-8a2f-4bd1-9a44-3c5e7d0f9a10, clique_id: 32766}"
    nvml = make_nvml(f"devices: [{{product: NVIDIA B200, count: 2, fabric: {fabric}}}]")
    found = discover_fabric(nvml)
    assert found is not None
    assert found.clique == "0b3c6c1e-8a2f-4bd1-9a44-3c5e7d0f9a10.32766"
    assert discover_fabric(make_nvml("devices: [{product: NVIDIA B200}]")) is None


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("Tesla  T4", "Tesla-T4"),
        ("NVIDIA GeForce RTX 4090 (rev a1)", "NVIDIA-GeForce-RTX-4090-rev-a1"),
    ],
    ids=["h100", "a100", "spaces", "punctuation"],
)
def test_gfd_product(name: str, label: str) -> None:
    assert gfd_product(name) == label


def test_versions_and_bus_ids() -> None:
    assert cuda_version(12040) == "12.4"
    assert cuda_version(11080) == "11.8"
    assert normalise_bus_id(b"0000:1b:00.0") == "00000000:1B:00.0"
    assert normalise_bus_id("00000000:1B:00.0") == "00000000:1B:00.0"


@pytest.mark.parametrize(
    ("gi", "ci", "mib", "total_mib", "name"),
    [
        (0, 0, 9856, 81559, "1g.10gb"),
        (2, 2, 40192, 81559, "3g.40gb"),
        (3, 3, 40192, 81559, "4g.40gb"),
        (4, 4, 80896, 81559, "7g.80gb"),
        (7, 0, 9856, 81559, "1g.10gb+me"),
        (9, 0, 19968, 81559, "1g.20gb"),
        (2, 0, 19968, 40960, "1c.3g.20gb"),
        (0, 0, 4864, 40960, "1g.5gb"),
    ],
    ids=["1g", "3g", "4g", "7g", "me", "rev2", "compute-instance", "a100-40gb"],
)
def test_mig_profile_names_follow_the_device_plugin(
    gi: int, ci: int, mib: int, total_mib: int, name: str
) -> None:
    assert str(mig_profile(gi, ci, mib, total_mib << 20)) == name
    assert str(parse_mig_profile(name)) == name
