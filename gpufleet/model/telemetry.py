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


#: NVIDIA's names of common XIDs (docs.nvidia.com/deploy/xid-errors), as dcgm-exporter labels
#: them in ``err_msg``; others are "Unknown Error".
XID_MESSAGES = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors -- "
    "Most likely to see when running multiple cuda",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
}
UNKNOWN_XID = "Unknown Error"


def xid_labels(code: int) -> dict[str, str]:
    """The labels dcgm-exporter adds to ``DCGM_FI_DEV_XID_ERRORS``: the XID and its name."""
    return {"err_code": str(code), "err_msg": XID_MESSAGES.get(code, UNKNOWN_XID)}
