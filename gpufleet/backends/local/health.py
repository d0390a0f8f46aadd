"""This machine's GPU health: a GPU NVML reports lost, or with a critical XID, is withdrawn.

Owns :class:`GpuHealthWatch`: each :meth:`~GpuHealthWatch.poll` waits (up to a timeout) for
the health changes a :class:`~gpufleet.devices.source.DeviceSource` reports (the node agent's
:class:`~gpufleet.devices.nvml_source.NvmlDeviceSource`: its health monitor's XID and ECC
events, lost devices, recovery; which XIDs count is its :class:`~gpufleet.devices.health.
XidPolicy`, the device plugin's), keeps the set of unhealthy GPUs, and hands a changed set to
the :class:`~.machine.LocalMachine` (:meth:`~.machine.LocalMachine.set_gpu_health`, under
``lock``: the machine is not thread-safe), which withdraws them from scheduling as the agent's
health does on a cluster. It returns the changes, for the caller to tell (an event, the log).
The thread that polls is the caller's; so is NVML's life.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gpufleet.backends.local.machine import LocalMachine
from gpufleet.devices.source import DeviceSource
from gpufleet.model.telemetry import HealthEvent


class GpuHealthWatch:
    """See the module docstring."""

    def __init__(self, machine: LocalMachine, devices: DeviceSource, lock: threading.RLock) -> None:
        self.machine = machine
        self.devices = devices
        self._lock = lock
        #: Why each unhealthy GPU is, by index.
        self.unhealthy: dict[int, str] = {
            d.index: d.reason or "unhealthy at discovery"
            for d in devices.inventory().devices
            if not d.healthy
        }

    def poll(self, timeout_s: float) -> Sequence[HealthEvent]:
        """Wait up to ``timeout_s`` for health changes; apply them to the machine. Returns
        those that changed a GPU's health (a repeated verdict is left out)."""
        changed = []
        for event in self.devices.wait_health(timeout_s):
            if event.healthy == (event.gpu not in self.unhealthy):
                continue
            if event.healthy:
                del self.unhealthy[event.gpu]
            else:
                self.unhealthy[event.gpu] = event.reason or "unhealthy"
            changed.append(event)
        if changed:
            with self._lock:
                self.machine.set_gpu_health(dict(self.unhealthy))
        return changed
