"""The simulated cluster in real time: the world behind ``gpufleet serve``'s embedded mode.

:class:`LiveSimCluster` is the replay world of :mod:`gpufleet.backends.sim.cluster` (ground-truth
node table, every bind checked, evicted pods resume from their last checkpoint) with three
differences: its clock follows the wall clock, scaled by ``speed`` (60: a simulated minute per
second); work arrives while it runs (:meth:`submit`) and may be cancelled (:meth:`cancel`); and
a restarted server puts back what was running exactly where it ran (:meth:`restore`). Its
:meth:`wait` sleeps for real, until the next simulated event, the scheduler's next timer or a
:meth:`wake` from another thread.

What happened to each pod is also kept as :class:`Outcome` records for the control plane to
persist. It does no persistence itself, and it is not thread-safe: the control plane calls it
under its lock (except :meth:`wake`, which any thread may call).
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpufleet.backends.sim.cluster import _ARRIVE_WORKLOAD, _FINISH, Mode, SimulatedCluster, _Work
from gpufleet.backends.sim.jobs import JobRun, Next, Verdict
from gpufleet.control.backend import ClusterState
from gpufleet.model import Node, Placement, Pod
from gpufleet.model.actions import Bind, Evict
from gpufleet.model.events import PodDeleted
from gpufleet.model.times import format_duration
from gpufleet.model.workload import TimedWorkload
from gpufleet.scheduling.target import TargetWorkload

#: The longest a wait sleeps without looking again (so a stop is noticed promptly).
MAX_SLEEP_S = 0.5


class ScaledClock:
    """Simulated seconds that pass ``speed`` times as fast as the wall clock, from ``start``."""

    def __init__(
        self, speed: float, start: float = 0.0, wall: Callable[[], float] = time.monotonic
    ) -> None:
        if not speed > 0 or not math.isfinite(speed):
            raise ValueError(f"speed must be a positive number, not {speed}")
        self.speed = speed
        self._wall = wall
        self._origin_wall = wall()
        self._origin = start

    def now(self) -> float:
        return self._origin + (self._wall() - self._origin_wall) * self.speed

    def seconds_until(self, time_: float) -> float:
        """Wall seconds until the simulated time ``time_`` (0 when it has passed)."""
        return max(0.0, (time_ - self.now()) / self.speed)


class OutcomeKind(StrEnum):
    BOUND = "bound"
    FINISHED = "finished"
    EVICTED = "evicted"
    BIND_FAILED = "bind-failed"
    #: Its container failed and restarted in place.
    RESTARTED = "restarted"
    #: It failed and left its node; a new pod follows (it waits again).
    FAILED = "failed"
    #: It failed for good, or its job ended without it.
    REMOVED = "removed"
    #: It runs its Job's next completion, in place.
    NEXT = "next"
    #: Its job ended (``message`` says how; ``job_outcome`` is Succeeded or Failed).
    JOB_ENDED = "job-ended"


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: OutcomeKind
    pod_key: str
    time: float
    placement: Placement | None = None
    #: Seconds of work left (bound or evicted), None when it runs until cancelled.
    remaining: float | None = None
    message: str = ""
    job_outcome: str = ""
    reason: str = ""


class LiveSimCluster(SimulatedCluster):
    """See the module docstring."""

    keep_job_runs = False

    def __init__(
        self,
        nodes: Sequence[Node],
        target: TargetWorkload,
        speed: float = 1.0,
        start: float = 0.0,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(nodes, [], Mode.REPLAY, target)
        self._scaled = ScaledClock(speed, start, wall)
        # The base class only calls now() and, in its own wait (overridden here), advance_to.
        self.clock = self._scaled  # type: ignore[assignment]
        self._placements: dict[str, Placement] = {}
        self._wake = threading.Event()
        self._stopped = False
        self.outcomes: list[Outcome] = []

    # ----------------------------------------------------------------------------- inputs
    def submit(self, timed: TimedWorkload) -> None:
        """A workload arrives now; it runs for ``timed.duration`` simulated seconds once bound."""
        keys = [pod.key for pod in timed.workload.pods]
        taken = [k for k in keys if k in self._work]
        if taken:
            raise ValueError(f"pod {taken[0]} is already in the cluster")
        self._push(self.clock.now(), _ARRIVE_WORKLOAD, timed)
        self.wake()

    def cancel(self, pod_keys: Iterable[str]) -> list[str]:
        """Stop and forget these pods, waiting or running; returns those that were here."""
        gone: list[str] = []
        now = self.clock.now()
        keys = set(pod_keys)
        self._heap = [
            item
            for item in self._heap
            if not (
                isinstance(item[3], TimedWorkload)
                and keys.issuperset(p.key for p in item[3].workload.pods)
            )
        ]
        heapq.heapify(self._heap)
        for key in keys:
            allocation = self._running.pop(key, None)
            work = self._work.get(key)
            if allocation is not None:
                self.world.release(allocation)
                self.recorder.finished(key, allocation, now)
                self._placements.pop(key, None)
            elif self._pending.pop(key, None) is not None or (work is not None and work.away):
                self.recorder.pending -= 1
            else:
                continue
            self._work.pop(key, None)
            self._immediate.append(PodDeleted(key))
            gone.append(key)
        self.wake()
        return gone

    def adopt_jobs(self, timed: TimedWorkload, states: Mapping[str, Mapping[str, Any]]) -> None:
        """Take back the controllers of a workload that was here before a restart, from their
        saved states (by job name): call before :meth:`restore` and :meth:`submit` of its pods."""
        if timed.jobs:
            self._adopted[timed.workload.key] = self._new_runs(timed, states)

    def job_states(self, workload_key: str) -> dict[str, dict[str, Any]]:
        """The saved states of a workload's jobs, by job name (see :meth:`adopt_jobs`)."""
        return {run.spec.name: run.state() for run in self.jobs_of(workload_key)}

    def jobs_of(self, workload_key: str) -> list[JobRun]:
        """The controllers of the workload of this key (the latest submitted)."""
        return list(self._runs_of.get(workload_key, ()))

    def forget_jobs(self, workload_key: str) -> None:
        """The workload is deleted: its controllers go too."""
        self._runs_of.pop(workload_key, None)
        self._adopted.pop(workload_key, None)

    def restore(
        self,
        pod: Pod,
        placement: Placement,
        remaining: float | None,
        checkpoint: float | None,
        in_gang: bool,
        started: float,
        timed: TimedWorkload | None = None,
    ) -> None:
        """Put back a pod that ran before a restart, on exactly its devices; it goes on from
        ``started`` with ``remaining`` seconds of work (under its job's controller, adopted
        first, when ``timed`` has one). Raises ValueError if they are taken."""
        if pod.key in self._work:
            raise ValueError(f"pod {pod.key} is already in the cluster")
        row = self.world.row_of.get(placement.node)
        if row is None:
            raise ValueError(f"pod {pod.key} ran on node {placement.node!r}, which is gone")
        allocation = self._allocate(pod, placement, row)
        self._running[pod.key] = allocation
        self._placements[pod.key] = placement
        work = _Work(pod, remaining, checkpoint, in_gang, started=started, run=1)
        self._work[pod.key] = work
        self.recorder.arrived(pod, started)
        self.recorder.bound(pod, placement, allocation, started)
        job = self._adopted.get(timed.workload.key, {}).get(pod.name) if timed else None
        if job is not None and timed is not None and not job.done:
            work.job, work.workload, work.full = job, timed.workload, timed.duration
            work.lifetime = job.replica(pod.name).lifetime
            work.attempt = job.current_attempt(pod.name)
            self._begin(work, started, bound=True)
        elif remaining is not None:
            self._push(started + remaining, _FINISH, (pod.key, work.run))

    def wake(self) -> None:
        """Cut a :meth:`wait` short (thread-safe)."""
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self.wake()

    # ----------------------------------------------------------------------------- protocol
    def list_state(self) -> ClusterState:
        running = [(self._work[k].pod, p) for k, p in self._placements.items()]
        return ClusterState(self.nodes, (), running)

    def _pod_left(self, key: str, now: float, succeeded: bool) -> None:
        self._placements.pop(key, None)
        kind = OutcomeKind.FINISHED if succeeded else OutcomeKind.REMOVED
        self.outcomes.append(Outcome(kind, key, now))

    def _job_verdict(
        self, work: _Work | None, verdict: Verdict, now: float, job: JobRun | None = None
    ) -> None:
        if work is None:
            return
        key = work.pod.key
        step = verdict.next
        if step is Next.RESTART:
            message = f"restarts in place after a back-off of {format_duration(verdict.delay)}"
            self.outcomes.append(Outcome(OutcomeKind.RESTARTED, key, now, message=message))
        elif step is Next.NEXT and work.job is not None:
            message = f"runs completion {work.job.task(work.pod.name)} in place"
            self.outcomes.append(
                Outcome(OutcomeKind.NEXT, key, now, remaining=work.full, message=message)
            )

    def _pod_away(self, work: _Work, now: float, why: str) -> None:
        key = work.pod.key
        self._placements.pop(key, None)
        self.outcomes.append(
            Outcome(OutcomeKind.FAILED, key, now, remaining=work.remaining, message=why)
        )

    def _job_ended(self, job: JobRun, now: float) -> None:
        self.outcomes.append(
            Outcome(
                OutcomeKind.JOB_ENDED,
                job.pod_keys[0],
                now,
                message=job.message,
                job_outcome=str(job.outcome or ""),
                reason=job.reason,
            )
        )

    def _bind(self, action: Bind, now: float) -> None:
        key = action.pod.key
        super()._bind(action, now)
        if key in self._running and key not in self._placements:
            self._placements[key] = action.placement
            self.outcomes.append(
                Outcome(
                    OutcomeKind.BOUND,
                    key,
                    now,
                    action.placement,
                    remaining=self._work[key].remaining,
                )
            )
        elif key not in self._running:
            self.outcomes.append(Outcome(OutcomeKind.BIND_FAILED, key, now, action.placement))

    def _evict(self, action: Evict, now: float) -> None:
        key = action.pod.key
        was_running = key in self._running
        super()._evict(action, now)
        if was_running:
            self._placements.pop(key, None)
            work = self._work[key]
            self.outcomes.append(
                Outcome(
                    OutcomeKind.EVICTED, key, now, remaining=work.remaining, message=action.reason
                )
            )

    def wait(self, deadline: float = math.inf) -> None:
        if self._immediate or self._stopped:
            return
        wake_at = min(deadline, self._heap[0][0] if self._heap else math.inf)
        seconds = min(self._scaled.seconds_until(wake_at), MAX_SLEEP_S)
        if seconds > 0 and self._wake.wait(seconds):
            self._wake.clear()

    @property
    def done(self) -> bool:
        return self._stopped

    # ----------------------------------------------------------------------------- queries
    def placement(self, pod_key: str) -> Placement | None:
        return self._placements.get(pod_key)

    def work_of(self, pod_key: str) -> tuple[float, float | None] | None:
        """(started, remaining work at that start) of a running pod."""
        work = self._work.get(pod_key)
        if work is None or pod_key not in self._running:
            return None
        return work.started, work.remaining

    def drain_outcomes(self) -> list[Outcome]:
        out, self.outcomes = self.outcomes, []
        return out
