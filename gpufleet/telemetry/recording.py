"""Device readings into the time-series store: which series a reading feeds and with what.

Owns :class:`SeriesRecorder`: each call to :meth:`~SeriesRecorder.record` turns one reading of
every node (``NodeTelemetry``, from the simulated cluster or the node agent) into one snapshot
of the store:

* device series, one per GPU and per MIG instance, labelled as dcgm-exporter labels a device
  (``Hostname``, ``gpu``, ``UUID``, ``modelName``, and ``GPU_I_PROFILE``/``GPU_I_ID`` for a MIG
  instance), for utilisation, memory used in MiB, temperature, power and the last XID (memory
  in percent is the MiB over the device's memory, kept per device: see ``observed_series``).
  They are keyed by the device only, not by the pod holding it: a device's history is one
  series whoever held it, so the store's size follows the number of GPUs, not the churn of
  pods. Who holds a device now is kept beside (:attr:`SeriesRecorder.holders`); the query view
  (:mod:`gpufleet.telemetry.observed_series`) adds the holder's labels as dcgm-exporter does;
* one workload series per pod holding GPUs (``gpufleet_workload_gpu_util``: the mean
  utilisation of the devices it holds), labelled ``namespace`` and ``pod`` plus the tags its
  world knows (queue, tenant, workload, kind);
* a running summary per pod (a :class:`~gpufleet.telemetry.pod_usage.PodUsageTable` of
  samples, their sum, first and last time, in compact columns), so
  the mean utilisation of a pod whose series was dropped (:meth:`SeriesRecorder.forget_ended`)
  is still known for cost over long windows.

It reads no clock (``now`` is passed in) and does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.model.alerts import AlertMetric
from gpufleet.model.telemetry import DeviceSample, DeviceUser
from gpufleet.telemetry.pod_usage import PodKey, PodUsage, PodUsageTable
from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_layout import Labels, as_labels
from gpufleet.telemetry.source import NodeTelemetry

#: The device metrics a reading feeds, with what each reads of a sample.
DEVICE_FIELDS: tuple[tuple[AlertMetric, str], ...] = (
    (AlertMetric.GPU_UTIL, "gpu_util"),
    (AlertMetric.FB_USED, "fb_used_mib"),
    (AlertMetric.GPU_TEMP, "temperature_c"),
    (AlertMetric.POWER_USAGE, "power_w"),
    (AlertMetric.XID_ERRORS, "xid"),
)
#: The pod labels dcgm-exporter adds to a device held by a pod.
HOLDER_LABELS = ("namespace", "pod", "container")
#: How long a pod's workload series is kept after its last point (its summary stays longer).
ENDED_KEEP_S = 86_400.0

__all__ = ["PodKey", "PodTags", "PodUsage", "SeriesRecorder"]


@dataclass(frozen=True, slots=True)
class PodTags:
    """What a world knows of a pod beyond its name: added as labels to its workload series."""

    queue: str = ""
    tenant: str = ""
    workload: str = ""
    kind: str = ""

    def labels(self) -> dict[str, str]:
        return {name: value for name, value in self._pairs() if value}

    def _pairs(self) -> tuple[tuple[str, str], ...]:
        return (
            ("queue", self.queue),
            ("tenant", self.tenant),
            ("workload", self.workload),
            ("kind", self.kind),
        )


#: What a device's series labels are made of (see ``device_series_labels``).
DeviceKey = tuple[str, str, str, int, str, str, str, int]
#: The fields read of a MIG instance: dcgm-exporter serves only its memory.
MIG_FIELDS = tuple(pair for pair in DEVICE_FIELDS if pair[0] is AlertMetric.FB_USED)


def _fields_of(sample: DeviceSample) -> tuple[tuple[AlertMetric, str], ...]:
    return MIG_FIELDS if sample.mig_profile else DEVICE_FIELDS


def _device_key(node: NodeTelemetry, sample: DeviceSample) -> DeviceKey:
    return (
        node.hostname,
        node.pci_bus_ids.get(sample.gpu) or "",
        node.driver_version or "",
        sample.gpu,
        sample.uuid,
        sample.model,
        sample.mig_profile or "",
        sample.gpu_instance_id if sample.mig_profile else 0,
    )


def device_series_labels(node: NodeTelemetry, sample: DeviceSample) -> Labels:
    """A device's series labels: dcgm-exporter's, without the holder (``Hostname``, ``gpu``,
    ``UUID``, ``modelName``, ``device``, ``pci_bus_id``, ``DCGM_FI_DRIVER_VERSION`` where the
    driver is known, ``GPU_I_*`` on a MIG instance), so an alert of gpufleet's engine carries
    the labels Prometheus' alert on dcgm-exporter's series carries.

    A MIG instance is labelled as dcgm-exporter labels it: with its GPU's identity (``gpu``,
    ``device``, ``pci_bus_id`` and ``UUID`` the parent GPU's, not the instance's ``MIG-`` UUID)
    and the instance's ``GPU_I_PROFILE`` and ``GPU_I_ID`` (NVML's GPU instance id): its
    monitoring entry carries the parent's device info (NVIDIA/dcgm-exporter,
    pkg/dcgmexporter/sysinfo/system_info.go, ``AddAllGPUInstances``), which the collector
    writes as ``UUID`` (collector/gpu_collector.go, ``ToMetric``: ``GPUUUID: d.UUID``,
    ``GPUInstanceID: instanceInfo.Info.NvmlInstanceId``). The instance's own UUID where the
    reading has no whole-GPU sample of its index."""
    labels = {
        "Hostname": node.hostname,
        "gpu": str(sample.gpu),
        "UUID": node.gpu_uuids().get(sample.gpu, sample.uuid),
        "modelName": sample.model,
        "device": f"nvidia{sample.gpu}",
    }
    if node.pci_bus_ids.get(sample.gpu):  # an empty label is no label, in Prometheus too
        labels["pci_bus_id"] = node.pci_bus_ids[sample.gpu]
    if node.driver_version:
        labels["DCGM_FI_DRIVER_VERSION"] = node.driver_version
    if sample.mig_profile:
        labels["GPU_I_PROFILE"] = sample.mig_profile
        labels["GPU_I_ID"] = str(sample.gpu_instance_id)
    return as_labels(labels)


class SeriesRecorder:
    """Feeds ``store`` with readings; keeps who holds each device and each pod's usage."""

    def __init__(self, store: SeriesStore) -> None:
        self.store = store
        #: The pods holding each device now (by UUID), as the latest reading said.
        self.holders: dict[str, tuple[DeviceUser, ...]] = {}
        #: Each device's series labels, by UUID, as the latest reading said.
        self.devices: dict[str, Labels] = {}
        #: The other way: each device's own UUID by its series labels (a MIG instance's
        #: ``UUID`` label is its GPU's: ``device_series_labels``).
        self.uuids: dict[Labels, str] = {}
        #: Each device's memory in MiB (used + free), by UUID, as readings said: memory in
        #: percent is derived from it and the stored MiB, not stored (a sixth series per GPU).
        self.memory_mib: dict[str, float] = {}
        #: Bumped whenever ``memory_mib`` changes (what is derived from it is kept until then).
        self.memory_version = 0
        #: Every pod's utilisation so far (see :meth:`forget_ended`), in the order of their
        #: last samples (oldest first; whoever fills it from elsewhere keeps that order).
        self.usage = PodUsageTable()
        #: The pods whose usage summary changed (or was forgotten) since :meth:`take_changed`.
        self.changed: set[PodKey] = set()
        self._pod_series: dict[PodKey, int] = {}
        #: Each device's series labels and ids by what they are made of (``_device_key``), as
        #: of the last reading: a round looks a device up here instead of sorting its labels
        #: and finding its five series again (most of a round's time at 1,000 GPUs).
        self._device_series: dict[DeviceKey, tuple[Labels, tuple[int, ...]]] = {}
        self._device_drops = self._drops_of_devices()

    def record(
        self,
        now: float,
        readings: Sequence[NodeTelemetry],
        tags: Mapping[PodKey, PodTags] | None = None,
    ) -> int:
        """Append one reading of every node at ``now``; returns how many values were written."""
        tags = tags or {}
        ids: list[int] = []
        values: list[float] = []
        holders: dict[str, tuple[DeviceUser, ...]] = {}
        devices: dict[str, Labels] = {}
        memory: dict[str, float] = {}
        held: dict[PodKey, list[float]] = {}
        drops = self._drops_of_devices()
        known = self._device_series if drops == self._device_drops else {}
        seen: dict[DeviceKey, tuple[Labels, tuple[int, ...]]] = {}
        for node in readings:
            users: dict[str, list[DeviceUser]] = {}
            for user in node.users:
                users.setdefault(user.uuid, []).append(user)
            for sample in node.samples:
                key = _device_key(node, sample)
                found = known.get(key) or seen.get(key)
                if found is None:
                    labels = device_series_labels(node, sample)
                    found = (
                        labels,
                        tuple(
                            self.store.add(metric.value, labels) for metric, _ in _fields_of(sample)
                        ),
                    )
                seen[key] = found
                labels, device_ids = found
                devices[sample.uuid] = labels
                ids.extend(device_ids)
                values.extend(float(getattr(sample, name)) for _, name in _fields_of(sample))
                total = sample.fb_used_mib + sample.fb_free_mib
                if total > 0:
                    memory[sample.uuid] = float(total)
                on_device = tuple(users.get(sample.uuid, ()))
                if on_device:
                    holders[sample.uuid] = on_device
                for pod in {(u.namespace, u.pod) for u in on_device}:
                    held.setdefault(pod, []).append(sample.gpu_util)
        for pod, utils in sorted(held.items()):
            mean = float(utils[0]) if len(utils) == 1 else float(np.mean(utils))
            ids.append(self._workload_series(pod, tags.get(pod, PodTags())))
            values.append(mean)
            self.usage.add(pod, now, mean)  # to the end: in the order of last samples
            self.changed.add(pod)
        self.store.append(now, ids, values)
        self._device_series, self._device_drops = seen, drops
        self.holders, self.devices = holders, devices
        self.uuids = {labels: uuid for uuid, labels in devices.items()}
        had = self.memory_mib
        if any(had.get(uuid) != mib for uuid, mib in memory.items()):
            had.update(memory)
            self.memory_version += 1
        return len(ids)

    def _drops_of_devices(self) -> tuple[int, ...]:
        """How many device series the store dropped so far, by metric (a cached id of a
        dropped series may have been handed to another series since)."""
        return tuple(self.store.drops.get(metric.value, 0) for metric, _ in DEVICE_FIELDS)

    def _workload_series(self, pod: PodKey, tags: PodTags) -> int:
        series = self._pod_series.get(pod)
        if series is None:
            labels = {"namespace": pod[0], "pod": pod[1], **tags.labels()}
            series = self.store.add(AlertMetric.WORKLOAD_GPU_UTIL.value, labels)
            self._pod_series[pod] = series
        return series

    def forget_ended(self, now: float, keep_s: float = ENDED_KEEP_S, usage_s: float = 0.0) -> int:
        """Drop the workload series of pods unseen for ``keep_s`` (their usage summary stays),
        and, with ``usage_s``, the summaries of pods unseen for that long. Returns how many
        series were dropped."""
        last_of = self.usage.last_of
        gone = [
            pod
            for pod in self._pod_series
            if (last := last_of(pod)) is not None and last <= now - keep_s
        ]
        for pod in gone:
            self.store.drop(self._pod_series.pop(pod))
        if usage_s > 0:
            self.changed.update(self.usage.forget_stale(now - usage_s))
        return len(gone)

    def forget_usage(self, before: float) -> int:
        """Forget the usage summaries of pods last sampled at or before ``before`` (their
        series went a day after they ended, at a round: :meth:`forget_ended`); returns how
        many. Cheap: the summaries are in the order of last samples, the scan stops at the
        first fresh one."""
        stale = self.usage.forget_stale(before)
        self.changed.update(stale)
        return len(stale)

    def take_changed(self) -> set[PodKey]:
        """The pods whose usage summary changed since the last call (an incremental save)."""
        changed, self.changed = self.changed, set()
        return changed

    def adopt(self) -> None:
        """Take up the workload series of a store restored from its durable form."""
        metric = AlertMetric.WORKLOAD_GPU_UTIL.value
        for labels, series in self.store.series(metric).items():
            named = dict(labels)
            self._pod_series[(named.get("namespace", ""), named.get("pod", ""))] = series
