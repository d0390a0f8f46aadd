"""The protocol the node agent reads its GPUs through (:class:`DeviceSource`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpufleet.model.inventory import NodeInventory
from gpufleet.model.telemetry import DeviceSample, HealthEvent


class DeviceSource(Protocol):
    """A node's GPUs: what they are, what they do now, and when their health changes."""

    def inventory(self) -> NodeInventory:
        """Every device as discovered, with its current health."""
        ...

    def samples(self) -> Sequence[DeviceSample]:
        """One reading of every device (and of every MIG instance)."""
        ...

    def wait_health(self, timeout_s: float) -> Sequence[HealthEvent]:
        """Health changes since the last call, waiting up to ``timeout_s`` for one."""
        ...

    def close(self) -> None: ...
