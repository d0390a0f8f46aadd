"""The series of dcgm-exporter's format: which families, which labels, one label set per pod.

Owns what :mod:`gpufleet.metrics.dcgm` (the prometheus-client collector of ``gpufleet serve``)
and :mod:`gpufleet.metrics.dcgm_text` (the node agent's direct exposition) both write: the
families in order with what each reads of a sample (:data:`FIELDS`), NVIDIA's XID names, and
each sample's labels, made once per series and shared by every family. The format itself is
described in :mod:`gpufleet.metrics.dcgm`. No metrics library here: the agent serves this
without one.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.metrics import families as f
from gpufleet.model.telemetry import DeviceSample, DeviceUser
from gpufleet.telemetry.source import NodeTelemetry

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

Value = Callable[[DeviceSample], float]
#: Every DCGM family with what it reads of a sample, in exposition order; the flag says whether
#: a MIG instance has it.
FIELDS: tuple[tuple[f.Family, Value, bool], ...] = (
    (f.DCGM_SM_CLOCK, lambda s: s.sm_clock_mhz, False),
    (f.DCGM_GPU_TEMP, lambda s: s.temperature_c, False),
    (f.DCGM_POWER_USAGE, lambda s: s.power_w, False),
    (f.DCGM_GPU_UTIL, lambda s: s.gpu_util, False),
    (f.DCGM_MEM_COPY_UTIL, lambda s: s.mem_copy_util, False),
    (f.DCGM_FB_FREE, lambda s: s.fb_free_mib, True),
    (f.DCGM_FB_USED, lambda s: s.fb_used_mib, True),
    (f.DCGM_GR_ENGINE_ACTIVE, lambda s: s.gpu_util / 100.0, True),
)


def device_labels(node: NodeTelemetry, sample: DeviceSample, parent_uuid: str) -> dict[str, str]:
    """The labels dcgm-exporter gives ``sample``'s series, in its order (no pod labels)."""
    labels = {
        "gpu": str(sample.gpu),
        "UUID": parent_uuid,
        "pci_bus_id": node.pci_bus_ids.get(sample.gpu, ""),
        "device": f"nvidia{sample.gpu}",
        "modelName": sample.model,
    }
    if sample.mig_profile:
        labels["GPU_I_PROFILE"] = sample.mig_profile
        labels["GPU_I_ID"] = str(sample.gpu_instance_id)
    labels["Hostname"] = node.hostname
    if node.driver_version:
        labels["DCGM_FI_DRIVER_VERSION"] = node.driver_version
    return labels


class Series:
    """One sample's series: its device labels, and one label set per pod holding it."""

    __slots__ = ("device", "per_pod", "sample")

    def __init__(self, sample: DeviceSample, device: dict[str, str], per_pod: list[dict[str, str]]):
        self.sample = sample
        self.device = device
        self.per_pod = per_pod


def series_of(node: NodeTelemetry) -> list[Series]:
    parents = {s.gpu: s.uuid for s in node.samples if not s.mig_profile}
    holders: dict[str, list[DeviceUser]] = {}
    for user in node.users:
        holders.setdefault(user.uuid, []).append(user)
    out = []
    for sample in node.samples:
        device = device_labels(node, sample, parents.get(sample.gpu, sample.uuid))
        users = holders.get(sample.uuid, ())
        per_pod = [
            {**device, "container": u.container, "namespace": u.namespace, "pod": u.pod}
            for u in sorted(users, key=lambda u: (u.namespace, u.pod, u.container))
        ]
        out.append(Series(sample, device, per_pod or [device]))
    return out
