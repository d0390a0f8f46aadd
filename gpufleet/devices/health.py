"""Device health from NVML: XID critical errors, double-bit ECC errors, lost devices, recovery.

Owns :class:`XidPolicy` (which XIDs make a device unhealthy) and :class:`HealthMonitor` (NVML
events and probes -> :class:`~gpufleet.model.telemetry.HealthEvent`). It does not publish
anything (the agent turns events into ListAndWatch health, Node conditions and Events).

Which XIDs are fatal follows the NVIDIA device plugin (k8s-device-plugin
``internal/rm/health.go``), which follows NVIDIA's XID catalogue
(https://docs.nvidia.com/deploy/xid-errors/): every XID marks the device unhealthy except the
application errors in :data:`APPLICATION_XIDS`, after which the GPU is still fine. The same
environment overrides apply: ``DP_DISABLE_HEALTHCHECKS`` (``all``/``xids``, or a comma list of
more XIDs to ignore) and ``DP_ENABLE_HEALTHCHECKS`` (XIDs, or ``all``, counted even if ignored
otherwise); :meth:`XidPolicy.from_env` also takes gpufleet's own extra ignored XIDs.

Beyond the device plugin (which only acts on XIDs and never marks a device healthy again):

* a double-bit ECC event (``nvmlEventTypeDoubleBitEccError``: uncorrectable memory) is fatal,
  as NVIDIA's XID 48 for the same error is;
* a read answering GPU_IS_LOST or RESET_REQUIRED makes the device unhealthy (probed on every
  poll, and reported by sampling); it is healthy again once a read succeeds;
* ``nvmlEventTypeGpuRecoveryAction`` (driver r575 and later): an action other than NONE
  (reset, reboot, drain) makes the device unhealthy; NONE clears the XID, ECC and recovery
  conditions: the driver says the device needs nothing any more (the fake's ``recover``).

Health is per physical GPU: an XID on one MIG instance withdraws the whole device.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.devices.nvml import (
    DEVICE_GONE_ERRORS,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    Nvml,
    NVMLError,
    gone_reason,
    nvml_error_code,
)
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.telemetry import HealthEvent

#: Application errors the device plugin ignores: the GPU stays healthy (health.go, from the
#: XID catalogue).
APPLICATION_XIDS: Mapping[int, str] = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    68: "Video processor exception",
    109: "Context Switch Timeout Error",
}

#: Names of the XIDs that matter most, from NVIDIA's XID catalogue (others: "XID N").
XID_DESCRIPTIONS: Mapping[int, str] = {
    **APPLICATION_XIDS,
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    140: "Unrecovered ECC Error",
}

DISABLE_ENV = "DP_DISABLE_HEALTHCHECKS"
ENABLE_ENV = "DP_ENABLE_HEALTHCHECKS"
_ALL = 0  # the device plugin's key for "every XID"
#: While a device is lost, poll at least this often (seconds) to see it come back.
LOST_PROBE_INTERVAL_S = 1.0


def xid_reason(xid: int) -> str:
    return f"XID {xid}: {XID_DESCRIPTIONS.get(xid, 'critical error')}"


def _xids(text: str) -> dict[int, bool]:
    """The device plugin's ``newHealthCheckXIDs``: ``all``/``xids`` or a list; bad items skip."""
    found: dict[int, bool] = {}
    for item in text.lower().split(","):
        item = item.strip()
        if item in ("all", "xids"):
            return {_ALL: True}
        if item.isdigit():
            found[int(item)] = True
    return found


@dataclass(frozen=True, slots=True)
class XidPolicy:
    """Which XIDs count: True in ``disabled`` ignores one, False counts it; key 0 is "all"."""

    disabled: Mapping[int, bool] = field(
        default_factory=lambda: dict.fromkeys(APPLICATION_XIDS, True)
    )

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, extra_ignored: Iterable[int] = ()
    ) -> XidPolicy:
        env = os.environ if environ is None else environ
        disabled = _xids(env.get(DISABLE_ENV, ""))
        disabled.update(dict.fromkeys(APPLICATION_XIDS, True))
        disabled.update(dict.fromkeys(extra_ignored, True))
        for xid in _xids(env.get(ENABLE_ENV, "")):
            disabled[xid] = False
        return cls(disabled)

    @property
    def all_disabled(self) -> bool:
        return self.disabled.get(_ALL, False)

    @property
    def watches_xids(self) -> bool:
        """False only when every XID is ignored and none is enabled again."""
        return not self.all_disabled or any(v is False for v in self.disabled.values())

    def is_fatal(self, xid: int) -> bool:
        if self.disabled.get(_ALL) is False:
            return True
        return not self.disabled.get(xid, self.all_disabled)


@dataclass(slots=True)
class _Device:
    index: int
    uuid: str
    handle: Any
    #: Why the device is unhealthy, by cause ("xid", "ecc", "lost", "recovery").
    conditions: dict[str, str] = field(default_factory=dict)
    xid: int = 0


class HealthMonitor:
    """Watches the devices of ``inventory``; :meth:`poll` returns what changed."""

    def __init__(self, nvml: Nvml, inventory: NodeInventory, policy: XidPolicy | None = None):
        self._nvml = nvml
        self._policy = policy or XidPolicy()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._pending: list[HealthEvent] = []
        self._devices = {
            d.index: _Device(d.index, d.uuid, nvml.nvmlDeviceGetHandleByIndex(d.index))
            for d in inventory.devices
        }
        for discovered in inventory.devices:
            if not discovered.healthy:
                self._devices[discovered.index].conditions["lost"] = discovered.reason
        self._by_uuid = {d.uuid: d for d in self._devices.values()}
        self._event_set = nvml.nvmlEventSetCreate()
        wanted = (
            nvml.nvmlEventTypeDoubleBitEccError
            | nvml.nvmlEventTypeGpuRecoveryAction
            | (nvml.nvmlEventTypeXidCriticalError if self._policy.watches_xids else 0)
        )
        for device in self._devices.values():
            self._register(device, wanted)

    def _register(self, device: _Device, wanted: int) -> None:
        try:
            supported = self._nvml.nvmlDeviceGetSupportedEventTypes(device.handle)
            self._nvml.nvmlDeviceRegisterEvents(device.handle, wanted & supported, self._event_set)
        except NVMLError as error:
            code = nvml_error_code(error)
            if code in DEVICE_GONE_ERRORS:
                device.conditions["lost"] = gone_reason(error)
            elif code != NVML_ERROR_NOT_SUPPORTED:  # too old for events: probes only
                raise

    # -- state ------------------------------------------------------------------------------

    def health(self, gpu: int) -> tuple[bool, str]:
        """(healthy, reason) of a device now."""
        with self._lock:
            conditions = self._devices[gpu].conditions
            return not conditions, "; ".join(conditions.values())

    def last_xids(self) -> dict[int, int]:
        with self._lock:
            return {i: d.xid for i, d in self._devices.items() if d.xid}

    def _set(self, device: _Device, cause: str, reason: str, xid: int = 0) -> None:
        """Mark a cause (callers hold the lock); every new cause is an event."""
        if device.conditions.get(cause) == reason:
            return
        device.conditions[cause] = reason
        self._pending.append(HealthEvent(device.index, device.uuid, False, xid, reason))

    def _clear(self, device: _Device, *causes: str) -> None:
        was_unhealthy = bool(device.conditions)
        for cause in causes:
            device.conditions.pop(cause, None)
        if was_unhealthy and not device.conditions:
            self._pending.append(HealthEvent(device.index, device.uuid, True, 0, "recovered"))

    def report_lost(self, gpu: int, reason: str = "GPU is lost") -> None:
        """A read of ``gpu`` elsewhere (sampling) answered GPU_IS_LOST."""
        with self._lock:
            self._set(self._devices[gpu], "lost", reason)

    # -- polling ----------------------------------------------------------------------------

    def _probe(self) -> None:
        for device in self._devices.values():
            try:
                self._nvml.nvmlDeviceGetMemoryInfo(device.handle)
            except NVMLError as error:
                if nvml_error_code(error) not in DEVICE_GONE_ERRORS:
                    raise
                with self._lock:
                    self._set(device, "lost", gone_reason(error))
                continue
            with self._lock:
                if "lost" in device.conditions:
                    self._clear(device, "lost")

    def _handle(self, event: Any) -> None:
        try:
            device = self._by_uuid.get(self._nvml.nvmlDeviceGetUUID(event.device))
        except NVMLError:
            return
        if device is None:
            return
        nvml = self._nvml
        with self._lock:
            if event.eventType & nvml.nvmlEventTypeXidCriticalError:
                xid = int(event.eventData)
                device.xid = xid
                if self._policy.is_fatal(xid):
                    self._set(device, "xid", xid_reason(xid), xid)
            elif event.eventType & nvml.nvmlEventTypeDoubleBitEccError:
                self._set(device, "ecc", "double-bit ECC error (uncorrectable memory error)")
            elif event.eventType & nvml.nvmlEventTypeGpuRecoveryAction:
                if event.eventData == nvml.NVML_GPU_RECOVERY_ACTION_NONE:
                    self._clear(device, "xid", "ecc", "recovery")
                else:
                    reason = f"the driver asks for recovery action {int(event.eventData)}"
                    self._set(device, "recovery", reason)

    def _wait_one(self, timeout_s: float) -> Any | None:
        try:
            return self._nvml.nvmlEventSetWait_v2(self._event_set, max(0, int(timeout_s * 1000)))
        except NVMLError as error:
            code = nvml_error_code(error)
            if code == NVML_ERROR_TIMEOUT or code in DEVICE_GONE_ERRORS:
                return None  # a lost device is found by the next probe
            if self._closed.is_set():
                return None  # the event set was freed under a waiting poll
            raise

    def poll(self, timeout_s: float) -> Sequence[HealthEvent]:
        """Health changes since the last poll, waiting up to ``timeout_s`` for an NVML event."""
        if self._closed.is_set():
            return []
        self._probe()
        with self._lock:
            if any("lost" in d.conditions for d in self._devices.values()):
                timeout_s = min(timeout_s, LOST_PROBE_INTERVAL_S)
            ready = bool(self._pending)
        event = self._wait_one(0 if ready else timeout_s)
        while event is not None:
            self._handle(event)
            event = self._wait_one(0)
        with self._lock:
            events, self._pending = self._pending, []
        return events

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._nvml.nvmlEventSetFree(self._event_set)
