"""The embedded simulated cluster: a discrete-event world behind the ClusterBackend protocol.

The world keeps its own node table (the ground truth, separate from the scheduler's view) and
checks every bind against it, so a scheduler bug that double-books a device shows up as a
failed bind instead of a silently wrong result. Time is virtual: :meth:`wait` jumps to the next
event.

Two modes:

* ``fill`` (the FGD protocol): pod i arrives at time i; a pod the scheduler cannot place is
  dropped; nothing ever leaves.
* ``replay``: pods (or workloads: gangs of pods) arrive at their creation time, run for their
  run time once bound, and wait (pending) while nothing fits; pods still waiting at the end never
  ran. An evicted pod (preempted, or its gang did not start in time) goes back to waiting and,
  when bound again, resumes from its workload's last checkpoint: the work since then is lost.
  Pods of gangs report ready as soon as they are bound.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpufleet.backends.sim.recorder import Recorder
from gpufleet.backends.sim.tenants import TenantRecorder
from gpufleet.control.backend import ClusterState, ManualClock
from gpufleet.model import MILLI_PER_GPU, Node, Placement, Pod
from gpufleet.model.actions import Action, Bind, Evict, MarkUnschedulable
from gpufleet.model.events import (
    BindFailed,
    ClusterEvent,
    PodAdded,
    PodDeleted,
    PodReady,
    WorkloadAdded,
)
from gpufleet.model.workload import TimedPod, TimedWorkload
from gpufleet.scheduling.node_table import Allocation, NodeTable
from gpufleet.scheduling.target import TargetWorkload


class Mode(StrEnum):
    FILL = "fill"
    REPLAY = "replay"


_ARRIVE = 0
_FINISH = 1
_ARRIVE_WORKLOAD = 2

Payload = TimedPod | TimedWorkload | tuple[str, int]


@dataclass(slots=True)
class _Work:
    """What is left of one pod's work, and when its current run started."""

    pod: Pod
    remaining: float | None
    checkpoint: float | None = None
    in_gang: bool = False
    started: float = 0.0
    #: Bumped on every bind, so that the finish of an earlier (evicted) run is ignored.
    run: int = 0


class SimulatedCluster:
    """See the module docstring."""

    def __init__(
        self,
        nodes: Sequence[Node],
        workload: Sequence[TimedPod],
        mode: Mode,
        target: TargetWorkload,
        workloads: Sequence[TimedWorkload] = (),
        tenants: TenantRecorder | None = None,
    ) -> None:
        self.clock = ManualClock()
        self.mode = mode
        self.world = NodeTable(nodes)
        self.nodes = tuple(nodes)
        self.recorder = Recorder(self.world, target)
        self.tenants = tenants
        self.arrivals_seen = 0
        self._heap: list[tuple[float, int, int, Payload]] = []
        self._seq = 0
        self._immediate: list[ClusterEvent] = []
        self._running: dict[str, Allocation] = {}
        self._work: dict[str, _Work] = {}
        self._pending: dict[str, Pod] = {}
        self._gpu_index: list[dict[int, int]] = [
            {gpu.index: position for position, gpu in enumerate(node.gpus)} for node in nodes
        ]
        if mode is Mode.FILL:
            if workloads:
                raise ValueError("fill mode takes pods, not workloads")
            for i, timed in enumerate(workload):
                self._push(float(i), _ARRIVE, timed)
        else:
            starts = [t.created for t in workload if t.created is not None]
            starts += [t.created for t in workloads]
            origin = min(starts, default=0.0)
            for timed in workload:
                created = timed.created if timed.created is not None else origin
                self._push(created - origin, _ARRIVE, timed)
            for job in workloads:
                self._push(job.created - origin, _ARRIVE_WORKLOAD, job)
        self.origin = 0.0 if mode is Mode.FILL else min(starts, default=0.0)
        if self._heap:
            self.clock.advance_to(self._heap[0][0])

    def _push(self, time: float, kind: int, payload: Payload) -> None:
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
                self._arrive(payload.pod, payload.runtime, None, False, now)
                events.append(PodAdded(payload.pod))
            elif kind == _ARRIVE_WORKLOAD:
                assert isinstance(payload, TimedWorkload)
                workload = payload.workload
                gang = len(workload.pods) > 1
                for pod in workload.pods:
                    self._arrive(pod, payload.duration, workload.checkpoint_interval, gang, now)
                if self.tenants is not None:
                    self.tenants.arrived(payload, now)
                events.append(WorkloadAdded(workload))
            else:
                assert isinstance(payload, tuple)
                key, run = payload
                work = self._work.get(key)
                if work is None or work.run != run or key not in self._running:
                    continue  # evicted since: this run never finished
                allocation = self._running.pop(key)
                self.world.release(allocation)
                del self._work[key]
                self.recorder.finished(key, allocation, now)
                if self.tenants is not None:
                    self.tenants.stopped(work.pod, allocation, now, lost=None)
                events.append(PodDeleted(key))
        return events

    def _arrive(
        self,
        pod: Pod,
        runtime: float | None,
        checkpoint: float | None,
        in_gang: bool,
        now: float,
    ) -> None:
        if pod.key in self._pending or pod.key in self._running or pod.key in self._work:
            raise ValueError(f"pod {pod.key} arrives twice in the workload")
        self._pending[pod.key] = pod
        self._work[pod.key] = _Work(pod, runtime, checkpoint, in_gang)
        self.recorder.arrived(pod, now)
        self.arrivals_seen += 1

    def apply(self, actions: Sequence[Action]) -> None:
        now = self.clock.now()
        for action in actions:
            if isinstance(action, Bind):
                self._bind(action, now)
            elif isinstance(action, Evict):
                self._evict(action, now)
            elif isinstance(action, MarkUnschedulable):
                pod = action.pod
                if pod.key not in self._pending:
                    continue
                self.recorder.unschedulable(pod, action.message, now)
                if self.tenants is not None:
                    self.tenants.unschedulable(pod, action.message)
                if self.mode is Mode.FILL:
                    del self._pending[pod.key]
                    del self._work[pod.key]
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
        try:
            allocation = self._allocate(pod, placement, row)
        except (ValueError, KeyError) as error:
            self.recorder.violation(pod, str(error), now)
            self._immediate.append(BindFailed(pod.key, str(error)))
            return
        del self._pending[pod.key]
        self._running[pod.key] = allocation
        self.recorder.bound(pod, placement, allocation, now)
        work = self._work[pod.key]
        work.started = now
        work.run += 1
        if self.tenants is not None:
            self.tenants.bound(pod, allocation, now)
        if work.in_gang:
            self._immediate.append(PodReady(pod.key))
        if self.mode is Mode.REPLAY and work.remaining is not None:
            self._push(now + work.remaining, _FINISH, (pod.key, work.run))
        elif self.mode is Mode.FILL:
            del self._work[pod.key]

    def _allocate(self, pod: Pod, placement: Placement, row: int) -> Allocation:
        """Take ``placement``'s devices on the ground-truth table (ValueError if not free)."""
        positions = self._gpu_index[row]
        return self.world.allocate(
            row,
            pod.cpu_milli,
            pod.memory_mib,
            tuple(positions[i] for i in placement.gpu_indices),
            placement.gpu_milli_per_device or (MILLI_PER_GPU if placement.gpu_indices else 0),
            self.world.mig_profile_id.get(pod.gpu.mig_profile or "", -1),
            tuple((positions[g], slot) for g, slot in placement.mig_slices),
            units=pod.gpu.units if placement.gpu_indices else 0,
        )

    def _evict(self, action: Evict, now: float) -> None:
        """The pod stops and waits again; it keeps the work done up to its last checkpoint."""
        key = action.pod.key
        allocation = self._running.pop(key, None)
        if allocation is None:
            return
        self.world.release(allocation)
        work = self._work[key]
        ran = now - work.started
        kept = 0.0
        if work.checkpoint:
            kept = math.floor(ran / work.checkpoint) * work.checkpoint
        if work.remaining is not None:
            work.remaining = max(0.0, work.remaining - kept)
        self._pending[key] = work.pod
        self.recorder.evicted(key, allocation, now)
        if self.tenants is not None:
            self.tenants.stopped(work.pod, allocation, now, lost=ran - kept)
        self._immediate.append(PodDeleted(key))

    def wait(self, deadline: float = math.inf) -> None:
        if self._immediate:
            return
        now = self.clock.now()
        self.recorder.sample(now)
        if self.tenants is not None:
            self.tenants.sample(now)
        if self._heap:
            self.clock.advance_to(min(self._heap[0][0], max(deadline, now)))
        elif deadline < math.inf and deadline > now:
            self.clock.advance_to(deadline)

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
