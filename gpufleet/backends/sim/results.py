"""Results of simulation runs: plain data, JSON-ready (``dataclasses.asdict``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpufleet.economics.reports import CostReport

if TYPE_CHECKING:
    from gpufleet.backends.sim.idle_reclaim import IdleReport
    from gpufleet.backends.sim.inference import ServingReport


@dataclass(slots=True)
class ClassStats:
    """Pods of one class (cpu-only, gpu-share, one-gpu, multi-gpu, mig): arrived and failed."""

    arrived: int = 0
    arrived_gpu_milli: int = 0
    failed: int = 0
    failed_gpu_milli: int = 0
    #: Failures before the arrived GPU request reached 100% of capacity (fill mode).
    failed_by_100: int = 0
    arrived_by_100: int = 0

    @property
    def failure_rate_by_100(self) -> float:
        return self.failed_by_100 / self.arrived_by_100 if self.arrived_by_100 else 0.0


@dataclass(slots=True)
class FillRun:
    """One fill-up run (trace, policy, seed); curves are indexed by arrived% 0..130."""

    policy: str
    seed: int
    seconds: float
    nodes: int
    pods: int
    capacity_gpu_milli: int
    unallocated_gpu_pct: list[float]
    fragmentation_pct: list[float]
    allocated_pct_by_model: dict[str, list[float]]
    classes: dict[str, ClassStats]
    impossible_pods: int = 0
    bind_violations: int = 0
    #: The scheduler's metrics at the end, by family, named as ``/metrics`` names them.
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def unallocated_at_100(self) -> float:
        return self.unallocated_gpu_pct[100]


@dataclass(slots=True)
class Timeline:
    """Samples over virtual time (seconds since the first arrival)."""

    time: list[float] = field(default_factory=list)
    allocated_gpu_pct: list[float] = field(default_factory=list)
    fragmentation_pct: list[float] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    allocated_pct_by_model: dict[str, list[float]] = field(default_factory=dict)


@dataclass(slots=True)
class DelayStats:
    p50: float = 0.0
    p95: float = 0.0
    max: float = 0.0
    mean: float = 0.0
    count: int = 0


@dataclass(slots=True)
class ReplayRun:
    """One time-based replay run."""

    policy: str
    seed: int
    seconds: float
    nodes: int
    pods: int
    capacity_gpu_milli: int
    queueing_delay: DelayStats
    queueing_delay_by_class: dict[str, DelayStats]
    delays: list[float]
    timeline: Timeline
    never_ran: int
    never_ran_examples: list[dict[str, str]]
    classes: dict[str, ClassStats]
    simulated_seconds: float = 0.0
    bind_violations: int = 0
    #: The scheduler's metrics at the end, by family, named as ``/metrics`` names them.
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(slots=True)
class QueueStats:
    """One queue's results (GPU amounts in GPUs, times in seconds)."""

    queue: str
    nominal_gpus: float
    workloads: int = 0
    admitted: int = 0
    completed: int = 0
    #: Workloads whose job failed (a backoff limit or deadline passed), failed attempts of
    #: their pods, and containers restarted in place.
    failed: int = 0
    pod_failures: int = 0
    restarts: int = 0
    queueing_delay: DelayStats = field(default_factory=DelayStats)
    completion_time: DelayStats = field(default_factory=DelayStats)
    gpu_hours_used: float = 0.0
    gpu_hours_entitled: float = 0.0
    preemptions: int = 0
    gpu_hours_lost: float = 0.0
    #: The longest spell below nominal quota with a waiting workload that would fit in it.
    longest_short_of_nominal: float = 0.0
    short_of_nominal_spells: int = 0


@dataclass(slots=True)
class QueueTimeline:
    """Per queue, sampled over time: GPUs in use, GPUs entitled, weighted share."""

    time: list[float] = field(default_factory=list)
    used_gpus: dict[str, list[float]] = field(default_factory=dict)
    entitled_gpus: dict[str, list[float]] = field(default_factory=dict)
    share: dict[str, list[float]] = field(default_factory=dict)


@dataclass(slots=True)
class TenancyStats:
    queues: dict[str, QueueStats]
    queueing_delay_by_priority_class: dict[str, DelayStats]
    timeline: QueueTimeline
    #: Gangs seen holding some but not all of their pods (0 for all-or-nothing admission).
    partial_gangs: int
    partial_gang_seconds: float
    preemptions: int
    gpu_hours_lost: float
    #: Each workload's arrival and first admission (None: never admitted), by workload key.
    admissions: dict[str, tuple[float, float | None]] = field(default_factory=dict)


@dataclass(slots=True)
class PendingReport:
    """A workload still waiting at a moment of the run: why, where in its queue, and when it
    may start (None: no plan gives a time)."""

    workload: str
    queue: str
    position: int
    waiting_for: str
    message: str
    estimated_start: float | None


@dataclass(frozen=True, slots=True)
class BudgetReport:
    """A queue's GPU-hour budget at the end of a run: GPU-hours used in the period the run
    ended in (with what running work is still expected to use), of how many, its state (ok,
    warn, exhausted), and what it does when spent."""

    queue: str
    used_gpu_hours: float
    gpu_hours: float
    period: str
    state: str
    action: str


@dataclass(slots=True)
class JobReport:
    """How a job (a Job, a training job, a Ray cluster or job, a pod that may fail) of a
    workload fared: its state at the end of the run (Succeeded, Failed; Running when it had
    not ended and a pod of it ran, else Pending), why (for a Pending one, what it waits for),
    completions done of those to do, failed attempts, pods that failed (not restarted in
    place), containers restarted in place, and new clusters made (RayJob)."""

    workload: str
    kind: str
    name: str
    queue: str
    state: str
    reason: str = ""
    message: str = ""
    completed: int = 0
    completions: int = 0
    attempt_failures: int = 0
    failed_pods: int = 0
    restarts: int = 0
    retries: int = 0


@dataclass(slots=True)
class SpotSavings:
    """What the spot nodes of a run saved (:mod:`gpufleet.backends.sim.spot`): their GPU-hours
    up, what those cost on demand and on spot, the gross saving, the GPU-hours of work their
    interruptions threw away and that work at the on-demand price, and the net saving; money in
    ``currency``. ``estimated``: a price was the list's estimate; ``unpriced``: GPU models left
    out for want of a price."""

    currency: str
    spot_gpu_hours: float = 0.0
    on_demand_cost: float = 0.0
    spot_cost: float = 0.0
    gross_saved: float = 0.0
    lost_gpu_hours: float = 0.0
    lost_cost: float = 0.0
    net_saved: float = 0.0
    estimated: bool = False
    unpriced: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def rounded(self) -> SpotSavings:
        """The same, hours to a thousandth of a second and money to a micro-unit."""
        for name in (
            "spot_gpu_hours", "on_demand_cost", "spot_cost", "gross_saved", "lost_gpu_hours",
            "lost_cost", "net_saved",
        ):  # fmt: skip
            setattr(self, name, round(getattr(self, name), 6))
        return self


@dataclass(slots=True)
class NodeFaultEvent:
    """A notice, a node gone or back, or a GPU fault that crashed pods, in a run: when, where,
    which scenario object, the pods it took down and the GPU-hours of work they lost."""

    at: float
    node: str
    fault: str
    event: str
    pods: int = 0
    gpu_hours_lost: float = 0.0
    message: str = ""


@dataclass(slots=True)
class InterruptionReport:
    """What a run's spot interruptions, node failures and GPU faults did: spot nodes reclaimed
    (gone after their notice), notices given, nodes failed, nodes back (replaced or repaired),
    GPU faults that crashed pods; pods lost (on the node or GPU), pods taken down with them
    (their gangs' other pods), pods that saved their work at a notice; workloads made to start
    again and jobs that failed for it; the GPU-hours of work lost since the last checkpoints,
    in all and by cause; each event; and what spot capacity saved (None: no spot nodes, or not
    priced)."""

    spot_interruptions: int = 0
    notices: int = 0
    node_failures: int = 0
    nodes_back: int = 0
    gpu_crashes: int = 0
    pods_lost: int = 0
    pods_taken_down: int = 0
    pods_checkpointed: int = 0
    restarts: int = 0
    jobs_failed: int = 0
    gpu_hours_lost: float = 0.0
    gpu_hours_lost_by_cause: dict[str, float] = field(default_factory=dict)
    events: list[NodeFaultEvent] = field(default_factory=list)
    savings: SpotSavings | None = None


@dataclass(frozen=True, slots=True)
class PoolUsage:
    """One pool over a run: its nodes (at the start, at most at once, at the end), the nodes
    asked for, removed as unneeded and lost to node faults, requests refused for want of
    capacity, and what they cost (node-hours
    billed from each node's asking to its leaving or the run's end)."""

    pool: str
    capacity_type: str
    gpu_model: str | None
    gpus_per_node: int
    hourly_price: float
    nodes_at_start: int
    nodes_peak: int
    nodes_at_end: int
    added: int
    removed: int
    lost: int
    node_hours: float
    gpu_hours: float
    cost: float
    #: Requests for its nodes that failed for want of capacity (its capacity outages).
    insufficient_capacity: int = 0


@dataclass(frozen=True, slots=True)
class PoolReport:
    """What the pools did in a run: each pool's usage, the total cost and hours, the first
    actions in words (``t=1h00m: +2 h100-spot (us-east-1a): ...``), what no pool could hold
    (workload -> why, the last time it was asked), and each pool's nodes (joined, not yet
    gone) after every change: (time, nodes per pool in the order of ``pools``)."""

    pools: tuple[PoolUsage, ...]
    cost: float
    node_hours: float
    gpu_hours: float
    scale_ups: int
    nodes_removed: int
    actions: tuple[str, ...] = ()
    never: tuple[tuple[str, str], ...] = ()
    timeline: tuple[tuple[float, tuple[int, ...]], ...] = ()


@dataclass(slots=True)
class TenancyRun:
    """A multi-tenant replay: the pod-level replay, per-queue results, and the workloads still
    waiting at the end (and at ``explained_at``, if asked)."""

    replay: ReplayRun
    tenancy: TenancyStats
    #: Mean GPU allocation (%) from the first to the last arrival (the busy window).
    allocation_busy_pct: float
    waiting_at_end: list[PendingReport] = field(default_factory=list)
    explained_at: float | None = None
    waiting_at: list[PendingReport] = field(default_factory=list)
    jobs: list[JobReport] = field(default_factory=list)
    budgets_at_end: list[BudgetReport] = field(default_factory=list)
    #: What the idle policies did (None: the run had none).
    idle: IdleReport | None = None
    #: What its pods cost, a report per grouping asked (none: not costed), each without the
    #: pods' own lines (:mod:`gpufleet.backends.sim.costs`).
    cost: tuple[CostReport, ...] = ()
    #: What each inference service's requests met (none: the run served none).
    serving: tuple[ServingReport, ...] = ()
    #: What its spot interruptions, node failures and GPU faults did (None: it had none).
    interruptions: InterruptionReport | None = None
    #: What its node pools did and cost (None: it had none).
    pools: PoolReport | None = None
