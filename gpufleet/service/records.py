"""The control plane's book of workloads: what each one is, where its pods run, what happened.

A :class:`WorkloadRecord` is the service's view of one submitted workload (its tenant, the
object kind it came from, its pods' states and places, its events), kept in memory for the API
and mirrored to the store by the control plane. Pure data and small derivations: no locking,
no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.model import MILLI_PER_GPU, Placement, Pod
from gpufleet.model.sharing import describe_requests
from gpufleet.model.workload import TimedWorkload
from gpufleet.service.states import WorkloadState
from gpufleet.service.store import StoredEvent
from gpufleet.telemetry.recording import PodKey, PodTags

#: Events kept in memory per workload (the store keeps them all).
EVENTS_KEPT = 50

POD_PENDING = "Pending"
POD_RUNNING = "Running"
POD_SUCCEEDED = "Succeeded"
POD_CANCELLED = "Cancelled"
POD_FAILED = "Failed"
POD_TERMINAL = (POD_SUCCEEDED, POD_CANCELLED, POD_FAILED)

TERMINAL = (WorkloadState.SUCCEEDED, WorkloadState.CANCELLED, WorkloadState.FAILED)


def requested_gpus(pod: Pod) -> float:
    """GPUs a pod asks for before placement, for admission rules (a cap per workload): 0.25 for
    a quarter of one, MIG slices one each, a share given only in GPU memory 0 (its fraction
    depends on the device it lands on). Not what it is charged: see :attr:`PodRecord.gpus`."""
    gpu = pod.gpu
    if gpu.mig_profile is not None:
        return float(gpu.mig_count)
    return gpu.total_milli / MILLI_PER_GPU


@dataclass(slots=True)
class PodRecord:
    pod: Pod
    state: str = POD_PENDING
    placement: Placement | None = None
    started: float | None = None
    #: Its container's restarts in place, and its Job completion index (Indexed Jobs).
    restarts: int = 0
    index: int | None = None
    #: Why it is not as its state says, as kubectl's STATUS tells it (``CrashLoopBackOff``:
    #: its container waits out the back-off before it is restarted in place); "" if nothing.
    reason: str = ""

    @property
    def gpus(self) -> float:
        """GPUs the pod holds now (what its queue is charged, the same in every view): what
        its placement holds on its devices while it runs, else 0. MIG slices are resources
        of their own and count none."""
        if self.state != POD_RUNNING or self.placement is None:
            return 0.0
        return self.placement.gpu_milli / MILLI_PER_GPU


@dataclass(slots=True)
class JobProgress:
    """How a job of the workload (a Job, a training job, a Ray cluster or job) is doing:
    completions done of those to do (a Job's, else its Master's, Launcher's or Ray job's),
    pods that failed (not restarted in place), restarts in place, and how it ended."""

    kind: str
    completed: int = 0
    completions: int = 0
    failed_pods: int = 0
    restarts: int = 0
    outcome: str | None = None  # Succeeded or Failed once it ended
    reason: str = ""
    message: str = ""
    #: An Indexed Job's indexes that failed for good (``backoffLimitPerIndex``), in order.
    failed_indexes: list[int] = field(default_factory=list)


@dataclass(slots=True)
class WorkloadRecord:
    key: str
    seq: int
    tenant: str
    kind: str
    timed: TimedWorkload
    submitted: float
    state: WorkloadState = WorkloadState.PENDING
    started: float | None = None
    finished: float | None = None
    pods: dict[str, PodRecord] = field(default_factory=dict)
    events: deque[StoredEvent] = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    #: The last FailedScheduling message told (so the same one is not repeated).
    told: str | None = None
    #: Its jobs' progress, by job name (none for pods that simply end).
    jobs: dict[str, JobProgress] = field(default_factory=dict)
    #: The key the scheduler's core knows it by, where that differs from ``key`` (on
    #: Kubernetes: its pod group's, or its lone pod's).
    core_key: str | None = None

    @classmethod
    def new(
        cls, seq: int, tenant: str, kind: str, timed: TimedWorkload, submitted: float
    ) -> WorkloadRecord:
        record = cls(timed.workload.key, seq, tenant, kind, timed, submitted)
        record.pods = {pod.key: PodRecord(pod) for pod in timed.workload.pods}
        return record

    @property
    def gpus(self) -> float:
        """GPUs its pods hold now (:attr:`PodRecord.gpus`)."""
        return sum(p.gpus for p in self.pods.values())

    @property
    def gpu_request(self) -> str:
        """What its pods ask for, as written (:func:`~gpufleet.model.sharing.describe_requests`):
        ``3x0.25+10Gi`` is a request, never a charge."""
        return describe_requests(p.pod.gpu for p in self.pods.values())

    @property
    def running_pods(self) -> int:
        return sum(p.state == POD_RUNNING for p in self.pods.values())

    @property
    def active(self) -> bool:
        return self.state not in TERMINAL

    def pending_pods(self) -> list[Pod]:
        return [p.pod for p in self.pods.values() if p.state == POD_PENDING]

    def settle(self, now: float) -> WorkloadState:
        """Derive the workload's state from its pods' (after a change); returns it."""
        if not self.active:
            return self.state
        states = [p.state for p in self.pods.values()]
        failed = any(j.outcome == "Failed" for j in self.jobs.values())
        if all(s in POD_TERMINAL for s in states) and (failed or POD_FAILED in states):
            self.state = WorkloadState.FAILED
            self.finished = now
        elif all(s == POD_SUCCEEDED for s in states):
            self.state = WorkloadState.SUCCEEDED
            self.finished = now
        elif any(s == POD_RUNNING for s in states):
            pending = any(s == POD_PENDING for s in states)
            self.state = WorkloadState.ADMITTED if pending else WorkloadState.RUNNING
            if self.started is None:
                self.started = now
        else:
            self.state = WorkloadState.PENDING
        return self.state


def pods_of(
    records: Mapping[str, WorkloadRecord],
) -> tuple[dict[PodKey, PodTags], dict[PodKey, float]]:
    """Each running pod's tags and start, from the plane's records."""
    tags: dict[PodKey, PodTags] = {}
    starts: dict[PodKey, float] = {}
    for record in records.values():
        if not record.active:
            continue
        workload = record.timed.workload
        for pod_record in record.pods.values():
            if pod_record.state != POD_RUNNING:
                continue
            key = (pod_record.pod.namespace, pod_record.pod.name)
            tags[key] = PodTags(workload.queue, record.tenant, record.key, record.kind)
            if pod_record.started is not None:
                starts[key] = pod_record.started
    return tags, starts
