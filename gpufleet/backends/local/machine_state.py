"""What the local machine holds, and how it lets go of it.

Owns :class:`MachineState`, the state that :class:`~.machine.LocalMachine` and its parts
(:class:`~.gang_starts.GangStarts`, :class:`~.gang_ends.GangEnds`) are given and share: its
settings (inventory, node, grace period, supervisor, clock, ports...), its books (the
workloads' gangs, the pods bound here and their runs, the events to report, what a restart
found), and the bookkeeping every part shares: stopping a pod's run and why
(:meth:`~MachineState.stop_pod`, or to start it again with its gang), forgetting a pod once its
run ended, dropping a workload none of which holds a place any more (its counts kept for its
job's row). Also :class:`WallClock`, the machine's clock, and :func:`gang_counts`. It starts
nothing (:mod:`.gang_starts`) and decides nothing about ends (:mod:`.gang_ends`).
"""

from __future__ import annotations

import time
from pathlib import Path

from gpufleet.backends.local.cgroups import Hierarchy
from gpufleet.backends.local.gangs import RESTARTING, BoundPod, Gang
from gpufleet.backends.local.node import machine_node
from gpufleet.backends.local.ports import PortBook
from gpufleet.backends.local.restarts import CrashBackoff, RunCounts
from gpufleet.backends.local.supervisor import DEFAULT_GRACE_S, RunEnd, Supervisor
from gpufleet.model import Node
from gpufleet.model.events import ClusterEvent, PodDeleted, PodEnd
from gpufleet.model.inventory import NodeInventory


class WallClock:
    """Seconds since the epoch: times that mean the same after a restart."""

    def now(self) -> float:
        return time.time()


def gang_counts(gang: Gang) -> RunCounts:
    """The gang's history as its runs keep it."""
    return RunCounts(
        gang.failures, gang.restarts, gang.streak, gang.deadline_at,
        tuple(sorted(gang.index_failures.items())), tuple(sorted(gang.failed_indexes)),
    )  # fmt: skip


class MachineState:
    """The local machine's state and its shared bookkeeping (see the module docstring)."""

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
        #: The events to report at the next poll.
        self.events: list[ClusterEvent] = []
        #: The workloads submitted (and not over), by workload key.
        self.gangs: dict[str, Gang] = {}
        #: The workload of each pod submitted, by pod key.
        self.workload_of: dict[str, str] = {}
        #: The pods bound here (running, stopping, backing off or to start again), by pod key.
        self.bound: dict[str, BoundPod] = {}
        #: The pod of each current run, by run id.
        self.by_run: dict[str, str] = {}
        #: What the runs counted before a restart (failures, restarts, the time limit), by
        #: workload key, until it is registered again.
        self.recovered_counts: dict[str, RunCounts] = {}
        #: Runs that ended while the server was down, by pod key, until their workload is
        #: resumed (then taken in as if the server had been up) or the next poll.
        self.recovered_ends: dict[str, tuple[BoundPod, RunEnd]] = {}
        #: The Job completions that succeeded before a restart, by workload key.
        self.recovered_done: dict[str, set[int]] = {}
        #: What the runs of a workload counted when it was over (for its job's row).
        self.final_counts: dict[str, RunCounts] = {}
        #: Why each pod waits, as the core last said (``MarkUnschedulable``).
        self.unschedulable: dict[str, str] = {}
        #: The server stopped: the loop ends (the processes run on).
        self.stopped = False

    def stop_pod(self, bound: BoundPod, end: PodEnd, reason: str) -> None:
        """Stop the pod's run for good (``end``, ``reason`` kept with it); one not running is
        forgotten and reported deleted at once."""
        if bound.stopping is not None:
            return
        bound.stopping = (end, reason)
        if bound.run_id is None:  # bound, its gang not started (or backing off): nothing runs
            self.forget(bound.pod.key)
            self.events.append(PodDeleted(bound.pod.key, end, reason))
            if end is not PodEnd.EVICTED:
                self.drop_if_over(bound.workload)
            return
        self.supervisor.stop(bound.run_id, self.grace_s, {"end": end.value, "reason": reason})

    def stop_to_restart(self, bound: BoundPod) -> None:
        """Stop a gang member to start it again with its gang (or place it again)."""
        if bound.stopping is not None or bound.restarting:
            return
        bound.restarting = True
        if bound.run_id is not None:
            self.supervisor.stop(bound.run_id, self.grace_s, {"end": RESTARTING})

    def holding(self, workload_key: str) -> list[BoundPod]:
        """The gang's members that hold their place (running, stopping, or to start again)."""
        return [b for b in self.bound.values() if b.workload == workload_key]

    def forget(self, key: str) -> None:
        """The pod no longer holds its place (its gang's port freed with its last member)."""
        bound = self.bound.pop(key, None)
        if bound is None:
            return
        if bound.run_id is not None:
            self.by_run.pop(bound.run_id, None)
        gang = self.gangs.get(bound.workload)
        if gang is not None:
            gang.bound.discard(key)
        if not self.holding(bound.workload):  # none of the gang runs: its port is free
            self.ports.release(bound.workload)

    def drop_if_over(self, workload_key: str) -> None:
        """Forget the workload if none of it holds a place any more."""
        if not self.holding(workload_key):
            self.drop_workload(workload_key)

    def drop_workload(self, workload_key: str) -> None:
        """Forget the workload and its pods (its counts kept for its job's row)."""
        self.ports.release(workload_key)
        gang = self.gangs.pop(workload_key, None)
        if gang is None:
            return
        self.final_counts[workload_key] = gang_counts(gang)
        for pod in gang.workload.pods:
            self.workload_of.pop(pod.key, None)
            self.unschedulable.pop(pod.key, None)
