"""The JSON shapes of the control plane's HTTP API (``/api/v1``), shared by server and client.

Quantities are in the units people read: CPU in cores, memory in MiB, GPUs in GPUs (0.5 is
half a GPU); quota maps use the Kubernetes resource names (``cpu``, ``memory``,
``nvidia.com/gpu``, ``nvidia.com/gpu.<model>``). Times are seconds of the cluster's clock (the
simulated clock in embedded mode, Unix time with ``--local`` and on Kubernetes); ``wall`` fields
are Unix time.
The service owns its types (:mod:`gpufleet.service.states`, its records); these shapes are the
API's, built from them by :mod:`gpufleet.api.views`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

# The service's own states and kinds of change, served as they are (explicitly re-exported:
# clients read the whole vocabulary of the API from this module).
from gpufleet.service.states import ChangeKind as ChangeKind
from gpufleet.service.states import WorkloadState as WorkloadState

API_PREFIX = "/api/v1"


class _Schema(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ErrorBody(_Schema):
    """Every 4xx/5xx answer: what went wrong, and where when the input is at fault."""

    error: str = Field(description="a short machine-readable kind: not_found, forbidden, ...")
    message: str
    field: str | None = None


class Role(StrEnum):
    ADMIN = "admin"
    TENANT = "tenant"
    #: Reads /metrics only (Prometheus' scrape credentials).
    METRICS = "metrics"


class WhoAmI(_Schema):
    tenant: str
    role: Role
    queues: list[str] = Field(description="queues this tenant may submit to ([] = any, admin)")
    namespaces: list[str]


class PodView(_Schema):
    name: str
    state: str = Field(description="Pending, Running, Succeeded, Failed, Cancelled")
    node: str | None = None
    gpu_indices: list[int] = Field(default_factory=list)
    gpu_share: float | None = Field(
        None, description="GPUs it holds of each device, when less than the device"
    )
    mig_slices: list[str] = Field(default_factory=list, description="'<gpu>:<slot>'")
    cpu: float
    memory_mib: int
    gpus: float = Field(
        description="GPUs it holds now, what its queue is charged (0 while it waits; MIG slices "
        "count none)"
    )
    gpu_request: str = Field(
        "0",
        description="what it asks for: '2', '0.25', '10Gi' (of GPU memory), '0.25+10Gi', "
        "'mig-1g.10gb'",
    )
    restarts: int = Field(0, description="its container's restarts in place")
    reason: str | None = Field(
        None, description="CrashLoopBackOff while it waits out the back-off of a restart in place"
    )
    completion_index: int | None = Field(None, description="an Indexed Job's index it runs")


class JobStatusView(_Schema):
    """A job's progress: a Job, a PyTorchJob, an MPIJob, a RayCluster or RayJob, or a pod that
    may fail (``gpufleet.dev/sim-failures``)."""

    kind: str
    completed: int = Field(description="completions done (a Job's; else its Master's, ...)")
    completions: int
    failed_pods: int = Field(description="pods that failed and were not restarted in place")
    restarts: int = Field(description="containers restarted in place")
    state: str = Field(
        description="Succeeded or Failed once it ended; else its workload's state (Pending, "
        "Admitted, Running)"
    )
    reason: str | None = Field(None, description="BackoffLimitExceeded, DeadlineExceeded, ...")
    message: str | None = None
    failed_indexes: list[int] = Field(
        default_factory=list,
        description="an Indexed Job's indexes that failed for good (backoffLimitPerIndex)",
    )


class WorkloadSummary(_Schema):
    name: str
    namespace: str
    key: str = Field(
        description="namespace/Kind/name: names are unique per kind and namespace (namespace/name "
        "for a workload stored by an older gpufleet)"
    )
    kind: str = Field(
        description="Pod, Job, PyTorchJob, MPIJob, RayCluster, RayJob, Deployment, StatefulSet, "
        "ReplicaSet or PodGroup"
    )
    tenant: str
    queue: str
    priority: int
    priority_class: str | None = None
    state: WorkloadState
    pods: int
    pods_running: int
    gpus: float = Field(
        description="GPUs its pods hold now, what its queue is charged (0 while it waits)"
    )
    gpu_request: str = Field(
        "0", description="what its pods ask for, per kind of pod: '4x1', '3x0.25+10Gi'"
    )
    submitted: float
    started: float | None = None
    finished: float | None = None
    expected_runtime: float | None = None
    waiting_for: str | None = Field(
        None, description="quota, capacity, preempting, backoff, queue order"
    )
    message: str | None = Field(None, description="why it waits, when it does")
    reason: str | None = Field(
        None, description="CrashLoopBackOff while a pod of it waits out a restart's back-off"
    )


class EventView(_Schema):
    time: float
    type: str = Field(description="Normal or Warning")
    reason: str = Field(description="Submitted, Scheduled, FailedScheduling, Preempted, ...")
    message: str
    workload: str | None = None


class WorkloadDetail(WorkloadSummary):
    checkpoint_interval: float | None = None
    preemptible: bool = True
    min_member: int = 1
    jobs: list[JobStatusView] = Field(default_factory=list)
    pod_views: list[PodView] = Field(default_factory=list)
    events: list[EventView] = Field(default_factory=list)


class Explanation(_Schema):
    workload: str
    state: WorkloadState
    queue: str
    position: int | None = Field(None, description="1 = the next its queue will try")
    waiting_for: str | None = None
    message: str
    estimated_start: float | None = None
    never: bool = Field(
        False, description="it can never fit on the cluster as it stands (Kueue: Inadmissible)"
    )


class UngateRequest(_Schema):
    """The body of ``POST .../ungate`` (optional): which scheduling gates to remove."""

    gates: list[str] = Field(
        default_factory=list, description="the gates to remove; none named: every gate"
    )


class SubmitResult(_Schema):
    accepted: list[WorkloadSummary]
    skipped: dict[str, int] = Field(
        default_factory=dict,
        description="objects set aside, by kind: kinds with no scheduling meaning (ConfigMap, "
        "Service...), neither read nor written",
    )
    paused: list[str] = Field(
        default_factory=list,
        description="Jobs of parallelism 0, a line each: valid, they run no pods (Kubernetes "
        "keeps such a Job active until its parallelism is raised), so no workload is made",
    )


class BudgetView(_Schema):
    """A queue's GPU-hour budget (its subtree's) in the current period."""

    gpu_hours: float = Field(description="GPU-hours per period")
    period: str = Field(description="day, week or month (calendar, UTC)")
    warn_at: float = Field(description="fraction of the budget at which it warns")
    action: str = Field(description="at 100%: Block, NominalOnly or Preemptible")
    used_gpu_hours: float = Field(
        description="used in this period, and what running work will use by its expected run time"
    )
    remaining_gpu_hours: float
    state: str = Field(description="ok, warn or exhausted")
    period_start: float = Field(description="when this period started (the world's clock)")
    resets: float = Field(description="when the next period starts (the world's clock)")


class FairShareView(_Schema):
    """A queue's usage over time, where the profile turns fair sharing on (``fairSharing``)."""

    usage_half_life: float = Field(description="seconds in which usage decays by half")
    usage_gpu_hours: float = Field(description="its whole subtree's GPU-hours, decayed to now")
    share: float = Field(
        description="its share among its siblings (nominal GPUs, or weight), as a fraction"
    )
    ratio: float | None = Field(
        description="its fraction of its siblings' usage, over its share (lower goes first; "
        "None: it used some and has no share)"
    )
    factor: float = Field(description="Slurm's fair-share factor 2^-ratio: 1 unused, 0.5 at share")
    users: dict[str, float] = Field(
        default_factory=dict, description="each user's (tenant's, or namespace's) GPU-hours here"
    )


class QueueView(_Schema):
    name: str
    parent: str | None = None
    weight: float = 1.0
    nominal: dict[str, float] = Field(default_factory=dict)
    borrowing_limit: dict[str, float] = Field(default_factory=dict)
    lending_limit: dict[str, float] = Field(default_factory=dict)
    usage: dict[str, float] = Field(default_factory=dict, description="its whole subtree's")
    borrowed: dict[str, float] = Field(default_factory=dict)
    share: float = Field(0.0, description="weighted dominant-resource share")
    pending: int = 0
    running: int = 0
    queueing_strategy: str = Field("BestEffortFIFO", description="BestEffortFIFO or StrictFIFO")
    gpu_models: list[str] = Field(
        default_factory=list, description="GPU models its workloads try, in order"
    )
    preemption: dict[str, str | int] = Field(
        default_factory=dict,
        description="withinQueue, reclaimWithinCohort, borrowWithinCohort (Kueue's policies)",
    )
    flavor_fungibility: dict[str, str] = Field(
        default_factory=dict, description="whenCanBorrow, whenCanPreempt"
    )
    budget: BudgetView | None = Field(None, description="its GPU-hour budget, if it has one")
    fair_share: FairShareView | None = Field(
        None, description="its decayed usage and fair-share factor (fair sharing over time on)"
    )


class PriorityClassView(_Schema):
    name: str
    value: int
    preemption_policy: str
    global_default: bool


class DeviceView(_Schema):
    index: int
    model: str
    memory_mib: int
    allocated: float = Field(description="GPUs of this device in use (0..1)")
    shared: bool = Field(description="held by more than one pod, or by a share of one")
    mig: bool = False
    pods: list[str] = Field(default_factory=list, description="namespace/name of its pods")
    utilization: float | None = Field(
        None, description="its real use, 0..1 (DCGM_FI_DEV_GPU_UTIL / 100); None: not measured"
    )
    memory_used_mib: int | None = Field(
        None, description="its framebuffer memory used (DCGM_FI_DEV_FB_USED); None: not measured"
    )
    healthy: bool = Field(
        True, description="false while the scheduler withholds it (an XID; nothing new goes on it)"
    )


class NodeView(_Schema):
    name: str
    gpu_model: str | None = None
    cpu: float
    cpu_allocated: float
    memory_mib: int
    memory_allocated_mib: int
    gpus: int = Field(description="its GPUs (capacity)")
    gpus_allocatable: int = Field(
        description="its GPUs less those withdrawn as unhealthy (allocatable, as the kubelet "
        "advertises once the device plugin withdrew them)"
    )
    gpus_allocated: float
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[str] = Field(default_factory=list)
    devices: list[DeviceView] = Field(default_factory=list)


class LogChunk(_Schema):
    """A slice of the output of one run of a pod (``serve --local``)."""

    pod: str
    attempt: int = Field(description="which run of the pod, 1 the first (0: none yet)")
    attempts: int = Field(description="how many runs the pod has had")
    offset: int = Field(description="byte offset of text in the run's log")
    next_offset: int = Field(description="where to ask from next")
    text: str
    running: bool = Field(description="this run goes on: more may come")
    finished: bool = Field(description="the workload has ended: no run will write more")


class ClusterSummary(_Schema):
    backend: str = Field(description="simulated, local or kubernetes")
    time: float
    speed: float | None = Field(None, description="simulated seconds per second")
    nodes: int
    gpus: int
    gpus_allocated: float
    gpu_allocation: float = Field(description="allocated / total, 0..1")
    workloads_pending: int
    workloads_running: int
    policy: str


class HistoryPoint(_Schema):
    time: float
    gpu_allocation: float
    pending: int
    running: int
    queueing_delay_p50: float | None = None
    queueing_delay_p95: float | None = None


class History(_Schema):
    points: list[HistoryPoint]


class Change(_Schema):
    """One message of the server-sent event stream (``GET /api/v1/stream``)."""

    seq: int
    kind: ChangeKind
    key: str | None = None
    time: float
    data: dict[str, object] = Field(default_factory=dict)


class TokenCreated(_Schema):
    token: str = Field(description="shown once; only its hash is stored")
    id: str = Field(description="how lists name it and how it is revoked")
    tenant: str
    role: Role
    name: str = ""
    expires: float | None = Field(description="Unix time; None: never")


class TokenView(_Schema):
    """A token as stored: never the token itself. Times are Unix time."""

    id: str = Field(description="the start of the token's SHA-256: names it to revoke it")
    tenant: str
    role: Role
    queues: list[str] = Field(description="queues it may submit to beyond its tenant's")
    name: str
    created: float
    expires: float | None = Field(description="None: never")
    last_used: float | None = Field(description="recorded at most once a minute")
    revoked: float | None = None


class CostLine(_Schema):
    """One group's GPU-hours and cost over the window, split as OpenCost splits GPU cost:
    ``allocated = used + idle + unmeasured`` (``unmeasured``: the GPU cost of held time no
    utilisation sample stands for, counted neither as used nor as idle)."""

    name: str = Field(
        description="the group ('__unallocated__': no value for the key; "
        "'__idle__': the nodes' GPU time nobody held)"
    )
    workloads: int
    gpu_hours: float
    idle_gpu_hours: float = Field(description="GPU-hours held but not used (measured pods)")
    unmeasured_gpu_hours: float
    unpriced_gpu_hours: float = Field(description="GPU-hours of models the price list lacks")
    allocated: float
    used: float
    idle: float
    unmeasured: float
    gpu: float = Field(description="the GPU part of allocated")
    cpu: float
    memory: float
    utilisation: float | None = Field(
        description="mean GPU utilisation of the measured pods, 0 to 1 (null: none measured)"
    )
    estimated: bool = Field(description="some price was estimated from an on-demand price")


class IdleHolder(_Schema):
    """A running workload holding GPUs at low measured utilisation over the window."""

    workload: str
    namespace: str
    queue: str
    tenant: str
    kind: str
    gpus: float
    gpu_hours: float
    utilisation: float
    idle: float = Field(description="the idle GPU cost it ran up in the window")
    held_since: float


class CostReport(_Schema):
    """``GET /api/v1/cost``: cost per group over a window, in ``currency``."""

    by: list[str]
    window: str
    start: float
    end: float
    currency: str
    measured: bool = Field(description="whether utilisation series could be read at all")
    lines: list[CostLine]
    total: CostLine
    idle_holders: list[IdleHolder]
    idle_below: float = Field(description="the utilisation under which a holder is idle")
    unpriced_models: list[str]
    notes: list[str]


class AlertStateName(StrEnum):
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


class AlertView(_Schema):
    """One alert of a rule on the GPUs' series (``GET /api/v1/alerts``)."""

    rule: str
    alertname: str = Field(description="the alert's name, as Prometheus and Alertmanager show it")
    state: AlertStateName = Field(description="resolved alerts are kept 15 minutes")
    severity: str
    summary: str
    condition: str = Field(description="what held: '<fn>(<metric>[<window>]) <op> <threshold>'")
    value: float = Field(description="the value last compared with the threshold")
    labels: dict[str, str]
    workload: str | None = Field(None, description="the workload of the pod it is about")
    active_at: float = Field(description="when its condition started holding")
    fired_at: float | None = None
    resolved_at: float | None = None


class AlertList(_Schema):
    alerts: list[AlertView]
    rules: int = Field(description="alert rules evaluated")
    evaluated_at: float | None = Field(None, description="the latest round (cluster clock)")
    error: str | None = Field(None, description="why the latest round could not read the series")
