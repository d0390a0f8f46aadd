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
from gpufleet.model.telemetry import UNKNOWN_XID, XID_MESSAGES, DeviceSample, DeviceUser, xid_labels
from gpufleet.telemetry.source import NodeTelemetry

__all__ = [
    "FIELDS",
    "UNKNOWN_XID",
    "XID_MESSAGES",
    "Series",
    "device_labels",
    "series_of",
    "xid_labels",
]


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
    parents = node.gpu_uuids()
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
