"""This machine as the scheduler's one :class:`~gpufleet.model.Node`.

Owns :func:`machine_node`: the GPUs of a :class:`~gpufleet.model.inventory.NodeInventory`
(found by the node agent's discovery, :func:`gpufleet.devices.discovery.discover`, over NVML
or the fake NVML) read as the scheduler reads a Kubernetes node's ``gpufleet.dev/gpu-inventory``
annotation (:func:`gpufleet.io.kube.node_inventory.inventory_devices`: UUIDs, health, MIG slices),
labelled with the labels every Kubernetes node has (host name, this machine's OS and
architecture: :func:`machine_os`, :func:`machine_arch`) and with GPU Feature Discovery's labels
as the scheduler reads them (the node agent's richer labels, :mod:`gpufleet.devices.labels`,
sit behind pynvml, which only ``devices`` may import), with this machine's CPUs and memory
(:func:`machine_resources`). It discovers nothing
itself: the caller discovers the inventory (``gpufleet.devices.discovery.discover``).
"""

from __future__ import annotations

import os
import platform
import socket

from gpufleet.io.kube.node_inventory import inventory_devices
from gpufleet.io.manifests import Context
from gpufleet.model import NO_SHARING, GpuSharing, Node, gfd_labels
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.node import well_known_labels

MEMINFO = "/proc/meminfo"


def machine_resources(meminfo: str = MEMINFO) -> tuple[int, int]:
    """(milli-CPU, MiB of memory) this process may use: the CPUs of its affinity mask and
    ``MemTotal``."""
    cpus = len(os.sched_getaffinity(0))
    memory_kib = 0
    with open(meminfo, encoding="ascii") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                memory_kib = int(line.split()[1])
                break
    return cpus * 1000, memory_kib // 1024


def machine_node(
    inventory: NodeInventory,
    name: str | None = None,
    cpu_milli: int | None = None,
    memory_mib: int | None = None,
    sharing: GpuSharing = NO_SHARING,
) -> Node:
    """The one node of this machine (``name``: its host name by default; CPU and memory: this
    machine's, unless given)."""
    name = name or socket.gethostname()
    if cpu_milli is None or memory_mib is None:
        cpus, memory = machine_resources()
        cpu_milli = cpus if cpu_milli is None else cpu_milli
        memory_mib = memory if memory_mib is None else memory_mib
    devices = inventory_devices(Context(f"GPU inventory of {name}"), inventory)
    labels = {**well_known_labels(name, os=machine_os(), arch=machine_arch())}
    labels.update(gfd_labels(devices, sharing))
    return Node(name, cpu_milli, memory_mib, devices, labels, gpu_sharing=sharing)


#: ``platform.machine()`` names of architectures, as Go (and so ``kubernetes.io/arch``) names them.
_GO_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def machine_os() -> str:
    """This machine's OS as ``kubernetes.io/os`` names it (``linux``)."""
    return platform.system().lower() or "linux"


def machine_arch() -> str:
    """This machine's architecture as ``kubernetes.io/arch`` names it (``amd64``, ``arm64``)."""
    machine = platform.machine().lower()
    return _GO_ARCHES.get(machine, machine or "amd64")
