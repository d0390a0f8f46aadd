"""The ``gpufleet.dev/gpu-inventory`` Node annotation: a node's devices as JSON.

Owns the text form of :class:`~gpufleet.model.inventory.NodeInventory` that the node agent
writes and the scheduler reads (keys are the dataclass field names). Reading checks every field
with pydantic and raises :class:`ValueError` naming the field (``devices[2].uuid: ...``);
callers add the node and the file.
"""

from __future__ import annotations

import json

from pydantic import TypeAdapter, ValidationError

from gpufleet.model.inventory import NodeInventory

INVENTORY_ANNOTATION = "gpufleet.dev/gpu-inventory"

_ADAPTER = TypeAdapter(NodeInventory)


def inventory_to_json(inventory: NodeInventory) -> str:
    """Compact JSON of ``inventory`` (stable key order, so an unchanged inventory is the same
    text and patches nothing)."""
    return json.dumps(_ADAPTER.dump_python(inventory, mode="json"), separators=(",", ":"))


def inventory_from_json(text: str) -> NodeInventory:
    """Parse the annotation; raises ValueError naming what is wrong and where."""
    try:
        inventory = _ADAPTER.validate_json(text, strict=False)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'inventory'}: {e['msg']}"
            for e in error.errors()[:3]
        )
        raise ValueError(f"invalid GPU inventory: {problems}") from None
    indices = [d.index for d in inventory.devices]
    if len(set(indices)) != len(indices):
        raise ValueError(f"invalid GPU inventory: device indices repeat: {indices}")
    return inventory
