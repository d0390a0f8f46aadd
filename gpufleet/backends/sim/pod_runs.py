"""The simulated cluster's pods as they run: every ordinary move of a pod.

Owns :class:`PodRuns`, the part of :class:`~gpufleet.backends.sim.cluster.SimulatedCluster`
given its books (:class:`~gpufleet.backends.sim.pod_books.PodBooks`: which pods wait, which run,
on which devices of the ground truth, and what is left of each one's work) that moves a pod
between them: it arrives, is
bound (its devices taken on the ground truth, or the bind refused), runs, and is evicted
(waiting again, it keeps its work up to its last checkpoint), finishes, or leaves. The pods of
a workload's jobs fail, restart in place, are replaced by new pods, run their Job's next
completion, or stop when their job ends, as the job's controller
(:mod:`gpufleet.backends.sim.jobs`) decides; a failed attempt, too, keeps the work up to its
last checkpoint. Each move is told to the recorders and, as the world's events, to the
scheduler.

It does not read the scheduler's actions or the event queue (the cluster,
:mod:`gpufleet.backends.sim.cluster`, calls these moves when their time comes), nor move the
clock: every move is given its time.
"""

from __future__ import annotations

import dataclasses

from gpufleet.backends.sim.event_queue import CRASH_LOOP, DEADLINE, FINISH, RESTART, RESUBMIT
from gpufleet.backends.sim.ground_truth import devices_of
from gpufleet.backends.sim.jobs import JobRun, Next, Outcome, Verdict
from gpufleet.backends.sim.pod_books import Mode, PodBooks
from gpufleet.backends.sim.work import PodWork, attempt_end, kept_work
from gpufleet.model import Pod
from gpufleet.model.actions import Bind, Evict
from gpufleet.model.events import (
    BindFailed,
    ClusterEvent,
    JobEnded,
    PodBound,
    PodDeleted,
    PodEnd,
    PodReady,
    PodRestarted,
    WorkloadAdded,
)
from gpufleet.model.jobs import Lifetime
from gpufleet.model.times import format_duration
from gpufleet.model.workload import TimedWorkload

__all__ = ["Mode", "PodRuns"]


class PodRuns:
    """See the module docstring."""

    def __init__(self, books: PodBooks, report_binds: bool = False) -> None:
        """``report_binds``: report each bind done as a ``PodBound`` (for a world whose
        observers record binds; the core, which made the bind, knows it already)."""
        self.books = books
        self.report_binds = report_binds
        self._job_generation: dict[int, int] = {}

    # ----------------------------------------------------------------------------- arrivals
    def arrive_pod(
        self,
        pod: Pod,
        runtime: float | None,
        checkpoint: float | None,
        in_gang: bool,
        now: float,
    ) -> None:
        if (
            pod.key in self.books.pending
            or pod.key in self.books.running
            or pod.key in self.books.works
        ):
            raise ValueError(f"pod {pod.key} arrives twice in the workload")
        self.books.pending[pod.key] = pod
        self.books.works[pod.key] = PodWork(pod, runtime, checkpoint, in_gang)
        self.books.recorder.arrived(pod, now)
        self.books.arrivals_seen += 1

    def arrive_workload(self, timed: TimedWorkload, now: float) -> None:
        workload = timed.workload
        gang = len(workload.pods) > 1
        runs = self.books.jobs.arrived(timed)
        for i, pod in enumerate(workload.pods):
            self.arrive_pod(pod, timed.duration, workload.checkpoint_interval, gang, now)
            work = self.books.works[pod.key]
            # Pods beyond minMember are admitted one by one, as workloads of their own.
            work.unit = workload if i < workload.gang_size else workload.extra(pod)
            work.on_notice = workload.checkpoint_on_notice
            owner = runs.get(pod.name)
            if owner is not None:
                work.job, work.workload, work.full = owner, workload, timed.duration
                work.lifetime = owner.replica(pod.name).lifetime
                if work.lifetime is not Lifetime.WORK:
                    work.remaining = None
        if self.books.queue_recorder is not None:
            self.books.queue_recorder.arrived(timed, now)

    # ----------------------------------------------------------------------------- runs
    def finish(self, key: str, run: int, now: float, events: list[ClusterEvent]) -> None:
        work = self.books.works.get(key)
        if work is None or work.run != run or key not in self.books.running:
            return  # evicted (or restarted) since: this run never finished
        if work.job is None:
            allocation = self.books.running.pop(key)
            self.books.world.release(allocation)
            del self.books.works[key]
            self.books.recorder.finished(key, allocation, now)
            if self.books.queue_recorder is not None:
                self.books.queue_recorder.stopped(work.pod, allocation, now, lost=None)
            events.append(PodDeleted(key, PodEnd.SUCCEEDED))
            return
        ran = now - work.started
        work.ran += ran
        failed = work.failing
        if work.remaining is not None:
            kept = work.remaining
            if failed:  # a failed attempt keeps the work up to its last checkpoint
                kept = kept_work(work, now)
            work.remaining = max(0.0, work.remaining - kept)
        attempt = work.attempt
        work.attempt = None
        exit_code = attempt.exit_code if attempt is not None and failed else 0
        verdict = work.job.ended(work.pod.name, failed, exit_code)
        self.carry_out(work, verdict, now, events)

    def begin(self, work: PodWork, now: float, bound: bool = False) -> None:
        """The pod runs from ``now``: its current attempt goes on, or a new one starts."""
        job = work.job
        if job is None:
            if self.books.mode is Mode.REPLAY and work.remaining is not None:
                self.books.events.push(now + work.remaining, FINISH, (work.pod.key, work.run))
            return
        if work.attempt is None:
            work.attempt = job.start(work.pod.name)
            work.ran = 0.0
        end, work.failing = attempt_end(work, work.attempt)
        if end is not None:
            self.books.events.push(now + end, FINISH, (work.pod.key, work.run))
        deadline = job.spec.active_deadline
        if bound and deadline is not None and self._running_pods(job) == 1:
            # The first pod of the job to run (at the start, or after an eviction of all).
            self._job_generation[id(job)] = generation = self._job_generation.get(id(job), 0) + 1
            self.books.events.push(now + deadline, DEADLINE, (job, generation))

    def _running_pods(self, job: JobRun) -> int:
        return sum(key in self.books.running for key in job.pod_keys)

    def carry_out(
        self,
        work: PodWork,
        verdict: Verdict,
        now: float,
        events: list[ClusterEvent],
        lost: str | None = None,
    ) -> None:
        """What the job's controller decided for the pod whose attempt ended (``lost``: how
        the pod was lost, when it was: its node went, its GPU failed)."""
        job = work.job
        assert job is not None
        key = work.pod.key
        step = verdict.next
        if step is Next.RESTART:
            message = f"restarts in place after a back-off of {format_duration(verdict.delay)}"
            events.append(PodRestarted(key, message))
        elif step is Next.NEXT:
            task = job.task(work.pod.name)
            events.append(PodRestarted(key, f"runs completion {task} in place", task))
        if verdict.ended is Outcome.FAILED and self.books.queue_recorder is not None:
            self.books.queue_recorder.job_failed(job.pod_keys)  # before this pod's end counts
        if step is Next.DONE or step is Next.FAILED:
            self.stop(work, now, events, succeeded=step is Next.DONE, message=lost or "")
        elif step is Next.NEXT:  # the Job's next completion, where this one ran
            work.remaining = work.full
            work.started = now
            self.books.run_starts += 1
            work.run += 1
            self.begin(work, now)
        elif step is Next.RESTART:
            work.run += 1
            work.started = now
            self.books.run_starts += 1
            self.books.events.push(now + verdict.delay, self._restart_kind(work), (key, work.run))
        elif step is Next.REPLACE:
            if verdict.fresh:
                work.remaining = work.full
            follows = f"a new pod follows in {format_duration(verdict.delay)}"
            if lost is None:
                self.take_away(work, now, events, follows)
            else:
                self.take_away(work, now, events, f"{lost}; {follows}", PodEnd.LOST)
            self.books.events.push(now + verdict.delay, RESUBMIT, (key, work.run))
        else:  # RECREATE: a new cluster for the job's next try
            for pod_key in job.pod_keys:
                other = self.books.works.get(pod_key)
                if other is not None:
                    other.attempt, other.remaining = None, other.full
                    if other.lifetime is not Lifetime.WORK:
                        other.remaining = None
                    self.take_away(other, now, events, "its job runs again on a new cluster")
            job.recreated()
            self.books.events.push(now + verdict.delay, RESUBMIT, (job, 0))
        if verdict.ended is not None:
            self.end_job(job, verdict.ended, now, events)

    def take_away(
        self,
        work: PodWork,
        now: float,
        events: list[ClusterEvent],
        why: str,
        end: PodEnd = PodEnd.REPLACED,
    ) -> None:
        """The pod failed (or its gang is made again, or it was lost): it leaves the
        scheduler, to come back."""
        key = work.pod.key
        allocation = self.books.running.pop(key, None)
        if allocation is not None:
            self.books.world.release(allocation)
            self.books.recorder.evicted(key, allocation, now)
            if self.books.queue_recorder is not None:
                self.books.queue_recorder.failed(work.pod, allocation, now)
        else:
            self.books.pending.pop(key, None)
        work.placement = None
        events.append(PodDeleted(key, end, why))
        work.away = True
        work.run += 1

    def resubmit(self, target: str | JobRun, run: int, events: list[ClusterEvent]) -> None:
        if isinstance(target, str):  # a new pod for a failed one: a workload of its own
            work = self.books.works.get(target)
            if work is None or not work.away or work.run != run or work.job is None:
                return
            work.away = False
            self.books.pending[target] = work.pod
            work.job.replaced(work.pod.name)
            assert work.workload is not None
            work.unit = work.workload.extra(work.pod)
            events.append(WorkloadAdded(work.unit))
            return
        works = [
            w for k in target.pod_keys if (w := self.books.works.get(k)) is not None and w.away
        ]
        if not works or target.done:
            return
        for work in works:
            work.away = False
            self.books.pending[work.pod.key] = work.pod
        workload = works[0].workload
        assert workload is not None
        pods = tuple(w.pod for w in works)
        unit = dataclasses.replace(
            workload, pods=pods, min_member=min(workload.min_member, len(pods))
        )
        for work in works:
            work.unit = unit
        events.append(WorkloadAdded(unit))

    def _restart_kind(self, work: PodWork) -> int:
        """The kind of event that restarts the pod's container: one that keeps the world
        running, but for a pod that crash-loops on a GPU that never recovers (that loop does
        not hold the world open)."""
        placement = work.placement
        if placement is not None:
            fault = self.books.truth.crashing(placement.node, devices_of(placement))
            if fault is not None and fault.recovers_at is None:
                return CRASH_LOOP
        return RESTART

    def restart(self, key: str, run: int, now: float) -> None:
        work = self.books.works.get(key)
        if work is None or work.run != run or key not in self.books.running:
            return  # evicted since: it starts again when bound
        work.started = now
        self.begin(work, now)

    def deadline(
        self, job: JobRun, generation: int, now: float, events: list[ClusterEvent]
    ) -> None:
        if job.done or self._job_generation.get(id(job)) != generation:
            return
        job.deadline_passed()
        self.end_job(job, Outcome.FAILED, now, events)

    def stop(
        self,
        work: PodWork,
        now: float,
        events: list[ClusterEvent],
        succeeded: bool,
        message: str = "",
    ) -> None:
        """The pod leaves for good: its work is done, it failed (``message``: how, where the
        world knows), or its job ended."""
        key = work.pod.key
        allocation = self.books.running.pop(key, None)
        if allocation is not None:
            self.books.world.release(allocation)
            self.books.recorder.finished(key, allocation, now)
        elif self.books.pending.pop(key, None) is not None or work.away:
            self.books.recorder.pending -= 1
        if self.books.queue_recorder is not None:
            if succeeded and allocation is not None:
                self.books.queue_recorder.stopped(work.pod, allocation, now, lost=None)
            else:
                self.books.queue_recorder.removed(work.pod, allocation, now)
        self.books.works.pop(key, None)
        events.append(PodDeleted(key, PodEnd.SUCCEEDED if succeeded else PodEnd.FAILED, message))

    def end_job(
        self, job: JobRun, outcome: Outcome, now: float, events: list[ClusterEvent]
    ) -> None:
        """The job ended: its pods stop, but those that run until deleted."""
        if self.books.queue_recorder is not None and outcome is Outcome.FAILED:
            self.books.queue_recorder.job_failed(job.pod_keys)
        for key in job.pod_keys:
            work = self.books.works.get(key)
            if work is not None and job.stops(work.lifetime):
                self.stop(work, now, events, succeeded=outcome is Outcome.SUCCEEDED)
        outcome_name = str(job.outcome or "")
        events.append(
            JobEnded(job.spec.name, job.pod_keys[0], outcome_name, job.reason, job.message)
        )

    # -------------------------------------------------------------------------- binds and evictions
    def bind(self, action: Bind, now: float) -> None:
        pod = action.pod
        placement = action.placement
        if pod.key not in self.books.pending:
            self.books.immediate.append(BindFailed(pod.key, "pod is not pending"))
            return
        row = self.books.world.row_of.get(placement.node)
        if row is None:
            self.books.immediate.append(BindFailed(pod.key, f"no node {placement.node!r}"))
            return
        try:
            allocation = self.books.truth.allocate(pod, placement, row)
        except (ValueError, KeyError) as error:
            self.books.recorder.violation(pod, str(error), now)
            self.books.immediate.append(BindFailed(pod.key, str(error)))
            return
        del self.books.pending[pod.key]
        self.books.running[pod.key] = allocation
        self.books.recorder.bound(pod, placement, allocation, now)
        work = self.books.works[pod.key]
        work.started = now
        work.run += 1
        work.placement = placement
        if self.books.queue_recorder is not None:
            self.books.queue_recorder.bound(pod, allocation, now)
        if self.report_binds:
            self.books.immediate.append(PodBound(pod, placement))
        if work.in_gang:
            self.books.immediate.append(PodReady(pod.key))
        if self.books.mode is Mode.FILL:
            del self.books.works[pod.key]
        else:
            self.begin(work, now, bound=True)

    def evict(self, action: Evict, now: float) -> None:
        """The pod stops and waits again; it keeps the work done up to its last checkpoint."""
        key = action.pod.key
        allocation = self.books.running.pop(key, None)
        if allocation is None:
            return
        self.books.world.release(allocation)
        work = self.books.works[key]
        work.placement = None
        ran = now - work.started
        if work.attempt is not None:
            work.ran += ran  # the attempt goes on when the pod is bound again
        kept = kept_work(work, now)
        if work.remaining is not None:
            work.remaining = max(0.0, work.remaining - kept)
        self.books.pending[key] = work.pod
        self.books.recorder.evicted(key, allocation, now)
        if self.books.queue_recorder is not None:
            self.books.queue_recorder.stopped(work.pod, allocation, now, lost=ran - kept)
        self.books.immediate.append(PodDeleted(key, PodEnd.EVICTED, action.reason))
