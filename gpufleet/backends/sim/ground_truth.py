"""The simulated cluster's ground truth about its devices: what is taken and what is broken.

Owns :class:`GroundTruth`: the world's own node table (separate from the scheduler's view),
on which every bind takes its devices, so a scheduler bug that double-books a device shows up
as a failed bind instead of a silently wrong result; and the GPU faults active now (a scenario's
:class:`~gpufleet.model.faults.GpuFault` objects): a failing GPU records its XID, is withdrawn
from the table (a bind on it fails) and is told as ``DeviceHealthChanged`` (the set of a node's
unhealthy GPUs, with the XIDs as reasons) when that set changes. A GPU may fail again before it
recovers; it is healthy once every fault on it has ended.

It does not schedule faults (the world's event queue does), release devices on its own, or
fail pods for an XID (a scenario says those with ``sim-failures``).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.model import MILLI_PER_GPU, Node, Placement, Pod
from gpufleet.model.events import DeviceHealthChanged
from gpufleet.model.faults import GpuFault
from gpufleet.model.node import with_gpu_health
from gpufleet.scheduling.node_table import Allocation, NodeTable
from gpufleet.telemetry.source import XidLog


class GroundTruth:
    """See the module docstring."""

    __slots__ = ("_faulty", "_gpu_index", "nodes", "table", "xids")

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.table = NodeTable(nodes)
        self.nodes = tuple(nodes)
        #: The last XID on each device (a fault records it; the telemetry reads it).
        self.xids = XidLog()
        #: Per node row, each GPU's index -> its position on the node.
        self._gpu_index: list[dict[int, int]] = [
            {gpu.index: position for position, gpu in enumerate(node.gpus)} for node in nodes
        ]
        #: Per node, the faults active on each GPU (a GPU may fail again before it recovers).
        self._faulty: dict[str, dict[int, list[GpuFault]]] = {}

    def allocate(self, pod: Pod, placement: Placement, row: int) -> Allocation:
        """Take ``placement``'s devices on the table (ValueError if not free)."""
        positions = self._gpu_index[row]
        table = self.table
        return table.allocate(
            row,
            pod.cpu_milli,
            pod.memory_mib,
            tuple(positions[i] for i in placement.gpu_indices),
            placement.gpu_milli_per_device or (MILLI_PER_GPU if placement.gpu_indices else 0),
            table.mig_profile_id.get(pod.gpu.mig_profile or "", -1),
            tuple((positions[g], slot) for g, slot in placement.mig_slices),
            extended=tuple((table.ext_id.get(n, -1), a) for n, a in pod.extended),
            units=pod.gpu.units if placement.gpu_indices else 0,
        )

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
        """``fault`` begins or ends: the node's unhealthy GPUs, if they changed."""
        active = self._faulty.setdefault(fault.node, {})
        if failing:
            active.setdefault(fault.gpu, []).append(fault)
            self.xids.record(fault.node, fault.gpu, fault.xid)
        else:
            active[fault.gpu].remove(fault)
            if not active[fault.gpu]:
                del active[fault.gpu]
        unhealthy = tuple(sorted(active))
        if self.table.set_unhealthy(self.table.row_of[fault.node], unhealthy):
            reasons = tuple((gpu, active[gpu][-1].reason) for gpu in unhealthy)
            return DeviceHealthChanged(fault.node, unhealthy, reasons)
        return None

    def current_nodes(self) -> tuple[Node, ...]:
        """The nodes, the GPUs a fault holds now marked unhealthy."""
        return tuple(
            with_gpu_health(node, faulty) if (faulty := self._faulty.get(node.name)) else node
            for node in self.nodes
        )
