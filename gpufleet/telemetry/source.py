"""Where device telemetry comes from: the protocol every world feeds and the exporter reads.

Owns :class:`NodeTelemetry` (one node's devices as a scrape sees them: their samples, who holds
them, how much of each the scheduler allocated, and the names dcgm-exporter labels them with),
:class:`TelemetrySource` (what gives them: the simulated cluster, the node agent), and
:class:`XidLog`, the last XID seen on each device of a world, which whatever injects or reads
XIDs records into (a simulated fault, the agent's NVML events) and a source reads. No I/O and no
clock: a source is asked at scrape time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.model.inventory import NodeInventory
from gpufleet.model.telemetry import DeviceSample, DeviceUser


@dataclass(frozen=True, slots=True)
class NodeTelemetry:
    """One node's devices at one reading."""

    #: The node's name (dcgm-exporter's ``Hostname`` label).
    hostname: str
    #: One per GPU and one per MIG instance (``mig_profile`` set), parents first.
    samples: Sequence[DeviceSample]
    #: The pod containers holding each device or MIG instance (by its UUID).
    users: Sequence[DeviceUser] = ()
    #: The scheduler's view: the fraction (0..1) of each device or MIG instance allocated,
    #: by UUID; a device not named is unallocated.
    allocated: Mapping[str, float] = field(default_factory=dict)
    #: The PCI bus id of each GPU, by index (``pci_bus_id``; empty when unknown).
    pci_bus_ids: Mapping[int, str] = field(default_factory=dict)
    #: The driver version (``DCGM_FI_DRIVER_VERSION``; empty: not labelled).
    driver_version: str = ""

    def gpu_uuids(self) -> dict[int, str]:
        """Each whole GPU's UUID, by index: the ``UUID`` dcgm-exporter labels the GPU's series
        with, and its MIG instances' too (they are told apart by ``GPU_I_ID``; see
        ``recording.device_series_labels``)."""
        return {s.gpu: s.uuid for s in self.samples if not s.mig_profile}

    @classmethod
    def of_inventory(
        cls,
        hostname: str,
        inventory: NodeInventory,
        samples: Sequence[DeviceSample],
        users: Sequence[DeviceUser] = (),
        allocated: Mapping[str, float] | None = None,
    ) -> NodeTelemetry:
        """A node's reading with the PCI bus ids and driver version its inventory names."""
        return cls(
            hostname,
            samples,
            users,
            allocated or {},
            {d.index: d.pci_bus_id for d in inventory.devices},
            inventory.driver_version,
        )


class TelemetrySource(Protocol):
    """Gives every node's devices, at the moment it is asked (thread-safe)."""

    def read(self) -> Sequence[NodeTelemetry]: ...


class XidLog:
    """The last XID seen on each device, by (node, GPU index); 0: none. A world's fault
    injection or health watcher records into it; its telemetry source reads it into
    ``DeviceSample.xid`` (``DCGM_FI_DEV_XID_ERRORS`` keeps the last XID seen, so does this,
    until :meth:`clear`)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], int] = {}

    def record(self, node: str, gpu: int, xid: int) -> None:
        if xid < 0:
            raise ValueError(f"XID on {node} GPU {gpu} must be 0 or more, got {xid}")
        self._last[(node, gpu)] = xid

    def clear(self, node: str, gpu: int) -> None:
        self._last.pop((node, gpu), None)

    def last(self, node: str, gpu: int) -> int:
        return self._last.get((node, gpu), 0)

    def of_node(self, node: str) -> dict[int, int]:
        """The last XID of each device of ``node`` that has one, by GPU index."""
        return {gpu: xid for (name, gpu), xid in self._last.items() if name == node}
