"""The node agent's :class:`~gpufleet.devices.source.DeviceSource` over NVML (real or fake).

Owns :class:`NvmlDeviceSource`: the inventory discovered once (again after a device that was
lost at discovery comes back) with the health monitor's current verdict laid over it, samples
on demand, and health changes for the agent's health loop. Safe for a gRPC server thread, a
metrics scrape thread and the health loop at once: NVML itself is thread-safe, and this
object's own state sits behind one lock that no NVML wait holds.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

from gpufleet.devices.discovery import Fabric, discover, discover_fabric
from gpufleet.devices.health import HealthMonitor, XidPolicy
from gpufleet.devices.nvml import Nvml
from gpufleet.devices.sampling import read_samples
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.telemetry import DeviceSample, HealthEvent


class NvmlDeviceSource:
    """A node's GPUs through an initialised NVML; :meth:`close` shuts NVML down."""

    def __init__(self, nvml: Nvml, xid_policy: XidPolicy | None = None) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._discovered = discover(nvml)
        #: The multi-node NVLink fabric, for the labels (None without one).
        self.fabric: Fabric | None = discover_fabric(nvml)
        self._monitor = HealthMonitor(nvml, self._discovered, xid_policy)
        self._names: dict[int, str] = {}
        self._stale = False
        self._closed = False

    def inventory(self) -> NodeInventory:
        with self._lock:
            if self._stale:
                self._discovered = discover(self._nvml)
                self._stale = False
            discovered = self._discovered
        devices = []
        for device in discovered.devices:
            healthy, reason = self._monitor.health(device.index)
            devices.append(replace(device, healthy=healthy, reason=reason))
        return replace(discovered, devices=tuple(devices))

    def samples(self) -> Sequence[DeviceSample]:
        with self._lock:
            inventory = self._discovered
            names = self._names
        read = read_samples(self._nvml, inventory, self._monitor.last_xids(), names)
        for gpu in read.lost:
            self._monitor.report_lost(gpu)
        return read.samples

    def wait_health(self, timeout_s: float) -> Sequence[HealthEvent]:
        events = self._monitor.poll(timeout_s)
        with self._lock:
            lost_at_discovery = {d.index for d in self._discovered.devices if not d.healthy}
            if any(e.healthy and e.gpu in lost_at_discovery for e in events):
                self._stale = True  # read what could not be read while it was lost
        return events

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._monitor.close()
        self._nvml.nvmlShutdown()
