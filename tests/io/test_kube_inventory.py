"""A Node's ``gpufleet.dev/gpu-inventory`` annotation read as its devices, and the
``gpufleet.dev/gpu-share`` resource on pods."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.io.errors import InputError
from gpufleet.io.kube.annotations import INVENTORY_ANNOTATION, inventory_to_json
from gpufleet.io.kube.nodes import node_from_object
from gpufleet.model import (
    SHARE_RESOURCE,
    GpuDevice,
    GpuRequest,
    GpuSharing,
    MigSlice,
    SharingStrategy,
)
from gpufleet.model.inventory import InventoryDevice, MigInstance, NodeInventory
from tests.io.test_kube_nodes import H100_LABELS, node_object
from tests.io.test_kube_pods import container, one, pod_object

PRODUCT = "NVIDIA H100 80GB HBM3"


def device(index: int, healthy: bool = True, mig: tuple[MigInstance, ...] = ()) -> InventoryDevice:
    return InventoryDevice(
        index,
        f"GPU-{index:04d}",
        PRODUCT,
        81559,
        mig_enabled=bool(mig),
        mig=mig,
        healthy=healthy,
        reason="" if healthy else "XID 79: GPU has fallen off the bus",
    )


def inventory_node(
    devices: list[InventoryDevice], allocatable: dict[str, Any], labels: dict[str, str]
) -> dict[str, Any]:
    text = inventory_to_json(NodeInventory(tuple(devices), "550.54.15", "12.4"))
    return node_object(
        allocatable=allocatable, labels=labels, annotations={INVENTORY_ANNOTATION: text}
    )


def test_the_inventory_gives_the_devices_and_an_unhealthy_one_does_not_shrink_the_list() -> None:
    devices = [device(i, healthy=i != 2) for i in range(4)]
    # The kubelet advertises 3: it dropped the unhealthy device.
    node = node_from_object(
        inventory_node(
            devices, {"nvidia.com/gpu": "3"}, {**H100_LABELS, "nvidia.com/gpu.count": "4"}
        ),
        "nodes.yaml",
    )
    assert node.gpus == tuple(
        GpuDevice(i, "NVIDIA-H100-80GB-HBM3", 81559, uuid=f"GPU-{i:04d}", healthy=i != 2)
        for i in range(4)
    )
    assert node.unhealthy_gpus == (2,)
    assert node.gpu_units == 4


def test_mig_instances_are_slices_and_a_mig_device_without_instances_is_left_out() -> None:
    instances = (
        MigInstance("3g.40gb", "MIG-a", 1, 2, placement_start=4, placement_size=4),
        MigInstance("3g.40gb", "MIG-b", 0, 1, placement_start=0, placement_size=4),
    )
    empty_mig = InventoryDevice(2, "GPU-2", PRODUCT, 81559, mig_enabled=True)
    node = node_from_object(
        inventory_node(
            [device(0), device(1, mig=instances), empty_mig],
            {"nvidia.com/gpu": "1", "nvidia.com/mig-3g.40gb": "2"},
            H100_LABELS,
        ),
        "nodes.yaml",
    )
    assert [g.index for g in node.gpus] == [0, 1]
    assert node.gpus[1].mig_slices == (MigSlice("3g.40gb", 0), MigSlice("3g.40gb", 1))


def test_time_slicing_is_still_read_from_the_labels() -> None:
    labels = {
        **H100_LABELS,
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    node = node_from_object(
        inventory_node([device(0), device(1, healthy=False)], {"nvidia.com/gpu": "4"}, labels),
        "nodes.yaml",
    )
    assert node.gpu_sharing == GpuSharing(SharingStrategy.TIME_SLICING, 4)
    assert len(node.gpus) == 2


@pytest.mark.parametrize(
    ("text", "field"),
    [
        pytest.param("not json", "gpu-inventory", id="not-json"),
        pytest.param('{"devices": [{"index": 0}]}', "devices.0.uuid", id="missing-uuid"),
        pytest.param(
            '{"devices": [{"index": 0, "uuid": "u", "product": "X", "memory_mib": 0}]}',
            "devices[0].memory_mib",
            id="no-memory",
        ),
        pytest.param(
            '{"devices": [{"index": 0, "uuid": "u", "product": "X", "memory_mib": 5, '
            '"mig": [{"profile": "9g.1gb", "uuid": "m", "slot": 0, "gpu_instance_id": 1}]}]}',
            "devices[0].mig[0].profile",
            id="bad-mig-profile",
        ),
    ],
)
def test_a_broken_inventory_is_an_error_naming_the_node_and_the_field(
    text: str, field: str
) -> None:
    obj = node_object(
        allocatable={"nvidia.com/gpu": "1"},
        labels=H100_LABELS,
        annotations={INVENTORY_ANNOTATION: text},
    )
    with pytest.raises(InputError) as raised:
        node_from_object(obj, "nodes.yaml")
    message = str(raised.value)
    assert "Node gpu-1" in message
    assert INVENTORY_ANNOTATION in message
    assert field in message


def test_a_node_advertising_share_slots_counts_them_as_an_extended_resource() -> None:
    node = node_from_object(
        node_object(allocatable={"nvidia.com/gpu": "8", SHARE_RESOURCE: "80"}, labels=H100_LABELS),
        "nodes.yaml",
    )
    assert (SHARE_RESOURCE, 80) in node.extended


SIZED = {"gpufleet.dev/gpu-milli": "250"}


def test_a_share_asks_one_share_slot() -> None:
    timed = one(pod_object(container({SHARE_RESOURCE: 1}), annotations=SIZED))
    assert timed.pod.gpu == GpuRequest.share(250)
    assert timed.pod.extended == ((SHARE_RESOURCE, 1),)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        pytest.param(
            pod_object(container({SHARE_RESOURCE: 2}), annotations=SIZED),
            "spec.containers[0].resources.limits[gpufleet.dev/gpu-share]: a GPU share takes one",
            id="two-slots",
        ),
        pytest.param(
            pod_object(
                container({SHARE_RESOURCE: 1}), container({SHARE_RESOURCE: 1}), annotations=SIZED
            ),
            "expected 1 for the pod (over its containers), got 2",
            id="two-containers",
        ),
        pytest.param(
            pod_object(container({SHARE_RESOURCE: 1})),
            "spec.containers[0].resources.limits[gpufleet.dev/gpu-share]: gpufleet.dev/gpu-share "
            "is for GPU shares",
            id="not-a-share",
        ),
    ],
)
def test_share_slots_only_for_shares_and_one_per_pod(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match="Pod") as raised:
        one(obj)
    assert message in str(raised.value)
