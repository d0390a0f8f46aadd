"""The agent's telemetry source: NVML samples, who holds each device, and what the scheduler
allocated, as one :class:`~gpufleet.telemetry.source.NodeTelemetry` per scrape.

Owns :class:`AgentTelemetry` (the :class:`~gpufleet.telemetry.source.TelemetrySource` the
``/metrics`` collector reads) and :func:`allocated_by_uuid`, the scheduler's view of each
device: the fraction of it the bindings of the pods on this node give out (their
``gpufleet.dev/gpu-index`` with ``gpu-milli-per-device``, and ``mig-slices``), so that
``gpufleet_gpu_allocated`` sits beside ``DCGM_FI_DEV_GPU_UTIL``. Pod attribution comes from
the kubelet's PodResources API as dcgm-exporter's does; when the kubelet cannot be reached the
scrape still answers, without pod labels, and says so in the log once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from gpufleet.agent.bound_pods import BoundPod, BoundPods
from gpufleet.backends.kube.devices import (
    GPU_INDEX_ANNOTATION,
    GPU_SHARE_ANNOTATION,
    MIG_SLICES_ANNOTATION,
)
from gpufleet.devices.source import DeviceSource
from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.telemetry import DeviceUser
from gpufleet.telemetry.source import NodeTelemetry

log = logging.getLogger(__name__)


def allocated_by_uuid(pods: Sequence[BoundPod], inventory: NodeInventory) -> dict[str, float]:
    """The fraction (0..1) of each GPU and MIG instance that the bound pods' bindings hold."""
    milli: dict[str, int] = {}
    uuid_of = {d.index: d.uuid for d in inventory.devices}
    mig_of = {(d.index, m.slot): m.uuid for d in inventory.devices for m in d.mig}
    for pod in pods:
        annotations = pod.annotations
        try:
            indices = _ints(annotations.get(GPU_INDEX_ANNOTATION, ""))
            share = int(annotations.get(GPU_SHARE_ANNOTATION, "0") or 0)
            slices = [
                tuple(int(part) for part in item.split(":", 1))
                for item in _items(annotations.get(MIG_SLICES_ANNOTATION, ""))
            ]
        except ValueError:
            continue
        per_device = share or MILLI_PER_GPU
        for index in indices:
            if index in uuid_of:
                milli[uuid_of[index]] = milli.get(uuid_of[index], 0) + per_device
        for gpu, slot in (s for s in slices if len(s) == 2):
            if (gpu, slot) in mig_of:
                milli[mig_of[(gpu, slot)]] = MILLI_PER_GPU
    return {uuid: min(amount, MILLI_PER_GPU) / MILLI_PER_GPU for uuid, amount in milli.items()}


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _ints(text: str) -> list[int]:
    return [int(item) for item in _items(text)]


class AgentTelemetry:
    """One node's telemetry, read at scrape time (thread-safe: each part is)."""

    def __init__(
        self,
        node_name: str,
        source: DeviceSource,
        inventory: Callable[[], NodeInventory],
        bound_pods: BoundPods,
        users: Callable[[], Sequence[DeviceUser]] | None = None,
    ) -> None:
        self._node = node_name
        self._source = source
        self._inventory = inventory
        self._bound_pods = bound_pods
        self._users = users
        self._users_failed = False

    def read(self) -> Sequence[NodeTelemetry]:
        inventory = self._inventory()
        samples = self._source.samples()
        allocated: Mapping[str, float] = allocated_by_uuid(self._bound_pods.pods(), inventory)
        return [
            NodeTelemetry.of_inventory(
                self._node, inventory, samples, self._device_users(), allocated
            )
        ]

    def _device_users(self) -> Sequence[DeviceUser]:
        if self._users is None:
            return ()
        try:
            users = self._users()
        except Exception as error:
            if not self._users_failed:
                log.warning("pod attribution unavailable (kubelet PodResources): %s", error)
            self._users_failed = True
            return ()
        self._users_failed = False
        return users
