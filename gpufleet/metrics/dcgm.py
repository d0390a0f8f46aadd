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

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from gpufleet.metrics import families as f
from gpufleet.metrics.dcgm_series import FIELDS, UNKNOWN_XID, XID_MESSAGES, series_of, xid_labels
from gpufleet.telemetry.source import NodeTelemetry, TelemetrySource

__all__ = ["FIELDS", "UNKNOWN_XID", "XID_MESSAGES", "DcgmCollector", "families"]


class DcgmCollector(Collector):
    """See the module docstring."""

    def __init__(self, source: TelemetrySource) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        nodes = self.source.read()
        return iter(families(nodes))


def families(nodes: Sequence[NodeTelemetry]) -> list[Metric]:
    """The device families of one reading of ``nodes`` (every family, possibly empty)."""
    series = [(node, s) for node in nodes for s in series_of(node)]
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
        extra = xid_labels(code)
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
