"""What a GPU does, sample by sample, and who uses it: plain data every world produces.

Owns the device sample (the fields dcgm-exporter names ``DCGM_FI_DEV_*``), the health event a
device raises (an XID, ECC errors, a lost device) and the attribution of a device to the pod
container that holds it. The node agent reads samples from NVML, the simulated cluster makes
them from workload profiles; both hand them to the same exporter and rules. Nothing here
reads a device or a clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One reading of one GPU, or of one MIG instance of it (``mig_profile`` set).

    Units are dcgm-exporter's: percent, MiB, degrees C, watts, MHz. ``xid`` is the last XID
    seen on the device (0: none), as ``DCGM_FI_DEV_XID_ERRORS`` reports it.
    """

    gpu: int
    uuid: str
    model: str
    gpu_util: float = 0.0
    mem_copy_util: float = 0.0
    fb_used_mib: int = 0
    fb_free_mib: int = 0
    temperature_c: float = 0.0
    power_w: float = 0.0
    sm_clock_mhz: int = 0
    xid: int = 0
    mig_profile: str = ""
    #: The MIG GPU instance id (``GPU_I_ID``); meaningful only with ``mig_profile``.
    gpu_instance_id: int = 0


@dataclass(frozen=True, slots=True)
class HealthEvent:
    """A device turned unhealthy (``healthy=False``) or healthy again."""

    gpu: int
    uuid: str
    healthy: bool
    #: The XID that caused it (0: not an XID: ECC errors, a lost device, recovery).
    xid: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class DeviceUser:
    """The pod container holding a device (or a MIG instance, by its UUID)."""

    uuid: str
    pod: str
    namespace: str
    container: str
