"""The embedded simulated cluster: a discrete-event world behind the ClusterBackend protocol.

The world keeps its own node table (the ground truth, separate from the scheduler's view:
:mod:`gpufleet.backends.sim.ground_truth`) and checks every bind against it, so a scheduler bug
that double-books a device shows up as a failed bind instead of a silently wrong result. Time
is virtual: :meth:`wait` jumps to the next event (:mod:`gpufleet.backends.sim.event_queue`).

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
  last checkpoint (each move of a pod: :mod:`gpufleet.backends.sim.pod_runs`).

What happens to a pod comes back as events, as from every world: a bind refused
(``BindFailed``), a pod gone with why (``PodDeleted`` with its :class:`PodEnd`), a container
restarted or a Job's next completion run in place (``PodRestarted``), a job ended
(``JobEnded``), and, in a world that says so (``report_binds``), a bind done (``PodBound``).
Work may also arrive, leave and be put back while the world runs (:meth:`arrive`,
:meth:`remove`, :meth:`put_back`: the live world of :mod:`gpufleet.backends.sim.live`).

Faults (a scenario's ``GpuFault`` objects, :class:`~gpufleet.model.faults.GpuFault`): at its
time a GPU reports its XID and turns unhealthy, and healthy again ``recover_after`` later, told
as ``DeviceHealthChanged`` (the set of a node's unhealthy GPUs, with the XIDs as reasons); the
ground truth withdraws the device too, so a bind on it fails; the pods on it crash if the XID
crashes applications. Nodes go and come back (a scenario's ``SpotInterruption`` and
``NodeFailure`` objects): a notice, the node gone with its pods, a node of its name back
(:mod:`gpufleet.backends.sim.node_faults`); what the lost pods' work and workloads become is
:mod:`gpufleet.backends.sim.pod_losses`'. Faults left once no work is left (nor waits) do not
keep the world running.

This module owns the protocol's face (what the control loop calls: events out, actions in,
waits), work put in and taken out from outside, and the queries. :class:`SimulatedCluster` holds
its parts, each given its books of pods (:class:`~gpufleet.backends.sim.pod_books.PodBooks`,
:attr:`SimulatedCluster.books`): the pods' ordinary moves
(:class:`~gpufleet.backends.sim.pod_runs.PodRuns`) and the pods it loses
(:class:`~gpufleet.backends.sim.pod_losses.PodLosses`, given the moves too).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

from gpufleet.backends.sim.controllers import JobControllers
from gpufleet.backends.sim.event_queue import (
    ARRIVE,
    ARRIVE_WORKLOAD,
    CRASH_LOOP,
    FAULT,
    FINISH,
    NODE_DOWN,
    NODE_UP,
    NOTICE,
    RECOVER,
    REQUEUE,
    RESTART,
    RESUBMIT,
)
from gpufleet.backends.sim.jobs import JobRun
from gpufleet.backends.sim.node_faults import NodeFaultPlan
from gpufleet.backends.sim.pod_books import Mode, PodBooks
from gpufleet.backends.sim.pod_losses import PodLosses
from gpufleet.backends.sim.pod_runs import PodRuns
from gpufleet.backends.sim.queue_recorder import QueueRecorder
from gpufleet.backends.sim.recorder import Recorder
from gpufleet.backends.sim.results import InterruptionReport
from gpufleet.backends.sim.work import PodWork
from gpufleet.control.backend import ClusterState, ManualClock
from gpufleet.economics import PriceList
from gpufleet.model import Node, Placement, Pod
from gpufleet.model.actions import Action, Bind, Evict, MarkUnschedulable
from gpufleet.model.events import (
    ClusterEvent,
    NodeAdded,
    NodeGone,
    NodeRemoved,
    PodAdded,
    PodDeleted,
    PodEnd,
    WorkloadAdded,
    WorkloadDemoted,
    WorkloadDisrupted,
    WorkloadReleased,
)
from gpufleet.model.faults import GpuFault
from gpufleet.model.node_faults import NodeFault
from gpufleet.model.workload import TimedPod, TimedWorkload, Workload
from gpufleet.scheduling.node_table import Allocation, NodeTable
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.telemetry.source import XidLog

__all__ = ["Mode", "SimulatedCluster"]


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
        node_faults: Sequence[NodeFault] = (),
        seed: int = 0,
        start: float = 0.0,
    ) -> None:
        self.clock = ManualClock()
        self.books = PodBooks(nodes, mode, target, queue_recorder, self.keep_job_runs)
        self.pod_runs = PodRuns(self.books, self.report_binds)
        self.pod_losses = PodLosses(self.books, self.pod_runs)
        events = self.books.events
        for fault in faults:
            self.books.truth.check_fault(fault)
            events.push(fault.at, FAULT, fault)
            if fault.recovers_at is not None:
                events.push(fault.recovers_at, RECOVER, fault)
        if node_faults:
            self.pod_losses.node_plan = NodeFaultPlan(
                node_faults, nodes, seed, events, lambda: events.work_left, start
            )
        if mode is Mode.FILL:
            if workloads:
                raise ValueError("fill mode takes pods, not workloads")
            for i, timed in enumerate(workload):
                events.push(float(i), ARRIVE, timed)
        else:
            starts = [t.created for t in workload if t.created is not None]
            starts += [t.created for t in workloads]
            origin = min(starts, default=0.0)
            for timed in workload:
                created = timed.created if timed.created is not None else origin
                events.push(created - origin, ARRIVE, timed)
            for job in workloads:
                events.push(job.created - origin, ARRIVE_WORKLOAD, job)
        self.origin = 0.0 if mode is Mode.FILL else min(starts, default=0.0)
        if events:
            self.clock.advance_to(events.next_at)

    # ----------------------------------------------------------------------------- its books
    @property
    def mode(self) -> Mode:
        return self.books.mode

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every node that was in the cluster, up or gone (nodes that joined too)."""
        return self.books.nodes

    @property
    def world(self) -> NodeTable:
        """The ground truth's node table (every bind takes its devices there)."""
        return self.books.world

    @property
    def recorder(self) -> Recorder:
        return self.books.recorder

    @property
    def queue_recorder(self) -> QueueRecorder | None:
        return self.books.queue_recorder

    @queue_recorder.setter
    def queue_recorder(self, recorder: QueueRecorder | None) -> None:
        """Set once the world is made (a queue recorder reads its node table)."""
        self.books.queue_recorder = recorder

    @property
    def jobs(self) -> JobControllers:
        return self.books.jobs

    @property
    def xids(self) -> XidLog:
        """The last XID on each device (a fault records it; the telemetry reads it)."""
        return self.books.xids

    @property
    def run_starts(self) -> int:
        """Bumped when a placed pod's run starts again where it is (see :class:`PodBooks`)."""
        return self.books.run_starts

    @property
    def arrivals_seen(self) -> int:
        return self.books.arrivals_seen

    @property
    def node_plan(self) -> NodeFaultPlan | None:
        """When the cluster's nodes go and come back (None: no node faults)."""
        return self.pod_losses.node_plan

    @property
    def losses(self) -> InterruptionReport:
        return self.pod_losses.losses

    def interruption_report(self, end: float, prices: PriceList | None) -> InterruptionReport:
        """See :meth:`PodLosses.interruption_report`."""
        return self.pod_losses.interruption_report(end, prices)

    def node_up(self, name: str) -> bool:
        """Whether node ``name`` is in the cluster now (not gone)."""
        return self.pod_losses.node_up(name)

    # ----------------------------------------------------------------------------- protocol
    def list_state(self) -> ClusterState:
        """The nodes (:meth:`current_nodes`) and the pods running, where they run (waiting
        work is told as events)."""
        running = [
            (work.pod, work.placement)
            for key in self.books.running
            if (work := self.books.works[key]).placement is not None
        ]
        return ClusterState(self.current_nodes(), (), running)

    def current_nodes(self) -> tuple[Node, ...]:
        """The nodes, the GPUs a fault holds now marked unhealthy."""
        return self.books.truth.current_nodes()

    def poll_events(self) -> Sequence[ClusterEvent]:
        events = self.books.immediate
        self.books.immediate = []
        now = self.clock.now()
        if self.pod_losses.node_plan is not None:
            self.pod_losses.node_plan.resume(now)
        # Each event happens at its own time (the live world may poll after it): a restart or a
        # next completion runs from then.
        for at, kind, payload in self.books.events.due(now):
            if kind == ARRIVE:
                assert isinstance(payload, TimedPod)
                self.pod_runs.arrive_pod(payload.pod, payload.runtime, None, False, now)
                events.append(PodAdded(payload.pod))
            elif kind == ARRIVE_WORKLOAD:
                assert isinstance(payload, TimedWorkload)
                self.pod_runs.arrive_workload(payload, now)
                events.append(WorkloadAdded(payload.workload))
            elif kind == FINISH:
                assert isinstance(payload, tuple)
                assert isinstance(payload[0], str)
                self.pod_runs.finish(payload[0], payload[1], at, events)
            elif kind in (RESTART, CRASH_LOOP):
                assert isinstance(payload, tuple)
                assert isinstance(payload[0], str)
                assert isinstance(payload[1], int)
                self.pod_losses.restarted(payload[0], payload[1], at, events)
            elif kind == RESUBMIT:
                assert isinstance(payload, tuple)
                assert isinstance(payload[0], str | JobRun)
                assert isinstance(payload[1], int)
                self.pod_runs.resubmit(payload[0], payload[1], events)
            elif kind in (FAULT, RECOVER):
                assert isinstance(payload, GpuFault)
                changed = self.books.truth.health_changed(payload, kind == FAULT)
                if changed is not None:
                    events.append(changed)
                if kind == FAULT:
                    self.pod_losses.gpu_failed(payload, at, events)
            elif kind in (NOTICE, NODE_DOWN, NODE_UP):
                assert isinstance(payload, tuple)
                assert isinstance(payload[0], NodeFault)
                fault, node, token = payload
                assert isinstance(node, str)
                assert isinstance(token, int)
                move = {
                    NOTICE: self.pod_losses.node_notice,
                    NODE_DOWN: self.pod_losses.node_down,
                }.get(kind, self.pod_losses.node_back)
                move(fault, node, token, at, events)
            elif kind == REQUEUE:
                assert isinstance(payload, tuple)
                assert isinstance(payload[0], Workload | Pod)
                self.pod_losses.requeue(payload[0], payload[1], events)
            else:
                assert isinstance(payload, tuple)
                assert isinstance(payload[0], JobRun)
                self.pod_runs.deadline(payload[0], payload[1], at, events)
        return events

    def apply(self, actions: Sequence[Action]) -> None:
        now = self.clock.now()
        for action in actions:
            if isinstance(action, Bind):
                self.pod_runs.bind(action, now)
            elif isinstance(action, Evict):
                self.pod_runs.evict(action, now)
            elif isinstance(action, MarkUnschedulable):
                pod = action.pod
                if pod.key not in self.books.pending:
                    continue
                self.books.recorder.unschedulable(pod, action.message, now)
                if self.books.queue_recorder is not None:
                    self.books.queue_recorder.unschedulable(pod, action.message)
                if self.books.mode is Mode.FILL:
                    del self.books.pending[pod.key]
                    del self.books.works[pod.key]
                    self.books.recorder.dropped(pod, now)
                    self.books.immediate.append(PodDeleted(pod.key))

    def wait(self, deadline: float = math.inf) -> None:
        if self.books.immediate:
            return
        now = self.clock.now()
        self.books.recorder.sample(now)
        if self.books.queue_recorder is not None:
            self.books.queue_recorder.sample(now)
        # A world that is done (only faults left) does not jump to its next fault: its end is
        # its last piece of work, not a strike that would come later.
        if self.books.events and not self.done:
            self.clock.advance_to(min(self.books.events.next_at, max(deadline, now)))
        elif deadline < math.inf and deadline > now:
            self.clock.advance_to(deadline)

    @property
    def done(self) -> bool:
        # Faults left once no work is left nor waits do not keep the world running.
        idle = not self.books.events.work_left and not self.books.pending
        return not self.books.immediate and (not self.books.events or idle)

    # ----------------------------------------------------------------------------- work
    def arrive(self, timed: TimedWorkload, at: float) -> None:
        """``timed`` arrives at ``at`` (ValueError if one of its pods is here already)."""
        taken = [pod.key for pod in timed.workload.pods if pod.key in self.books.works]
        if taken:
            raise ValueError(f"pod {taken[0]} is already in the cluster")
        self.books.events.push(at, ARRIVE_WORKLOAD, timed)

    def remove(self, pod_keys: Iterable[str]) -> list[str]:
        """Stop and forget these pods, waiting, running or not arrived yet (a workload none of
        whose pods is kept); returns those that were here. Each is reported ``PodDeleted``."""
        gone: list[str] = []
        now = self.clock.now()
        keys = set(pod_keys)
        self.books.events.drop_workloads(keys)
        for key in keys:
            allocation = self.books.running.pop(key, None)
            work = self.books.works.get(key)
            if allocation is not None:
                self.books.world.release(allocation)
                self.books.recorder.finished(key, allocation, now)
            elif self.books.pending.pop(key, None) is not None or (work is not None and work.away):
                self.books.recorder.pending -= 1
            else:
                continue
            if self.books.queue_recorder is not None and work is not None:
                self.books.queue_recorder.deleted(work.pod, allocation, now)
            self.books.works.pop(key, None)
            self.books.immediate.append(PodDeleted(key))
            gone.append(key)
        return gone

    def stop_running(self, pod_keys: Iterable[str], reason: str) -> list[str]:
        """Evict these running pods for good (an idle policy's Stop): their devices are freed
        and they do not wait again; each is reported ``PodDeleted`` as evicted, with
        ``reason``. Returns those that were running."""
        stopped: list[str] = []
        now = self.clock.now()
        for key in pod_keys:
            allocation = self.books.running.pop(key, None)
            if allocation is None:
                continue
            self.books.world.release(allocation)
            self.books.recorder.finished(key, allocation, now)
            work = self.books.works.pop(key)
            if self.books.queue_recorder is not None:
                self.books.queue_recorder.removed(work.pod, allocation, now)
            self.books.immediate.append(PodDeleted(key, PodEnd.EVICTED, reason))
            stopped.append(key)
        return stopped

    def demote(self, pod_keys: Iterable[str], reason: str) -> bool:
        """Lower the workload of these running pods to preemptible at the lowest priority (an
        idle policy's Preemptible): reported ``WorkloadDemoted`` naming the first of them that
        runs. False when none runs."""
        running = next((key for key in pod_keys if key in self.books.running), None)
        if running is None:
            return False
        self.books.immediate.append(WorkloadDemoted(running, reason))
        return True

    def release(self, timed: TimedWorkload) -> None:
        """The owner of a held workload changed it (removed scheduling gates, resumed it):
        its pods here take their new form, so that whatever brings them back to the scheduler
        later (an eviction, a Job's next pod) brings them so, and the core is told
        (``WorkloadReleased``). A workload that has not arrived yet arrives in its new form."""
        workload = timed.workload
        keys = {pod.key for pod in workload.pods}
        if not any(key in self.books.works for key in keys):
            self.books.events.drop_workloads(keys)
            self.arrive(timed, self.clock.now())
            return
        for i, pod in enumerate(workload.pods):
            work = self.books.works.get(pod.key)
            if work is None:
                continue
            work.pod = pod
            if pod.key in self.books.pending:
                self.books.pending[pod.key] = pod
            if work.workload is not None:
                work.workload = workload
            work.unit = workload if i < workload.gang_size else workload.extra(pod)
        self.books.immediate.append(WorkloadReleased(workload))

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
        if pod.key in self.books.works:
            raise ValueError(f"pod {pod.key} is already in the cluster")
        row = self.books.world.row_of.get(placement.node)
        if row is None:
            raise ValueError(f"pod {pod.key} ran on node {placement.node!r}, which is gone")
        allocation = self.books.truth.allocate(pod, placement, row)
        self.books.running[pod.key] = allocation
        work = PodWork(pod, remaining, checkpoint, in_gang, started=started, run=1)
        work.placement = placement
        if timed is not None:
            workload = timed.workload
            work.on_notice = workload.checkpoint_on_notice
            gang = pod.key in {p.key for p in workload.pods[: workload.gang_size]}
            work.unit = workload if gang else workload.extra(pod)
        self.books.works[pod.key] = work
        self.books.recorder.arrived(pod, started)
        self.books.recorder.bound(pod, placement, allocation, started)
        job = self.books.jobs.adopted(timed.workload.key, pod.name) if timed else None
        if job is not None and timed is not None and not job.done:
            work.job, work.workload, work.full = job, timed.workload, timed.duration
            work.lifetime = job.replica(pod.name).lifetime
            work.attempt = job.current_attempt(pod.name)
            self.pod_runs.begin(work, started, bound=True)
        elif remaining is not None:
            self.books.events.push(started + remaining, FINISH, (pod.key, work.run))

    # ----------------------------------------------------------------------------- nodes
    def join(self, node: Node) -> None:
        """A node new to the cluster joins now, empty (a node pool's): told ``NodeAdded``;
        the node faults whose selection takes it strike it from now. ValueError if a node of
        its name is here."""
        now = self.clock.now()
        self.books.truth.restore_node(node)
        self.books.recorder.nodes_changed()
        if self.pod_losses.node_plan is not None:
            self.pod_losses.node_plan.join(node, now)
        self.books.immediate.append(NodeAdded(node))

    def drain(self, name: str, reason: str) -> list[str]:
        """Drain the node for its removal: nothing new goes there (``NodeRemoved`` to the
        scheduler, the node cordoned), and each workload running there is told
        ``WorkloadDisrupted``, so the scheduler evicts it whole and places it again, from its
        last checkpoint. Returns the pods running there now."""
        if not self.books.truth.is_up(name):
            return []
        self.books.truth.cordon(name)
        self.books.immediate.append(NodeRemoved(name))
        keys = [work.pod.key for work in self.pod_losses.running_on(name)]
        for key in keys:
            self.books.immediate.append(WorkloadDisrupted(key, reason))
        return keys

    def retire(self, name: str, reason: str) -> bool:
        """Remove the node for good once no pod runs there (told ``NodeGone``); False while
        some pod still runs there. A node already gone is left as it is (True)."""
        if not self.books.truth.is_up(name):
            return True
        if next(self.pod_losses.running_on(name), None) is not None:
            return False
        self.books.truth.remove_node(name)
        self.books.recorder.nodes_changed()
        if self.pod_losses.node_plan is not None:
            self.pod_losses.node_plan.retire(name, self.clock.now())
        self.books.immediate.append(NodeRemoved(name))
        self.books.immediate.append(NodeGone(name, reason))
        return True

    def running_pods(self) -> Iterator[tuple[Pod, Placement, Workload]]:
        """(pod, where it runs, the workload it was admitted in) of every running pod."""
        for key in self.books.running:
            work = self.books.works[key]
            if work.placement is not None:
                yield work.pod, work.placement, work.unit or _alone(work.pod)

    def knows_node(self, name: str) -> bool:
        """Whether a node of this name is or was in the cluster."""
        return name in self.books.truth.by_name

    def pods_on(self, name: str) -> int:
        """How many pods run on node ``name`` now."""
        return sum(1 for _ in self.pod_losses.running_on(name))

    # ----------------------------------------------------------------------------- queries
    @property
    def job_runs(self) -> list[tuple[Workload, JobRun]]:
        """Every job's controller, with the workload it came in (for a run's report)."""
        return self.books.jobs.runs

    def placement(self, pod_key: str) -> Placement | None:
        """Where the pod runs (None: it does not run here)."""
        work = self.books.works.get(pod_key)
        return None if work is None else work.placement

    def work_of(self, pod_key: str) -> tuple[float, float | None] | None:
        """(when its current or last run started, the work it had left then, or left now if it
        waits again) of a pod held here; the work is None when it runs until stopped."""
        work = self.books.works.get(pod_key)
        return None if work is None else (work.started, work.remaining)

    def holds(self, pod_key: str) -> bool:
        """Whether the pod runs now (placed on a node)."""
        return pod_key in self.books.running

    def placed(self) -> Iterator[tuple[Pod, Placement, float]]:
        """(pod, where it runs, when its current run started) of every running pod."""
        for key in self.books.running:
            work = self.books.works[key]
            if work.placement is not None:
                yield work.pod, work.placement, work.started

    @property
    def events_waiting(self) -> bool:
        """Whether events were reported that the next poll returns (a wait returns at once)."""
        return bool(self.books.immediate)

    @property
    def next_event_at(self) -> float:
        """When the next scheduled event happens (``inf``: none is)."""
        return self.books.events.next_at

    @property
    def pending(self) -> dict[str, Pod]:
        return dict(self.books.pending)

    @property
    def running(self) -> dict[str, Allocation]:
        return dict(self.books.running)


def _alone(pod: Pod) -> Workload:
    """A pod that arrived on its own (a trace's), as a workload of one."""
    return Workload(pod.name, pod.namespace, (pod,), queue="")
