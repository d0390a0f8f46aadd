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
  Pods of gangs report ready as soon as they are bound. The pods of a workload's jobs (a Job,
  a training job, a Ray cluster or job: ``TimedWorkload.jobs``) fail as their failure model
  says and are restarted in place, replaced by new pods (which reach the scheduler as new
  workloads of one), run their Job's next completion, or stopped when their job ends, as
  :mod:`gpufleet.backends.sim.jobs` decides; a failed attempt, too, keeps the work up to its
  last checkpoint.

What happens to a pod comes back as events, as from every world: a bind refused
(``BindFailed``), a pod gone with why (``PodDeleted`` with its :class:`PodEnd`), a container
restarted or a Job's next completion run in place (``PodRestarted``), a job ended
(``JobEnded``), and, in a world that says so (``report_binds``), a bind done (``PodBound``).
Work may also arrive, leave and be put back while the world runs (:meth:`arrive`,
:meth:`remove`, :meth:`put_back`: the live world of :mod:`gpufleet.backends.sim.live`).

Faults (a scenario's ``GpuFault`` objects, :class:`~gpufleet.model.faults.GpuFault`): at its
time a GPU reports its XID and turns unhealthy, and healthy again ``recover_after`` later, told
as ``DeviceHealthChanged`` (the set of a node's unhealthy GPUs, with the XIDs as reasons); the
ground truth withdraws the device too, so a bind on it fails. Pods running on it run on (the
simulator plays no pod failures for an XID; a scenario says those with ``sim-failures``).
Faults left once no work is left (nor waits) do not keep the world running.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Iterable, Iterator, Sequence
from enum import StrEnum

from gpufleet.backends.sim.controllers import JobControllers
from gpufleet.backends.sim.jobs import JobRun, Next, Outcome, Verdict
from gpufleet.backends.sim.queue_recorder import QueueRecorder
from gpufleet.backends.sim.recorder import Recorder
from gpufleet.backends.sim.work import PodWork, attempt_end
from gpufleet.control.backend import ClusterState, ManualClock
from gpufleet.model import MILLI_PER_GPU, Node, Placement, Pod
from gpufleet.model.actions import Action, Bind, Evict, MarkUnschedulable
from gpufleet.model.events import (
    BindFailed,
    ClusterEvent,
    DeviceHealthChanged,
    JobEnded,
    PodAdded,
    PodBound,
    PodDeleted,
    PodEnd,
    PodReady,
    PodRestarted,
    WorkloadAdded,
)
from gpufleet.model.faults import GpuFault
from gpufleet.model.jobs import Lifetime
from gpufleet.model.node import with_gpu_health
from gpufleet.model.times import format_duration
from gpufleet.model.workload import TimedPod, TimedWorkload, Workload
from gpufleet.scheduling.node_table import Allocation, NodeTable
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.telemetry.source import XidLog


class Mode(StrEnum):
    FILL = "fill"
    REPLAY = "replay"


_ARRIVE = 0
_FINISH = 1
_ARRIVE_WORKLOAD = 2
_RESTART = 3  # a container restarts in place
_RESUBMIT = 4  # a new pod for a failed one (or a job's new gang) arrives
_DEADLINE = 5  # a job's activeDeadlineSeconds may have passed
_FAULT = 6  # a GPU fails (a GpuFault)
_RECOVER = 7  # a GPU recovers from a GpuFault

Payload = TimedPod | TimedWorkload | tuple[str, int] | tuple[JobRun, int] | GpuFault


class SimulatedCluster:
    """See the module docstring."""

    #: Keep every job's controller for the run's report (a long-lived world does not).
    keep_job_runs = True
    #: Report each bind done as a ``PodBound`` (for a world whose observers record binds; the
    #: core, which made the bind, knows it already).
    report_binds = False

    def __init__(
        self,
        nodes: Sequence[Node],
        workload: Sequence[TimedPod],
        mode: Mode,
        target: TargetWorkload,
        workloads: Sequence[TimedWorkload] = (),
        queue_recorder: QueueRecorder | None = None,
        faults: Sequence[GpuFault] = (),
    ) -> None:
        self.clock = ManualClock()
        self.mode = mode
        self.world = NodeTable(nodes)
        self.nodes = tuple(nodes)
        self.recorder = Recorder(self.world, target)
        self.queue_recorder = queue_recorder
        self.arrivals_seen = 0
        self.jobs = JobControllers(keep=self.keep_job_runs)
        #: The last XID on each device (a fault records it; the telemetry reads it).
        self.xids = XidLog()
        self._job_generation: dict[int, int] = {}
        self._heap: list[tuple[float, int, int, Payload]] = []
        #: Events on the heap that are not faults (the world is done when none are left).
        self._work_events = 0
        self._seq = 0
        self._immediate: list[ClusterEvent] = []
        self._running: dict[str, Allocation] = {}
        self._work: dict[str, PodWork] = {}
        self._pending: dict[str, Pod] = {}
        self._gpu_index: list[dict[int, int]] = [
            {gpu.index: position for position, gpu in enumerate(node.gpus)} for node in nodes
        ]
        #: Per node, the faults active on each GPU (a GPU may fail again before it recovers).
        self._faulty: dict[str, dict[int, list[GpuFault]]] = {}
        for fault in faults:
            self._check_fault(fault)
            self._push(fault.at, _FAULT, fault)
            if fault.recovers_at is not None:
                self._push(fault.recovers_at, _RECOVER, fault)
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

    def _check_fault(self, fault: GpuFault) -> None:
        where = fault.name or "GpuFault"
        row = self.world.row_of.get(fault.node)
        if row is None:
            raise ValueError(f"{where}: spec.node: no node {fault.node!r} in the cluster")
        if fault.gpu not in self._gpu_index[row]:
            known = ", ".join(map(str, sorted(self._gpu_index[row]))) or "none"
            raise ValueError(
                f"{where}: spec.gpu: node {fault.node!r} has no GPU {fault.gpu} (its GPUs: {known})"
            )

    def _device_health(self, fault: GpuFault, failing: bool, events: list[ClusterEvent]) -> None:
        """``fault`` begins or ends: the node's unhealthy GPUs change (maybe)."""
        active = self._faulty.setdefault(fault.node, {})
        if failing:
            active.setdefault(fault.gpu, []).append(fault)
            self.xids.record(fault.node, fault.gpu, fault.xid)
        else:
            active[fault.gpu].remove(fault)
            if not active[fault.gpu]:
                del active[fault.gpu]
        unhealthy = tuple(sorted(active))
        if self.world.set_unhealthy(self.world.row_of[fault.node], unhealthy):
            reasons = tuple((gpu, active[gpu][-1].reason) for gpu in unhealthy)
            events.append(DeviceHealthChanged(fault.node, unhealthy, reasons))

    def _push(self, time: float, kind: int, payload: Payload) -> None:
        self._work_events += kind not in (_FAULT, _RECOVER)
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq, kind, payload))

    # ----------------------------------------------------------------------------- protocol
    def list_state(self) -> ClusterState:
        """The nodes (:meth:`current_nodes`) and the pods running, where they run (waiting
        work is told as events)."""
        running = [
            (work.pod, work.placement)
            for key in self._running
            if (work := self._work[key]).placement is not None
        ]
        return ClusterState(self.current_nodes(), (), running)

    def current_nodes(self) -> tuple[Node, ...]:
        """The nodes, the GPUs a fault holds now marked unhealthy."""
        return tuple(
            with_gpu_health(node, faulty) if (faulty := self._faulty.get(node.name)) else node
            for node in self.nodes
        )

    def poll_events(self) -> Sequence[ClusterEvent]:
        events = self._immediate
        self._immediate = []
        now = self.clock.now()
        heap = self._heap
        while heap and heap[0][0] <= now:
            # Each event happens at its own time (the live world may poll after it): a restart
            # or a next completion runs from then.
            at, _, kind, payload = heapq.heappop(heap)
            self._work_events -= kind not in (_FAULT, _RECOVER)
            if kind == _ARRIVE:
                assert isinstance(payload, TimedPod)
                self._arrive(payload.pod, payload.runtime, None, False, now)
                events.append(PodAdded(payload.pod))
            elif kind == _ARRIVE_WORKLOAD:
                assert isinstance(payload, TimedWorkload)
                self._arrive_workload(payload, now)
                events.append(WorkloadAdded(payload.workload))
            elif kind == _FINISH:
                assert isinstance(payload, tuple)
                assert isinstance(payload[0], str)
                self._finish(payload[0], payload[1], at, events)
            elif kind == _RESTART:
                assert isinstance(payload, tuple)
                assert isinstance(payload[0], str)
                self._restart(payload[0], payload[1], at)
            elif kind == _RESUBMIT:
                assert isinstance(payload, tuple)
                self._resubmit(payload[0], payload[1], events)
            elif kind in (_FAULT, _RECOVER):
                assert isinstance(payload, GpuFault)
                self._device_health(payload, kind == _FAULT, events)
            else:
                assert isinstance(payload, tuple)
                assert isinstance(payload[0], JobRun)
                self._deadline(payload[0], payload[1], at, events)
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
        self._work[pod.key] = PodWork(pod, runtime, checkpoint, in_gang)
        self.recorder.arrived(pod, now)
        self.arrivals_seen += 1

    def _arrive_workload(self, timed: TimedWorkload, now: float) -> None:
        workload = timed.workload
        gang = len(workload.pods) > 1
        runs = self.jobs.arrived(timed)
        for pod in workload.pods:
            self._arrive(pod, timed.duration, workload.checkpoint_interval, gang, now)
            owner = runs.get(pod.name)
            if owner is not None:
                work = self._work[pod.key]
                work.job, work.workload, work.full = owner, workload, timed.duration
                work.lifetime = owner.replica(pod.name).lifetime
                if work.lifetime is not Lifetime.WORK:
                    work.remaining = None
        if self.queue_recorder is not None:
            self.queue_recorder.arrived(timed, now)

    def _finish(self, key: str, run: int, now: float, events: list[ClusterEvent]) -> None:
        work = self._work.get(key)
        if work is None or work.run != run or key not in self._running:
            return  # evicted (or restarted) since: this run never finished
        if work.job is None:
            allocation = self._running.pop(key)
            self.world.release(allocation)
            del self._work[key]
            self.recorder.finished(key, allocation, now)
            if self.queue_recorder is not None:
                self.queue_recorder.stopped(work.pod, allocation, now, lost=None)
            events.append(PodDeleted(key, PodEnd.SUCCEEDED))
            return
        ran = now - work.started
        work.ran += ran
        failed = work.failing
        if work.remaining is not None:
            kept = work.remaining
            if failed:  # a failed attempt keeps the work up to its last checkpoint
                kept = math.floor(ran / work.checkpoint) * work.checkpoint if work.checkpoint else 0
            work.remaining = max(0.0, work.remaining - kept)
        attempt = work.attempt
        work.attempt = None
        exit_code = attempt.exit_code if attempt is not None and failed else 0
        verdict = work.job.ended(work.pod.name, failed, exit_code)
        self._carry_out(work, verdict, now, events)

    # ----------------------------------------------------------------------------- jobs
    def _begin(self, work: PodWork, now: float, bound: bool = False) -> None:
        """The pod runs from ``now``: its current attempt goes on, or a new one starts."""
        job = work.job
        if job is None:
            if self.mode is Mode.REPLAY and work.remaining is not None:
                self._push(now + work.remaining, _FINISH, (work.pod.key, work.run))
            return
        if work.attempt is None:
            work.attempt = job.start(work.pod.name)
            work.ran = 0.0
        end, work.failing = attempt_end(work, work.attempt)
        if end is not None:
            self._push(now + end, _FINISH, (work.pod.key, work.run))
        deadline = job.spec.active_deadline
        if bound and deadline is not None and self._running_pods(job) == 1:
            # The first pod of the job to run (at the start, or after an eviction of all).
            self._job_generation[id(job)] = generation = self._job_generation.get(id(job), 0) + 1
            self._push(now + deadline, _DEADLINE, (job, generation))

    def _running_pods(self, job: JobRun) -> int:
        return sum(key in self._running for key in job.pod_keys)

    def _carry_out(
        self, work: PodWork, verdict: Verdict, now: float, events: list[ClusterEvent]
    ) -> None:
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
        if verdict.ended is Outcome.FAILED and self.queue_recorder is not None:
            self.queue_recorder.job_failed(job.pod_keys)  # before this pod's end counts
        if step is Next.DONE or step is Next.FAILED:
            self._stop(work, now, events, succeeded=step is Next.DONE)
        elif step is Next.NEXT:  # the Job's next completion, where this one ran
            work.remaining = work.full
            work.started = now
            work.run += 1
            self._begin(work, now)
        elif step is Next.RESTART:
            work.run += 1
            work.started = now
            self._push(now + verdict.delay, _RESTART, (key, work.run))
        elif step is Next.REPLACE:
            if verdict.fresh:
                work.remaining = work.full
            self._take_away(
                work, now, events, f"a new pod follows in {format_duration(verdict.delay)}"
            )
            self._push(now + verdict.delay, _RESUBMIT, (key, work.run))
        else:  # RECREATE: a new cluster for the job's next try
            for pod_key in job.pod_keys:
                other = self._work.get(pod_key)
                if other is not None:
                    other.attempt, other.remaining = None, other.full
                    if other.lifetime is not Lifetime.WORK:
                        other.remaining = None
                    self._take_away(other, now, events, "its job runs again on a new cluster")
            job.recreated()
            self._push(now + verdict.delay, _RESUBMIT, (job, 0))
        if verdict.ended is not None:
            self._end_job(job, verdict.ended, now, events)

    def _take_away(self, work: PodWork, now: float, events: list[ClusterEvent], why: str) -> None:
        """The pod failed (or its gang is made again): it leaves the scheduler, to come back."""
        key = work.pod.key
        allocation = self._running.pop(key, None)
        if allocation is not None:
            self.world.release(allocation)
            self.recorder.evicted(key, allocation, now)
            if self.queue_recorder is not None:
                self.queue_recorder.failed(work.pod, allocation, now)
        else:
            self._pending.pop(key, None)
        work.placement = None
        events.append(PodDeleted(key, PodEnd.REPLACED, why))
        work.away = True
        work.run += 1

    def _resubmit(self, target: str | JobRun, run: int, events: list[ClusterEvent]) -> None:
        if isinstance(target, str):  # a new pod for a failed one: a workload of its own
            work = self._work.get(target)
            if work is None or not work.away or work.run != run or work.job is None:
                return
            work.away = False
            self._pending[target] = work.pod
            work.job.replaced(work.pod.name)
            assert work.workload is not None
            events.append(WorkloadAdded(work.workload.extra(work.pod)))
            return
        works = [w for k in target.pod_keys if (w := self._work.get(k)) is not None and w.away]
        if not works or target.done:
            return
        for work in works:
            work.away = False
            self._pending[work.pod.key] = work.pod
        workload = works[0].workload
        assert workload is not None
        pods = tuple(w.pod for w in works)
        events.append(
            WorkloadAdded(
                dataclasses.replace(
                    workload, pods=pods, min_member=min(workload.min_member, len(pods))
                )
            )
        )

    def _restart(self, key: str, run: int, now: float) -> None:
        work = self._work.get(key)
        if work is None or work.run != run or key not in self._running:
            return  # evicted since: it starts again when bound
        work.started = now
        self._begin(work, now)

    def _deadline(
        self, job: JobRun, generation: int, now: float, events: list[ClusterEvent]
    ) -> None:
        if job.done or self._job_generation.get(id(job)) != generation:
            return
        job.deadline_passed()
        self._end_job(job, Outcome.FAILED, now, events)

    def _stop(self, work: PodWork, now: float, events: list[ClusterEvent], succeeded: bool) -> None:
        """The pod leaves for good: its work is done, it failed, or its job ended."""
        key = work.pod.key
        allocation = self._running.pop(key, None)
        if allocation is not None:
            self.world.release(allocation)
            self.recorder.finished(key, allocation, now)
        elif self._pending.pop(key, None) is not None or work.away:
            self.recorder.pending -= 1
        if self.queue_recorder is not None:
            if succeeded and allocation is not None:
                self.queue_recorder.stopped(work.pod, allocation, now, lost=None)
            else:
                self.queue_recorder.removed(work.pod, allocation, now)
        self._work.pop(key, None)
        events.append(PodDeleted(key, PodEnd.SUCCEEDED if succeeded else PodEnd.FAILED))

    def _end_job(
        self, job: JobRun, outcome: Outcome, now: float, events: list[ClusterEvent]
    ) -> None:
        """The job ended: its pods stop, but those that run until deleted."""
        if self.queue_recorder is not None and outcome is Outcome.FAILED:
            self.queue_recorder.job_failed(job.pod_keys)
        for key in job.pod_keys:
            work = self._work.get(key)
            if work is not None and job.stops(work.lifetime):
                self._stop(work, now, events, succeeded=outcome is Outcome.SUCCEEDED)
        outcome_name = str(job.outcome or "")
        events.append(
            JobEnded(job.spec.name, job.pod_keys[0], outcome_name, job.reason, job.message)
        )

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
                if self.queue_recorder is not None:
                    self.queue_recorder.unschedulable(pod, action.message)
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
        work.placement = placement
        if self.queue_recorder is not None:
            self.queue_recorder.bound(pod, allocation, now)
        if self.report_binds:
            self._immediate.append(PodBound(pod, placement))
        if work.in_gang:
            self._immediate.append(PodReady(pod.key))
        if self.mode is Mode.FILL:
            del self._work[pod.key]
        else:
            self._begin(work, now, bound=True)

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
            extended=tuple((self.world.ext_id.get(n, -1), a) for n, a in pod.extended),
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
        work.placement = None
        ran = now - work.started
        if work.attempt is not None:
            work.ran += ran  # the attempt goes on when the pod is bound again
        kept = 0.0
        if work.checkpoint:
            kept = math.floor(ran / work.checkpoint) * work.checkpoint
        if work.remaining is not None:
            work.remaining = max(0.0, work.remaining - kept)
        self._pending[key] = work.pod
        self.recorder.evicted(key, allocation, now)
        if self.queue_recorder is not None:
            self.queue_recorder.stopped(work.pod, allocation, now, lost=ran - kept)
        self._immediate.append(PodDeleted(key, PodEnd.EVICTED, action.reason))

    def wait(self, deadline: float = math.inf) -> None:
        if self._immediate:
            return
        now = self.clock.now()
        self.recorder.sample(now)
        if self.queue_recorder is not None:
            self.queue_recorder.sample(now)
        if self._heap:
            self.clock.advance_to(min(self._heap[0][0], max(deadline, now)))
        elif deadline < math.inf and deadline > now:
            self.clock.advance_to(deadline)

    @property
    def done(self) -> bool:
        # Faults left once no work is left nor waits do not keep the world running.
        idle = not self._work_events and not self._pending
        return not self._immediate and (not self._heap or idle)

    # ----------------------------------------------------------------------------- work
    def arrive(self, timed: TimedWorkload, at: float) -> None:
        """``timed`` arrives at ``at`` (ValueError if one of its pods is here already)."""
        taken = [pod.key for pod in timed.workload.pods if pod.key in self._work]
        if taken:
            raise ValueError(f"pod {taken[0]} is already in the cluster")
        self._push(at, _ARRIVE_WORKLOAD, timed)

    def remove(self, pod_keys: Iterable[str]) -> list[str]:
        """Stop and forget these pods, waiting, running or not arrived yet (a workload none of
        whose pods is kept); returns those that were here. Each is reported ``PodDeleted``."""
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
        self._work_events = sum(item[2] not in (_FAULT, _RECOVER) for item in self._heap)
        for key in keys:
            allocation = self._running.pop(key, None)
            work = self._work.get(key)
            if allocation is not None:
                self.world.release(allocation)
                self.recorder.finished(key, allocation, now)
            elif self._pending.pop(key, None) is not None or (work is not None and work.away):
                self.recorder.pending -= 1
            else:
                continue
            self._work.pop(key, None)
            self._immediate.append(PodDeleted(key))
            gone.append(key)
        return gone

    def put_back(
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
        first with ``jobs.adopt``, when ``timed`` has one). Raises ValueError if they are
        taken."""
        if pod.key in self._work:
            raise ValueError(f"pod {pod.key} is already in the cluster")
        row = self.world.row_of.get(placement.node)
        if row is None:
            raise ValueError(f"pod {pod.key} ran on node {placement.node!r}, which is gone")
        allocation = self._allocate(pod, placement, row)
        self._running[pod.key] = allocation
        work = PodWork(pod, remaining, checkpoint, in_gang, started=started, run=1)
        work.placement = placement
        self._work[pod.key] = work
        self.recorder.arrived(pod, started)
        self.recorder.bound(pod, placement, allocation, started)
        job = self.jobs.adopted(timed.workload.key, pod.name) if timed else None
        if job is not None and timed is not None and not job.done:
            work.job, work.workload, work.full = job, timed.workload, timed.duration
            work.lifetime = job.replica(pod.name).lifetime
            work.attempt = job.current_attempt(pod.name)
            self._begin(work, started, bound=True)
        elif remaining is not None:
            self._push(started + remaining, _FINISH, (pod.key, work.run))

    # ----------------------------------------------------------------------------- queries
    @property
    def job_runs(self) -> list[tuple[Workload, JobRun]]:
        """Every job's controller, with the workload it came in (for a run's report)."""
        return self.jobs.runs

    def placement(self, pod_key: str) -> Placement | None:
        """Where the pod runs (None: it does not run here)."""
        work = self._work.get(pod_key)
        return None if work is None else work.placement

    def work_of(self, pod_key: str) -> tuple[float, float | None] | None:
        """(when its current or last run started, the work it had left then, or left now if it
        waits again) of a pod held here; the work is None when it runs until stopped."""
        work = self._work.get(pod_key)
        return None if work is None else (work.started, work.remaining)

    def placed(self) -> Iterator[tuple[Pod, Placement, float]]:
        """(pod, where it runs, when its current run started) of every running pod."""
        for key in self._running:
            work = self._work[key]
            if work.placement is not None:
                yield work.pod, work.placement, work.started

    @property
    def events_waiting(self) -> bool:
        """Whether events were reported that the next poll returns (a wait returns at once)."""
        return bool(self._immediate)

    @property
    def next_event_at(self) -> float:
        """When the next scheduled event happens (``inf``: none is)."""
        return self._heap[0][0] if self._heap else math.inf

    @property
    def pending(self) -> dict[str, Pod]:
        return dict(self._pending)

    @property
    def running(self) -> dict[str, Allocation]:
        return dict(self._running)
