"""Run one simulation (cluster, workload, policy, seed): fill-up, replay of pods, or replay of
workloads (gangs) through queues, quotas, priorities and preemption."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.backends.sim.costs import CostSettings, pod_runs, run_cost
from gpufleet.backends.sim.fill import fill_order
from gpufleet.backends.sim.holds import HoldLog
from gpufleet.backends.sim.idle_reclaim import IdleTicking
from gpufleet.backends.sim.inference import InferenceSettings, InferenceTicking
from gpufleet.backends.sim.jobs import JobRun
from gpufleet.backends.sim.node_pools import PoolScaling, PoolSettings
from gpufleet.backends.sim.queue_recorder import QueueRecorder
from gpufleet.backends.sim.results import (
    BudgetReport,
    FillRun,
    JobReport,
    PendingReport,
    ReplayRun,
    TenancyRun,
)
from gpufleet.backends.sim.usage_meter import UsageMeter
from gpufleet.control.backend import ClusterBackend
from gpufleet.control.factory import tie_rank
from gpufleet.control.loop import TurnObserver
from gpufleet.control.loop import run as run_loop
from gpufleet.economics.reports import CostReport
from gpufleet.metrics.state import read_state
from gpufleet.model import Node, Pod
from gpufleet.model.faults import GpuFault
from gpufleet.model.idle import IdlePolicy
from gpufleet.model.node_faults import NodeFault
from gpufleet.model.queues import Queue, ResourceQuota
from gpufleet.model.workload import TimedPod, TimedWorkload, Workload
from gpufleet.scheduling.admission import AdmissionConfig, cluster_capacity
from gpufleet.scheduling.core import PendingExplanation, SchedulerCore
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.plugins.budget import budget_check_of
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.profile import DEFAULT_PROFILE, Profile
from gpufleet.scheduling.target import TargetWorkload, typical_shapes

#: Called with (pods arrived so far, pods in all).
Progress = Callable[[int, int], None]
PROGRESS_EVERY = 500


def count_impossible(core: SchedulerCore, pods: Sequence[Pod]) -> int:
    """Pods that could not fit on any node even if the cluster were empty."""
    verdict: dict[tuple[object, ...], bool] = {}
    impossible = 0
    for pod in pods:
        fits = verdict.get(pod.signature)
        if fits is None:
            fits = verdict[pod.signature] = core.engine.fits_when_empty(pod)
        impossible += not fits
    return impossible


def _progress_hook(
    sim: SimulatedCluster, total: int, progress: Progress | None
) -> Callable[[], None] | None:
    if progress is None:
        return None
    counter = [0]

    def tick() -> None:
        counter[0] += 1
        if counter[0] % PROGRESS_EVERY == 0:
            progress(min(sim.arrivals_seen, total), total)

    return tick


def _run(
    sim: SimulatedCluster,
    core: SchedulerCore,
    on_iteration: Callable[[], None] | None,
    backend: ClusterBackend | None = None,
    observers: Sequence[TurnObserver] = (),
) -> None:
    """The control loop over ``core`` and ``backend`` (default ``sim``; else what wraps it:
    the idle policies' ticking, the usage meter), the recorder's scheduler metrics observing
    it and reading the core, and ``observers`` too."""
    metrics = sim.recorder.metrics
    metrics.read = lambda: read_state(core)
    world = sim if backend is None else backend
    run_loop(world, core, on_iteration, observers=[metrics, *observers])


def run_fill(
    nodes: Sequence[Node],
    trace: Sequence[Pod],
    policy: str,
    seed: int,
    target: TargetWorkload | None = None,
    inflation: float = 1.3,
    progress: Progress | None = None,
) -> FillRun:
    """The FGD protocol's fill-up experiment (see :mod:`gpufleet.backends.sim.fill`)."""
    started = time.perf_counter()
    target = target if target is not None else typical_shapes(trace)
    table = NodeTable(nodes)
    order = fill_order(trace, table.size, table.total_gpu_milli(), seed, inflation)
    core = SchedulerCore(
        table,
        make_policy(policy, table, PolicyContext(target, seed)),
        tie_rank=order.node_rank,
        explain=False,
    )
    impossible = count_impossible(core, order.pods)
    sim = SimulatedCluster(nodes, [TimedPod(p) for p in order.pods], Mode.FILL, target)
    _run(sim, core, _progress_hook(sim, len(order.pods), progress))
    if progress is not None:
        progress(len(order.pods), len(order.pods))
    return sim.recorder.fill_result(
        policy, seed, time.perf_counter() - started, len(order.pods), impossible
    )


def run_replay(
    nodes: Sequence[Node],
    workload: Sequence[TimedPod],
    policy: str,
    seed: int,
    target: TargetWorkload | None = None,
    progress: Progress | None = None,
) -> ReplayRun:
    """Time-based replay: arrivals at creation time, departures after their run time."""
    started = time.perf_counter()
    pods = [t.pod for t in workload]
    target = target if target is not None else typical_shapes(pods)
    table = NodeTable(nodes)
    core = SchedulerCore(
        table,
        make_policy(policy, table, PolicyContext(target, seed)),
        tie_rank=tie_rank(table, seed),
    )
    sim = SimulatedCluster(nodes, workload, Mode.REPLAY, target)
    _run(sim, core, _progress_hook(sim, len(workload), progress))
    if progress is not None:
        progress(len(workload), len(workload))
    never_ran = {key: sim.recorder.messages.get(key, "") for key in sim.pending}
    return sim.recorder.replay_result(
        policy, seed, time.perf_counter() - started, len(workload), never_ran
    )


def run_workloads(
    nodes: Sequence[Node],
    workloads: Sequence[TimedWorkload],
    policy: str,
    seed: int,
    queues: Mapping[str, Queue] | None = None,
    resource_quotas: Sequence[ResourceQuota] = (),
    config: AdmissionConfig | None = None,
    target: TargetWorkload | None = None,
    progress: Progress | None = None,
    explain_at: float | None = None,
    profile: Profile = DEFAULT_PROFILE,
    faults: Sequence[GpuFault] = (),
    idle_policies: Sequence[IdlePolicy] = (),
    kinds: Mapping[str, str] | None = None,
    idle_dry_run: bool = False,
    cost: CostSettings | None = None,
    inference: InferenceSettings | None = None,
    node_faults: Sequence[NodeFault] = (),
    node_pools: PoolSettings | None = None,
) -> TenancyRun:
    """Replay workloads (pods and gangs) through queues, quotas, priorities, preemption and
    backfill: arrivals at their creation time, each pod running for its workload's duration
    (resumed from the last checkpoint after an eviction). ``explain_at``: also capture why
    workloads wait at that moment (seconds from the first arrival). ``profile``: which plugin
    at each extension point. ``faults``: XIDs injected on GPUs at their times (seconds from the
    first arrival). ``idle_policies``: judged every minute of simulated time, acting on idle
    GPU holders (``kinds``: the object kind of each workload key, for their scopes;
    ``idle_dry_run``: report only); what they did is the run's ``idle``. ``cost``: what the
    pods cost, priced and grouped as it says, with their utilisation sampled from the usage
    profiles without changing the run (:mod:`gpufleet.backends.sim.costs`); the run's
    ``cost``. ``inference``: the inference services' requests, served by replicas their
    autoscalers add and remove (:mod:`gpufleet.backends.sim.inference`); the run goes on until
    their requests stop, and what they met is its ``serving``.
    ``node_faults``: spot interruptions and node failures (their random times drawn
    from ``seed``); what they and the GPU faults did, with what spot capacity saved at
    ``cost``'s prices, is the run's ``interruptions``. ``node_pools``: pools whose nodes an
    autoscaler adds for work that waits for capacity and removes when unneeded
    (:mod:`gpufleet.backends.sim.node_pools`), each pool's minimum there from the start beside
    ``nodes``; what they did and cost is the run's ``pools``."""
    started = time.perf_counter()
    quota_capacity = None
    if node_pools is not None:
        quota_capacity = _capacity_at_most(nodes, node_pools)
        named = {node.name for node in nodes}
        nodes = [*nodes, *(n for n in node_pools.start_nodes() if n.name not in named)]
    all_pods = [p for t in workloads for p in t.workload.pods]
    target = target if target is not None else typical_shapes(all_pods)
    table = NodeTable(nodes)
    queues = dict(queues or {})
    core = SchedulerCore(
        table,
        make_policy(policy, table, PolicyContext(target, seed)),
        tie_rank=tie_rank(table, seed),
        queues=queues,
        resource_quotas=resource_quotas,
        config=config,
        profile=profile,
        quota_capacity=quota_capacity,
    )
    span = max((t.created for t in workloads), default=0.0) - min(
        (t.created for t in workloads), default=0.0
    )
    sim = SimulatedCluster(
        nodes,
        (),
        Mode.REPLAY,
        target,
        workloads=workloads,
        faults=faults,
        node_faults=node_faults,
        seed=seed,
    )
    queue_recorder = sim.queue_recorder = QueueRecorder(
        sim.world,
        core.quotas.queues,
        # Entitlements divide what the quotas count (with pools: the cluster at their maximum).
        cluster_capacity(nodes) if quota_capacity is None else quota_capacity,
        entitlement_every=max(span / 2000, 1.0),
        busy_until=span,
    )
    snapshot: list[PendingExplanation] | None = None
    tick = _progress_hook(sim, len(all_pods), progress)

    def on_iteration() -> None:
        nonlocal snapshot
        if tick is not None:
            tick()
        # Taken once, even if nothing waits then (an empty snapshot is an answer too).
        if explain_at is not None and snapshot is None and sim.clock.now() >= explain_at:
            snapshot = core.explain_pending()

    idle = None
    backend: ClusterBackend = sim
    if idle_policies:
        backend = idle = IdleTicking(sim, idle_policies, workloads, kinds, dry_run=idle_dry_run)
    serving = None
    if inference is not None and inference.services:
        given: dict[str, list[TimedWorkload]] = {}
        for timed in workloads:
            owner = inference.replica_owner.get(timed.workload.key)
            if owner is not None:
                given.setdefault(owner, []).append(timed)
        backend = serving = InferenceTicking(
            backend,
            sim,
            inference.services,
            inference.autoscaling,
            inference.templates,
            given,
            seed,
        )
    scaling = None
    if node_pools is not None:
        backend = scaling = PoolScaling(backend, sim, node_pools, core.time_format)
    meter = None
    if cost is not None:
        sim.recorder.holds = HoldLog()
        if cost.sample_every_s is not None:
            telemetry = idle.telemetry if idle is not None else None
            backend = meter = UsageMeter(backend, sim, telemetry, cost.sample_every_s)
    _run(sim, core, on_iteration, backend, () if scaling is None else (scaling,))
    if progress is not None:
        progress(len(all_pods), len(all_pods))
    now = sim.clock.now()
    never_ran = {key: sim.recorder.messages.get(key, "") for key in sim.pending}
    replay = sim.recorder.replay_result(
        policy, seed, time.perf_counter() - started, len(all_pods), never_ran
    )
    tenancy = queue_recorder.result(now)
    waiting_at_end = core.explain_pending()
    waiting = {e.workload: e.waiting_for for e in waiting_at_end}
    jobs = job_reports(sim.job_runs, sim.holds, waiting)
    for report in jobs:
        stats = tenancy.queues.get(report.queue)
        if stats is not None:
            stats.pod_failures += report.attempt_failures
            stats.restarts += report.restarts
    return TenancyRun(
        replay=replay,
        tenancy=tenancy,
        allocation_busy_pct=queue_recorder.busy_allocation_pct(),
        waiting_at_end=[_report(e) for e in waiting_at_end],
        explained_at=explain_at,
        waiting_at=[_report(e) for e in snapshot or ()],
        jobs=jobs,
        budgets_at_end=budget_reports(core),
        idle=None if idle is None else idle.finish(now),
        cost=_cost(
            sim,
            nodes,
            [*workloads, *(() if serving is None else serving.made)],
            kinds,
            cost,
            meter,
            now,
            scaling is not None,
        ),
        serving=() if serving is None else serving.finish(core.time_format),
        interruptions=(
            sim.interruption_report(now, None if cost is None else cost.prices)
            if faults or node_faults
            else None
        ),
        pools=None if scaling is None else scaling.finish(now),
    )


def _capacity_at_most(nodes: Sequence[Node], pools: PoolSettings) -> dict[str, int]:
    """What the cluster may grow to: ``nodes`` and every pool at its maximum (the top of the
    quota tree, as Kueue's quotas do not shrink to the nodes there now)."""
    capacity = cluster_capacity(nodes)
    for pool in pools.pools:
        for key, amount in cluster_capacity([pool.template]).items():
            capacity[key] = capacity.get(key, 0) + amount * pool.max_nodes
    return capacity


def _cost(
    sim: SimulatedCluster,
    nodes: Sequence[Node],
    workloads: Sequence[TimedWorkload],
    kinds: Mapping[str, str] | None,
    settings: CostSettings | None,
    meter: UsageMeter | None,
    end: float,
    pools: bool = False,
) -> tuple[CostReport, ...]:
    holds = sim.recorder.holds
    if settings is None or holds is None:
        return ()
    held = holds.holds()
    if all(h.end is not None for h in held):  # the run ends when its last pod stopped
        end = max((h.end for h in held if h.end is not None), default=end)
    # Pods are priced on the node they ran on, a pool's too; the unheld capacity counted as
    # idle is the nodes the run began with (a pool's nodes are billed in its own report).
    runs = pod_runs(held, sim.nodes, workloads, end, kinds)
    utilisation = None if meter is None else meter.mean_utilisation()
    return run_cost(runs, nodes, settings, end, utilisation, pools)


def budget_reports(core: SchedulerCore) -> list[BudgetReport]:
    """Every budgeted queue's budget as the core's budget check counts it now."""
    check = budget_check_of(core.admission_checks)
    if check is None:
        return []
    return [
        BudgetReport(
            queue,
            status.used_gpu_hours,
            status.budget.gpu_hours,
            status.budget.period.value,
            status.state.value,
            check.budgets[queue].action.value,
        )
        for queue, status in sorted(check.statuses().items())
    ]


def job_reports(
    runs: Sequence[tuple[Workload, JobRun]],
    holds: Callable[[str], bool],
    waiting: Mapping[str, str] | None = None,
) -> list[JobReport]:
    """How each job of a run fared (see :class:`JobReport`). A job that has not ended is
    Running only while ``holds`` (does the pod run now?) says one of its pods runs; else it is
    Pending, for what ``waiting`` (workload key -> what it waits for) says it waits for."""
    reports = []
    waiting = waiting or {}
    for workload, run in runs:
        done, total = run.completions
        reason = run.reason
        if run.outcome is not None:
            state = str(run.outcome)
        elif any(holds(key) for key in run.pod_keys):
            state = "Running"
        else:
            state, reason = "Pending", reason or waiting.get(workload.key, "")
        reports.append(
            JobReport(
                workload=workload.key,
                kind=str(run.spec.kind),
                name=run.spec.name,
                queue=workload.queue,
                state=state,
                reason=reason,
                message=run.message,
                completed=done,
                completions=total,
                attempt_failures=run.attempt_failures,
                failed_pods=run.failed_pods,
                restarts=run.restarts,
                retries=run.retries,
            )
        )
    return reports


def _report(explanation: PendingExplanation) -> PendingReport:
    e = explanation
    return PendingReport(
        e.workload, e.queue, e.position, e.waiting_for, e.message, e.estimated_start
    )
