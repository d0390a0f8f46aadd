"""The simulated cluster's future: its events in time order, on the virtual clock.

Owns :class:`EventQueue` (a heap of (time, order pushed, kind, payload); events at the same
time come out in the order they were pushed) and the kinds of event the world schedules. It
counts the events that are work (not faults, nor nodes going and coming), so the world can tell
that only faults are left.
It does not say what an event does (:mod:`gpufleet.backends.sim.cluster` and
:mod:`gpufleet.backends.sim.pod_runs` do) and moves no clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator

from gpufleet.backends.sim.jobs import JobRun
from gpufleet.model import Pod
from gpufleet.model.faults import GpuFault
from gpufleet.model.node_faults import NodeFault
from gpufleet.model.workload import TimedPod, TimedWorkload, Workload

ARRIVE = 0
FINISH = 1
ARRIVE_WORKLOAD = 2
RESTART = 3  # a container restarts in place
RESUBMIT = 4  # a new pod for a failed one (or a job's new gang) arrives
DEADLINE = 5  # a job's activeDeadlineSeconds may have passed
FAULT = 6  # a GPU fails (a GpuFault)
RECOVER = 7  # a GPU recovers from a GpuFault
NOTICE = 8  # a node is told it will go (a spot interruption's notice)
NODE_DOWN = 9  # a node goes, with its pods (a spot interruption's end, a node failure)
NODE_UP = 10  # a node of that name joins again (a spot replacement, a repaired node)
REQUEUE = 11  # pods lost (or taken down with their gang) go back to the scheduler
CRASH_LOOP = 12  # a container restarts in place on a GPU that failed for good

#: Kinds that are not work: a world with only these left is done (a pod crash-looping on a
#: GPU that never recovers does not keep it running).
_NOT_WORK = (FAULT, RECOVER, NOTICE, NODE_DOWN, NODE_UP, CRASH_LOOP)

Payload = (
    TimedPod
    | TimedWorkload
    | tuple[str, int]
    | tuple[JobRun, int]
    | GpuFault
    | tuple[NodeFault, str, int]
    | tuple[Workload | Pod, tuple[tuple[str, int], ...]]
)


class EventQueue:
    """See the module docstring."""

    __slots__ = ("_heap", "_seq", "_work_events")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Payload]] = []
        self._seq = 0
        #: Events on the heap that are not faults (the world is done when none are left).
        self._work_events = 0

    def push(self, time: float, kind: int, payload: Payload) -> None:
        self._work_events += kind not in _NOT_WORK
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq, kind, payload))

    def due(self, now: float) -> Iterator[tuple[float, int, Payload]]:
        """(time, kind, payload) of each event at or before ``now``, in order, taken off the
        queue one at a time (an event pushed for ``now`` while they are handled comes too)."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, _, kind, payload = heapq.heappop(heap)
            self._work_events -= kind not in _NOT_WORK
            yield at, kind, payload

    def drop_workloads(self, pod_keys: set[str]) -> None:
        """Forget the arrivals of workloads all of whose pods are in ``pod_keys``."""
        self._heap = [
            item
            for item in self._heap
            if not (
                isinstance(item[3], TimedWorkload)
                and pod_keys.issuperset(p.key for p in item[3].workload.pods)
            )
        ]
        heapq.heapify(self._heap)
        self._work_events = sum(item[2] not in _NOT_WORK for item in self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def work_left(self) -> bool:
        """Whether an event that is not a fault is still to come."""
        return self._work_events != 0

    @property
    def next_at(self) -> float:
        """When the next event happens (``inf``: none is)."""
        return self._heap[0][0] if self._heap else math.inf
