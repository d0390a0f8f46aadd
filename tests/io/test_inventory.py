"""The gpufleet.dev/gpu-inventory annotation: round trip and errors that name the field."""

from __future__ import annotations

import pytest

from gpufleet.io.kube.annotations import inventory_from_json, inventory_to_json
from gpufleet.model.inventory import InventoryDevice, MigInstance, NodeInventory


def _inventory() -> NodeInventory:
    mig = (MigInstance("3g.40gb", "MIG-a", 0, 1, 0, 0, 4), MigInstance("1g.10gb", "MIG-b", 1, 9))
    return NodeInventory(
        devices=(
            InventoryDevice(0, "GPU-0", "NVIDIA-A100-SXM4-80GB", 81920, 8, 0, "0000:07:00.0"),
            InventoryDevice(1, "GPU-1", "NVIDIA-A100-SXM4-80GB", 81920, 8, 0, "", True, mig),
            InventoryDevice(
                2, "GPU-2", "NVIDIA-A100-SXM4-80GB", 81920, healthy=False, reason="XID 79"
            ),
        ),
        driver_version="550.54.15",
        cuda_driver_version="12.4",
    )


def test_round_trip_is_exact_and_stable() -> None:
    text = inventory_to_json(_inventory())
    assert inventory_from_json(text) == _inventory()
    assert inventory_to_json(inventory_from_json(text)) == text
    assert _inventory().unhealthy == (2,)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        pytest.param('{"devices": [{"index": "x"}]}', "devices.0.index", id="bad-index"),
        pytest.param(
            '{"devices": [{"index": 0, "product": "p", "memory_mib": 1}]}',
            "devices.0.uuid",
            id="missing-uuid",
        ),
        pytest.param("not json", "inventory", id="not-json"),
        pytest.param(
            '{"devices": [{"index": 0, "uuid": "a", "product": "p", "memory_mib": 1},'
            ' {"index": 0, "uuid": "b", "product": "p", "memory_mib": 1}]}',
            "indices repeat",
            id="repeated-index",
        ),
    ],
)
def test_errors_name_the_field(text: str, names: str) -> None:
    with pytest.raises(ValueError, match="invalid GPU inventory") as caught:
        inventory_from_json(text)
    assert names in str(caught.value)
