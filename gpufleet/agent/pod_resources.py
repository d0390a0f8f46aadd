"""Who holds which device, as the kubelet's PodResources API (v1) tells it.

Owns the reading of ``List`` (and ``GetAllocatableResources``) on the kubelet's
``pod-resources/kubelet.sock`` into plain records: :class:`DeviceUser` per device and container
for the metrics (dcgm-exporter attributes devices to pods the same way), and the resources
each pod already holds (so a restarted agent does not take an allocated pod for one still
waiting). Device IDs are mapped back to hardware as dcgm-exporter does: a time-slicing
replica (``GPU-x::2``) or a share slot (``GPU-x::share-3``) to its GPU's UUID, a MIG instance
to its own MIG UUID (the metrics of a MIG instance carry it). Only the resources this agent
serves are read (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``nvidia.com/mig-*``,
``gpufleet.dev/gpu-share``). It does not cache: each call asks the kubelet.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpufleet.agent.kubelet_api import (
    POD_RESOURCES_SOCKET,
    ContainerDevices,
    PodResources,
    PodResourcesClient,
    unix_channel,
)
from gpufleet.agent.resources import base_uuid
from gpufleet.io.kube.mig_layout import MIG_RESOURCE_PREFIX
from gpufleet.model.gpu import GPU_RESOURCES, SHARE_RESOURCE
from gpufleet.model.telemetry import DeviceUser


def is_gpu_resource(resource: str) -> bool:
    """A resource whose devices are GPUs (or MIG instances) this agent serves."""
    return (
        resource in GPU_RESOURCES
        or resource == SHARE_RESOURCE
        or resource.startswith(MIG_RESOURCE_PREFIX)
    )


def device_users(pods: list[PodResources]) -> list[DeviceUser]:
    """One record per (device, container), each device once per container, in list order."""
    users: list[DeviceUser] = []
    for pod in pods:
        for container in pod.containers:
            seen: set[str] = set()
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name):
                    continue
                for device_id in devices.device_ids:
                    uuid = base_uuid(device_id)
                    if uuid in seen:
                        continue
                    seen.add(uuid)
                    users.append(DeviceUser(uuid, pod.name, pod.namespace, container.name))
    return users


def allocated_by_pod(pods: list[PodResources]) -> dict[str, set[str]]:
    """``namespace/name`` -> the GPU resources the kubelet allocated to the pod."""
    held: dict[str, set[str]] = {}
    for pod in pods:
        for container in pod.containers:
            for devices in container.devices:
                if devices.device_ids and is_gpu_resource(devices.resource_name):
                    held.setdefault(f"{pod.namespace}/{pod.name}", set()).add(devices.resource_name)
    return held


class PodResourcesReader:
    """Reads the kubelet's PodResources socket (one channel, reused)."""

    def __init__(
        self, socket_path: str | Path = POD_RESOURCES_SOCKET, timeout_s: float = 5.0
    ) -> None:
        self._channel: Any = unix_channel(socket_path)
        self._client = PodResourcesClient(self._channel)
        self._timeout_s = timeout_s

    def pods(self) -> list[PodResources]:
        return self._client.list_pods(self._timeout_s)

    def device_users(self) -> list[DeviceUser]:
        return device_users(self.pods())

    def allocated_by_pod(self) -> Mapping[str, set[str]]:
        return allocated_by_pod(self.pods())

    def allocatable(self) -> list[ContainerDevices]:
        """Every GPU device the kubelet knows, by resource."""
        return [
            d for d in self._client.allocatable(self._timeout_s) if is_gpu_resource(d.resource_name)
        ]

    def close(self) -> None:
        self._channel.close()
