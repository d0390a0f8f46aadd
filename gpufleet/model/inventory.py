"""What a node's GPUs are, as its agent discovered them: the scheduler's truth about devices.

Owns the plain data the node agent publishes on its Node (the ``gpufleet.dev/gpu-inventory``
annotation, :mod:`gpufleet.io.kube.annotations`) and the scheduler reads back: per device its index,
UUID, product, memory, compute capability, PCI bus id, MIG instances (profile, UUID, the slot
gpufleet counts it in, placement), NVLink peers and health; per node the driver and CUDA
versions. It does not discover anything (``gpufleet.devices`` does) nor decide placement.

A MIG instance's ``slot`` is its position among its device's instances ordered by placement
start: the same slot numbers a ``gpufleet.dev/mig-layout`` annotation gives
(:mod:`gpufleet.io.kube.mig_layout`), so a scheduler's ``(gpu, slot)`` names one instance.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG GPU instance (with its compute instance) on a device."""

    profile: str
    uuid: str
    slot: int
    gpu_instance_id: int
    compute_instance_id: int = 0
    placement_start: int = 0
    placement_size: int = 0


@dataclass(frozen=True, slots=True)
class InventoryDevice:
    """One GPU as NVML reports it, with its health as the agent last judged it."""

    index: int
    uuid: str
    product: str
    memory_mib: int
    compute_major: int = 0
    compute_minor: int = 0
    pci_bus_id: str = ""
    mig_enabled: bool = False
    mig: tuple[MigInstance, ...] = ()
    #: Indices of the devices this one reaches over an active NVLink.
    nvlink_peers: tuple[int, ...] = ()
    healthy: bool = True
    #: Why the device is unhealthy (``XID 79: GPU has fallen off the bus``), empty when healthy.
    reason: str = ""


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """A node's GPUs, ordered by index, and the driver that serves them."""

    devices: tuple[InventoryDevice, ...] = ()
    #: ``nvmlSystemGetDriverVersion``: ``550.54.15``.
    driver_version: str = ""
    #: ``nvmlSystemGetCudaDriverVersion`` as major.minor: ``12.4``.
    cuda_driver_version: str = ""

    def device(self, index: int) -> InventoryDevice | None:
        return next((d for d in self.devices if d.index == index), None)

    @property
    def unhealthy(self) -> tuple[int, ...]:
        """Indices of the devices the scheduler must not place on."""
        return tuple(d.index for d in self.devices if not d.healthy)
