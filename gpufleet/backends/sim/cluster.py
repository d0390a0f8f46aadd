"""The embedded simulated cluster: a discrete-event world behind the ClusterBackend protocol.

The world keeps its own node table (the ground truth, separate from the scheduler's view) and
checks every bind against it, so a scheduler bug that double-books a device shows up as a
failed bind instead of a silently wrong result. Time is virtual: :meth:`wait` jumps to the next
event.

Two modes:

* ``fill`` (the FGD protocol): pod i arrives at time i; a pod the scheduler cannot place is
  dropped; nothing ever leaves.
* ``replay``: pods arrive at their creation time, run for their run time once bound, and wait
  (pending) while nothing fits; pods still waiting at the end never ran.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from enum import StrEnum

from gpufleet.backends.sim.recorder import Recorder
from gpufleet.control.backend import ClusterState, ManualClock
from gpufleet.model import MILLI_PER_GPU, Node, Pod
from gpufleet.model.actions import Action, Bind, MarkUnschedulable
from gpufleet.model.events import BindFailed, ClusterEvent, PodAdded, PodDeleted
from gpufleet.model.workload import TimedPod
from gpufleet.scheduling.node_table import Allocation, NodeTable
from gpufleet.scheduling.target import TargetWorkload


class Mode(StrEnum):
    FILL = "fill"
    REPLAY = "replay"


_ARRIVE = 0
_FINISH = 1


class SimulatedCluster:
    """See the module docstring."""

    def __init__(
        self,
        nodes: Sequence[Node],
        workload: Sequence[TimedPod],
        mode: Mode,
        target: TargetWorkload,
    ) -> None:
        self.clock = ManualClock()
        self.mode = mode
        self.world = NodeTable(nodes)
        self.nodes = tuple(nodes)
        self.recorder = Recorder(self.world, target)
        self.arrivals_seen = 0
        self._heap: list[tuple[float, int, int, TimedPod | str]] = []
        self._seq = 0
        self._immediate: list[ClusterEvent] = []
        self._running: dict[str, Allocation] = {}
        self._runtime: dict[str, float | None] = {}
        self._pending: dict[str, Pod] = {}
        self._gpu_index: list[dict[int, int]] = [
            {gpu.index: position for position, gpu in enumerate(node.gpus)} for node in nodes
        ]
        if mode is Mode.FILL:
            for i, timed in enumerate(workload):
                self._push(float(i), _ARRIVE, timed)
        else:
            starts = [t.created for t in workload if t.created is not None]
            origin = min(starts, default=0.0)
            for timed in workload:
                created = timed.created if timed.created is not None else origin
                self._push(created - origin, _ARRIVE, timed)
        if self._heap:
            self.clock.advance_to(self._heap[0][0])

    def _push(self, time: float, kind: int, payload: TimedPod | str) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq, kind, payload))

    # ----------------------------------------------------------------------------- protocol
    def list_state(self) -> ClusterState:
        return ClusterState(self.nodes, tuple(self._pending.values()), ())

    def poll_events(self) -> Sequence[ClusterEvent]:
        events = self._immediate
        self._immediate = []
        now = self.clock.now()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, kind, payload = heapq.heappop(heap)
            if kind == _ARRIVE:
                assert isinstance(payload, TimedPod)
                pod = payload.pod
                if pod.key in self._pending or pod.key in self._running:
                    raise ValueError(f"pod {pod.key} arrives twice in the workload")
                self._pending[pod.key] = pod
                self._runtime[pod.key] = payload.runtime
                self.recorder.arrived(pod, now)
                self.arrivals_seen += 1
                events.append(PodAdded(pod))
            else:
                assert isinstance(payload, str)
                allocation = self._running.pop(payload)
                self.world.release(allocation)
                self.recorder.finished(payload, allocation, now)
                events.append(PodDeleted(payload))
        return events

    def apply(self, actions: Sequence[Action]) -> None:
        now = self.clock.now()
        for action in actions:
            if isinstance(action, Bind):
                self._bind(action, now)
            elif isinstance(action, MarkUnschedulable):
                pod = action.pod
                if pod.key not in self._pending:
                    continue
                self.recorder.unschedulable(pod, action.message, now)
                if self.mode is Mode.FILL:
                    del self._pending[pod.key]
                    self.recorder.dropped(pod, now)
                    self._immediate.append(PodDeleted(pod.key))

    def _bind(self, action: Bind, now: float) -> None:
        pod = action.pod
        placement = action.placement
        if pod.key not in self._pending:
            self._immediate.append(BindFailed(pod.key, "pod is not pending"))
            return
        row = self.world.row_of.get(placement.node)
        if row is None:
            self._immediate.append(BindFailed(pod.key, f"no node {placement.node!r}"))
            return
        positions = self._gpu_index[row]
        try:
            allocation = self.world.allocate(
                row,
                pod.cpu_milli,
                pod.memory_mib,
                tuple(positions[i] for i in placement.gpu_indices),
                placement.gpu_milli_per_device or (MILLI_PER_GPU if placement.gpu_indices else 0),
                self.world.mig_profile_id.get(pod.gpu.mig_profile or "", -1),
                tuple((positions[g], slot) for g, slot in placement.mig_slices),
            )
        except (ValueError, KeyError) as error:
            self.recorder.violation(pod, str(error), now)
            self._immediate.append(BindFailed(pod.key, str(error)))
            return
        del self._pending[pod.key]
        self._running[pod.key] = allocation
        self.recorder.bound(pod, placement, allocation, now)
        runtime = self._runtime.pop(pod.key, None)
        if self.mode is Mode.REPLAY and runtime is not None:
            self._push(now + runtime, _FINISH, pod.key)

    def wait(self, deadline: float = math.inf) -> None:
        if self._immediate:
            return
        self.recorder.sample(self.clock.now())
        if self._heap:
            self.clock.advance_to(min(self._heap[0][0], max(deadline, self.clock.now())))

    @property
    def done(self) -> bool:
        return not self._heap and not self._immediate

    # ----------------------------------------------------------------------------- queries
    @property
    def pending(self) -> dict[str, Pod]:
        return dict(self._pending)

    @property
    def running(self) -> dict[str, Allocation]:
        return dict(self._running)
