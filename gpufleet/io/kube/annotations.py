"""The two annotations gpufleet writes for its own components to read: their text formats.

Owns both, together:

* the ``gpufleet.dev/gpu-inventory`` Node annotation: a node's devices as JSON, the text form of
  :class:`~gpufleet.model.inventory.NodeInventory` that the node agent writes and the scheduler
  reads (keys are the dataclass field names). Reading checks every field with pydantic and raises
  :class:`ValueError` naming the field (``devices[2].uuid: ...``); callers add the node and the
  file;
* the device-binding annotations: which GPU devices a bound pod holds, written onto the pod at
  binding and read back after. The scheduler writes them through the Binding (the API server
  copies a binding's annotations onto the pod in the same write, so a pod is never bound without
  them): the device indices, the milli-GPU taken on each when less than a device (a share, or a
  replica of a time-sliced GPU), the MIG slices, and an ``NVIDIA_VISIBLE_DEVICES``-style hint for
  a node-side component to enforce. A restarted scheduler reads them back, so it hands out no
  device twice, and the node agent reads them to give the pod its devices. (On a time-sliced node
  the device plugin, not gpufleet, picks which replica a pod gets: the index is where gpufleet
  counts it.) Their signature is :mod:`gpufleet.io.kube.binding_signature`'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import TypeAdapter, ValidationError

from gpufleet.model import MILLI_PER_GPU, Placement
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


GPU_INDEX_ANNOTATION = "gpufleet.dev/gpu-index"
GPU_SHARE_ANNOTATION = "gpufleet.dev/gpu-milli-per-device"
MIG_SLICES_ANNOTATION = "gpufleet.dev/mig-slices"
VISIBLE_DEVICES_ANNOTATION = "gpufleet.dev/visible-devices"


def placement_annotations(placement: Placement) -> dict[str, str]:
    """What a binding writes onto the pod for ``placement`` (nothing for a CPU-only pod)."""
    out: dict[str, str] = {}
    if placement.gpu_indices:
        out[GPU_INDEX_ANNOTATION] = ",".join(str(i) for i in placement.gpu_indices)
        if 0 < placement.gpu_milli_per_device < MILLI_PER_GPU:
            out[GPU_SHARE_ANNOTATION] = str(placement.gpu_milli_per_device)
    if placement.mig_slices:
        out[MIG_SLICES_ANNOTATION] = ",".join(f"{g}:{s}" for g, s in placement.mig_slices)
    if out:
        out[VISIBLE_DEVICES_ANNOTATION] = placement.visible_devices
    return out


def placement_from_annotations(node: str, annotations: Mapping[str, str]) -> Placement | None:
    """The placement a binding recorded, or None when the pod carries none (or a broken one)."""
    if not any(
        key in annotations
        for key in (GPU_INDEX_ANNOTATION, MIG_SLICES_ANNOTATION, VISIBLE_DEVICES_ANNOTATION)
    ):
        return None
    try:
        indices = _ints(annotations.get(GPU_INDEX_ANNOTATION, ""))
        share = int(annotations.get(GPU_SHARE_ANNOTATION, "0") or 0)
        slices = tuple(
            (int(gpu), int(slot))
            for gpu, slot in (
                item.split(":") for item in _items(annotations.get(MIG_SLICES_ANNOTATION, ""))
            )
        )
    except ValueError:
        return None
    milli = share or (MILLI_PER_GPU if indices else 0)
    return Placement(node, indices, milli, slices)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(item) for item in _items(text))
