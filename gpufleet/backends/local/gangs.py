"""The local machine's bookkeeping of its workloads: plain data and the pure rules over it.

Owns :class:`BoundPod` (a pod bound to this machine: its placement, its current run, why it is
being stopped, its Job completion) and :class:`Gang` (a workload's processes and its history:
failures against its backoff limit, restarts in place, completions done, an Indexed Job's
failures of each index and its failed indexes), how a pod's run is
found again after a restart (:func:`recovered_bound`, from the labels its run keeps and why it
was being stopped), how an ended run is reported (:func:`deleted_event`), whether a gang's
places are free to start it again there (:func:`places_free`) and the text form of a
placement kept with a run. It starts, stops and schedules nothing: :mod:`.machine` does; what
a Job's end leads to is :mod:`gpufleet.job_controller`'s, asked with the gang's
:attr:`Gang.job_rules` and :attr:`Gang.job_counts`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.backends.local.devices_env import placement_env
from gpufleet.backends.local.supervisor import AdoptedRun, RunEnd
from gpufleet.devices.visibility import DeviceNotFoundError
from gpufleet.job_controller.decisions import JobCounts, JobRules
from gpufleet.model import Placement, Pod, Workload
from gpufleet.model.events import PodDeleted, PodEnd
from gpufleet.model.gpu import MILLI_PER_GPU
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.jobs import RestartPolicy
from gpufleet.model.processes import ProcessSpec

#: Why a run was stopped, kept with it (``stop.json``): to be started again with its gang.
RESTARTING = "restarting"


@dataclass(slots=True)
class BoundPod:
    """A pod bound to this machine, and its current run (None: not started, or to start
    again)."""

    pod: Pod
    placement: Placement
    workload: str
    rank: int
    run_id: str | None = None
    #: Why it is being stopped: the end to report when it has ended.
    stopping: tuple[PodEnd, str] | None = None
    #: When its time limit passes (the clock's seconds), if it has one.
    deadline_at: float | None = None
    #: Stopped (or ended) to be started again with its gang after a member failed.
    restarting: bool = False
    #: When its run started (the clock's seconds; None: not known).
    started_at: float | None = None
    #: Found being evicted at a restart: the scheduler that evicted it is gone, so its
    #: workload is told again (to wait) once it has ended.
    requeue: bool = False
    #: The Job completion its run runs (None: not known).
    completion: int | None = None


@dataclass(slots=True)
class Gang:
    """A workload of this machine: its processes and its history (see the module docstring)."""

    workload: Workload
    specs: Mapping[str, ProcessSpec]
    bound: set[str] = field(default_factory=set)
    #: Its failed runs so far (each counts one against its backoff limit).
    failures: int = 0
    #: When the time limit of its current start passes (kept for a retry).
    deadline_at: float | None = None
    #: Its pods that succeeded (they are not started again with the rest).
    succeeded: set[str] = field(default_factory=set)
    #: Why it failed for good, found at a restart (a member's failure the server recorded).
    failed_for_good: str | None = None
    #: Its members are stopped to be placed again whole (not started again where they were).
    place_again: bool = False
    #: Its next start keeps the time limit of the first (placed again after a failure).
    keep_deadline: bool = False
    #: Its restarts in place (its restart policy's), and those since the back-off was reset.
    restarts: int = 0
    streak: int = 0
    #: When its restart in place is due (the clock's seconds), while it backs off.
    restart_at: float | None = None
    #: Its Job's completions done, and the one each pod runs (or will run again).
    done: set[int] = field(default_factory=set)
    completion_of: dict[str, int] = field(default_factory=dict)
    #: An Indexed Job's failed runs of each index (``backoffLimitPerIndex``), and the indexes
    #: that failed for good (they are not run again).
    index_failures: dict[int, int] = field(default_factory=dict)
    failed_indexes: set[int] = field(default_factory=set)
    #: Its Job ended (failed) for its failed indexes, and was reported so.
    indexes_ended: bool = False

    @property
    def backoff_limit(self) -> int | None:
        limits = [s.backoff_limit for s in self.specs.values() if s.backoff_limit is not None]
        return min(limits) if limits else None

    @property
    def backoff_limit_per_index(self) -> int | None:
        """Its Indexed Job's ``backoffLimitPerIndex`` (None: its failures count as a whole)."""
        given = [s.backoff_limit_per_index for s in self.specs.values()]
        limits = [limit for limit in given if limit is not None]
        return min(limits) if limits and self.indexed else None

    @property
    def max_failed_indexes(self) -> int | None:
        given = [s.max_failed_indexes for s in self.specs.values()]
        limits = [limit for limit in given if limit is not None]
        return min(limits) if limits else None

    @property
    def restart_policy(self) -> RestartPolicy | None:
        return next((s.restart_policy for s in self.specs.values() if s.restart_policy), None)

    @property
    def completions(self) -> int:
        """Its Job's completions (0: it is no Job, and counts none)."""
        given = [s.completions for s in self.specs.values() if s.completions is not None]
        return max(given) if given else 0

    @property
    def indexed(self) -> bool:
        return any(s.indexed for s in self.specs.values())

    def next_completion(self) -> int | None:
        """The lowest completion neither done, failed for good nor run by a pod (None: none is
        left, or it is no Job)."""
        taken = self.done | self.failed_indexes | set(self.completion_of.values())
        return next((i for i in range(self.completions) if i not in taken), None)

    @property
    def job_rules(self) -> JobRules:
        """Its Job's rules, as the Job controller reads them."""
        return JobRules(
            self.backoff_limit,
            self.backoff_limit_per_index,
            self.max_failed_indexes,
            self.completions,
        )

    @property
    def job_counts(self) -> JobCounts:
        """Its Job's counts, as the Job controller reads them (:meth:`take` sets them)."""
        return JobCounts(self.failures, dict(self.index_failures), frozenset(self.failed_indexes))

    def take(self, counts: JobCounts) -> None:
        """Its Job's counts after the Job controller's decision."""
        self.failures = counts.failed
        self.index_failures = dict(counts.index_failures)
        self.failed_indexes = set(counts.failed_indexes)

    @property
    def needed(self) -> tuple[Pod, ...]:
        """Its pods that have yet to succeed: those a start runs."""
        return tuple(p for p in self.workload.pods if p.key not in self.succeeded)


def array_env(first: int, index: int, count: int) -> dict[str, str]:
    """Slurm's job array variables for the run of index ``index`` of ``count`` (the task ids
    run from ``first``), as ``sbatch --array`` sets them."""
    return {
        "SLURM_ARRAY_TASK_ID": str(first + index),
        "SLURM_ARRAY_TASK_MIN": str(first),
        "SLURM_ARRAY_TASK_MAX": str(first + count - 1),
        "SLURM_ARRAY_TASK_COUNT": str(count),
    }


def part(workload: Workload, pods: tuple[Pod, ...]) -> Workload:
    """Some pods of a workload, as a workload to place."""
    return dataclasses.replace(workload, pods=pods, min_member=min(workload.min_member, len(pods)))


def ended_at(end: RunEnd) -> float:
    """When a run ended (a lost run: inf, when it went is not known)."""
    return math.inf if end.record is None else end.record.ended_at


def recovered_bound(pod: Pod, run: AdoptedRun) -> BoundPod:
    """A pod's latest run found at a restart, with why it was being stopped, if it was."""
    labels = run.labels
    deadline_at, started_at = labels.get("deadline_at"), labels.get("started_at")
    completion = labels.get("completion")
    bound = BoundPod(
        pod, placement_from_text(labels["placement"]), labels["workload"], int(labels["rank"]),
        run.run_id, deadline_at=None if deadline_at is None else float(deadline_at),
        started_at=None if started_at is None else float(started_at),
        completion=None if completion is None else int(completion),
    )  # fmt: skip
    why = run.stop_why or {}
    end = why.get("end", "")
    if end == RESTARTING:
        bound.restarting = True
    elif end in {e.value for e in PodEnd}:
        bound.stopping = (PodEnd(end), why.get("reason", ""))
        bound.requeue = bound.stopping[0] is PodEnd.EVICTED
    return bound


def placement_to_text(placement: Placement) -> str:
    """A placement as the text a run keeps in its labels."""
    return json.dumps(
        {
            "node": placement.node,
            "gpu_indices": list(placement.gpu_indices),
            "gpu_milli_per_device": placement.gpu_milli_per_device,
            "mig_slices": [list(s) for s in placement.mig_slices],
        }
    )


def placement_from_text(text: str) -> Placement:
    """The inverse of :func:`placement_to_text`."""
    data = json.loads(text)
    return Placement(
        str(data["node"]),
        tuple(int(i) for i in data["gpu_indices"]),
        int(data["gpu_milli_per_device"]),
        tuple((int(g), int(s)) for g, s in data["mig_slices"]),
    )


def deleted_event(key: str, end: RunEnd, stopping: tuple[PodEnd, str] | None) -> PodDeleted:
    """How a pod whose run ended is reported: why it was stopped, else how the run ended;
    when it ended as its shim recorded it (None: lost, not known)."""
    at = None if end.record is None else end.record.ended_at
    if stopping is not None:
        why, reason = stopping
        message = f"{reason}; {end.describe()}" if reason else end.describe()
        return PodDeleted(key, why, message, at)
    if end.lost:
        return PodDeleted(key, PodEnd.LOST, end.describe())
    if end.succeeded:
        return PodDeleted(key, PodEnd.SUCCEEDED, end.describe(), at)
    return PodDeleted(key, PodEnd.FAILED, end.describe(), at)


def places_free(
    wanted: Sequence[Placement],
    others: Sequence[Placement],
    inventory: NodeInventory,
    node_name: str,
) -> bool:
    """Whether ``wanted`` can be taken again on this machine (node ``node_name``): its devices
    exist and ``others`` (what other workloads hold) leave room on them."""
    used: dict[int, int] = {}
    slices: set[tuple[int, int]] = set()
    for other in others:
        for index in other.gpu_indices:
            used[index] = used.get(index, 0) + other.milli_per_device
        slices.update(other.mig_slices)
    for placement in wanted:
        try:
            placement_env(placement, inventory)
        except DeviceNotFoundError:
            return False
        if placement.node != node_name or slices & set(placement.mig_slices):
            return False
        for index in placement.gpu_indices:
            if used.get(index, 0) + placement.milli_per_device > MILLI_PER_GPU:
                return False
    return True
