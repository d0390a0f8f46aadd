"""Which resources and device IDs a node serves, and that the scheduler counts the same."""

from __future__ import annotations

import pytest

from gpufleet.agent.resources import (
    base_uuid,
    capacity,
    replica_id,
    served_resources,
    share_id,
)
from gpufleet.io.kube.nodes import node_from_object
from gpufleet.model.gpu import (
    GPU_RESOURCE,
    NO_SHARING,
    SHARE_RESOURCE,
    SHARED_GPU_RESOURCE,
    GpuSharing,
    SharingStrategy,
)
from gpufleet.model.node import GFD_LABELS
from gpufleet.testing.agent_builders import gpu_inventory, gpu_uuid, mig_uuid

SLICED_4 = GpuSharing(SharingStrategy.TIME_SLICING, 4)
RENAMED_2 = GpuSharing(SharingStrategy.TIME_SLICING, 2, SHARED_GPU_RESOURCE)


@pytest.mark.parametrize(
    ("gpus", "mig", "sharing", "shares", "expected"),
    [
        pytest.param(2, {}, NO_SHARING, 0, {GPU_RESOURCE: 2}, id="whole"),
        pytest.param(2, {}, NO_SHARING, 10, {GPU_RESOURCE: 2, SHARE_RESOURCE: 20}, id="shares"),
        pytest.param(3, {}, SLICED_4, 0, {GPU_RESOURCE: 12}, id="time-slicing"),
        pytest.param(
            2, {}, RENAMED_2, 5, {SHARED_GPU_RESOURCE: 4, SHARE_RESOURCE: 10}, id="renamed"
        ),
        pytest.param(
            3,
            {1: ["3g.40gb", "2g.20gb", "1g.10gb"], 2: ["1g.10gb"] * 7},
            NO_SHARING,
            4,
            {
                GPU_RESOURCE: 1,
                SHARE_RESOURCE: 4,
                "nvidia.com/mig-3g.40gb": 1,
                "nvidia.com/mig-2g.20gb": 1,
                "nvidia.com/mig-1g.10gb": 8,
            },
            id="mig-mixed",
        ),
        pytest.param(1, {0: []}, NO_SHARING, 10, {}, id="mig-enabled-no-instances"),
    ],
)
def test_capacity(
    gpus: int,
    mig: dict[int, list[str]],
    sharing: GpuSharing,
    shares: int,
    expected: dict[str, int],
) -> None:
    served = served_resources(gpu_inventory(gpus, mig=mig), sharing, shares)
    assert capacity(served) == expected


def test_ids_name_the_hardware() -> None:
    served = served_resources(gpu_inventory(2, mig={1: ["1g.10gb", "1g.10gb"]}), SLICED_4, 2)
    assert [d.id for d in served[GPU_RESOURCE]] == [replica_id(gpu_uuid(0), n) for n in range(4)]
    assert [d.id for d in served[SHARE_RESOURCE]] == [share_id(gpu_uuid(0), n) for n in range(2)]
    assert [d.id for d in served["nvidia.com/mig-1g.10gb"]] == [mig_uuid(1, 0), mig_uuid(1, 1)]
    assert {d.gpu_uuid for d in served["nvidia.com/mig-1g.10gb"]} == {gpu_uuid(1)}
    assert base_uuid(replica_id(gpu_uuid(0), 3)) == gpu_uuid(0)
    assert base_uuid(share_id(gpu_uuid(0), 1)) == gpu_uuid(0)
    assert all(len(d.id) <= 63 for devices in served.values() for d in devices)


def test_an_unhealthy_gpu_makes_every_id_on_it_unhealthy() -> None:
    inventory = gpu_inventory(3, mig={2: ["3g.40gb", "3g.40gb"]}, unhealthy=[0, 2])
    served = served_resources(inventory, SLICED_4, 3)
    for devices in served.values():
        for device in devices:
            assert device.healthy == (device.gpu_index == 1), device


def test_negative_shares_are_refused() -> None:
    with pytest.raises(ValueError, match="shares per GPU"):
        served_resources(gpu_inventory(1), NO_SHARING, -1)


@pytest.mark.parametrize(
    ("sharing", "mig"),
    [
        pytest.param(NO_SHARING, {}, id="whole"),
        pytest.param(SLICED_4, {}, id="time-slicing"),
        pytest.param(RENAMED_2, {}, id="renamed"),
        pytest.param(NO_SHARING, {2: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}, id="mig"),
    ],
)
def test_the_scheduler_reads_back_what_the_plugin_serves(
    sharing: GpuSharing, mig: dict[int, list[str]]
) -> None:
    """The Node the kubelet publishes from this capacity (with GFD's labels) is read by the
    scheduler as the same GPUs, MIG slices, sharing and share slots."""
    inventory = gpu_inventory(4, mig=mig)
    units = capacity(served_resources(inventory, sharing, 10))
    labels = {
        GFD_LABELS.PRODUCT: "NVIDIA-H100-80GB-HBM3",
        GFD_LABELS.MEMORY: "81559",
        GFD_LABELS.COUNT: "4",
    }
    if sharing.time_sliced:
        labels[GFD_LABELS.REPLICAS] = str(sharing.replicas)
        labels[GFD_LABELS.SHARING_STRATEGY] = sharing.strategy.value
    node = node_from_object(
        {
            "kind": "Node",
            "metadata": {"name": "gpu-1", "labels": labels},
            "status": {
                "allocatable": {
                    "cpu": "64",
                    "memory": "512Gi",
                    **{k: str(v) for k, v in units.items()},
                }
            },
        },
        "node.yaml",
    )
    whole = [g for g in node.gpus if not g.partitioned]
    assert len(whole) == sum(1 for d in inventory.devices if not d.mig_enabled)
    assert node.gpu_sharing.replicas == sharing.replicas
    assert node.gpu_sharing.resource == sharing.resource
    slices = sorted(s.profile for g in node.gpus for s in g.mig_slices)
    assert slices == sorted(m.profile for d in inventory.devices for m in d.mig)
    assert dict(node.extended).get(SHARE_RESOURCE) == 10 * len(whole)
