"""The simulated cluster's ground truth about its devices: what is taken and what is broken.

Owns :class:`GroundTruth`: the world's own node table (separate from the scheduler's view),
on which every bind takes its devices, so a scheduler bug that double-books a device shows up
as a failed bind instead of a silently wrong result; and the GPU faults active now (a scenario's
:class:`~gpufleet.model.faults.GpuFault` objects): a failing GPU records its XID, is withdrawn
from the table (a bind on it fails) and is told as ``DeviceHealthChanged`` (the set of a node's
unhealthy GPUs, with the XIDs as reasons) when that set changes. A GPU may fail again before it
recovers; it is healthy once every fault on it has ended. Nodes come and go (a spot
interruption, a node failure, a node pool growing and shrinking: :meth:`GroundTruth.remove_node`,
:meth:`GroundTruth.restore_node`): a node that comes back is a new one of the same name and shape
(a new row of the table), all its GPUs healthy; a node new to the cluster is added the same
way; a GPU fault on a node that is gone changes nothing until it returns.

It does not schedule faults (the world's event queue does), release devices on its own, or
decide what happens to the pods of a node that goes or of a GPU that fails (the world does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gpufleet.model import Node, Placement, Pod
from gpufleet.model.events import DeviceHealthChanged
from gpufleet.model.faults import GpuFault
from gpufleet.model.node import with_gpu_health
from gpufleet.scheduling.node_table import Allocation, Claim, NodeTable
from gpufleet.telemetry.source import XidLog


def devices_of(placement: Placement) -> tuple[int, ...]:
    """The GPU indices a placement holds (whole, shared, or a MIG slice of)."""
    return (*placement.gpu_indices, *(index for index, _ in placement.mig_slices))


class GroundTruth:
    """See the module docstring."""

    __slots__ = ("_cordoned", "_faulty", "_gone", "_gpu_index", "by_name", "nodes", "table", "xids")

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.table = NodeTable(nodes)
        self.nodes = tuple(nodes)
        #: Every node that was ever in the cluster, by name (gone ones too).
        self.by_name = {node.name: node for node in nodes}
        #: The last XID on each device (a fault records it; the telemetry reads it).
        self.xids = XidLog()
        #: Per node row, each GPU's index -> its position on the node.
        self._gpu_index: list[dict[int, int]] = [
            {gpu.index: position for position, gpu in enumerate(node.gpus)} for node in nodes
        ]
        #: Per node, the faults active on each GPU (a GPU may fail again before it recovers).
        self._faulty: dict[str, dict[int, list[GpuFault]]] = {}
        #: Nodes gone now (a spot interruption, a node failure), until they come back, and
        #: nodes told they will go (cordoned: listed as unschedulable).
        self._gone: set[str] = set()
        self._cordoned: set[str] = set()

    def allocate(self, pod: Pod, placement: Placement, row: int) -> Allocation:
        """Take ``placement``'s devices on the table (ValueError if not free)."""
        positions = self._gpu_index[row]
        table = self.table
        claim = Claim(
            row,
            pod.cpu_milli,
            pod.memory_mib,
            tuple(positions[i] for i in placement.gpu_indices),
            placement.milli_per_device,
            table.mig_profile_id.get(pod.gpu.mig_profile or "", -1),
            tuple((positions[g], slot) for g, slot in placement.mig_slices),
            extended=tuple((table.ext_id.get(n, -1), a) for n, a in pod.extended),
            units=pod.gpu.units if placement.gpu_indices else 0,
        )
        return table.allocate(claim)

    # ----------------------------------------------------------------------------- faults
    def check_fault(self, fault: GpuFault) -> None:
        """ValueError naming the fault and its field if its node or GPU is not here."""
        where = fault.name or "GpuFault"
        row = self.table.row_of.get(fault.node)
        if row is None:
            raise ValueError(f"{where}: spec.node: no node {fault.node!r} in the cluster")
        if fault.gpu not in self._gpu_index[row]:
            known = ", ".join(map(str, sorted(self._gpu_index[row]))) or "none"
            raise ValueError(
                f"{where}: spec.gpu: node {fault.node!r} has no GPU {fault.gpu} (its GPUs: {known})"
            )

    def health_changed(self, fault: GpuFault, failing: bool) -> DeviceHealthChanged | None:
        """``fault`` begins or ends: the node's unhealthy GPUs, if they changed (nothing while
        the node is gone; a fault that began before the node last came back ends nothing)."""
        if fault.node in self._gone:
            return None
        active = self._faulty.setdefault(fault.node, {})
        if failing:
            active.setdefault(fault.gpu, []).append(fault)
            self.xids.record(fault.node, fault.gpu, fault.xid)
        else:
            faults = active.get(fault.gpu, [])
            if fault not in faults:
                return None
            faults.remove(fault)
            if not faults:
                del active[fault.gpu]
        unhealthy = tuple(sorted(active))
        if self.table.set_unhealthy(self.table.row_of[fault.node], unhealthy):
            reasons = tuple((gpu, active[gpu][-1].reason) for gpu in unhealthy)
            return DeviceHealthChanged(fault.node, unhealthy, reasons)
        return None

    def crashing(self, node: str, gpu_indices: Sequence[int]) -> GpuFault | None:
        """The latest fault that crashes pods among those active on these GPUs of ``node``
        (None: none is)."""
        active = self._faulty.get(node, {})
        found = [f for i in gpu_indices for f in active.get(i, ()) if f.crashes_pods]
        return max(found, key=lambda f: f.at) if found else None

    def current_nodes(self) -> tuple[Node, ...]:
        """The nodes that are up, the GPUs a fault holds now marked unhealthy, a node told it
        will go marked unschedulable (cordoned)."""
        nodes = []
        for node in self.nodes:
            if node.name in self._gone:
                continue
            if (faulty := self._faulty.get(node.name)) is not None:
                node = with_gpu_health(node, faulty)
            if node.name in self._cordoned:
                node = dataclasses.replace(node, unschedulable=True)
            nodes.append(node)
        return tuple(nodes)

    # ----------------------------------------------------------------------------- nodes
    def is_up(self, name: str) -> bool:
        return name not in self._gone

    def cordon(self, name: str) -> None:
        """The node is told it will go: nothing new is to go there."""
        self._cordoned.add(name)

    def remove_node(self, name: str) -> None:
        """The node is gone (its pods' devices must have been released first)."""
        self._cordoned.discard(name)
        self._gone.add(name)
        self._faulty.pop(name, None)
        self.table.remove_node(name)

    def restore_node(self, node: Node) -> None:
        """A node of this name and shape joins again, every GPU healthy (a new row); or a
        node new to the cluster joins (a node pool's)."""
        if node.name not in self._gone:
            if node.name in self.table.row_of:
                raise ValueError(f"node {node.name!r} is already in the cluster")
            self.nodes = (*self.nodes, node)
            self.by_name[node.name] = node
        self._gone.discard(node.name)
        row = self.table.add_node(node)
        positions = {gpu.index: position for position, gpu in enumerate(node.gpus)}
        if row == len(self._gpu_index):
            self._gpu_index.append(positions)
        else:
            self._gpu_index[row] = positions
