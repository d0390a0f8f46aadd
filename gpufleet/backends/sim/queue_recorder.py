"""Measure a multi-tenant simulation per queue and per workload (a pod or a gang).

Per queue (a parent counts its whole subtree): queueing delay (arrival to the first time the
whole gang runs), job completion time, GPU-hours used and entitled (the water-filled fair share
of the queue tree, given what each queue runs and waits for), preemptions and GPU-hours lost to
them (work since the last checkpoint), and how long the queue was ever kept below its nominal
quota: a queue is *short* of its nominal quota while one of its waiting workloads would fit in
what remains of it and another queue (not its ancestor or descendant) uses more than its own
nominal quota, i.e. while what the queue is guaranteed is lent out and not yet reclaimed (a
queue below nominal that nobody borrows from waits for capacity, not for admission); the
longest such spell is the bound the benchmark states. Cluster-wide: how
many gangs ever held only part of their pods (must be none), and each queue's share and
entitlement over time.

The world calls it; it keeps its own copy of the quota tree for entitlements, so the scheduler's
state is never read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from gpufleet.backends.sim.recorder import delay_stats
from gpufleet.backends.sim.results import QueueStats, QueueTimeline, TenancyStats
from gpufleet.model import Pod
from gpufleet.model.queues import Queue
from gpufleet.model.resources import CPU, GPU, MEMORY, gpu_model_key
from gpufleet.model.workload import TimedWorkload
from gpufleet.scheduling.admission import requested
from gpufleet.scheduling.node_table import Allocation, NodeTable
from gpufleet.scheduling.quota import QuotaTree

#: Per-queue timelines are kept at about this many points.
TIMELINE_POINTS = 600
HOUR = 3600.0


@dataclass(slots=True)
class _Job:
    timed: TimedWorkload
    gang: frozenset[str]
    request_gpu: int
    arrived: float = 0.0
    bound: set[str] = field(default_factory=set)
    running_since: float | None = None
    admitted_at: float | None = None
    finished: int = 0
    #: Pods that left without finishing (their job failed), and whether a job of it failed.
    removed: int = 0
    failed: bool = False
    #: Whether it counts as waiting (for the time below nominal quota).
    waiting: bool = False
    evicted_at: float | None = None
    partial_since: float | None = None

    @property
    def key(self) -> str:
        return self.timed.workload.key

    @property
    def queue(self) -> str:
        return self.timed.workload.queue


class QueueRecorder:
    """See the module docstring."""

    def __init__(
        self,
        world: NodeTable,
        queues: Mapping[str, Queue],
        capacity: Mapping[str, int],
        entitlement_every: float = 60.0,
        busy_until: float = 0.0,
    ) -> None:
        self.world = world
        self.busy_until = busy_until
        self.busy_gpu_seconds = 0.0
        #: GPU-seconds of the live nodes over the busy window (nodes come and go: node pools,
        #: node faults), each span at the GPUs live when it began.
        self.busy_capacity_seconds = 0.0
        #: The same from the start to now: the busy window's, once an arrival extends it.
        self._all_gpu_seconds = 0.0
        self._all_capacity_seconds = 0.0
        self._live_gpus = world.total_gpu_milli() / 1000
        self.tree = QuotaTree(dict(queues), capacity)
        self.entitlement_every = entitlement_every
        self.names = list(queues)
        self.jobs: dict[str, _Job] = {}
        self.job_of: dict[str, _Job] = {}
        self.stats = {name: QueueStats(name, self._nominal_gpus(q)) for name, q in queues.items()}
        self._delays: dict[str, list[float]] = {name: [] for name in queues}
        self._jct: dict[str, list[float]] = {name: [] for name in queues}
        self._class_delays: dict[str, list[float]] = {}
        self._gpu_used = dict.fromkeys(queues, 0)
        #: GPUs in use by each queue's whole subtree (what quotas and entitlements count).
        self._subtree_used = dict.fromkeys(queues, 0)
        self._gpu_seconds = dict.fromkeys(queues, 0.0)
        self._entitled_seconds = dict.fromkeys(queues, 0.0)
        self._entitled = dict.fromkeys(queues, 0.0)
        self._waiting: dict[str, Counter[int]] = {name: Counter() for name in queues}
        self._short_since: dict[str, float | None] = dict.fromkeys(queues, None)
        family = {name: _lineage(name, queues) for name in queues}
        #: Per queue, the queues that may borrow what it lends: all but its own line.
        self._others = {
            name: [q for q in queues if q not in family[name] and name not in family[q]]
            for name in queues
        }
        self._last = 0.0
        self._entitled_at = -np.inf
        self._samples: list[tuple[float, list[float], list[float], list[float]]] = []
        self.partial_gangs: set[str] = set()
        self.partial_seconds = 0.0
        self.preemptions = 0
        self.lost_gpu_seconds = 0.0
        self.messages: dict[str, str] = {}
        self._partial_now: set[str] = set()

    def _nominal_gpus(self, queue: Queue) -> float:
        return queue.nominal.get(GPU, 0) / 1000

    # ----------------------------------------------------------------------------- events
    def arrived(self, timed: TimedWorkload, now: float) -> None:
        workload = timed.workload
        gang = workload.pods[: workload.gang_size]
        job = _Job(timed, frozenset(p.key for p in gang), requested(gang)[GPU], now)
        self.jobs[workload.key] = job
        for pod in workload.pods:
            self.job_of[pod.key] = job
        self.stats[workload.queue].workloads += 1
        self._wait(job, True)
        # The busy window runs to the last arrival, made during the run too (an autoscaled
        # service's replicas arrive while its requests come).
        if now > self.busy_until:
            self._advance(now)
            self.busy_until = now
            self.busy_gpu_seconds = self._all_gpu_seconds
            self.busy_capacity_seconds = self._all_capacity_seconds

    def _wait(self, job: _Job, waiting: bool) -> None:
        if job.waiting == waiting:
            return
        job.waiting = waiting
        counts = self._waiting[job.queue]
        if waiting:
            counts[job.request_gpu] += 1
        else:
            counts[job.request_gpu] -= 1
            if not counts[job.request_gpu]:
                del counts[job.request_gpu]

    def bound(self, pod: Pod, allocation: Allocation, now: float) -> None:
        job = self.job_of.get(pod.key)
        if job is None:
            return
        self._advance(now)
        self._charge(job.queue, allocation, +1)
        if pod.key not in job.gang:
            return
        job.bound.add(pod.key)
        self._check_partial(job)
        if len(job.bound) == len(job.gang):
            self._wait(job, False)
            job.running_since = now
            if job.admitted_at is None:
                job.admitted_at = now
                self.stats[job.queue].admitted += 1
                delay = now - job.arrived
                self._delays[job.queue].append(delay)
                name = job.timed.workload.priority_class or "(none)"
                self._class_delays.setdefault(name, []).append(delay)

    def stopped(self, pod: Pod, allocation: Allocation, now: float, lost: float | None) -> None:
        """A pod ended: its work done (``lost`` None) or evicted, losing ``lost`` seconds."""
        job = self.job_of.get(pod.key)
        if job is None:
            return
        self._advance(now)
        self._charge(job.queue, allocation, -1)
        if lost is not None:
            gpus = allocation.gpu_milli / 1000
            self.lost_gpu_seconds += lost * gpus
            self.stats[job.queue].gpu_hours_lost += lost * gpus / HOUR
            if job.evicted_at != now:
                job.evicted_at = now
                self.stats[job.queue].preemptions += 1
                self.preemptions += 1
        if pod.key not in job.gang:
            if lost is None:
                job.finished += 1
                self._maybe_complete(job, now)
            return
        was_running = len(job.bound) == len(job.gang)
        job.bound.discard(pod.key)
        if lost is None:
            job.finished += 1
            self._maybe_complete(job, now)
        elif was_running:
            self._wait(job, True)
        self._check_partial(job)

    def failed(self, pod: Pod, allocation: Allocation, now: float) -> None:
        """A pod's attempt failed and it left its node; it comes back as a new pod (or, for a
        RayJob, with a new cluster)."""
        job = self.job_of.get(pod.key)
        if job is None:
            return
        self._advance(now)
        self._charge(job.queue, allocation, -1)
        if pod.key in job.gang:
            if len(job.bound) == len(job.gang):
                self._wait(job, True)
            job.bound.discard(pod.key)
            self._check_partial(job)

    def removed(self, pod: Pod, allocation: Allocation | None, now: float) -> None:
        """A pod left for good without finishing its work: it failed, or its job did."""
        job = self.job_of.get(pod.key)
        if job is None:
            return
        self._advance(now)
        if allocation is not None:
            self._charge(job.queue, allocation, -1)
        job.removed += 1
        if pod.key in job.gang:
            self._wait(job, False)  # whatever is left of it waits for nothing
            job.bound.discard(pod.key)
        self._maybe_complete(job, now)
        self._check_partial(job)

    def deleted(self, pod: Pod, allocation: Allocation | None, now: float) -> None:
        """A pod was deleted, waiting or running (a replica scaled away): what it held is its
        queue's no more, and it waits for nothing; neither done nor failed."""
        job = self.job_of.get(pod.key)
        if job is None:
            return
        self._advance(now)
        if allocation is not None:
            self._charge(job.queue, allocation, -1)
        if pod.key in job.gang:
            self._wait(job, False)
            job.bound.discard(pod.key)
        self._check_partial(job)

    def job_failed(self, pod_keys: list[str]) -> None:
        """A job of these pods failed: their workload counts as failed once all have left."""
        for key in pod_keys:
            job = self.job_of.get(key)
            if job is not None:
                job.failed = True

    def _maybe_complete(self, job: _Job, now: float) -> None:
        if job.finished + job.removed != len(job.timed.workload.pods):
            return
        if job.failed:
            self.stats[job.queue].failed += 1
            return
        self.stats[job.queue].completed += 1
        self._jct[job.queue].append(now - job.arrived)

    def unschedulable(self, pod: Pod, message: str) -> None:
        self.messages[pod.key] = message

    def _charge(self, queue: str, allocation: Allocation, sign: int) -> None:
        milli = allocation.gpu_milli
        self._gpu_used[queue] += sign * milli
        for i in self.tree.paths[self.tree.index[queue]]:
            self._subtree_used[self.names[i]] += sign * milli
        usage = {CPU: allocation.cpu_milli, MEMORY: allocation.memory_mib, GPU: milli}
        model = self.world.row_models[allocation.row]
        if milli and model is not None:
            usage[gpu_model_key(model)] = milli
        vector = self.tree.vector(usage)
        if sign > 0:
            self.tree.add(queue, vector)
        else:
            self.tree.remove(queue, vector)

    def _advance(self, now: float) -> None:
        dt = now - self._last
        live, self._live_gpus = self._live_gpus, self.world.total_gpu_milli() / 1000
        if dt <= 0:
            return
        in_use = sum(self._gpu_used.values()) / 1000
        busy = max(0.0, min(now, self.busy_until) - self._last)
        self.busy_gpu_seconds += in_use * busy
        self.busy_capacity_seconds += live * busy
        self._all_gpu_seconds += in_use * dt
        self._all_capacity_seconds += live * dt
        for name in self.names:
            self._gpu_seconds[name] += self._subtree_used[name] / 1000 * dt
            self._entitled_seconds[name] += self._entitled[name] * dt
        self.partial_seconds += dt * len(self._partial_now)
        self._last = now

    def _check_partial(self, job: _Job) -> None:
        if 0 < len(job.bound) < len(job.gang) and not job.finished:
            self._partial_now.add(job.key)
        else:
            self._partial_now.discard(job.key)

    # ----------------------------------------------------------------------------- samples
    def sample(self, now: float) -> None:
        """After every step of the world (all events of one instant handled)."""
        self._advance(now)
        self.partial_gangs.update(self._partial_now)
        for name in self.names:
            nominal = self.stats[name].nominal_gpus * 1000
            # Only waiting GPUs count: work that asks none is not kept out of the GPU quota.
            asks = [size for size in self._waiting[name] if size > 0]
            short = (
                bool(nominal)
                and bool(asks)
                and min(asks) <= nominal - self._gpu_used[name]
                and any(
                    self._subtree_used[q] > self.stats[q].nominal_gpus * 1000
                    for q in self._others[name]
                )
            )
            since = self._short_since[name]
            if short and since is None:
                self._short_since[name] = now
            elif not short and since is not None:
                self._end_short(name, now)
        if now - self._entitled_at >= self.entitlement_every:
            self._entitled_at = now
            self._update_entitlement(now)

    def _end_short(self, name: str, now: float) -> None:
        since = self._short_since[name]
        assert since is not None
        stats = self.stats[name]
        stats.longest_short_of_nominal = max(stats.longest_short_of_nominal, now - since)
        stats.short_of_nominal_spells += 1
        self._short_since[name] = None

    def _update_entitlement(self, now: float) -> None:
        tree = self.tree
        demand = {}
        waiting_gpu = {
            name: sum(size * count for size, count in self._waiting[name].items())
            for name in self.names
        }
        for name in self.names:
            i = tree.index[name]
            own = tree.usage[i].copy()
            for child in tree.children[i]:
                own -= tree.usage[child]
            if GPU in tree.key_index:
                own[tree.key_index[GPU]] += waiting_gpu[name]
            demand[name] = own
        entitled = tree.entitlement(demand)
        j = tree.key_index.get(GPU)
        for name in self.names:
            self._entitled[name] = float(entitled[name][j]) / 1000 if j is not None else 0.0
        self._samples.append(
            (
                now,
                [self._subtree_used[n] / 1000 for n in self.names],
                [self._entitled[n] for n in self.names],
                [tree.share(n)[-1] if tree.keys else 0.0 for n in self.names],
            )
        )

    # ----------------------------------------------------------------------------- results
    def busy_allocation_pct(self) -> float:
        """Mean share of the cluster's GPUs allocated from the first to the last arrival (of
        the GPUs live at each moment, as nodes join and leave)."""
        if self.busy_until <= 0 or self.busy_capacity_seconds <= 0:
            return 0.0
        return round(100.0 * self.busy_gpu_seconds / self.busy_capacity_seconds, 3)

    def result(self, now: float) -> TenancyStats:
        self._advance(now)
        for name in self.names:
            if self._short_since[name] is not None:
                self._end_short(name, now)
            stats = self.stats[name]
            stats.queueing_delay = delay_stats(np.asarray(self._delays[name], np.float64))
            stats.completion_time = delay_stats(np.asarray(self._jct[name], np.float64))
            stats.gpu_hours_used = round(self._gpu_seconds[name] / HOUR, 3)
            stats.gpu_hours_entitled = round(self._entitled_seconds[name] / HOUR, 3)
            stats.gpu_hours_lost = round(stats.gpu_hours_lost, 3)
        timeline = QueueTimeline()
        step = max(1, len(self._samples) // TIMELINE_POINTS)
        for time, used, entitled, share in self._samples[::step]:
            timeline.time.append(round(time, 1))
            for i, name in enumerate(self.names):
                timeline.used_gpus.setdefault(name, []).append(round(used[i], 3))
                timeline.entitled_gpus.setdefault(name, []).append(round(entitled[i], 3))
                timeline.share.setdefault(name, []).append(round(share[i], 4))
        return TenancyStats(
            queues=self.stats,
            queueing_delay_by_priority_class={
                name: delay_stats(np.asarray(d, np.float64))
                for name, d in sorted(self._class_delays.items())
            },
            timeline=timeline,
            partial_gangs=len(self.partial_gangs),
            partial_gang_seconds=round(self.partial_seconds, 3),
            preemptions=self.preemptions,
            gpu_hours_lost=round(self.lost_gpu_seconds / HOUR, 3),
            admissions={key: (job.arrived, job.admitted_at) for key, job in self.jobs.items()},
        )


def _lineage(name: str, queues: Mapping[str, Queue]) -> set[str]:
    """``name`` and its ancestors."""
    line = {name}
    parent = queues[name].parent
    while parent is not None and parent in queues and parent not in line:
        line.add(parent)
        parent = queues[parent].parent
    return line
