"""Which resources a node's device plugin serves, and under which device IDs.

Owns the mapping from a :class:`~gpufleet.model.inventory.NodeInventory` and the node's sharing
config to the kubelet's view: per extended resource, the device IDs the plugin lists in
``ListAndWatch``, each tied to the physical GPU (and MIG instance) it stands for, with that
device's health. The counts are those the scheduler reads back from the Node
(:mod:`gpufleet.io.kube.nodes`, :class:`~gpufleet.model.gpu.GpuSharing`):

* ``nvidia.com/gpu``: one ID per whole GPU that is not MIG-enabled, its UUID; with
  time-slicing or MPS of R replicas, R IDs per GPU named ``<uuid>::<n>`` as the NVIDIA device
  plugin names replicas (``nvidia.com/gpu.shared`` instead with ``renameByDefault``);
* ``nvidia.com/mig-<profile>``: one ID per MIG instance, its MIG UUID (the mixed strategy);
* ``gpufleet.dev/gpu-share``: N share slots per GPU that is not MIG-enabled,
  ``<uuid>::share-<n>`` (counting tokens: the device a share uses is the scheduler's choice).

An unhealthy GPU makes every ID on it unhealthy, its MIG instances' included. Pure: no grpc,
no I/O. It does not decide which IDs a pod gets (:mod:`gpufleet.agent.allocation`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.io.kube.mig_layout import MIG_RESOURCE_PREFIX
from gpufleet.model.gpu import NO_SHARING, SHARE_RESOURCE, GpuSharing
from gpufleet.model.inventory import NodeInventory

#: Share slots each GPU offers by default (the agent's ``--shares-per-gpu``).
DEFAULT_SHARES_PER_GPU = 10
#: Separates a GPU's UUID from a replica or share number in a device ID.
REPLICA_SEPARATOR = "::"
SHARE_MARK = "share-"


@dataclass(frozen=True, slots=True)
class ServedDevice:
    """One device ID the plugin lists, and the hardware it stands for."""

    id: str
    gpu_uuid: str
    gpu_index: int
    healthy: bool
    #: The MIG instance the ID is (empty for whole GPUs, replicas and shares).
    mig_uuid: str = ""


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """What the units of a resource are, as allocation must treat them."""

    #: An ID names one device only one pod may hold (a whole GPU, a MIG instance).
    exclusive: bool
    #: IDs are counting tokens whose device is the scheduler's choice (shares).
    token: bool = False
    mig_profile: str = ""


def mig_resource(profile: str) -> str:
    return f"{MIG_RESOURCE_PREFIX}{profile}"


def replica_id(gpu_uuid: str, replica: int) -> str:
    return f"{gpu_uuid}{REPLICA_SEPARATOR}{replica}"


def share_id(gpu_uuid: str, slot: int) -> str:
    return f"{gpu_uuid}{REPLICA_SEPARATOR}{SHARE_MARK}{slot}"


def base_uuid(device_id: str) -> str:
    """The UUID a device ID is built on: a replica's or share's GPU (``GPU-x::2`` ->
    ``GPU-x``), a whole GPU's or MIG instance's own UUID otherwise."""
    return device_id.split(REPLICA_SEPARATOR, 1)[0]


def resource_kind(resource: str, sharing: GpuSharing) -> ResourceKind:
    if resource == SHARE_RESOURCE:
        return ResourceKind(exclusive=False, token=True)
    if resource.startswith(MIG_RESOURCE_PREFIX):
        return ResourceKind(exclusive=True, mig_profile=resource.removeprefix(MIG_RESOURCE_PREFIX))
    return ResourceKind(exclusive=not sharing.time_sliced)


def served_resources(
    inventory: NodeInventory,
    sharing: GpuSharing = NO_SHARING,
    shares_per_gpu: int = DEFAULT_SHARES_PER_GPU,
) -> dict[str, tuple[ServedDevice, ...]]:
    """Every resource the node serves with its device IDs, in device order (a resource with
    no devices is left out)."""
    if shares_per_gpu < 0:
        raise ValueError(f"shares per GPU must be 0 or more, got {shares_per_gpu}")
    served: dict[str, list[ServedDevice]] = {}
    gpu_resource = sharing.resource
    for device in sorted(inventory.devices, key=lambda d: d.index):
        if device.mig_enabled:
            for instance in sorted(device.mig, key=lambda m: m.slot):
                served.setdefault(mig_resource(instance.profile), []).append(
                    ServedDevice(
                        instance.uuid, device.uuid, device.index, device.healthy, instance.uuid
                    )
                )
            continue
        whole = served.setdefault(gpu_resource, [])
        if sharing.time_sliced:
            whole.extend(
                ServedDevice(replica_id(device.uuid, n), device.uuid, device.index, device.healthy)
                for n in range(sharing.replicas)
            )
        else:
            whole.append(ServedDevice(device.uuid, device.uuid, device.index, device.healthy))
        if shares_per_gpu:
            served.setdefault(SHARE_RESOURCE, []).extend(
                ServedDevice(share_id(device.uuid, n), device.uuid, device.index, device.healthy)
                for n in range(shares_per_gpu)
            )
    return {resource: tuple(devices) for resource, devices in served.items() if devices}


def capacity(served: Mapping[str, tuple[ServedDevice, ...]]) -> dict[str, int]:
    """Units per resource, as the kubelet will put them in the Node's capacity."""
    return {resource: len(devices) for resource, devices in served.items()}
