"""Pods the simulated cluster loses: with a node that goes (a spot interruption, a node
failure), or to a GPU that fails under them (an XID that crashes them).

Owns :class:`PodLosses`, the part of :class:`~gpufleet.backends.sim.cluster.SimulatedCluster`
given its books (:class:`~gpufleet.backends.sim.pod_books.PodBooks`) and its pods' ordinary moves
(:class:`~gpufleet.backends.sim.pod_runs.PodRuns`), which a lost pod's end follows. What it
plays, and what it follows:

* **A notice** (a spot interruption, two minutes by default: :mod:`gpufleet.model.node_faults`):
  the pods on the node are told to checkpoint (``NodeNotice``); a pod whose workload says
  ``gpufleet.dev/checkpoint-on-notice: "true"`` saves its progress then (with every pod of its
  gang, elsewhere too: a distributed job checkpoints as one), the others keep their last
  interval checkpoint (``gpufleet.dev/checkpoint-interval``). The scheduler is told the
  node is gone at once (``NodeRemoved``), so nothing more is placed there: Karpenter and AWS's
  Node Termination Handler taint or cordon an interrupted node as soon as the notice comes.
  The pods run on until the node goes (the world does not drain it).
* **The node goes** (the notice's end; a node failure at once, the scheduler told then): its
  pods are lost, each reported ``PodDeleted`` with ``PodEnd.LOST``, and the node with
  ``NodeGone``. A node of its name and shape joins later if the fault says (``NodeAdded``).
* **A GPU fails** with an XID that crashes the applications on it (``GpuFault.crashes_pods``):
  the pods holding it (a whole GPU, a share or a MIG slice of it) crash. Neither the kubelet nor
  the device plugin stops a pod whose GPU turns unhealthy; the pod's program fails on it, so
  the crash is a failed attempt of the pod's container (exit code 1, not a disruption). A pod
  whose policy restarts it in place keeps its devices (the kubelet does not move it), so it
  crashes again at each restart while the GPU is unhealthy, each restart counted, until the
  GPU recovers or its job's limit fails it, as in Kubernetes; on a GPU that never recovers it
  crash-loops until the run ends (those restarts do not keep the world running).

What follows for a lost pod's work and workload:

* The work since each pod's last checkpoint is lost (:func:`~gpufleet.backends.sim.work.
  kept_work`), counted in GPU-hours (its GPUs, a share by its fraction, a MIG slice by its
  compute slices).
* **Gangs restart whole**: a pod of a gang (a workload whose pods were admitted together) takes
  the gang's other running pods down with it (``PodEnd.LOST``, "taken down with its gang"),
  and the gang is put back to the scheduler as one workload (after its controller's back-off),
  so it never runs in part: Kueue evicts and requeues a workload whose pods are not all ready
  again (``waitForPodsReady``), and a distributed job cannot go on without a member. Kubernetes'
  own Job controller would replace only the lost pod of a Job's gang; gpufleet admits a Job's
  parallel pods as one gang, so it restarts them as one.
* **Counting**: the pod's job's controller decides (:meth:`~gpufleet.backends.sim.jobs.JobRun.
  lost` for a pod lost with its node, a failed attempt for a crash): a Job counts a lost pod
  against ``backoffLimit`` unless its ``podFailurePolicy`` ignores ``DisruptionTarget``, and
  fails as Kubernetes fails it; the other pods of the gang are evicted, not failed (Kueue's
  eviction does not count against ``backoffLimit``). A pod without a controller (a bare pod, a
  trace's) is put back in its queue, as an evicted one is.

It keeps the run's counts (:class:`~gpufleet.backends.sim.results.InterruptionReport`). When a
node goes and comes back is :class:`~gpufleet.backends.sim.node_faults.NodeFaultPlan`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from gpufleet.backends.sim.event_queue import REQUEUE
from gpufleet.backends.sim.ground_truth import devices_of
from gpufleet.backends.sim.jobs import JobRun, Next, Outcome, Verdict
from gpufleet.backends.sim.node_faults import NodeFaultPlan
from gpufleet.backends.sim.pod_books import PodBooks
from gpufleet.backends.sim.pod_runs import PodRuns
from gpufleet.backends.sim.results import InterruptionReport, NodeFaultEvent
from gpufleet.backends.sim.spot import spot_savings
from gpufleet.backends.sim.work import PodWork, kept_work
from gpufleet.economics import PriceList
from gpufleet.economics.runs import gpus_held
from gpufleet.model import Pod
from gpufleet.model.events import (
    ClusterEvent,
    NodeAdded,
    NodeGone,
    NodeNotice,
    NodeRemoved,
    PodAdded,
    PodEnd,
    WorkloadAdded,
)
from gpufleet.model.faults import GpuFault
from gpufleet.model.node_faults import NodeFault
from gpufleet.model.workload import Workload

#: The exit code of a pod's program that crashed on its GPU (a CUDA error ends it as an
#: uncaught error does).
CRASH_EXIT_CODE = 1
SECONDS_PER_HOUR = 3600.0
XID_CAUSE = "GPU fault"


class PodLosses:
    """See the module docstring."""

    def __init__(self, books: PodBooks, runs: PodRuns) -> None:
        """``runs``: the pods' ordinary moves, which a lost pod's end follows."""
        self.books = books
        self.runs = runs
        #: When the cluster's nodes go and come back (None: no node faults).
        self.node_plan: NodeFaultPlan | None = None
        self.losses = InterruptionReport()
        #: GPU-seconds of work lost, by cause, and to each spot node's interruptions.
        self._lost_by_cause: dict[str, float] = {}
        self._lost_to_spot: dict[str, float] = {}
        self._crash_rows: list[NodeFaultEvent] = []

    # ----------------------------------------------------------------------------- nodes
    def running_on(self, node: str) -> Iterator[PodWork]:
        for key in self.books.running:
            work = self.books.works[key]
            if work.placement is not None and work.placement.node == node:
                yield work

    def node_notice(
        self, fault: NodeFault, name: str, token: int, now: float, events: list[ClusterEvent]
    ) -> None:
        assert self.node_plan is not None
        leaves_at = self.node_plan.notice(fault, name, token, now)
        if leaves_at is None or fault.notice <= 0:
            return  # stale, or a failure: the node goes now (its NODE_DOWN is due at once)
        told, saved = [], []
        for work in self.running_on(name):
            told.append(work.pod.key)
            if work.on_notice:
                # A gang checkpoints as one program: every pod of it saves its progress.
                for member in self._gang(work):
                    if member.saved_at != now:
                        member.saved_at = now
                        saved.append(member.pod.key)
        self.losses.notices += 1
        self.losses.pods_checkpointed += len(saved)
        self.node_plan.record_notice(fault, name, now, len(told))
        reason = f"{fault.label}: {fault.cause}"
        events.append(NodeNotice(name, leaves_at, reason, tuple(told), tuple(saved)))
        self.books.truth.cordon(name)  # a core built afresh sees it unschedulable
        events.append(NodeRemoved(name))  # cordoned: nothing more is placed there

    def node_down(
        self, fault: NodeFault, name: str, generation: int, now: float, events: list[ClusterEvent]
    ) -> None:
        plan = self.node_plan
        assert plan is not None
        if not plan.down(fault, name, generation, now):
            return
        keys = [work.pod.key for work in self.running_on(name)]
        lost = self._kill(keys, now, events, f"lost with node {name} ({fault.cause})", None)
        self._lost_by_cause[fault.cause] = self._lost_by_cause.get(fault.cause, 0.0) + lost
        if fault.is_spot:
            self._lost_to_spot[name] = self._lost_to_spot.get(name, 0.0) + lost
            self.losses.spot_interruptions += 1
        else:
            self.losses.node_failures += 1
        self.books.truth.remove_node(name)
        if fault.notice <= 0:
            events.append(NodeRemoved(name))
        back_after = plan.back_after(fault, name)
        back = None if back_after is None else now + back_after
        events.append(NodeGone(name, f"{fault.label}: {fault.cause}", back))
        plan.record_gone(fault, name, now, len(keys), lost / SECONDS_PER_HOUR)

    def node_back(
        self, fault: NodeFault, name: str, generation: int, now: float, events: list[ClusterEvent]
    ) -> None:
        assert self.node_plan is not None
        node = self.node_plan.up(fault, name, generation, now)
        if node is None:
            return
        self.books.truth.restore_node(node)
        self.losses.nodes_back += 1
        events.append(NodeAdded(node))

    # ----------------------------------------------------------------------------- GPUs
    def gpu_failed(self, fault: GpuFault, now: float, events: list[ClusterEvent]) -> None:
        """A GPU fault began: the pods on the device crash, if its XID crashes them."""
        if not fault.crashes_pods or not self.books.truth.is_up(fault.node):
            return
        keys = [
            work.pod.key
            for work in self.running_on(fault.node)
            if work.placement is not None and fault.gpu in devices_of(work.placement)
        ]
        if not keys:
            return
        why = f"crashed: GPU {fault.gpu} of node {fault.node} failed ({fault.reason})"
        lost = self._kill(keys, now, events, why, fault)
        self._lost_by_cause[XID_CAUSE] = self._lost_by_cause.get(XID_CAUSE, 0.0) + lost
        self.losses.gpu_crashes += 1
        label = fault.name.rsplit(", ", 1)[-1] or "GpuFault"  # its object, not its file
        hours = round(lost / SECONDS_PER_HOUR, 6)
        self._crash_rows.append(
            NodeFaultEvent(now, fault.node, label, "xid", len(keys), hours,
                           f"GPU {fault.gpu}: {fault.reason}")
        )  # fmt: skip

    def restarted(self, key: str, run: int, now: float, events: list[ClusterEvent]) -> None:
        """A container restarts in place; on a GPU that is still unhealthy it crashes again
        at once (a new attempt that fails)."""
        work = self.books.works.get(key)
        if (
            work is None
            or work.run != run
            or key not in self.books.running
            or work.placement is None
        ):
            return
        fault = self.books.truth.crashing(work.placement.node, devices_of(work.placement))
        if fault is None:
            self.runs.restart(key, run, now)
            return
        work.started = now
        if work.job is not None and work.attempt is None:
            work.attempt, work.ran = work.job.start(work.pod.name), 0.0
        why = f"crashed again: GPU {fault.gpu} of node {fault.node} is unhealthy"
        lost = self._kill([key], now, events, why, fault)
        self._lost_by_cause[XID_CAUSE] = self._lost_by_cause.get(XID_CAUSE, 0.0) + lost

    # ----------------------------------------------------------------------------- pods
    def _gang(self, work: PodWork) -> list[PodWork]:
        """The running pods of the gang ``work`` runs in (only it, for a pod of its own)."""
        unit = work.unit
        if unit is None or unit.gang_size <= 1:
            return [work]
        members = []
        for pod in unit.pods:
            other = self.books.works.get(pod.key)
            if (
                other is not None
                and pod.key in self.books.running
                and other.unit is not None
                and other.unit.key == unit.key
            ):
                members.append(other)
        return members or [work]

    def _kill(
        self,
        keys: Sequence[str],
        now: float,
        events: list[ClusterEvent],
        why: str,
        crash: GpuFault | None,
    ) -> float:
        """The running pods ``keys`` are lost (``crash``: they crashed on that GPU fault), their
        gangs with them; returns the GPU-seconds of work lost."""
        lost = 0.0
        killed = set(keys)
        handled: set[str] = set()
        for key in keys:
            if key in handled or key not in self.books.running:
                continue
            members = self._gang(self.books.works[key])
            handled.update(member.pod.key for member in members)
            lost += self._kill_unit(members, killed, now, events, why, crash)
        self.losses.gpu_hours_lost += lost / SECONDS_PER_HOUR
        return lost

    def _cut(self, work: PodWork, now: float, attempt_over: bool) -> float:
        """Cut the pod's run at ``now``: its work since its last checkpoint is lost (returned,
        in GPU-seconds); its attempt is over (a crash) or goes on when it runs again."""
        placement = work.placement
        assert placement is not None
        ran = max(0.0, now - work.started)
        kept = kept_work(work, now)
        node = self.books.truth.by_name.get(placement.node)
        gpus, _ = gpus_held(placement.gpu_milli, placement.mig_slices, node)
        if work.remaining is not None:
            work.remaining = max(0.0, work.remaining - kept)
        if work.attempt is not None:
            work.ran += ran
            if attempt_over:
                work.attempt = None
        return (ran - kept) * gpus

    def _kill_unit(
        self,
        members: list[PodWork],
        killed: set[str],
        now: float,
        events: list[ClusterEvent],
        why: str,
        crash: GpuFault | None,
    ) -> float:
        """One gang (or lone pod) of which the pods ``killed`` were lost: see the module
        docstring."""
        losses = self.losses
        hit = [m for m in members if m.pod.key in killed]
        losses.pods_lost += len(hit)
        losses.pods_taken_down += len(members) - len(hit)
        lost = 0.0
        verdicts: list[tuple[PodWork, Verdict]] = []
        for member in members:
            struck = member.pod.key in killed
            lost += self._cut(member, now, attempt_over=struck and crash is not None)
            if struck and member.job is not None:
                job = member.job
                name = member.pod.name
                verdict = job.ended(name, True, CRASH_EXIT_CODE) if crash else job.lost(name)
                verdicts.append((member, verdict))
        losses.jobs_failed += len(
            {id(w.job): None for w, v in verdicts if v.ended is Outcome.FAILED}
        )
        if len(members) == 1 and (members[0].unit is None or members[0].unit.gang_size <= 1):
            self._lone_lost(members[0], verdicts, now, events, why)
        else:
            self._gang_lost(members, killed, verdicts, now, events, why)
        return lost

    def _lone_lost(
        self,
        work: PodWork,
        verdicts: list[tuple[PodWork, Verdict]],
        now: float,
        events: list[ClusterEvent],
        why: str,
    ) -> None:
        if verdicts:
            verdict = verdicts[0][1]
            if verdict.next in (Next.RESTART, Next.REPLACE, Next.RECREATE):
                self.losses.restarts += 1
            self.runs.carry_out(work, verdict, now, events, lost=why)
            return
        self.losses.restarts += 1
        self.runs.take_away(work, now, events, why, PodEnd.LOST)
        target: Workload | Pod = work.unit if work.unit is not None else work.pod
        self.books.events.push(now, REQUEUE, (target, ((work.pod.key, work.run),)))

    def _gang_lost(
        self,
        members: list[PodWork],
        killed: set[str],
        verdicts: list[tuple[PodWork, Verdict]],
        now: float,
        events: list[ClusterEvent],
        why: str,
    ) -> None:
        first = next(m for m in members if m.pod.key in killed)
        for member in members:
            message = why
            if member.pod.key not in killed:
                message = f"taken down with its gang: {first.pod.name} {why}"
            self.runs.take_away(member, now, events, message, PodEnd.LOST)
        delay = 0.0
        ended: dict[int, tuple[JobRun, Outcome]] = {}
        recreated: set[int] = set()
        for work, verdict in verdicts:
            job = work.job
            assert job is not None
            if verdict.ended is not None:
                ended[id(job)] = (job, verdict.ended)
            if verdict.next is Next.RECREATE:  # a RayJob's new cluster: its pods all come back
                recreated.add(id(job))
                self.runs.carry_out(work, verdict, now, events, lost=why)
            elif verdict.next in (Next.FAILED, Next.DONE):
                self.runs.stop(work, now, events, succeeded=False)
            else:
                delay = max(delay, verdict.delay)
                if verdict.fresh:
                    work.remaining = work.full
        for job, outcome in ended.values():
            if id(job) not in recreated:
                self.runs.end_job(job, outcome, now, events)
        back = [
            m
            for m in members
            if m.pod.key in self.books.works
            and m.away
            and (m.job is None or (id(m.job) not in recreated and not m.job.done))
        ]
        if back:
            self.losses.restarts += 1
            unit = first.unit
            assert unit is not None
            tokens = tuple((m.pod.key, m.run) for m in back)
            self.books.events.push(now + delay, REQUEUE, (unit, tokens))
        elif recreated:
            self.losses.restarts += 1

    def requeue(
        self,
        target: Workload | Pod,
        tokens: tuple[tuple[str, int], ...],
        events: list[ClusterEvent],
    ) -> None:
        """Lost pods (a gang's, or one's own) go back to the scheduler, those still away."""
        works = [
            work
            for key, run in tokens
            if (work := self.books.works.get(key)) is not None and work.away and work.run == run
        ]
        if not works:
            return
        for work in works:
            work.away = False
            self.books.pending[work.pod.key] = work.pod
            if work.job is not None:
                work.job.replaced(work.pod.name)  # a new pod: its restarts start again
        if isinstance(target, Pod):
            events.append(PodAdded(target))
            return
        pods = tuple(work.pod for work in works)
        unit = target
        if len(pods) != len(target.pods):
            unit = dataclasses.replace(
                target, pods=pods, min_member=min(target.min_member, len(pods))
            )
        for work in works:
            work.unit = unit
        events.append(WorkloadAdded(unit))

    # ----------------------------------------------------------------------------- report
    def interruption_report(self, end: float, prices: PriceList | None) -> InterruptionReport:
        """What the run's node faults and GPU faults did, up to ``end`` (``prices``: to say
        what spot capacity saved; None: not said)."""
        report = dataclasses.replace(self.losses)
        report.gpu_hours_lost = round(report.gpu_hours_lost, 6)
        report.gpu_hours_lost_by_cause = {
            cause: round(seconds / SECONDS_PER_HOUR, 6)
            for cause, seconds in sorted(self._lost_by_cause.items())
        }
        rows = list(self._crash_rows)
        plan = self.node_plan
        uptime: dict[str, float] = {node.name: end for node in self.books.nodes}
        if plan is not None:
            rows += plan.rows
            uptime = {name: life.up_seconds(end) for name, life in plan.lives.items()}
        report.events = sorted(rows, key=lambda row: row.at)
        if prices is not None:
            report.savings = spot_savings(self.books.nodes, uptime, self._lost_to_spot, prices)
        return report

    def node_up(self, name: str) -> bool:
        """Whether node ``name`` is in the cluster now (not gone)."""
        return self.books.truth.is_up(name)
