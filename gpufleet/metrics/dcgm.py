"""Device telemetry in NVIDIA dcgm-exporter's format, and the scheduler's allocation beside it.

Owns :class:`DcgmCollector`, a prometheus-client collector that reads a
:class:`~gpufleet.telemetry.source.TelemetrySource` at each scrape and exposes its samples under
dcgm-exporter's names, types, help texts and labels (:data:`~gpufleet.metrics.families.DEVICES`),
as dcgm-exporter 4.x with its Kubernetes pod mapping writes them, so that existing Grafana
dashboards and alerts work unchanged:

* every series has ``gpu`` (the index), ``UUID`` (the GPU's, also on its MIG instances),
  ``pci_bus_id``, ``device`` (``nvidia<index>``), ``modelName`` and ``Hostname``; a MIG instance
  adds ``GPU_I_PROFILE`` and ``GPU_I_ID``; ``DCGM_FI_DRIVER_VERSION`` where the driver is known.
  (dcgm-exporter's unreleased main branch renames ``Hostname`` to ``hostname``; its releases,
  and the dashboards built on them, use ``Hostname``.)
* a device a pod holds carries ``pod``, ``namespace`` and ``container``; a device several pods
  share gives one series per pod, each with the device's value (dcgm-exporter's
  ``--kubernetes-virtual-gpus`` mode, which shared GPUs need); a device nobody holds gives one
  series without them.
* ``DCGM_FI_DEV_XID_ERRORS`` adds ``err_code`` and ``err_msg`` (NVIDIA's name of the XID).
* a MIG instance has the framebuffer and engine-activity series only (DCGM reports no
  utilisation, power, clock or temperature per instance); its GPU has every series.
* ``gpufleet_gpu_allocated`` is one series per GPU and MIG instance, with the device labels and
  no pod labels: the fraction the scheduler allocated, beside the real use.

It reads nothing itself and keeps no state between scrapes; a scrape's cost is a dictionary of
labels per series (made once and shared by every family) and one sample per family per series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from gpufleet.metrics import families as f
from gpufleet.model.telemetry import DeviceSample, DeviceUser
from gpufleet.telemetry.source import NodeTelemetry, TelemetrySource

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


class _Series:
    """One sample's series: its device labels, and one label set per pod holding it."""

    __slots__ = ("device", "per_pod", "sample")

    def __init__(self, sample: DeviceSample, device: dict[str, str], per_pod: list[dict[str, str]]):
        self.sample = sample
        self.device = device
        self.per_pod = per_pod


def _series(node: NodeTelemetry) -> list[_Series]:
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
        out.append(_Series(sample, device, per_pod or [device]))
    return out


class DcgmCollector(Collector):
    """See the module docstring."""

    def __init__(self, source: TelemetrySource) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        nodes = self.source.read()
        return iter(families(nodes))


def families(nodes: Sequence[NodeTelemetry]) -> list[Metric]:
    """The device families of one reading of ``nodes`` (every family, possibly empty)."""
    series = [(node, s) for node in nodes for s in _series(node)]
    out: list[Metric] = []
    for family, value, on_mig in FIELDS:
        metric = GaugeMetricFamily(family.name, family.help)
        name, samples = family.name, metric.samples
        for _, one in series:
            if one.sample.mig_profile and not on_mig:
                continue
            number = float(value(one.sample))
            samples.extend(Sample(name, labels, number) for labels in one.per_pod)
        out.append(metric)
    xid = GaugeMetricFamily(f.DCGM_XID_ERRORS.name, f.DCGM_XID_ERRORS.help)
    for _, one in series:
        if one.sample.mig_profile:
            continue
        code = one.sample.xid
        extra = {"err_code": str(code), "err_msg": XID_MESSAGES.get(code, UNKNOWN_XID)}
        xid.samples.extend(
            Sample(xid.name, {**labels, **extra}, float(code)) for labels in one.per_pod
        )
    out.append(xid)
    allocated = GaugeMetricFamily(f.GPU_ALLOCATED.name, f.GPU_ALLOCATED.help)
    for node, one in series:
        fraction = node.allocated.get(one.sample.uuid, 0.0)
        allocated.samples.append(Sample(allocated.name, one.device, float(fraction)))
    out.append(allocated)
    return out
