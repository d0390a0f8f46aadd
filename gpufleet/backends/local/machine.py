"""This machine as a world: :class:`LocalMachine`, a ClusterBackend whose pods are processes.

One node (this machine, :func:`~gpufleet.backends.local.node.machine_node`); work comes in with
:meth:`LocalMachine.submit` (a workload and, for each of its pods, the
:class:`~gpufleet.model.processes.ProcessSpec` the caller read: the scheduling Pod has no
command); what the core decides is carried out by a :class:`~.supervisor.Supervisor`:

* ``Bind``: the pod's process starts at once with its devices' variables
  (:func:`~.devices_env.placement_env`), reported ``PodBound`` then ``PodReady``. A gang (a
  workload of several pods) starts when all its pods are bound (the core binds a gang whole,
  in one cycle), each with torchrun's variables for its rank (its place in the workload) and
  one port chosen for the gang (one no other live gang holds until it ends: :mod:`.ports`);
  its pods are ready together, which the core's gang permit waits for. A bind that cannot be
  carried out (no spec, a device the machine lacks, a run the supervisor refuses) is
  ``BindFailed``.
* ``Evict``: the process is stopped, SIGTERM then SIGKILL after the grace period (30 s by
  default, as Kubernetes' ``terminationGracePeriodSeconds``), and reported ``PodDeleted``
  ``EVICTED`` when it has ended: only then are its GPUs free for another.
* A process that ends is ``PodDeleted``: ``SUCCEEDED`` on exit code 0, ``FAILED`` otherwise
  (the exit code or signal in the message), ``LOST`` when its shim vanished without a record.
  When a pod of a gang fails, the rest of its gang is stopped and fails with it (as torchrun's
  agent stops the other workers).
* :meth:`LocalMachine.cancel` stops (or forgets, if waiting) pods: ``PodDeleted`` ``DELETED``.
* Time limits: a gang whose processes have a ``deadline_s`` (a Pod's or Job's
  ``activeDeadlineSeconds``) may run that long from its start (the shortest of its pods'; a
  start after an eviction counts anew, as a Job resumed by Kueue does). When it has passed,
  ``JobEnded`` ``Failed`` ``DeadlineExceeded`` is reported and its processes are stopped as an
  eviction's are (SIGTERM, the grace, SIGKILL), each then ``PodDeleted`` ``FAILED``. The
  deadline is kept with the runs, so it holds across a restart of the server.
* Retries: a workload whose processes have a ``backoff_limit`` (a Job's ``backoffLimit``) has
  a failed run started again, as Kubernetes creates a new pod for a Job with ``restartPolicy``
  Never: each failed run counts one failure (a gang's other members, stopped for it, do not);
  while the failures do not exceed the limit, the gang is started again where it was bound
  once all its processes have ended (``PodRestarted`` for each pod, a new run id, its log kept
  apart), its time limit still counted from the first start; the failure past the limit is
  ``JobEnded`` ``Failed`` ``BackoffLimitExceeded`` and the pods' ``PodDeleted`` ``FAILED``.
  A lost run counts as a failure (as a pod lost with its node counts for a Job). A member
  that succeeded is done: a retry starts the others. The count is kept with the runs, so it
  holds across a restart of the server.
* Completions: a workload whose processes have ``completions`` (a Job's, beyond its pods) has
  each pod run one completion at a time (the lowest neither done nor run by another; an
  Indexed Job's index in ``JOB_COMPLETION_INDEX``, and a job array's Slurm variables,
  ``SLURM_ARRAY_TASK_ID`` and the rest: :func:`~.gangs.array_env`): a pod whose completion
  succeeded runs the next at once in place (``PodRestarted`` with the completion, a new run),
  and ends (``PodDeleted`` ``SUCCEEDED``) when none is left. Each run keeps its completion, so
  the ones done hold across a restart of the server.
* Indexes: an Indexed Job whose processes have a ``backoff_limit_per_index`` (its
  ``backoffLimitPerIndex``) retries a failed index on its own, as Kubernetes does: the pod
  that ran it runs it again at once in place (``PodRestarted``, a new run), the other pods run
  on. An index whose failures exceed the limit fails for good (it is not run again) and its
  pod runs the next index left, or ends ``FAILED`` while the others run on; once more indexes
  failed than ``max_failed_indexes`` (its ``maxFailedIndexes``) the Job fails at once
  (``JobEnded`` ``Failed`` ``MaxFailedIndexesExceeded``, the rest stopped, failed), else it
  fails when its last pod ends (``JobEnded`` ``Failed`` ``FailedIndexes``, listing them). A
  ``backoff_limit`` given too still counts every failure, and fails the Job past it. The
  counts and the failed indexes are kept with the runs, so they hold across a restart.
* Restarts in place: a workload whose processes have a ``restart_policy`` (a Deployment's
  replica: ``Always``; a Pod's ``OnFailure``) has a run that ends (``Always``) or fails
  (``OnFailure``), and was not stopped, started again where it is after the kubelet's
  back-off (:class:`~.restarts.CrashBackoff`, counted from its end; the rest of a gang is
  stopped and started with it): ``PodRestarted`` saying how it ended and the delay, a new run
  id and log, the count (:meth:`LocalMachine.restarts_of`) and the back-off kept with the runs
  across a restart of the server. It holds its GPUs while it backs off; a cancellation,
  eviction or time limit stops it for good.

GPU health: :meth:`LocalMachine.set_gpu_health` withdraws the GPUs the caller found unhealthy
(NVML's lost devices and critical XIDs, :mod:`.health`) from scheduling, as the node agent's
health marks them on a cluster (``DeviceHealthChanged``); runs already there run on.

Restarts: each run keeps its pod's key, workload, rank and placement with it, and a stop
asked for keeps why (evicted, cancelled, failed, to be started again), so a new server calls
:meth:`LocalMachine.recover` with the pods it believes run or wait, and gets back the running
ones in :meth:`~LocalMachine.list_state`; then :meth:`LocalMachine.resume` for each workload
takes in the runs of its pods that ended (or were lost) meanwhile, in the order they ended, as
if the server had been up: a failure counted against the backoff limit (the gang started
again where it was, or, when a GPU of its is gone or taken, ``PodDeleted`` ``REPLACED`` and
``WorkloadAdded``: placed again whole), a gang's failure stopping the rest. A gang is never
left part running: a member the server recorded failed stops the rest (failed); one with no
run stops the rest, and the gang is placed again whole. A run found being stopped ends as
it was to (its workload, if it was evicted, told again with ``WorkloadAdded`` to wait: the
scheduler that evicted it is gone). Ends of a workload not resumed are reported as they were
at the next poll. A gang's start is recorded (``.gang-start-<workload>.json`` in the runs
directory, written atomically before any member starts, listing its runs, removed once all have
started): :meth:`LocalMachine.recover` that finds one starts the members missing as they were
to start, so a gang is found started whole or not started, and a member's command never runs
twice. Nothing is started twice: a run id (``<namespace>_<name>_<attempt>``) is used once.

Each tenant works under ``<state>/tenants/<tenant>/`` (:meth:`~LocalMachine.tenant_root`,
made on demand, mode 0700, owned by the tenant's uid where one is given: :mod:`.state_modes`).
:meth:`~LocalMachine.wait` wakes when a process ends (the shims' FIFO) or another thread
calls :meth:`~LocalMachine.wake`.
It is not thread-safe otherwise: the control plane calls it under its lock.

It holds its parts, each given its :class:`~.machine_state.MachineState` (what it holds,
stopping and forgetting runs; :attr:`LocalMachine.state`): :class:`~.gang_starts.GangStarts`
(binds and starts) and :class:`~.gang_ends.GangEnds` (ends, retries, restarts in place, time
limits; given the starts part, to start again); a Job's rules are
:mod:`gpufleet.job_controller`'s. Its settings (the supervisor, the clock, the grace period...)
are its state's, read and set through it.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from gpufleet.backends.local.cgroups import Hierarchy
from gpufleet.backends.local.gang_ends import GangEnds
from gpufleet.backends.local.gang_starts import GangStarts
from gpufleet.backends.local.gangs import Gang, deleted_event, ended_at, part, recovered_bound
from gpufleet.backends.local.machine_state import MachineState
from gpufleet.backends.local.machine_state import WallClock as WallClock
from gpufleet.backends.local.ports import PortBook
from gpufleet.backends.local.restarts import CrashBackoff, RunCounts
from gpufleet.backends.local.run_state import make_private_dir
from gpufleet.backends.local.state_modes import (
    PASSAGE_MODE,
    TENANT_ROOT_MODE,
    TENANTS_DIR,
    prepare_state_dir,
)
from gpufleet.backends.local.supervisor import DEFAULT_GRACE_S, AdoptedRun, RunStatus, Supervisor
from gpufleet.control.backend import ClusterState
from gpufleet.job_controller.decisions import DEADLINE_EXCEEDED as DEADLINE_EXCEEDED
from gpufleet.model import Node, Pod, Workload
from gpufleet.model.actions import Action, Bind, Evict, MarkUnschedulable
from gpufleet.model.events import (
    ClusterEvent,
    DeviceHealthChanged,
    PodDeleted,
    PodEnd,
    WorkloadAdded,
    WorkloadDemoted,
    WorkloadReleased,
)
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.node import with_gpu_health
from gpufleet.model.processes import ProcessSpec

log = logging.getLogger(__name__)

#: The longest a wait sleeps without looking again (so that a stop is noticed promptly).
MAX_SLEEP_S = 0.5
_TENANT = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class SubmitRefusedError(ValueError):
    """A workload the machine cannot run (nothing of it is submitted)."""


class LocalMachine:
    """See the module docstring."""

    def __init__(
        self,
        inventory: NodeInventory,
        state_dir: Path,
        node: Node | None = None,
        mps: bool = False,
        grace_s: float = DEFAULT_GRACE_S,
        allow_root: bool = False,
        supervisor: Supervisor | None = None,
        shared_proc: bool = False,
        crash_backoff: CrashBackoff | None = None,
        cgroups: Hierarchy | None = None,
        private_dev: bool = False,
        device_dir: str = "/dev",
    ) -> None:
        #: What it holds and its settings, shared with its parts.
        self.state = MachineState(
            inventory, state_dir, node=node, mps=mps, grace_s=grace_s, allow_root=allow_root,
            supervisor=supervisor, shared_proc=shared_proc, crash_backoff=crash_backoff,
            cgroups=cgroups, private_dev=private_dev, device_dir=device_dir,
        )  # fmt: skip
        #: Binds and starts; then ends, retries, restarts in place and time limits (which
        #: start again through the first).
        self._starts = GangStarts(self.state)
        self._ends = GangEnds(self.state, self._starts)

    # ---------------------------------------------------------------------------- settings
    @property
    def inventory(self) -> NodeInventory:
        return self.state.inventory

    @property
    def state_dir(self) -> Path:
        return self.state.state_dir

    @property
    def mps(self) -> bool:
        return self.state.mps

    @property
    def device_dir(self) -> str:
        """Where this machine's GPU device nodes are (``/dev``; the fake GPUs' directory)."""
        return self.state.device_dir

    @property
    def unschedulable(self) -> dict[str, str]:
        """Why each pod waits, as the core last said (``MarkUnschedulable``)."""
        return self.state.unschedulable

    @property
    def node(self) -> Node:
        return self.state.node

    @node.setter
    def node(self, node: Node) -> None:
        self.state.node = node

    @property
    def grace_s(self) -> float:
        """How long a stopped run has between SIGTERM and SIGKILL."""
        return self.state.grace_s

    @grace_s.setter
    def grace_s(self, grace_s: float) -> None:
        self.state.grace_s = grace_s

    @property
    def crash_backoff(self) -> CrashBackoff:
        return self.state.crash_backoff

    @crash_backoff.setter
    def crash_backoff(self, crash_backoff: CrashBackoff) -> None:
        self.state.crash_backoff = crash_backoff

    @property
    def supervisor(self) -> Supervisor:
        return self.state.supervisor

    @supervisor.setter
    def supervisor(self, supervisor: Supervisor) -> None:
        self.state.supervisor = supervisor

    @property
    def clock(self) -> WallClock:
        return self.state.clock

    @clock.setter
    def clock(self, clock: WallClock) -> None:
        self.state.clock = clock

    @property
    def ports(self) -> PortBook:
        """The rendezvous port each live gang holds (never handed to another meanwhile)."""
        return self.state.ports

    @ports.setter
    def ports(self, ports: PortBook) -> None:
        self.state.ports = ports

    # ----------------------------------------------------------------------------- inputs
    def tenant_root(self, tenant: str, uid: int | None = None, gid: int | None = None) -> Path:
        """``<state>/tenants/<tenant>/``, made now if missing (mode 0700, owned by ``uid``)."""
        if not _TENANT.match(tenant):
            raise SubmitRefusedError(
                f"tenant {tenant!r}: expected a DNS label (lower-case letters, digits, '-')"
            )
        root = self.state_dir / TENANTS_DIR / tenant
        if not root.exists():
            # Its parents with their modes (:mod:`.state_modes`).
            if not self.state_dir.is_dir():
                prepare_state_dir(self.state_dir)
            make_private_dir(self.state_dir / TENANTS_DIR, PASSAGE_MODE)
            owned = uid is not None and gid is not None and os.geteuid() == 0
            make_private_dir(root, TENANT_ROOT_MODE, uid if owned else None, gid if owned else None)
        return root

    def submit(self, workload: Workload, specs: Mapping[str, ProcessSpec]) -> None:
        """A workload to run: each pod's process in ``specs`` (by pod key). Raises
        :class:`SubmitRefusedError` (nothing submitted) when a pod has no process, the machine
        could never hold a pod, or a gang is elastic (``min_member`` below its size)."""
        self.check(workload, specs)
        self._register(workload, specs)
        self.state.events.append(WorkloadAdded(workload))
        self.wake()

    def resume(
        self,
        workload: Workload,
        specs: Mapping[str, ProcessSpec],
        waiting: Sequence[Pod] = (),
        succeeded: Iterable[str] = (),
        failed: Iterable[str] = (),
    ) -> None:
        """After :meth:`recover`: a workload that was here before the restart, its running pods
        recovered; ``waiting``: its pods to place again (told to the scheduler now, as a
        workload of those pods); ``succeeded`` and ``failed``: its pods whose end the caller
        recorded before the restart. The runs of its pods that ended while the server was
        down are taken in as if it had been up (see the module docstring: retries, a gang's
        failure); a gang is never left part running: with a member failed for good the rest
        is stopped and failed, with a member waiting the rest is stopped and the gang placed
        again whole. Raises :class:`SubmitRefusedError` as :meth:`submit` does."""
        state = self.state
        self.check(workload, specs)
        self._register(workload, specs)
        gang = state.gangs[workload.key]
        gang.succeeded.update(succeeded)
        if gang.backoff_limit_per_index is not None:
            # A pod whose index failed for good (the Job going on) is through: it runs no more.
            gang.succeeded.update(failed)
            failed = ()
        for pod in waiting:  # its last run's end was taken in before the restart
            state.recovered_ends.pop(pod.key, None)
        failed_before = sorted(failed, key=lambda k: self._rank(gang, k))
        if failed_before:
            gang.failed_for_good = f"{failed_before[0]} of its gang failed"
            for bound in state.holding(workload.key):
                state.stop_pod(bound, PodEnd.FAILED, gang.failed_for_good)
        ended = [
            state.recovered_ends.pop(p.key) for p in workload.pods if p.key in state.recovered_ends
        ]
        for bound, end in ended:
            state.bound[bound.pod.key] = bound
            state.by_run[end.run_id] = bound.pod.key
        for bound in state.holding(workload.key):
            if bound.completion is not None:
                gang.completion_of[bound.pod.key] = bound.completion
        # In the order they ended (a lost run last: when it went is not known).
        ended.sort(key=lambda item: (ended_at(item[1]), item[0].rank))
        for _, end in ended:
            self._ends.ended(end)
        if waiting and gang.failed_for_good is not None:
            for pod in waiting:
                state.events.append(PodDeleted(pod.key, PodEnd.FAILED, gang.failed_for_good))
            state.drop_if_over(workload.key)
        elif waiting and state.holding(workload.key):
            # A gang starts whole: what still runs of it is stopped, and it is placed again.
            gang.place_again = True
            for bound in state.holding(workload.key):
                state.stop_to_restart(bound)
            self._ends.gang_down(gang)
        elif waiting:
            keys = {pod.key for pod in waiting}
            waiting_part = part(workload, tuple(p for p in workload.pods if p.key in keys))
            state.events.append(WorkloadAdded(waiting_part))
        self.wake()

    def check(self, workload: Workload, specs: Mapping[str, ProcessSpec]) -> None:
        """Raise :class:`SubmitRefusedError` if :meth:`submit` would refuse ``workload``."""
        for pod in workload.pods:
            if pod.key not in specs:
                raise SubmitRefusedError(f"pod {pod.key}: no process given for it")
            problem = self._never_fits(pod)
            if problem:
                raise SubmitRefusedError(f"pod {pod.key}: {problem}")
        size = len(workload.pods)
        if size > 1 and workload.min_member not in (0, size):
            raise SubmitRefusedError(
                f"workload {workload.key}: the local machine starts a gang whole; "
                f"min_member {workload.min_member} of {size} pods is not supported"
            )
        if workload.key in self.state.gangs:
            raise SubmitRefusedError(f"workload {workload.key} was submitted already")

    def _rank(self, gang: Gang, pod_key: str) -> int:
        return next((i for i, p in enumerate(gang.workload.pods) if p.key == pod_key), -1)

    def _register(self, workload: Workload, specs: Mapping[str, ProcessSpec]) -> None:
        state = self.state
        counts = state.recovered_counts.pop(workload.key, RunCounts())
        state.final_counts.pop(workload.key, None)
        state.gangs[workload.key] = Gang(
            workload, dict(specs), failures=counts.failures, deadline_at=counts.deadline_at,
            restarts=counts.restarts, streak=counts.streak,
            done=state.recovered_done.pop(workload.key, set()),
            index_failures=dict(counts.index_failures), failed_indexes=set(counts.failed_indexes),
        )  # fmt: skip
        for pod in workload.pods:
            state.workload_of[pod.key] = workload.key

    def _never_fits(self, pod: Pod) -> str:
        node, gpu = self.node, pod.gpu
        whole = [g for g in node.gpus if not g.partitioned]
        if gpu.count > len(whole):
            return f"asks for {gpu.count} GPUs; this machine has {len(whole)}"
        if gpu.mig_profile is not None:
            slices = sum(s.profile == gpu.mig_profile for g in node.gpus for s in g.mig_slices)
            if gpu.mig_count > slices:
                return f"asks for {gpu.mig_count} MIG {gpu.mig_profile}; this machine has {slices}"
        if pod.cpu_milli > node.cpu_milli:
            return f"asks for {pod.cpu_milli}m CPU; this machine has {node.cpu_milli}m"
        if pod.memory_mib > node.memory_mib:
            return f"asks for {pod.memory_mib} MiB; this machine has {node.memory_mib} MiB"
        return ""

    def cancel(self, pod_keys: Iterable[str]) -> list[str]:
        """Stop these pods (running) or forget them (waiting); each comes back ``PodDeleted``
        ``DELETED`` (a running one once it has ended). Returns those that were here."""
        state = self.state
        found = []
        for key in pod_keys:
            bound = state.bound.get(key)
            if bound is not None:
                state.stop_pod(bound, PodEnd.DELETED, "cancelled")
                found.append(key)
            elif key in state.workload_of:
                # A gang cannot start without all its pods: the core drops the workload, so
                # does the machine.
                state.events.append(PodDeleted(key, PodEnd.DELETED, "cancelled"))
                state.drop_workload(state.workload_of[key])
                found.append(key)
        self.wake()
        return found

    def recover(self, pods: Mapping[str, Pod]) -> dict[str, RunStatus]:
        """After a restart: find the runs of the state directory again (see the module
        docstring). ``pods``: the pods the caller believes run or wait, by key (a run of
        another pod is stopped: nobody waits for it). Returns what was found of each of them
        that has a run: running, ended or lost (the last two reported as events too)."""
        state = self.state
        found: dict[str, RunStatus] = {}
        latest: dict[str, tuple[int, AdoptedRun]] = {}
        self._starts.finish_gang_starts()
        for run in self.supervisor.adopt():
            self._recover_completion(run)
            key = run.labels.get("pod", "")
            attempt = int(run.labels.get("attempt", "0"))
            if key not in latest or latest[key][0] < attempt:
                latest[key] = (attempt, run)
        for key, (_, run) in latest.items():
            if key not in pods:
                if run.status is RunStatus.RUNNING:
                    log.warning("run %s of unknown pod %s: stopping it", run.run_id, key)
                    self.supervisor.stop(run.run_id, self.grace_s)
                continue
            found[key] = run.status
            if not {"placement", "workload", "rank"} <= set(run.labels):
                if run.end is not None:  # not a run of this machine's: its end as it is
                    state.events.append(deleted_event(key, run.end, None))
                continue
            bound = recovered_bound(pods[key], run)
            counted = state.recovered_counts.get(bound.workload, RunCounts())
            state.recovered_counts[bound.workload] = counted.most(RunCounts.of(run.labels))
            if run.status is RunStatus.RUNNING:
                state.bound[key] = bound
                state.by_run[run.run_id] = key
                if run.labels.get("port", "").isdigit():
                    self.ports.hold(bound.workload, int(run.labels["port"]))
            elif run.end is not None:
                state.recovered_ends[key] = (bound, run.end)
        return found

    def end_taken_in(self, pod_key: str) -> bool:
        """Whether the run of ``pod_key`` found ended at :meth:`recover` had been stopped
        (evicted, placed again, to start again): a pod the caller records waiting has had that
        end taken in before the restart (its ``Preempted``, say), and is not told it again."""
        found = self.state.recovered_ends.get(pod_key)
        return found is not None and (found[0].stopping is not None or found[0].restarting)

    def _recover_completion(self, run: AdoptedRun) -> None:
        """Count a run found at a restart that succeeded (not stopped) as its completion done."""
        completion, workload = run.labels.get("completion"), run.labels.get("workload")
        end = run.end
        if completion is None or workload is None or end is None or run.stop_why is not None:
            return
        if end.succeeded:
            self.state.recovered_done.setdefault(workload, set()).add(int(completion))

    # ----------------------------------------------------------------------------- protocol
    def list_state(self) -> ClusterState:
        # A pod waiting to be started again with its gang holds its GPUs too.
        running = [
            (b.pod, b.placement)
            for b in self.state.bound.values()
            if b.run_id is not None or b.restarting
        ]
        return ClusterState(nodes=(self.node,), running=tuple(running))

    def poll_events(self) -> Sequence[ClusterEvent]:
        # Ends found at a restart whose workload was not resumed: reported as they were.
        state = self.state
        for key, (bound, end) in state.recovered_ends.items():
            state.events.append(deleted_event(key, end, bound.stopping))
        state.recovered_ends.clear()
        self._ends.restart_due()
        self._ends.enforce_deadlines()
        for end in self.supervisor.poll():
            self._ends.ended(end)
        events, state.events = state.events, []
        return events

    def apply(self, actions: Sequence[Action]) -> None:
        state = self.state
        for action in actions:
            if isinstance(action, Bind):
                self._starts.bind(action.pod, action.placement)
            elif isinstance(action, Evict):
                bound = state.bound.get(action.pod.key)
                if bound is not None:
                    state.stop_pod(bound, PodEnd.EVICTED, action.reason)
            elif isinstance(action, MarkUnschedulable):
                self.unschedulable[action.pod.key] = action.message

    def wait(self, deadline: float = math.inf) -> None:
        state = self.state
        if state.events or state.stopped:
            return
        now = self.clock.now()
        due = min(self._ends.next_deadline(), self._ends.next_restart())
        seconds = min(deadline - now, MAX_SLEEP_S, due - now)
        self.supervisor.wait(max(0.0, seconds))

    @property
    def done(self) -> bool:
        return self.state.stopped

    def wake(self) -> None:
        """Cut a :meth:`wait` short (thread-safe)."""
        self.supervisor.wake()

    def stop(self) -> None:
        """The server stops: the loop ends; the processes run on."""
        self.state.stopped = True
        self.wake()

    def close(self) -> None:
        self.supervisor.close()

    def demote(self, pod_keys: Iterable[str], reason: str) -> bool:
        """Lower the workload of these running pods to preemptible at the lowest priority
        (``WorkloadDemoted`` naming the first that runs, for the core). False when none runs."""
        running = next((k for k in pod_keys if self.run_of(k) is not None), None)
        if running is None:
            return False
        self.state.events.append(WorkloadDemoted(running, reason))
        self.wake()
        return True

    def release(self, workload: Workload) -> bool:
        """The owner of a held workload changed it (removed scheduling gates, resumed it): it
        is kept in its new form and the core is told (``WorkloadReleased``). False when it is
        not here."""
        state = self.state
        gang = state.gangs.get(workload.key)
        if gang is None:
            return False
        gang.workload = workload
        state.events.append(WorkloadReleased(workload))
        self.wake()
        return True

    def set_gpu_health(self, unhealthy: Mapping[int, str]) -> bool:
        """Exactly the GPUs ``unhealthy`` (index: why) are withdrawn from scheduling from now
        on (``DeviceHealthChanged`` for the core; what runs on them runs on). False: no
        change."""
        node = with_gpu_health(self.node, unhealthy)
        if node is self.node:
            return False
        self.node = node
        sick = tuple(sorted(unhealthy))
        self.state.events.append(
            DeviceHealthChanged(node.name, sick, tuple((i, unhealthy[i]) for i in sick))
        )
        self.wake()
        return True

    # ----------------------------------------------------------------------------- queries
    def run_of(self, pod_key: str) -> str | None:
        """The run of a pod that runs (None otherwise): for its logs and process."""
        bound = self.state.bound.get(pod_key)
        return None if bound is None else bound.run_id

    def spec_of(self, pod_key: str) -> ProcessSpec | None:
        """The process submitted for a pod (None: no such pod here)."""
        state = self.state
        gang = state.gangs.get(state.workload_of.get(pod_key, ""))
        return None if gang is None else gang.specs.get(pod_key)

    def runs_of(self, pod_key: str) -> list[str]:
        """Every run of a pod, running or ended, first attempt first (its logs are kept)."""
        namespace, _, name = pod_key.partition("/")
        prefix = f"{namespace}_{name}_"
        attempts = [
            int(entry[len(prefix) :])
            for entry in os.listdir(self.supervisor.runs_dir)
            if entry.startswith(prefix) and entry[len(prefix) :].isdigit()
        ]
        return [f"{prefix}{attempt}" for attempt in sorted(attempts)]

    def failures_of(self, workload_key: str) -> int:
        """The failed runs counted against the workload's backoff limit so far (before it is
        resumed, those its runs counted before the restart; once over, its last count)."""
        gang = self.state.gangs.get(workload_key)
        if gang is None:
            return self._counts_of(workload_key).failures
        return gang.failures

    def failed_indexes_of(self, workload_key: str) -> list[int]:
        """An Indexed Job's indexes that failed for good so far, in order (as
        :meth:`failures_of`, kept when it is over)."""
        gang = self.state.gangs.get(workload_key)
        if gang is None:
            return list(self._counts_of(workload_key).failed_indexes)
        return sorted(gang.failed_indexes)

    def _counts_of(self, workload_key: str) -> RunCounts:
        """What a workload not registered counted: before it is resumed, or when it ended."""
        state = self.state
        found = state.recovered_counts.get(workload_key)
        return found if found is not None else state.final_counts.get(workload_key, RunCounts())

    def backing_off(self, pod_key: str) -> bool:
        """Whether the pod's gang waits out the back-off before its restart in place (the
        kubelet's ``CrashLoopBackOff``)."""
        state = self.state
        gang = state.gangs.get(state.workload_of.get(pod_key, ""))
        return gang is not None and gang.restart_at is not None and pod_key in state.bound

    def completions_done(self, workload_key: str) -> int:
        """The Job completions of the workload done so far (0 if gone)."""
        gang = self.state.gangs.get(workload_key)
        return 0 if gang is None else len(gang.done)

    def restarts_of(self, workload_key: str) -> int:
        """The restarts in place (its restart policy's) of the workload so far (0 if gone;
        before it is resumed, those its runs counted before the restart)."""
        state = self.state
        gang = state.gangs.get(workload_key)
        if gang is None:
            return state.recovered_counts.get(workload_key, RunCounts()).restarts
        return gang.restarts

    @property
    def waiting(self) -> dict[str, Pod]:
        """The pods submitted and not bound, by key."""
        state = self.state
        return {
            pod.key: pod
            for gang in state.gangs.values()
            for pod in gang.workload.pods
            if pod.key not in state.bound
        }
