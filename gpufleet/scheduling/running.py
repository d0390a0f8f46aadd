"""What the core knows of admitted workloads: each one's placements, quota usage, start and
readiness (:class:`RunningWorkload`), and the set of them (:class:`RunningSet`): running by
workload key and by queue, those being evicted apart, and which workload owns each bound pod.

The set tells its watchers (:class:`~.framework.RunningWatcher`: the preemption plugin's
victim columns, the admission checks' own accounting, the gang permit's deadlines) when a
workload starts, when one of its pods ends and gives its usage back, and when it stops running
(evicted or ended), and when a running workload is retagged (lowered to preemptible), so
that each keeps what it derives up to date without listing every
running workload again.

What it does not do: charge or refund quotas, release devices, or decide anything (the core's
lifecycle does those, and tells the set).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.model.workload import Workload
from gpufleet.scheduling.engine import Bound
from gpufleet.scheduling.framework import RunningWatcher


@dataclass(slots=True)
class RunningWorkload:
    workload: Workload
    bound: dict[str, Bound]
    usage: dict[str, int]
    started: float
    #: When it arrived in its queue (Kueue's queue order timestamp; see :class:`.Arrivals`).
    queued: float = 0.0
    #: Pods still to report ready, and when the gang must be ready by (None: it is).
    unready: set[str] = field(default_factory=set)
    ready_by: float | None = None
    #: Set when it is being evicted: why, and for whom.
    evicted_for: str | None = None
    attempts: int = 0

    @property
    def key(self) -> str:
        return self.workload.key

    @property
    def gpu_milli(self) -> int:
        return sum(b.allocation.gpu_milli for b in self.bound.values())

    def expected_end(self, default_runtime: float) -> float:
        runtime = self.workload.expected_runtime
        return self.started + (runtime if runtime is not None else default_runtime)

    def work_lost(self, now: float) -> float:
        """GPU-milli-seconds a preemption now would throw away (since the last checkpoint)."""
        ran = max(0.0, now - self.started)
        interval = self.workload.checkpoint_interval
        since = ran - math.floor(ran / interval) * interval if interval else ran
        return since * max(self.gpu_milli, 1)


class RunningSet:
    """See the module docstring."""

    def __init__(self) -> None:
        #: Admitted workloads by workload key, and by queue; those being evicted apart.
        self.workloads: dict[str, RunningWorkload] = {}
        self.evicting: dict[str, RunningWorkload] = {}
        self.by_queue: dict[str, dict[str, RunningWorkload]] = {}
        #: Pod key -> workload key, for the pods of admitted workloads.
        self.owner: dict[str, str] = {}
        #: Bumped when the running set changes: keys what is derived from it.
        self.version = 0
        self.watchers: list[RunningWatcher] = []
        self._priorities: dict[str, Counter[int]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self.workloads

    def get(self, key: str) -> RunningWorkload | None:
        return self.workloads.get(key)

    def of_pod(self, pod_key: str) -> RunningWorkload | None:
        """The running workload that owns a bound pod (None if none, or it is being evicted)."""
        return self.workloads.get(self.owner.get(pod_key, ""))

    def disown(self, pod_key: str) -> str | None:
        """Forget who owns a pod (it ended, or its bind failed); its owner's key, if any."""
        return self.owner.pop(pod_key, None)

    def lowest_priority(self, queue: str) -> int | None:
        """The lowest priority running in ``queue`` (None when nothing runs there)."""
        counts = self._priorities.get(queue)
        return min(counts) if counts else None

    def track(self, running: RunningWorkload) -> None:
        workload = running.workload
        queue = workload.queue
        self.workloads[workload.key] = running
        in_queue = self.by_queue.get(queue)
        if in_queue is None:
            in_queue = self.by_queue[queue] = {}
        in_queue[workload.key] = running
        self.version += 1
        counts = self._priorities.get(queue)
        if counts is None:
            counts = self._priorities[queue] = Counter()
        counts[workload.priority] += 1
        for key in running.bound:
            self.owner[key] = workload.key
        for watcher in self.watchers:
            watcher.started(running)

    def untrack(self, running: RunningWorkload) -> None:
        workload = running.workload
        self.workloads.pop(workload.key, None)
        self.by_queue[workload.queue].pop(workload.key, None)
        self.version += 1
        for watcher in self.watchers:
            watcher.stopped(running)
        counts = self._priorities[workload.queue]
        counts[workload.priority] -= 1
        if not counts[workload.priority]:
            del counts[workload.priority]

    def retag(self, running: RunningWorkload, workload: Workload) -> None:
        """``running`` (running or being evicted) is now ``workload``: the same key and queue,
        another priority or preemptibility. Its quota charge is the caller's to move."""
        before = running.workload
        if workload.key != before.key or workload.queue != before.queue:
            raise ValueError(f"cannot retag {before.key} as {workload.key} in {workload.queue}")
        running.workload = workload
        if self.workloads.get(workload.key) is not running:
            return  # being evicted: it is requeued as ``workload``, nobody watches it now
        counts = self._priorities[workload.queue]
        counts[before.priority] -= 1
        if not counts[before.priority]:
            del counts[before.priority]
        counts[workload.priority] += 1
        self.version += 1
        for watcher in self.watchers:
            watcher.retagged(running, before)

    def shrink(self, running: RunningWorkload, freed: Mapping[str, int]) -> None:
        """One pod of ``running`` gave back ``freed`` (its bound entry is already gone)."""
        for k, v in freed.items():
            running.usage[k] = running.usage.get(k, 0) - v
        for watcher in self.watchers:
            watcher.shrunk(running, freed)

    def start_evicting(self, running: RunningWorkload, reason: str) -> None:
        running.evicted_for = reason
        self.untrack(running)
        self.evicting[running.key] = running
