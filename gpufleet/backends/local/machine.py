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
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.backends.local.cgroups import Hierarchy, Limits
from gpufleet.backends.local.devices_env import placement_env, rendezvous_env
from gpufleet.backends.local.gangs import (
    RESTARTING,
    BoundPod,
    Gang,
    array_env,
    deleted_event,
    ended_at,
    part,
    placement_from_text,
    placement_to_text,
    places_free,
    recovered_bound,
)
from gpufleet.backends.local.node import machine_node
from gpufleet.backends.local.ports import PortBook
from gpufleet.backends.local.private_dev import gpu_nodes
from gpufleet.backends.local.restarts import CrashBackoff, RunCounts, restarts_after
from gpufleet.backends.local.run_state import make_private_dir, read_json, write_json
from gpufleet.backends.local.state_modes import (
    PASSAGE_MODE,
    TENANT_ROOT_MODE,
    TENANTS_DIR,
    prepare_state_dir,
)
from gpufleet.backends.local.supervisor import (
    DEFAULT_GRACE_S,
    AdoptedRun,
    RunEnd,
    RunStatus,
    Supervisor,
)
from gpufleet.control.backend import ClusterState
from gpufleet.devices.visibility import DeviceNotFoundError
from gpufleet.model import Node, Placement, Pod, Workload
from gpufleet.model.actions import Action, Bind, Evict, MarkUnschedulable
from gpufleet.model.events import (
    BindFailed,
    ClusterEvent,
    DeviceHealthChanged,
    JobEnded,
    PodBound,
    PodDeleted,
    PodEnd,
    PodReady,
    PodRestarted,
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
#: The reason Kubernetes gives a Pod or Job failed for its ``activeDeadlineSeconds``.
DEADLINE_EXCEEDED = "DeadlineExceeded"
#: The reason Kubernetes gives a Job failed for more failed pods than its ``backoffLimit``.
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
_TENANT = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
#: The variable that gives an Indexed Job's pod its completion's index, as Kubernetes sets it.
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
#: The reasons Kubernetes gives an Indexed Job with ``backoffLimitPerIndex`` failed: more
#: failed indexes than its ``maxFailedIndexes``, or some failed when all were through.
MAX_FAILED_INDEXES_EXCEEDED = "MaxFailedIndexesExceeded"
FAILED_INDEXES = "FailedIndexes"


@dataclass(slots=True)
class PreparedRun:
    """A run about to start: its id, its process (its variables laid over), what it keeps
    with it, when it starts, its Job completion and its time limit."""

    run_id: str
    spec: ProcessSpec
    labels: dict[str, str]
    started_at: float
    completion: int | None
    deadline_at: float | None = None


class SubmitRefusedError(ValueError):
    """A workload the machine cannot run (nothing of it is submitted)."""


class WallClock:
    """Seconds since the epoch: times that mean the same after a restart."""

    def now(self) -> float:
        return time.time()


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
        self.inventory = inventory
        self.state_dir = Path(state_dir)
        self.node = node or machine_node(inventory)
        self.mps = mps
        self.grace_s = grace_s
        self.crash_backoff = crash_backoff or CrashBackoff()
        self.supervisor = supervisor or Supervisor(
            self.state_dir,
            allow_root=allow_root,
            shared_proc=shared_proc,
            cgroups=cgroups,
            private_dev=private_dev,
        )
        #: Where this machine's GPU device nodes are (``/dev``; the fake GPUs' directory).
        self.device_dir = device_dir
        self.clock = WallClock()
        #: The rendezvous port each live gang holds (never handed to another meanwhile).
        self.ports = PortBook()
        self._events: list[ClusterEvent] = []
        self._gangs: dict[str, Gang] = {}
        self._workload_of: dict[str, str] = {}
        self._bound: dict[str, BoundPod] = {}
        self._by_run: dict[str, str] = {}
        #: What the runs counted before a restart (failures, restarts, the time limit), by
        #: workload key, until it is registered again.
        self._recovered_counts: dict[str, RunCounts] = {}
        #: Runs that ended while the server was down, by pod key, until their workload is
        #: resumed (then taken in as if the server had been up) or the next poll.
        self._recovered_ends: dict[str, tuple[BoundPod, RunEnd]] = {}
        #: The Job completions that succeeded before a restart, by workload key.
        self._recovered_done: dict[str, set[int]] = {}
        #: What the runs of a workload counted when it was over (for its job's row).
        self._final_counts: dict[str, RunCounts] = {}
        #: Why each pod waits, as the core last said (``MarkUnschedulable``).
        self.unschedulable: dict[str, str] = {}
        self._stopped = False

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
        self._events.append(WorkloadAdded(workload))
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
        self.check(workload, specs)
        self._register(workload, specs)
        gang = self._gangs[workload.key]
        gang.succeeded.update(succeeded)
        if gang.backoff_limit_per_index is not None:
            # A pod whose index failed for good (the Job going on) is through: it runs no more.
            gang.succeeded.update(failed)
            failed = ()
        for pod in waiting:  # its last run's end was taken in before the restart
            self._recovered_ends.pop(pod.key, None)
        failed_before = sorted(failed, key=lambda k: self._rank(gang, k))
        if failed_before:
            gang.failed_for_good = f"{failed_before[0]} of its gang failed"
            for bound in self._holding(workload.key):
                self._stop(bound, PodEnd.FAILED, gang.failed_for_good)
        ended = [
            self._recovered_ends.pop(p.key) for p in workload.pods if p.key in self._recovered_ends
        ]
        for bound, end in ended:
            self._bound[bound.pod.key] = bound
            self._by_run[end.run_id] = bound.pod.key
        for bound in self._holding(workload.key):
            if bound.completion is not None:
                gang.completion_of[bound.pod.key] = bound.completion
        # In the order they ended (a lost run last: when it went is not known).
        ended.sort(key=lambda item: (ended_at(item[1]), item[0].rank))
        for _, end in ended:
            self._ended(end)
        if waiting and gang.failed_for_good is not None:
            for pod in waiting:
                self._events.append(PodDeleted(pod.key, PodEnd.FAILED, gang.failed_for_good))
            self._drop_if_over(workload.key)
        elif waiting and self._holding(workload.key):
            # A gang starts whole: what still runs of it is stopped, and it is placed again.
            gang.place_again = True
            for bound in self._holding(workload.key):
                self._stop_to_restart(bound)
            self._gang_down(gang)
        elif waiting:
            keys = {pod.key for pod in waiting}
            waiting_part = part(workload, tuple(p for p in workload.pods if p.key in keys))
            self._events.append(WorkloadAdded(waiting_part))
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
        if workload.key in self._gangs:
            raise SubmitRefusedError(f"workload {workload.key} was submitted already")

    def _rank(self, gang: Gang, pod_key: str) -> int:
        return next((i for i, p in enumerate(gang.workload.pods) if p.key == pod_key), -1)

    def _register(self, workload: Workload, specs: Mapping[str, ProcessSpec]) -> None:
        counts = self._recovered_counts.pop(workload.key, RunCounts())
        self._final_counts.pop(workload.key, None)
        self._gangs[workload.key] = Gang(
            workload, dict(specs), failures=counts.failures, deadline_at=counts.deadline_at,
            restarts=counts.restarts, streak=counts.streak,
            done=self._recovered_done.pop(workload.key, set()),
            index_failures=dict(counts.index_failures), failed_indexes=set(counts.failed_indexes),
        )  # fmt: skip
        for pod in workload.pods:
            self._workload_of[pod.key] = workload.key

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
        found = []
        for key in pod_keys:
            bound = self._bound.get(key)
            if bound is not None:
                self._stop(bound, PodEnd.DELETED, "cancelled")
                found.append(key)
            elif key in self._workload_of:
                # A gang cannot start without all its pods: the core drops the workload, so
                # does the machine.
                self._events.append(PodDeleted(key, PodEnd.DELETED, "cancelled"))
                self._drop_workload(self._workload_of[key])
                found.append(key)
        self.wake()
        return found

    def recover(self, pods: Mapping[str, Pod]) -> dict[str, RunStatus]:
        """After a restart: find the runs of the state directory again (see the module
        docstring). ``pods``: the pods the caller believes run or wait, by key (a run of
        another pod is stopped: nobody waits for it). Returns what was found of each of them
        that has a run: running, ended or lost (the last two reported as events too)."""
        found: dict[str, RunStatus] = {}
        latest: dict[str, tuple[int, AdoptedRun]] = {}
        self._finish_gang_starts()
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
                    self._events.append(deleted_event(key, run.end, None))
                continue
            bound = recovered_bound(pods[key], run)
            counted = self._recovered_counts.get(bound.workload, RunCounts())
            self._recovered_counts[bound.workload] = counted.most(RunCounts.of(run.labels))
            if run.status is RunStatus.RUNNING:
                self._bound[key] = bound
                self._by_run[run.run_id] = key
                if run.labels.get("port", "").isdigit():
                    self.ports.hold(bound.workload, int(run.labels["port"]))
            elif run.end is not None:
                self._recovered_ends[key] = (bound, run.end)
        return found

    def end_taken_in(self, pod_key: str) -> bool:
        """Whether the run of ``pod_key`` found ended at :meth:`recover` had been stopped
        (evicted, placed again, to start again): a pod the caller records waiting has had that
        end taken in before the restart (its ``Preempted``, say), and is not told it again."""
        found = self._recovered_ends.get(pod_key)
        return found is not None and (found[0].stopping is not None or found[0].restarting)

    def _recover_completion(self, run: AdoptedRun) -> None:
        """Count a run found at a restart that succeeded (not stopped) as its completion done."""
        completion, workload = run.labels.get("completion"), run.labels.get("workload")
        end = run.end
        if completion is None or workload is None or end is None or run.stop_why is not None:
            return
        if end.succeeded:
            self._recovered_done.setdefault(workload, set()).add(int(completion))

    # ----------------------------------------------------------------------------- protocol
    def list_state(self) -> ClusterState:
        # A pod waiting to be started again with its gang holds its GPUs too.
        running = [
            (b.pod, b.placement)
            for b in self._bound.values()
            if b.run_id is not None or b.restarting
        ]
        return ClusterState(nodes=(self.node,), running=tuple(running))

    def poll_events(self) -> Sequence[ClusterEvent]:
        # Ends found at a restart whose workload was not resumed: reported as they were.
        for key, (bound, end) in self._recovered_ends.items():
            self._events.append(deleted_event(key, end, bound.stopping))
        self._recovered_ends.clear()
        self._restart_due()
        self._enforce_deadlines()
        for end in self.supervisor.poll():
            self._ended(end)
        events, self._events = self._events, []
        return events

    def apply(self, actions: Sequence[Action]) -> None:
        for action in actions:
            if isinstance(action, Bind):
                self._bind(action.pod, action.placement)
            elif isinstance(action, Evict):
                bound = self._bound.get(action.pod.key)
                if bound is not None:
                    self._stop(bound, PodEnd.EVICTED, action.reason)
            elif isinstance(action, MarkUnschedulable):
                self.unschedulable[action.pod.key] = action.message

    def wait(self, deadline: float = math.inf) -> None:
        if self._events or self._stopped:
            return
        now = self.clock.now()
        due = min(self._next_deadline(), self._next_restart())
        seconds = min(deadline - now, MAX_SLEEP_S, due - now)
        self.supervisor.wait(max(0.0, seconds))

    @property
    def done(self) -> bool:
        return self._stopped

    def wake(self) -> None:
        """Cut a :meth:`wait` short (thread-safe)."""
        self.supervisor.wake()

    def stop(self) -> None:
        """The server stops: the loop ends; the processes run on."""
        self._stopped = True
        self.wake()

    def close(self) -> None:
        self.supervisor.close()

    def demote(self, pod_keys: Iterable[str], reason: str) -> bool:
        """Lower the workload of these running pods to preemptible at the lowest priority
        (``WorkloadDemoted`` naming the first that runs, for the core). False when none runs."""
        running = next((k for k in pod_keys if self.run_of(k) is not None), None)
        if running is None:
            return False
        self._events.append(WorkloadDemoted(running, reason))
        self.wake()
        return True

    def release(self, workload: Workload) -> bool:
        """The owner of a held workload changed it (removed scheduling gates, resumed it): it
        is kept in its new form and the core is told (``WorkloadReleased``). False when it is
        not here."""
        gang = self._gangs.get(workload.key)
        if gang is None:
            return False
        gang.workload = workload
        self._events.append(WorkloadReleased(workload))
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
        self._events.append(
            DeviceHealthChanged(node.name, sick, tuple((i, unhealthy[i]) for i in sick))
        )
        self.wake()
        return True

    # ----------------------------------------------------------------------------- queries
    def run_of(self, pod_key: str) -> str | None:
        """The run of a pod that runs (None otherwise): for its logs and process."""
        bound = self._bound.get(pod_key)
        return None if bound is None else bound.run_id

    def spec_of(self, pod_key: str) -> ProcessSpec | None:
        """The process submitted for a pod (None: no such pod here)."""
        gang = self._gangs.get(self._workload_of.get(pod_key, ""))
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
        gang = self._gangs.get(workload_key)
        if gang is None:
            return self._counts_of(workload_key).failures
        return gang.failures

    def failed_indexes_of(self, workload_key: str) -> list[int]:
        """An Indexed Job's indexes that failed for good so far, in order (as
        :meth:`failures_of`, kept when it is over)."""
        gang = self._gangs.get(workload_key)
        if gang is None:
            return list(self._counts_of(workload_key).failed_indexes)
        return sorted(gang.failed_indexes)

    def _counts_of(self, workload_key: str) -> RunCounts:
        """What a workload not registered counted: before it is resumed, or when it ended."""
        found = self._recovered_counts.get(workload_key)
        return found if found is not None else self._final_counts.get(workload_key, RunCounts())

    def backing_off(self, pod_key: str) -> bool:
        """Whether the pod's gang waits out the back-off before its restart in place (the
        kubelet's ``CrashLoopBackOff``)."""
        gang = self._gangs.get(self._workload_of.get(pod_key, ""))
        return gang is not None and gang.restart_at is not None and pod_key in self._bound

    def completions_done(self, workload_key: str) -> int:
        """The Job completions of the workload done so far (0 if gone)."""
        gang = self._gangs.get(workload_key)
        return 0 if gang is None else len(gang.done)

    def restarts_of(self, workload_key: str) -> int:
        """The restarts in place (its restart policy's) of the workload so far (0 if gone;
        before it is resumed, those its runs counted before the restart)."""
        gang = self._gangs.get(workload_key)
        if gang is None:
            return self._recovered_counts.get(workload_key, RunCounts()).restarts
        return gang.restarts

    @property
    def waiting(self) -> dict[str, Pod]:
        """The pods submitted and not bound, by key."""
        return {
            pod.key: pod
            for gang in self._gangs.values()
            for pod in gang.workload.pods
            if pod.key not in self._bound
        }

    # ----------------------------------------------------------------------------- binds
    def _bind(self, pod: Pod, placement: Placement) -> None:
        workload_key = self._workload_of.get(pod.key)
        gang = None if workload_key is None else self._gangs.get(workload_key)
        if gang is None:
            self._events.append(BindFailed(pod.key, "no process was submitted for this pod"))
            return
        try:
            placement_env(placement, self.inventory, self.mps)
        except DeviceNotFoundError as error:
            self._events.append(BindFailed(pod.key, f"this machine has no {error}"))
            return
        rank = next(i for i, p in enumerate(gang.workload.pods) if p.key == pod.key)
        self._bound[pod.key] = BoundPod(pod, placement, gang.workload.key, rank)
        self._events.append(PodBound(pod, placement))
        gang.bound.add(pod.key)
        if len(gang.bound) == len(gang.needed):
            self._start_gang(gang)

    def _start_gang(self, gang: Gang, retry: bool = False) -> None:
        """Start the gang's processes, those that have yet to succeed (``retry``: again after
        a failure, where they were; its time limit still counts from the first start, and its
        pods were ready already)."""
        pods = gang.needed
        size = len(gang.workload.pods)
        try:
            port = self.ports.draw(gang.workload.key) if size > 1 else 0
        except OSError as error:
            for pod in pods:
                self._bound.pop(pod.key, None)
                self._events.append(BindFailed(pod.key, str(error)))
            gang.bound.clear()
            return
        started: list[str] = []
        limits = [s.deadline_s for s in gang.specs.values() if s.deadline_s is not None]
        deadline_at = self.clock.now() + min(limits) if limits else None
        if (retry or gang.keep_deadline) and gang.deadline_at is not None:
            deadline_at = gang.deadline_at
        gang.deadline_at, gang.keep_deadline, gang.restart_at = deadline_at, False, None
        record = self._gang_start_path(gang.workload.key)
        try:
            prepared = []
            for pod in pods:
                bound = self._bound[pod.key]
                env = {} if size == 1 else dict(rendezvous_env(bound.rank, size, port))
                prepared.append((bound, self._prepare_run(gang, bound, env)))
            if len(prepared) > 1:  # a restart finds the gang started whole, or not at all
                runs = [{"run_id": r.run_id, "spec": r.spec.to_json(), "labels": r.labels}
                        for _, r in prepared]  # fmt: skip
                write_json(record, {"workload": gang.workload.key, "runs": runs})
            for bound, run in prepared:
                self._launch(bound, run)
                started.append(bound.pod.key)
        except (ValueError, OSError) as error:
            # The gang starts whole or not at all: what started is stopped again.
            for key in started:
                self._stop(self._bound[key], PodEnd.FAILED, f"gang member failed: {error}")
            for other in pods:
                if other.key not in started:
                    self._bound.pop(other.key, None)
                    self._events.append(BindFailed(other.key, str(error)))
            gang.bound.clear()
            if not self._holding(gang.workload.key):
                self.ports.release(gang.workload.key)
            record.unlink(missing_ok=True)
            return
        record.unlink(missing_ok=True)  # started whole: a restart adopts its runs
        gang.bound.clear()
        if not retry:
            self._events.extend(PodReady(key) for key in started)

    def _gang_start_path(self, workload_key: str) -> Path:
        """Where a gang's start is recorded while its members start (a file in the private
        runs directory, which no run's directory is named like)."""
        return self.supervisor.runs_dir / f".gang-start-{workload_key.replace('/', '_')}.json"

    def _finish_gang_starts(self) -> None:
        """At a restart: a gang whose start was recorded and not finished (the server died
        between two of its members' starts) is started whole now, each member missing started
        as it was to be (its run id, command, rendezvous port), and none started twice."""
        for path in sorted(self.supervisor.runs_dir.glob(".gang-start-*.json")):
            record = read_json(path) or {}
            for run in record.get("runs") or []:
                run_id = str(run.get("run_id", ""))
                if not run_id or self.supervisor.run_dir(run_id).exists():
                    continue
                try:
                    labels = {str(k): str(v) for k, v in dict(run["labels"]).items()}
                    spec = ProcessSpec.from_json(run["spec"])
                    confinement = self._confinement(spec, labels["placement"])
                    self.supervisor.start(run_id, spec, labels, self.grace_s, *confinement)
                except (KeyError, TypeError, ValueError, OSError) as error:
                    log.error("run %s of an unfinished gang start cannot start: %s", run_id, error)
                else:
                    log.warning("run %s: started now, its gang's start was cut short", run_id)
            path.unlink(missing_ok=True)

    def _start_run(self, gang: Gang, bound: BoundPod, env: dict[str, str]) -> None:
        """Start one run of a bound pod of the gang (:meth:`_prepare_run`, then launched)."""
        self._launch(bound, self._prepare_run(gang, bound, env))

    def _prepare_run(self, gang: Gang, bound: BoundPod, env: dict[str, str]) -> PreparedRun:
        """One run of a bound pod of the gang, to start: ``env`` and its devices' variables
        laid over its process's, its Job completion's index given (an Indexed Job's), and
        what a restarted server needs kept with it (see the module docstring)."""
        pod = bound.pod
        completion = gang.completion_of.get(pod.key)
        if completion is None:
            completion = gang.next_completion()
            if completion is not None:
                gang.completion_of[pod.key] = completion
        env.update(placement_env(bound.placement, self.inventory, self.mps))
        spec = gang.specs[pod.key]
        if gang.indexed and completion is not None:
            env[JOB_COMPLETION_INDEX] = str(completion)
            if spec.array_first is not None:
                env.update(array_env(spec.array_first, completion, gang.completions))
        run_id = self._next_run_id(pod)
        started_at = self.clock.now()
        labels = {
            "pod": pod.key,
            "workload": gang.workload.key,
            "rank": str(bound.rank),
            "attempt": run_id.rsplit("_", 1)[1],
            "placement": placement_to_text(bound.placement),
            "started_at": repr(started_at),
            **self._counts(gang).labels(),
        }
        if completion is not None:
            labels["completion"] = str(completion)
        port = self.ports.port_of(gang.workload.key)
        if port is not None and len(gang.workload.pods) > 1:
            labels["port"] = str(port)  # held again by a restarted server while it runs
        run = PreparedRun(run_id, spec.with_env(env), labels, started_at, completion)
        run.deadline_at = gang.deadline_at
        return run

    def _launch(self, bound: BoundPod, run: PreparedRun) -> None:
        """Start a prepared run of ``bound`` and take it as its current run."""
        confinement = self._confinement(run.spec, run.labels["placement"])
        self.supervisor.start(run.run_id, run.spec, run.labels, self.grace_s, *confinement)
        bound.run_id, bound.completion = run.run_id, run.completion
        bound.deadline_at, bound.started_at = run.deadline_at, run.started_at
        self._by_run[run.run_id] = bound.pod.key

    def _confinement(
        self, spec: ProcessSpec, placement_text: str
    ) -> tuple[Limits, list[tuple[str, str]]]:
        """A run's cgroup limits and the device nodes of its placement (its labels' text)."""
        placement = placement_from_text(placement_text)
        gpus = [*placement.gpu_indices, *(gpu for gpu, _ in placement.mig_slices)]
        nodes = gpu_nodes(gpus, self.device_dir, mig=bool(placement.mig_slices))
        return Limits(spec.cpu_limit_milli, spec.memory_limit_bytes, None), nodes

    def _run_next_completion(
        self, gang: Gang, bound: BoundPod, completion: int, retried: str = ""
    ) -> bool:
        """A pod whose completion succeeded runs the next one in place, at once (as the
        simulator's Job does: its place and quota stay taken); ``retried``: it runs
        ``completion`` again, or the next after it failed, saying so (a failure, not a
        completion done). False if it cannot start."""
        self._by_run.pop(bound.run_id or "", None)
        gang.completion_of[bound.pod.key] = completion
        try:
            self._start_run(gang, bound, {})
        except (ValueError, OSError) as error:
            log.error("pod %s: completion %d cannot start: %s", bound.pod.key, completion, error)
            gang.completion_of.pop(bound.pod.key, None)
            return False
        if retried:
            self._events.append(PodRestarted(bound.pod.key, retried))
            return True
        message = f"runs completion {completion} ({len(gang.done)} of {gang.completions} done)"
        self._events.append(PodRestarted(bound.pod.key, message, completion))
        return True

    @staticmethod
    def _counts(gang: Gang) -> RunCounts:
        """The gang's history as its runs keep it."""
        return RunCounts(
            gang.failures, gang.restarts, gang.streak, gang.deadline_at,
            tuple(sorted(gang.index_failures.items())), tuple(sorted(gang.failed_indexes)),
        )  # fmt: skip

    def _next_run_id(self, pod: Pod) -> str:
        prefix = f"{pod.namespace}_{pod.name}_"
        attempts = [
            int(name[len(prefix) :])
            for name in os.listdir(self.supervisor.runs_dir)
            if name.startswith(prefix) and name[len(prefix) :].isdigit()
        ]
        return f"{prefix}{max(attempts, default=0) + 1}"

    # ----------------------------------------------------------------------------- deadlines
    def _next_deadline(self) -> float:
        """When the next time limit of a run not yet stopping passes (inf: none)."""
        return min(
            (
                b.deadline_at
                for b in self._bound.values()
                if b.deadline_at is not None and b.stopping is None and b.run_id is not None
            ),
            default=math.inf,
        )

    def _enforce_deadlines(self) -> None:
        """Stop the gangs whose time limit has passed (see the module docstring)."""
        now = self.clock.now()
        if self._next_deadline() > now:
            return
        expired: dict[str, list[BoundPod]] = {}
        for bound in self._bound.values():
            if bound.run_id is None or bound.stopping is not None or bound.deadline_at is None:
                continue
            if bound.deadline_at <= now:
                expired.setdefault(bound.workload, []).append(bound)
        for workload_key, bounds in expired.items():
            first = min(bounds, key=lambda b: b.rank)
            name = workload_key.partition("/")[2] or workload_key
            message = "active longer than its time limit (activeDeadlineSeconds)"
            self._events.append(JobEnded(name, first.pod.key, "Failed", DEADLINE_EXCEEDED, message))
            for bound in list(self._bound.values()):
                if bound.workload == workload_key:
                    self._stop(bound, PodEnd.FAILED, f"{DEADLINE_EXCEEDED}: {message}")

    # ----------------------------------------------------------------------------- ends
    def _stop(self, bound: BoundPod, end: PodEnd, reason: str) -> None:
        if bound.stopping is not None:
            return
        bound.stopping = (end, reason)
        if bound.run_id is None:  # bound, its gang not started (or backing off): nothing runs
            self._forget(bound.pod.key)
            self._events.append(PodDeleted(bound.pod.key, end, reason))
            if end is not PodEnd.EVICTED:
                self._drop_if_over(bound.workload)
            return
        self.supervisor.stop(bound.run_id, self.grace_s, {"end": end.value, "reason": reason})

    def _stop_to_restart(self, bound: BoundPod) -> None:
        """Stop a gang member to start it again with its gang (or place it again)."""
        if bound.stopping is not None or bound.restarting:
            return
        bound.restarting = True
        if bound.run_id is not None:
            self.supervisor.stop(bound.run_id, self.grace_s, {"end": RESTARTING})

    def _holding(self, workload_key: str) -> list[BoundPod]:
        """The gang's members that hold their place (running, stopping, or to start again)."""
        return [b for b in self._bound.values() if b.workload == workload_key]

    def _forget(self, key: str) -> None:
        bound = self._bound.pop(key, None)
        if bound is None:
            return
        if bound.run_id is not None:
            self._by_run.pop(bound.run_id, None)
        gang = self._gangs.get(bound.workload)
        if gang is not None:
            gang.bound.discard(key)
        if not self._holding(bound.workload):  # none of the gang runs: its port is free
            self.ports.release(bound.workload)

    def _ended(self, end: RunEnd) -> None:
        key = self._by_run.get(end.run_id)
        if key is None:
            return
        bound = self._bound[key]
        gang = self._gangs.get(bound.workload)
        if (
            bound.stopping is None
            and bound.restarting
            and gang is not None
            and gang.failed_for_good is None
        ):
            self._member_down(gang, bound)  # stopped (or ended) to start again with its gang
            return
        if (
            bound.stopping is None
            and gang is not None
            and gang.failed_for_good is None
            and restarts_after(gang.restart_policy, end.succeeded)
        ):
            self._restart_in_place(gang, bound, end)
            return
        failed = not end.succeeded and bound.stopping is None
        if failed and gang is not None and self._retry_index(gang, bound, end):
            return
        if failed and self._retry(bound, end):
            return
        if end.succeeded and bound.stopping is None and gang is not None:
            done = gang.completion_of.pop(key, None)
            if done is not None:
                gang.done.add(done)
            following = gang.next_completion()
            if following is not None and self._run_next_completion(gang, bound, following):
                return
            gang.succeeded.add(key)
            self._end_with_failed_indexes(gang, key)
        self._forget(key)
        self._events.append(deleted_event(key, end, bound.stopping))
        if failed:
            why = f"{key} of its gang failed ({end.describe()})"
            for other in self._holding(bound.workload):
                self._stop(other, PodEnd.FAILED, why)
        evicted = bound.stopping is not None and bound.stopping[0] is PodEnd.EVICTED
        if not evicted:
            # It is over (an evicted workload waits to be bound again, with its processes).
            self._drop_if_over(bound.workload)
        if gang is None or bound.workload not in self._gangs:
            return
        if gang.place_again:  # the rest of its gang may wait for it to be placed again
            self._gang_down(gang)
        elif evicted and bound.requeue and not self._holding(bound.workload):
            self._events.append(WorkloadAdded(part(gang.workload, gang.needed)))

    def _drop_if_over(self, workload_key: str) -> None:
        """Forget the workload if none of it holds a place any more."""
        if not self._holding(workload_key):
            self._drop_workload(workload_key)

    def _retry(self, bound: BoundPod, end: RunEnd) -> bool:
        """A run of ``bound`` failed: count the failure and start its gang again when all
        have ended (see the module docstring). False when it is not retried (no backoff
        limit, past it, or its gang failed for good: the Job has failed)."""
        gang = self._gangs.get(bound.workload)
        limit = None if gang is None else gang.backoff_limit
        if gang is None or limit is None or gang.failed_for_good is not None:
            return False
        key = bound.pod.key
        gang.failures += 1
        if gang.failures > limit:
            name = bound.workload.partition("/")[2] or bound.workload
            message = f"Job has reached the specified backoff limit ({limit})"
            self._events.append(JobEnded(name, key, "Failed", BACKOFF_LIMIT_EXCEEDED, message))
            return False
        for other in self._holding(bound.workload):
            if other is not bound:
                self._stop_to_restart(other)
        message = (
            f"is started again ({end.describe()}; failure {gang.failures} of backoffLimit {limit})"
        )
        self._events.append(PodRestarted(key, message))
        bound.restarting = True
        self._member_down(gang, bound)
        return True

    def _retry_index(self, gang: Gang, bound: BoundPod, end: RunEnd) -> bool:
        """A run of an Indexed Job with a limit per index failed: retry its index alone, or
        fail the index and go on (see the module docstring). True when that is all; False
        when the Job's own rules take it from here (no limit per index, or the Job failed)."""
        per_index, completion = gang.backoff_limit_per_index, bound.completion
        if per_index is None or completion is None or gang.failed_for_good is not None:
            return False
        key, name = bound.pod.key, bound.workload.partition("/")[2] or bound.workload
        gang.failures += 1
        limit = gang.backoff_limit
        if limit is not None and gang.failures > limit:
            message = f"Job has reached the specified backoff limit ({limit})"
            gang.failed_for_good = message
            self._events.append(JobEnded(name, key, "Failed", BACKOFF_LIMIT_EXCEEDED, message))
            return False
        count = gang.index_failures[completion] = gang.index_failures.get(completion, 0) + 1
        if count <= per_index:
            retried = (
                f"runs index {completion} again ({end.describe()}; failure {count} of "
                f"backoffLimitPerIndex {per_index})"
            )
            if self._run_next_completion(gang, bound, completion, retried):
                return True
        gang.failed_indexes.add(completion)
        gang.completion_of.pop(key, None)
        most = gang.max_failed_indexes
        if most is not None and len(gang.failed_indexes) > most:
            message = f"Job has exceeded the maximum of {most} failed indexes"
            gang.failed_for_good = message
            self._events.append(JobEnded(name, key, "Failed", MAX_FAILED_INDEXES_EXCEEDED, message))
            return False
        following = gang.next_completion()
        failed = f"index {completion} failed ({end.describe()}; backoffLimitPerIndex {per_index})"
        if following is not None and self._run_next_completion(
            gang, bound, following, f"{failed}: runs index {following}"
        ):
            return True
        # Nothing left for it to run: it ends, failed; the rest of its gang runs on.
        self._end_with_failed_indexes(gang, key)
        self._forget(key)
        self._events.append(deleted_event(key, end, None))
        self._drop_if_over(bound.workload)
        return True

    def _end_with_failed_indexes(self, gang: Gang, key: str) -> None:
        """The pod ``key`` is through with its indexes: if it is the last of its gang and
        some indexes failed, its Job fails (``FailedIndexes``), before the pod's end."""
        if not gang.failed_indexes or gang.indexes_ended or gang.failed_for_good is not None:
            return
        if any(b.pod.key != key for b in self._holding(gang.workload.key)):
            return
        gang.indexes_ended = True
        name = gang.workload.key.partition("/")[2] or gang.workload.key
        message = f"Job has failed indexes {_listing(gang.failed_indexes)}"
        self._events.append(JobEnded(name, key, "Failed", FAILED_INDEXES, message))

    def _restart_in_place(self, gang: Gang, bound: BoundPod, end: RunEnd) -> None:
        """A run whose restart policy says so has ended: its gang starts again where it is
        after the kubelet's back-off (counted from its end), the restart counted."""
        ended_at = self.clock.now() if end.record is None else end.record.ended_at
        started_at = ended_at if bound.started_at is None else bound.started_at
        if ended_at - started_at >= self.crash_backoff.reset_after_s:
            gang.streak = 0
        delay = self.crash_backoff.delay(gang.streak)
        gang.streak += 1
        gang.restarts += 1
        gang.restart_at = ended_at + delay
        for other in self._holding(bound.workload):
            if other is not bound:
                self._stop_to_restart(other)
        message = (
            f"ended ({end.describe()}) and is restarted in place after a back-off of "
            f"{delay:g}s (restart {gang.restarts}, restartPolicy {gang.restart_policy})"
        )
        self._events.append(PodRestarted(bound.pod.key, message))
        bound.restarting = True
        self._member_down(gang, bound)

    def _next_restart(self) -> float:
        """When the next restart in place is due (inf: none)."""
        due = (g.restart_at for g in self._gangs.values() if g.restart_at is not None)
        return min(due, default=math.inf)

    def _restart_due(self) -> None:
        """Start the gangs whose back-off has passed (those all of whose members ended)."""
        now = self.clock.now()
        for gang in list(self._gangs.values()):
            if gang.restart_at is not None and gang.restart_at <= now:
                gang.restart_at = None
                self._gang_down(gang)

    def _member_down(self, gang: Gang, bound: BoundPod) -> None:
        """A member to start again with its gang has ended: once all have, the gang starts
        again where it was, or, when it cannot (a member has no place, or its GPUs are taken:
        after a restart), is placed again whole."""
        if bound.run_id is not None:
            self._by_run.pop(bound.run_id, None)
        bound.run_id = None
        self._gang_down(gang)

    def _gang_down(self, gang: Gang) -> None:
        """If every member to start again has ended: start or place the gang again."""
        holding = self._holding(gang.workload.key)
        if not holding and gang.place_again:  # its last member was evicted meanwhile
            self._place_again(gang, holding)
            return
        if not holding or gang.restart_at is not None:
            return  # gone (cancelled, evicted), or backing off
        if not all(m.run_id is None and m.stopping is None and m.restarting for m in holding):
            return
        for member in holding:
            member.restarting = False
        placed = all(p.key in self._bound for p in gang.needed)
        others = [b.placement for b in self._bound.values() if b.workload != gang.workload.key]
        free = places_free([m.placement for m in holding], others, self.inventory, self.node.name)
        if gang.place_again or not placed or not free:
            self._place_again(gang, holding)
        else:
            self._start_gang(gang, retry=True)

    def _place_again(self, gang: Gang, holding: Sequence[BoundPod]) -> None:
        """The gang gives its places back and waits to be placed again, whole (those of its
        pods that have yet to succeed), its time limit kept."""
        why = "its gang is placed again"
        for member in holding:
            self._forget(member.pod.key)
            self._events.append(PodDeleted(member.pod.key, PodEnd.REPLACED, why))
        gang.place_again, gang.keep_deadline = False, True
        self._events.append(WorkloadAdded(part(gang.workload, gang.needed)))

    def _drop_workload(self, workload_key: str) -> None:
        self.ports.release(workload_key)
        gang = self._gangs.pop(workload_key, None)
        if gang is None:
            return
        self._final_counts[workload_key] = self._counts(gang)
        for pod in gang.workload.pods:
            self._workload_of.pop(pod.key, None)
            self.unschedulable.pop(pod.key, None)


def _listing(indexes: set[int]) -> str:
    """Indexes as Kubernetes lists them in a Job's message (the first 20, and how many more)."""
    shown = sorted(indexes)
    text = ",".join(str(i) for i in shown[:20])
    return text + (f" and {len(shown) - 20} more" if len(shown) > 20 else "")
