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
from gpufleet.agent.kubelet_api import rpc_error_text
from gpufleet.devices.source import DeviceSource
from gpufleet.io.kube.annotations import placement_from_annotations
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
        binding = placement_from_annotations("", pod.annotations)
        if binding is None:
            continue
        for index in binding.gpu_indices:
            if index in uuid_of:
                uuid = uuid_of[index]
                milli[uuid] = milli.get(uuid, 0) + binding.gpu_milli_per_device
        for gpu, slot in binding.mig_slices:
            if (gpu, slot) in mig_of:
                milli[mig_of[(gpu, slot)]] = MILLI_PER_GPU
    return {uuid: min(amount, MILLI_PER_GPU) / MILLI_PER_GPU for uuid, amount in milli.items()}


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
                log.warning(
                    "pod attribution unavailable (kubelet PodResources): %s", rpc_error_text(error)
                )
            self._users_failed = True
            return ()
        self._users_failed = False
        return users
