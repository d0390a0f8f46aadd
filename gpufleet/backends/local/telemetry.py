"""This machine's GPUs as telemetry: what NVML reads, who holds each device, what is allocated.

Owns :class:`LocalTelemetry`, the :class:`~gpufleet.telemetry.source.TelemetrySource` of
``gpufleet serve --local``: each :meth:`~LocalTelemetry.read` is one
:class:`~gpufleet.telemetry.source.NodeTelemetry` of this machine, with

* a sample of every GPU and MIG instance, read through a
  :class:`~gpufleet.devices.source.DeviceSource` (the node agent's
  :class:`~gpufleet.devices.nvml_source.NvmlDeviceSource` over the real or the fake NVML);
* the pods holding each device, from the runs of the :class:`~.machine.LocalMachine` (each
  running pod's placement: its whole GPUs and MIG slices by UUID), labelled as dcgm-exporter
  labels a Kubernetes pod: its namespace, its name and its container's name
  (:func:`device_users`);
* the fraction of each device the scheduler gave out (:func:`allocated_fractions`: the
  ``gpufleet_gpu_allocated`` gauge beside the utilisation).

The machine is not thread-safe: its runs are read under ``lock`` (the plane's), the samples
outside it (an NVML read may take milliseconds a GPU). Opening and closing NVML is the
caller's (the plane keeps the source for the server's life and closes it at stop).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gpufleet.backends.local.machine import LocalMachine
from gpufleet.devices.source import DeviceSource
from gpufleet.model import MILLI_PER_GPU, Placement, Pod
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.telemetry import DeviceUser
from gpufleet.telemetry.source import NodeTelemetry

#: A running pod, where it runs, and its container's name.
Holder = tuple[Pod, Placement, str]


def held_uuids(placement: Placement, inventory: NodeInventory) -> list[tuple[str, int]]:
    """The UUIDs of the devices and MIG instances a placement holds, each with the milli-GPU
    it takes of it (a MIG instance is held whole); devices the inventory lacks are left out."""
    uuid_of = {d.index: d.uuid for d in inventory.devices}
    mig_of = {(d.index, m.slot): m.uuid for d in inventory.devices for m in d.mig}
    held = [
        (uuid_of[index], placement.milli_per_device)
        for index in placement.gpu_indices
        if index in uuid_of
    ]
    held.extend(
        (mig_of[(gpu, slot)], MILLI_PER_GPU)
        for gpu, slot in placement.mig_slices
        if (gpu, slot) in mig_of
    )
    return held


def device_users(holders: Sequence[Holder], inventory: NodeInventory) -> list[DeviceUser]:
    """One user per (device, pod): the pod's name, namespace and container, by device UUID."""
    return [
        DeviceUser(uuid, pod.name, pod.namespace, container)
        for pod, placement, container in holders
        for uuid, _ in held_uuids(placement, inventory)
    ]


def allocated_fractions(
    placements: Sequence[Placement], inventory: NodeInventory
) -> dict[str, float]:
    """The fraction (0..1) of each GPU and MIG instance that the placements hold, by UUID."""
    milli: dict[str, int] = {}
    for placement in placements:
        for uuid, amount in held_uuids(placement, inventory):
            milli[uuid] = milli.get(uuid, 0) + amount
    return {uuid: min(amount, MILLI_PER_GPU) / MILLI_PER_GPU for uuid, amount in milli.items()}


class LocalTelemetry:
    """See the module docstring."""

    def __init__(self, machine: LocalMachine, devices: DeviceSource, lock: threading.RLock) -> None:
        self.machine = machine
        self.devices = devices
        self._lock = lock

    def holders(self) -> list[Holder]:
        """Every running pod of the machine with its placement and container name."""
        with self._lock:
            running = self.machine.list_state().running
            return [
                (pod, placement, _container(self.machine, pod.key)) for pod, placement in running
            ]

    def read(self) -> Sequence[NodeTelemetry]:
        holders = self.holders()
        inventory = self.devices.inventory()
        samples = self.devices.samples()
        return [
            NodeTelemetry.of_inventory(
                self.machine.node.name,
                inventory,
                samples,
                device_users(holders, inventory),
                allocated_fractions([placement for _, placement, _ in holders], inventory),
            )
        ]


def _container(machine: LocalMachine, pod_key: str) -> str:
    spec = machine.spec_of(pod_key)
    return "" if spec is None else spec.container
