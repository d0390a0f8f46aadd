"""Read-only views of the control plane in the API's shapes (:mod:`gpufleet.api.schemas`).

The API maps the service's records (:mod:`gpufleet.service.records`) to its own shapes here;
the service never sees those shapes. Each function reads the plane under its lock and converts
model units to the units people read (cores, MiB, GPUs). A tenant sees only its own
workloads; on the node map, the pods of other tenants are shown as ``(other tenant)``.
Explanations of waiting workloads are computed once per scheduling turn and shared by all
readers of that turn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gpufleet.api.schemas import (
    BudgetView,
    ClusterSummary,
    DeviceView,
    EventView,
    Explanation,
    FairShareView,
    History,
    HistoryPoint,
    JobStatusView,
    NodeView,
    PodView,
    PriorityClassView,
    QueueView,
    Role,
    TokenView,
    WorkloadDetail,
    WorkloadState,
    WorkloadSummary,
)
from gpufleet.control.status import queue_numbers
from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.queues import QueuePreemption
from gpufleet.model.resources import CPU, GPU, GPU_MODEL_PREFIX
from gpufleet.model.sharing import describe_request
from gpufleet.model.workload import split_workload_key
from gpufleet.scheduling.core import PendingExplanation
from gpufleet.scheduling.plugins.budget import BudgetCheck, budget_check_of
from gpufleet.scheduling.usage_history import UsageHistory
from gpufleet.service.auth import Principal
from gpufleet.service.plane_book import NotFoundError
from gpufleet.service.protocol import Plane
from gpufleet.service.records import POD_RUNNING, PodRecord, WorkloadRecord
from gpufleet.service.store import StoredEvent, StoredToken

OTHER_TENANT = "(other tenant)"


def readable(resources: Mapping[str, int]) -> dict[str, float]:
    """Model units to people's: milli-CPU to cores, milli-GPU to GPUs, MiB stays MiB."""
    out: dict[str, float] = {}
    for key, amount in resources.items():
        if key in (CPU, GPU) or key.startswith(GPU_MODEL_PREFIX):
            out[key] = round(amount / 1000, 3)
        else:
            out[key] = float(amount)
    return out


def event_view(event: StoredEvent) -> EventView:
    return EventView(
        time=event.time,
        type=event.type,
        reason=event.reason,
        message=event.message,
        workload=event.workload,
    )


def token_view(token: StoredToken) -> TokenView:
    return TokenView(
        id=token.id,
        tenant=token.tenant,
        role=Role(token.role),
        queues=list(token.queues),
        name=token.name,
        created=token.created,
        expires=token.expires,
        last_used=token.last_used,
        revoked=token.revoked,
    )


def explanations(plane: Plane) -> dict[str, PendingExplanation]:
    """Why each waiting workload waits (computed at most once per turn and core)."""
    with plane.lock:
        stamp = (plane.turns, id(plane.core))
        cached = plane.explained
        if cached is not None and cached[0] == stamp:
            return cached[1]
        found = {e.workload: e for e in plane.core.explain_pending(estimate=True)}
        plane.explained = (stamp, found)
        return found


def workload_summary(
    record: WorkloadRecord, explained: Mapping[str, PendingExplanation]
) -> WorkloadSummary:
    workload = record.timed.workload
    why = explained.get(record.core_key or record.key)
    if record.state is not WorkloadState.PENDING:
        why = None
    return WorkloadSummary(
        name=workload.name,
        namespace=workload.namespace,
        key=record.key,
        kind=record.kind,
        tenant=record.tenant,
        queue=workload.queue,
        priority=workload.priority,
        priority_class=workload.priority_class,
        state=record.state,
        pods=len(record.pods),
        pods_running=record.running_pods,
        gpus=round(record.gpus, 3),
        gpu_request=record.gpu_request,
        submitted=record.submitted,
        started=record.started,
        finished=record.finished,
        expected_runtime=record.timed.duration,
        waiting_for=why.waiting_for if why else None,
        message=why.message if why else None,
        reason=next((p.reason for p in record.pods.values() if p.reason), None),
    )


def workloads(
    plane: Plane,
    principal: Principal,
    state: str | None = None,
    queue: str | None = None,
    namespace: str | None = None,
) -> list[WorkloadSummary]:
    explained = explanations(plane)
    with plane.lock:
        return [
            workload_summary(record, explained)
            for record in sorted(plane.records.values(), key=lambda r: r.seq)
            if principal.may_see(record.tenant)
            and (state is None or record.state.value.lower() == state.lower())
            and (queue is None or record.timed.workload.queue == queue)
            and (namespace is None or record.timed.workload.namespace == namespace)
        ]


def workload_detail(plane: Plane, principal: Principal, key: str) -> WorkloadDetail:
    explained = explanations(plane)
    with plane.lock:
        record = plane.visible(principal, key)
        summary = workload_summary(record, explained)
        workload = record.timed.workload
        pods = []
        for pod_record in record.pods.values():
            pod, placement = pod_record.pod, pod_record.placement
            share = None
            if placement is not None and 0 < placement.milli_per_device < MILLI_PER_GPU:
                share = placement.milli_per_device / MILLI_PER_GPU
            pods.append(
                PodView(
                    name=pod.name,
                    state=pod_record.state,
                    node=placement.node if placement else None,
                    gpu_indices=list(placement.gpu_indices) if placement else [],
                    gpu_share=share,
                    mig_slices=[f"{g}:{s}" for g, s in placement.mig_slices] if placement else [],
                    cpu=pod.cpu_milli / 1000,
                    memory_mib=pod.memory_mib,
                    gpus=round(pod_record.gpus, 3),
                    gpu_request=describe_request(pod.gpu),
                    restarts=pod_record.restarts,
                    reason=pod_record.reason or None,
                    completion_index=pod_record.index,
                )
            )
        return WorkloadDetail(
            **summary.model_dump(),
            checkpoint_interval=workload.checkpoint_interval,
            preemptible=workload.preemptible,
            min_member=workload.gang_size,
            jobs=[
                JobStatusView(
                    kind=job.kind,
                    completed=job.completed,
                    completions=job.completions,
                    failed_pods=job.failed_pods,
                    restarts=job.restarts,
                    # A job that has not ended is in its workload's state: Pending while
                    # it waits (for a budget, say), never Running before it runs.
                    state=job.outcome or record.state.value,
                    reason=job.reason or None,
                    message=job.message or None,
                    failed_indexes=list(job.failed_indexes),
                )
                for job in record.jobs.values()
            ],
            pod_views=pods,
            events=[event_view(e) for e in record.events],
        )


def explanation(plane: Plane, principal: Principal, key: str) -> Explanation:
    explained = explanations(plane)
    with plane.lock:
        record = plane.visible(principal, key)
        queue = record.timed.workload.queue
        why = explained.get(record.core_key or key)
        if record.state is WorkloadState.PENDING and why is not None:
            return Explanation(
                workload=key,
                state=record.state,
                queue=queue,
                position=why.position,
                waiting_for=why.waiting_for,
                message=why.message,
                estimated_start=why.estimated_start,
                never=why.never,
            )
        at = plane.core.time_format  # the world's clock: simulated, or the wall clock
        message = {
            WorkloadState.PENDING: "submitted; the scheduler has not looked at it yet",
            WorkloadState.ADMITTED: "admitted; its pods are being placed",
            WorkloadState.RUNNING: f"running since {at(record.started or 0)}",
            WorkloadState.SUCCEEDED: f"finished at {at(record.finished or 0)}",
            WorkloadState.CANCELLED: f"cancelled at {at(record.finished or 0)}",
            WorkloadState.FAILED: "failed",
        }[record.state]
        return Explanation(workload=key, state=record.state, queue=queue, message=message)


def queues(plane: Plane) -> list[QueueView]:
    with plane.lock:
        numbers = queue_numbers(plane.core)
        check = budget_check_of(plane.core.admission_checks)
        out = []
        for name, queue in sorted(plane.core.quotas.queues.items()):
            found = numbers.get(name)
            out.append(
                QueueView(
                    name=name,
                    parent=queue.parent,
                    weight=queue.weight,
                    nominal=readable(queue.nominal),
                    borrowing_limit=readable(queue.borrowing_limit),
                    lending_limit=readable(queue.lending_limit),
                    usage=readable(found.usage) if found else {},
                    borrowed=readable(found.borrowed) if found else {},
                    share=found.share if found else 0.0,
                    pending=found.pending if found else 0,
                    running=found.running if found else 0,
                    queueing_strategy=queue.queueing_strategy.value,
                    gpu_models=list(queue.gpu_models),
                    preemption=_preemption(queue.preemption),
                    flavor_fungibility={
                        "whenCanBorrow": queue.fungibility.when_can_borrow.value,
                        "whenCanPreempt": queue.fungibility.when_can_preempt.value,
                    },
                    budget=_budget(check, name),
                    fair_share=_fair_share(plane.core.state.usage_history, name),
                )
            )
        return out


def _budget(check: BudgetCheck | None, queue: str) -> BudgetView | None:
    """A queue's budget now, as the core's budget check counts it (None: no budget, or a
    profile without the check)."""
    status = check.status(queue) if check is not None else None
    if check is None or status is None:
        return None
    budget = check.budgets[queue]
    return BudgetView(
        gpu_hours=budget.gpu_hours,
        period=budget.period.value,
        warn_at=budget.warn_at,
        action=budget.action.value,
        used_gpu_hours=round(status.used_gpu_hours, 3),
        remaining_gpu_hours=round(status.remaining_gpu_hours, 3),
        state=status.state.value,
        period_start=status.period.start,
        resets=status.period.end,
    )


def _fair_share(history: UsageHistory | None, queue: str) -> FairShareView | None:
    """A queue's decayed usage now (None: fair sharing over time is off)."""
    usage = history.describe(queue) if history is not None else None
    if history is None or usage is None:
        return None
    return FairShareView(
        usage_half_life=history.half_life,
        usage_gpu_hours=round(usage.gpu_hours, 3),
        share=round(usage.share, 6),
        ratio=round(usage.ratio, 6) if math.isfinite(usage.ratio) else None,
        factor=round(usage.factor, 6),
        users={user: round(hours, 3) for user, hours in usage.users.items()},
    )


def _preemption(policy: QueuePreemption) -> dict[str, str | int]:
    """A queue's preemption policies, as its spec writes them."""
    out: dict[str, str | int] = {
        "withinQueue": policy.within_queue.value,
        "reclaimWithinCohort": policy.reclaim_within_cohort.value,
        "borrowWithinCohort": policy.borrow_within_cohort.value,
    }
    if policy.max_priority_threshold is not None:
        out["maxPriorityThreshold"] = policy.max_priority_threshold
    return out


def queue(plane: Plane, name: str) -> QueueView:
    for view in queues(plane):
        if view.name == name:
            return view
    raise NotFoundError(f"queue {name} not found")


def priority_classes(plane: Plane) -> list[PriorityClassView]:
    with plane.lock:
        return [
            PriorityClassView(
                name=c.name,
                value=c.value,
                preemption_policy=c.preemption_policy.value,
                global_default=c.global_default,
            )
            for c in sorted(plane.priority_classes().values(), key=lambda c: -c.value)
        ]


def nodes(plane: Plane, principal: Principal, name: str | None = None) -> list[NodeView]:
    used = _device_use(plane)
    with plane.lock:
        by_node: dict[str, list[tuple[str, PodRecord]]] = {}
        for record in plane.records.values():
            if not record.active:
                continue
            shown = record.key if principal.may_see(record.tenant) else OTHER_TENANT
            for pod_record in record.pods.values():
                placement = pod_record.placement
                if pod_record.state == POD_RUNNING and placement is not None:
                    by_node.setdefault(placement.node, []).append((shown, pod_record))
        out = []
        for node in plane.cluster_nodes():
            if name is not None and node.name != name:
                continue
            cpu = memory = 0
            milli: dict[int, int] = {}
            holders: dict[int, list[str]] = {}
            shared: set[int] = set()
            for shown, pod_record in by_node.get(node.name, []):
                pod, placement = pod_record.pod, pod_record.placement
                assert placement is not None
                cpu += pod.cpu_milli
                memory += pod.memory_mib
                each = placement.milli_per_device
                for index in placement.gpu_indices:
                    milli[index] = milli.get(index, 0) + each
                    holders.setdefault(index, []).append(shown)
                    if each < MILLI_PER_GPU:
                        shared.add(index)
                for index, _slot in placement.mig_slices:
                    holders.setdefault(index, []).append(shown)
            devices = []
            for gpu in node.gpus:
                pods_here = holders.get(gpu.index, [])
                if gpu.partitioned:
                    slots = len(gpu.mig_slices) or 1
                    allocated = min(1.0, len(pods_here) / slots)
                else:
                    allocated = min(1.0, milli.get(gpu.index, 0) / MILLI_PER_GPU)
                devices.append(
                    DeviceView(
                        index=gpu.index,
                        model=gpu.model,
                        memory_mib=gpu.memory_mib,
                        allocated=round(allocated, 3),
                        shared=gpu.index in shared or len(pods_here) > 1,
                        mig=gpu.partitioned,
                        pods=sorted(pods_here),
                        utilization=use[0] if (use := used.get((node.name, gpu.index))) else None,
                        memory_used_mib=use[1] if use else None,
                        healthy=gpu.healthy,
                    )
                )
            out.append(
                NodeView(
                    name=node.name,
                    gpu_model=node.gpu_model,
                    cpu=node.cpu_milli / 1000,
                    cpu_allocated=cpu / 1000,
                    memory_mib=node.memory_mib,
                    memory_allocated_mib=memory,
                    gpus=node.gpu_count,
                    gpus_allocatable=sum(d.healthy for d in devices),
                    gpus_allocated=round(sum(d.allocated for d in devices), 3),
                    labels=dict(node.labels),
                    taints=[f"{t.key}={t.value}:{t.effect.value}" for t in node.taints],
                    devices=devices,
                )
            )
        if name is not None and not out:
            raise NotFoundError(f"node {name} not found")
        return out


def _device_use(plane: Plane) -> dict[tuple[str, int], tuple[float, int]]:
    """The real use of every GPU the world measures, by (node, index): utilisation (0..1) and
    memory used (MiB); empty when it measures none."""
    if plane.telemetry is None:
        return {}
    return {
        (node.hostname, sample.gpu): (round(sample.gpu_util / 100.0, 3), sample.fb_used_mib)
        for node in plane.telemetry.read()
        for sample in node.samples
        if not sample.mig_profile
    }


def cluster(plane: Plane) -> ClusterSummary:
    with plane.lock:
        total, allocated = plane.gpu_totals()
        states = [r.state for r in plane.records.values()]
        return ClusterSummary(
            backend=plane.backend_name,
            time=round(plane.now(), 3),
            speed=plane.speed,
            nodes=len(plane.cluster_nodes()),
            gpus=total,
            gpus_allocated=round(allocated, 3),
            gpu_allocation=round(min(allocated / total, 1.0), 4) if total else 0.0,
            workloads_pending=sum(s is WorkloadState.PENDING for s in states),
            workloads_running=sum(
                s in (WorkloadState.RUNNING, WorkloadState.ADMITTED) for s in states
            ),
            policy=plane.policy,
        )


def history(plane: Plane, since: float | None = None) -> History:
    with plane.lock:
        points = [
            HistoryPoint(**point)
            for point in plane.history
            if since is None or float(point["time"]) > since
        ]
    return History(points=points)


def events(plane: Plane, principal: Principal, workload: str | None) -> list[EventView]:
    with plane.lock:
        if workload is not None:  # its key, or namespace/name where one kind uses the name
            namespace, kind, name = split_workload_key(workload)
            record = plane.records.get(workload)
            if record is None or not principal.may_see(record.tenant):
                record = plane.find(principal, namespace, name, kind or None)
            return [event_view(e) for e in record.events]
        found = plane.recent_events(500)
        return [
            event_view(e)
            for e in found
            if e.workload is None
            or (e.workload in plane.records and principal.may_see(plane.records[e.workload].tenant))
        ]
