"""The simulated cluster's device telemetry: every GPU's samples at the world's current time.

Owns :class:`SimTelemetry`, a :class:`~gpufleet.telemetry.source.TelemetrySource` over a
:class:`~gpufleet.backends.sim.cluster.SimulatedCluster`: for each node, each GPU and each MIG
instance of it, a :class:`~gpufleet.model.telemetry.DeviceSample` made by the usage profiles
(:mod:`gpufleet.telemetry.profiles`) from the pods running there, the pods holding it (their
container named :data:`SIM_CONTAINER`), the fraction of it allocated, and the last XID the
world's :class:`~gpufleet.telemetry.source.XidLog` holds for it. Device names are made up the
same way every time: UUIDs from the node's name and the device's index (and MIG slot), PCI bus
ids from the index, the driver version :data:`SIM_DRIVER_VERSION`.

It is not thread-safe: it reads the world, which its owner guards (the embedded control plane
reads it under its lock, :class:`LockedTelemetry`). It changes nothing in the world.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.backends.sim.cluster import SimulatedCluster
from gpufleet.model import MILLI_PER_GPU, Node, Placement, Pod
from gpufleet.model.gpu import MIG_COMPUTE_SLICES, parse_mig_profile
from gpufleet.model.telemetry import DeviceSample, DeviceUser
from gpufleet.telemetry.gpus import GpuSpec, gpu_spec
from gpufleet.telemetry.profiles import (
    Domain,
    PodLoad,
    ProfileModel,
    Readings,
    UsageProfile,
    profile_of,
)
from gpufleet.telemetry.source import NodeTelemetry, TelemetrySource

log = logging.getLogger(__name__)

#: The container name of a simulated pod (simulated pods have one container).
SIM_CONTAINER = "main"
#: The driver version a simulated node reports.
SIM_DRIVER_VERSION = "simulated"
_NAMESPACE = uuid.UUID("6f1d3f4e-8a55-4c0b-9d0e-6a1c2b3d4e5f")


def gpu_uuid(node: str, index: int) -> str:
    """The made-up UUID of a simulated GPU (``GPU-`` and a UUID, as NVML writes them)."""
    return f"GPU-{uuid.uuid5(_NAMESPACE, f'{node}/{index}')}"


def mig_uuid(node: str, index: int, slot: int) -> str:
    return f"MIG-{uuid.uuid5(_NAMESPACE, f'{node}/{index}/mig/{slot}')}"


def pci_bus_id(index: int) -> str:
    """A plausible PCI bus id (``00000000:1B:00.0``) for the ``index``-th GPU of a node."""
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


@dataclass(slots=True)
class _NodeLayout:
    """Where a node's GPUs and domains sit in the flat lists the profile model reads."""

    node: Node
    first_domain: int
    gpu_positions: list[int] = field(default_factory=list)


class SimTelemetry(TelemetrySource):
    """See the module docstring."""

    def __init__(
        self,
        world: SimulatedCluster,
        seed: int = 0,
        default_profile: UsageProfile | None = None,
    ) -> None:
        self.world = world
        self.model = ProfileModel(seed)
        self.default_profile = default_profile
        self._warned: set[str] = set()
        self._layouts: list[_NodeLayout] = []
        self._specs: list[GpuSpec] = []
        self._domain_template: list[tuple[int, float, int]] = []  # (gpu position, part, MiB)
        self._domain_of: dict[tuple[str, int, int], int] = {}
        self._made: (
            tuple[tuple[int, int], list[Domain], dict[int, list[tuple[Pod, float]]]] | None
        ) = None
        self._known = 0
        self._add_nodes()

    def _add_nodes(self) -> None:
        """Lay out the nodes that joined since (all of them at the start; a node pool's
        later)."""
        nodes = self.world.nodes[self._known :]
        if not nodes:
            return
        self._known += len(nodes)
        self._made = None
        for node in nodes:
            layout = _NodeLayout(node, first_domain=len(self._domain_template))
            for gpu in node.gpus:
                position = len(self._specs)
                self._specs.append(gpu_spec(gpu.model))
                layout.gpu_positions.append(position)
                if not gpu.partitioned:
                    self._domain_of[(node.name, gpu.index, -1)] = len(self._domain_template)
                    self._domain_template.append((position, 1.0, gpu.memory_mib))
                    continue
                for mig in gpu.mig_slices:
                    shape = parse_mig_profile(mig.profile)
                    memory = min(gpu.memory_mib, shape.memory_gb * 1024)
                    part = shape.compute_slices / MIG_COMPUTE_SLICES
                    self._domain_of[(node.name, gpu.index, mig.slot)] = len(self._domain_template)
                    self._domain_template.append((position, part, memory))
            if node.gpus:
                self._layouts.append(layout)

    def read(self) -> Sequence[NodeTelemetry]:
        now = self.world.clock.now()
        domains, users = self._domains()
        readings = self.model.read(self._specs, domains, now)
        up = self.world.node_up  # a node gone (a spot interruption, a failure) reports nothing
        return [
            self._node(layout, readings, users) for layout in self._layouts if up(layout.node.name)
        ]

    def pod_utilisation(self, now: float | None = None) -> dict[tuple[str, str], float]:
        """(namespace, pod) -> the mean utilisation (percent) of the devices it holds, the
        pods placed as they are, at ``now`` (default: the world's time; another: a meter that
        catches up on a span the world jumped over, nothing placed having changed in it).
        What :meth:`read` reports of each device a pod holds (``gpufleet_workload_gpu_util``),
        without making the rest of the samples."""
        at = self.world.clock.now() if now is None else now
        domains, users = self._domains()
        util = self.model.utilisation(domains, at)
        held: dict[tuple[str, str], list[float]] = {}
        for domain, holders in users.items():
            for pod, _ in holders:
                held.setdefault((pod.namespace, pod.name), []).append(float(util[domain]))
        return {pod: sum(values) / len(values) for pod, values in held.items()}

    def _domains(self) -> tuple[list[Domain], dict[int, list[tuple[Pod, float]]]]:
        """Every compute domain with the pods on it, and the pods holding each (and how
        much of it), as the world places them now: made again only when a placement, a
        release or a run's restart changed them (a run samples every simulated minute, and
        most minutes nothing moved)."""
        world = self.world
        if len(world.nodes) != self._known:
            self._add_nodes()
        key = (world.world.clock, world.run_starts)
        if self._made is not None and self._made[0] == key:
            return self._made[1], self._made[2]
        domains, users = self._make_domains()
        self._made = (key, domains, users)
        return domains, users

    def _make_domains(self) -> tuple[list[Domain], dict[int, list[tuple[Pod, float]]]]:
        pods: list[list[PodLoad]] = [[] for _ in self._domain_template]
        users: dict[int, list[tuple[Pod, float]]] = {}
        for pod, placement, started in self.world.placed():
            for domain, share in self._holds(pod, placement):
                template = self._domain_template[domain]
                memory = pod.gpu.memory_mib or round(template[2] * share)
                load = PodLoad(
                    pod.key, self._profile(pod), share, min(memory, template[2]), started
                )
                pods[domain].append(load)
                users.setdefault(domain, []).append((pod, share))
        domains = [
            Domain(gpu, part, memory, pods[i])
            for i, (gpu, part, memory) in enumerate(self._domain_template)
        ]
        return domains, users

    def _holds(self, pod: Pod, placement: Placement) -> list[tuple[int, float]]:
        """(domain, share of it) of each domain the pod holds."""
        node = placement.node
        held = []
        share = placement.milli_per_device / MILLI_PER_GPU
        for index in placement.gpu_indices:
            domain = self._domain_of.get((node, index, -1))
            if domain is not None:
                held.append((domain, share))
        for index, slot in placement.mig_slices:
            domain = self._domain_of.get((node, index, slot))
            if domain is not None:
                held.append((domain, 1.0))
        return held

    def _profile(self, pod: Pod) -> UsageProfile:
        try:
            return profile_of(pod, self.default_profile)
        except ValueError as error:
            if pod.key not in self._warned:
                self._warned.add(pod.key)
                log.warning("%s; it uses the default profile", error)
            return self.default_profile or UsageProfile.IDLE

    def _node(
        self, layout: _NodeLayout, readings: Readings, users: dict[int, list[tuple[Pod, float]]]
    ) -> NodeTelemetry:
        """One node's samples (GPUs, then MIG instances), holders and allocation."""
        node = layout.node
        xids = self.world.xids.of_node(node.name)
        samples: list[DeviceSample] = []
        holders: list[DeviceUser] = []
        allocated: dict[str, float] = {}
        instances: list[DeviceSample] = []
        domain = layout.first_domain
        for gpu, position in zip(node.gpus, layout.gpu_positions, strict=True):
            parent = gpu_uuid(node.name, gpu.index)
            memory = gpu.memory_mib
            used = int(readings.gpu_fb_used[position])
            samples.append(
                DeviceSample(
                    gpu=gpu.index,
                    uuid=parent,
                    model=gpu.model,
                    gpu_util=float(readings.gpu_util[position]),
                    mem_copy_util=float(readings.gpu_mem_copy[position]),
                    fb_used_mib=used,
                    fb_free_mib=max(0, memory - used),
                    temperature_c=float(readings.gpu_temperature[position]),
                    power_w=float(readings.gpu_power[position]),
                    sm_clock_mhz=int(readings.gpu_sm_clock[position]),
                    xid=xids.get(gpu.index, 0),
                )
            )
            slots = gpu.mig_slices if gpu.partitioned else ()
            held_slots = 0
            if not slots:
                held = users.get(domain, [])
                allocated[parent] = min(1.0, sum(share for _, share in held))
                holders.extend(_users(parent, held))
                domain += 1
            for mig in slots:
                instance = mig_uuid(node.name, gpu.index, mig.slot)
                template = self._domain_template[domain]
                used = int(readings.domain_fb_used[domain])
                held = users.get(domain, [])
                held_slots += bool(held)
                allocated[instance] = 1.0 if held else 0.0
                holders.extend(_users(instance, held))
                instances.append(
                    DeviceSample(
                        gpu=gpu.index,
                        uuid=instance,
                        model=gpu.model,
                        gpu_util=float(readings.domain_util[domain]),
                        mem_copy_util=float(readings.domain_mem_copy[domain]),
                        fb_used_mib=used,
                        fb_free_mib=max(0, template[2] - used),
                        mig_profile=mig.profile,
                        gpu_instance_id=mig.slot + 1,
                    )
                )
                domain += 1
            if slots:
                allocated[parent] = held_slots / len(slots)
        return NodeTelemetry(
            node.name,
            [*samples, *instances],
            holders,
            allocated,
            {gpu.index: pci_bus_id(gpu.index) for gpu in node.gpus},
            SIM_DRIVER_VERSION,
        )


def _users(device: str, held: list[tuple[Pod, float]]) -> list[DeviceUser]:
    return [DeviceUser(device, pod.name, pod.namespace, SIM_CONTAINER) for pod, _ in held]


class LockedTelemetry(TelemetrySource):
    """Another source, read under ``lock`` (the lock its world is guarded by)."""

    def __init__(self, source: TelemetrySource, lock: threading.RLock) -> None:
        self.source = source
        self.lock = lock

    def read(self) -> Sequence[NodeTelemetry]:
        with self.lock:
            return self.source.read()
