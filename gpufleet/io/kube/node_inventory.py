"""A Node's GPUs as its node agent discovered them: the ``gpufleet.dev/gpu-inventory``
annotation (:mod:`gpufleet.io.kube.annotations`) read as model :class:`~gpufleet.model.GpuDevice`s.

Where a node carries the annotation, its devices are the agent's truth rather than a guess from
``nvidia.com/gpu`` counts: one device per inventory device, with its index, product (as GPU
Feature Discovery writes it, spaces as ``-``), memory, UUID and health, and its MIG instances
as slices (profile, slot). The kubelet lowers ``nvidia.com/gpu`` allocatable when a device is
unhealthy; with an inventory that does not shrink the device list: the device stays, marked
unhealthy. A device in MIG mode without instances offers nothing to place on, so it is left out.

What it does not do: read the rest of the Node (:mod:`gpufleet.io.kube.nodes` does) or decide
how the devices are shared (the labels and allocatable say that, as without an inventory).
"""

from __future__ import annotations

from gpufleet.io.kube.annotations import INVENTORY_ANNOTATION, inventory_from_json
from gpufleet.io.manifests import Context
from gpufleet.model import GpuDevice, MigSlice
from gpufleet.model.gpu import parse_mig_profile
from gpufleet.model.inventory import NodeInventory

INVENTORY_FIELD = f"metadata.annotations[{INVENTORY_ANNOTATION}]"


def product_model(product: str) -> str:
    """NVML's product name as GFD's ``nvidia.com/gpu.product`` label writes it
    (``NVIDIA H100 80GB HBM3`` -> ``NVIDIA-H100-80GB-HBM3``)."""
    return "-".join(product.split())


def read_inventory(context: Context, text: str) -> NodeInventory:
    """The annotation's inventory; errors name the node, the annotation and the field."""
    return context.parse(inventory_from_json, text, INVENTORY_FIELD)


def inventory_devices(context: Context, inventory: NodeInventory) -> tuple[GpuDevice, ...]:
    """The devices of ``inventory`` as the scheduler counts them, ordered by index."""
    devices = []
    for i, device in enumerate(inventory.devices):
        where = f"{INVENTORY_FIELD}: devices[{i}]"
        if device.index < 0:
            raise context.error(where + ".index", f"expected 0 or more, got {device.index}")
        if not device.product.strip():
            raise context.error(where + ".product", "required: expected the GPU's product name")
        if device.memory_mib <= 0:
            raise context.error(
                where + ".memory_mib", f"expected a positive size in MiB, got {device.memory_mib}"
            )
        slices = []
        slots: set[int] = set()
        for j, instance in enumerate(device.mig):
            field = f"{where}.mig[{j}]"
            profile = context.parse(parse_mig_profile, instance.profile, field + ".profile")
            if instance.slot in slots or instance.slot < 0:
                raise context.error(
                    field + ".slot",
                    f"expected a slot number not used by another instance of the device, "
                    f"got {instance.slot}",
                )
            slots.add(instance.slot)
            slices.append(MigSlice(profile.name, instance.slot))
        if device.mig_enabled and not slices:
            continue
        devices.append(
            GpuDevice(
                device.index,
                product_model(device.product),
                device.memory_mib,
                tuple(sorted(slices, key=lambda s: s.slot)),
                uuid=device.uuid,
                healthy=device.healthy,
            )
        )
    return tuple(sorted(devices, key=lambda d: d.index))
