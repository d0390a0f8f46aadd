"""The scheduling core: cluster events in, actions out. Pure, synchronous, deterministic.

It keeps the node table, the queue quotas, the admitted workloads and the waiting ones. One call
of :meth:`SchedulerCore.cycle` is one scheduling cycle (a workload is one pod or a gang):

1. release workloads whose backoff has passed; evict gangs that did not become ready in time;
   wake workloads that may now preempt someone who has run its minimum time;
2. admit first the preemptors whose victims are gone;
3. admit as many workloads as there are queues with work, each time from the queue with the
   lowest weighted dominant-resource share (so the surplus goes by weight), in each queue by
   priority, then arrival: quota (queue tree and namespace caps), then placement of the whole
   gang on a trial of the table (inside one topology domain if it asks), then the exact quota
   with GPUs per model; commit and emit a Bind per pod;
4. for a workload that does not get in: preemption on a trial (the victims' eviction must let it
   both pass quota and place), or, for the first gang blocked by capacity, a backfill
   reservation;
5. park what could not run, telling each workload why once per reason, until an event that
   could help: capacity freed where one of its pods could go, quota given back, or a new
   candidate victim.

Call cycles until one admits and evicts nothing (:meth:`run_until_idle`). With one queue
without quota and one-pod workloads this is the plain placement loop of the fill-up mode.

What it does not do: I/O, clocks (the caller passes ``now``), or deciding the placement of one
pod (the :class:`~gpufleet.scheduling.engine.PlacementEngine`).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.model import MILLI_PER_GPU, Placement, Pod
from gpufleet.model.actions import Action, Bind, Evict, MarkUnschedulable
from gpufleet.model.events import (
    BindFailed,
    ClusterEvent,
    NodeAdded,
    NodeRemoved,
    PodAdded,
    PodBound,
    PodDeleted,
    PodReady,
    WorkloadAdded,
)
from gpufleet.model.tenancy import GPU, PreemptionPolicy, Queue, ResourceQuota, Workload
from gpufleet.scheduling.admission import (
    AdmissionConfig,
    Quotas,
    cluster_capacity,
    requested,
    used,
)
from gpufleet.scheduling.backfill import Reservation, plan_reservation
from gpufleet.scheduling.engine import Bound, PlacementEngine, Unschedulable
from gpufleet.scheduling.framework import Policy
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable
from gpufleet.scheduling.pending import Group, Parked, PendingWorkload, PendingWorkloads
from gpufleet.scheduling.preemption import find_victims, node_first, victim_order
from gpufleet.scheduling.running import RunningWorkload
from gpufleet.scheduling.topology import place_workload

ADMITTED = "admitted"
PREEMPTED = "preempted"
BLOCKED = "blocked"


def _no_share(queue: str) -> tuple[float, ...]:
    return ()


@dataclass(frozen=True, slots=True)
class PendingExplanation:
    """Why a workload waits, where it stands in its queue, and when it may start."""

    workload: str
    queue: str
    #: 1 for the next workload its queue will try.
    position: int
    #: "quota", "capacity", "preempting" (victims are leaving), "backoff" or "not tried yet".
    waiting_for: str
    message: str
    #: Seconds of simulated or wall time; None when no plan gives one.
    estimated_start: float | None


class SchedulerCore:
    """Events in, actions out; see the module docstring."""

    def __init__(
        self,
        table: NodeTable,
        policy: Policy,
        tie_rank: IntArray | None = None,
        explain: bool = True,
        queues: Mapping[str, Queue] | None = None,
        resource_quotas: Iterable[ResourceQuota] = (),
        config: AdmissionConfig | None = None,
    ) -> None:
        self.table = table
        self.engine = PlacementEngine(table, policy, tie_rank=tie_rank)
        self.config = config or AdmissionConfig()
        self.quotas = Quotas(queues or {}, cluster_capacity(table.nodes), resource_quotas)
        self.explain_failures = explain
        self.now = 0.0
        self.pending = PendingWorkloads(self._effective_priority)
        #: Admitted workloads, by workload key and by queue; those being evicted apart.
        self.running: dict[str, RunningWorkload] = {}
        self.evicting: dict[str, RunningWorkload] = {}
        self._by_queue: dict[str, dict[str, RunningWorkload]] = {}
        self._priorities: dict[str, Counter[int]] = {}
        #: Pod key -> workload key, for admitted pods and for waiting ones.
        self.owner: dict[str, str] = {}
        self._waiting_pod: dict[str, str] = {}
        #: Preemptor -> victims not yet gone; victims' rows are held for their preemptor.
        self.nominated: dict[str, set[str]] = {}
        #: Preemptor -> (its request, charged to its queue, and the rows it was planned on)
        #: while its victims leave, so that nothing else takes what the preemption freed
        #: (kube-scheduler's nominated pods count on their nominated node the same way).
        self._holds: dict[str, tuple[Workload, dict[str, int], IntArray]] = {}
        self.reservation: Reservation | None = None
        self._requeue_at: dict[str, float] = {}
        #: Workload key -> times it failed to start (a bind failed, a gang not ready in time),
        #: kept while it waits again, so that its backoff grows.
        self._failures: dict[str, int] = {}
        self._ready_deadlines: list[tuple[float, str]] = []
        self._eligible: list[tuple[float, str]] = []
        self._failed_binds: list[tuple[str, str]] = []
        self._victims_ripen: float | None = None
        #: Work lost and GPUs of candidate victims, kept for one cycle (see victim_order).
        self._victim_costs: dict[int, tuple[RunningWorkload, float, int]] = {}
        #: Queue -> run time -> its preemptible workloads that ran at least that long, kept
        #: for one cycle (dropped when the queue's running set changes): the reclaim scan.
        self._reclaimable: dict[str, dict[float, list[RunningWorkload]]] = {}
        self._never_fits_cache: dict[object, bool] = {}
        self._aged_at = 0.0
        self._planned_at = -math.inf
        #: Preemption searches left this cycle, and workloads whose search was put off.
        self._search_budget = 0
        self._deferred: set[str] = set()
        #: (time, preemptor, victim) of every preemption, for reports and invariants.
        self.preemptions: list[tuple[float, str, str]] = []

    # ----------------------------------------------------------------------------- events
    def handle(self, event: ClusterEvent) -> None:
        if isinstance(event, WorkloadAdded):
            self.add(event.workload)
        elif isinstance(event, PodAdded):
            pod = event.pod
            if pod.key not in self.owner and pod.key not in self._waiting_pod:
                self.add(self._lone(pod))
        elif isinstance(event, PodDeleted):
            self._on_pod_deleted(event.key)
        elif isinstance(event, PodReady):
            running = self.running.get(self.owner.get(event.key, ""))
            if running is not None:
                running.unready.discard(event.key)
                if not running.unready:
                    running.ready_by = None
        elif isinstance(event, PodBound):
            self._on_pod_bound(event.pod, event.placement)
        elif isinstance(event, BindFailed):
            self._on_bind_failed(event.key, event.reason)
        elif isinstance(event, NodeAdded):
            row = self.table.add_node(event.node)
            self._never_fits_cache.clear()
            self._wake_for_rows([row])
        elif isinstance(event, NodeRemoved):
            self.table.remove_node(event.name)
            self._never_fits_cache.clear()

    def handle_all(self, events: Iterable[ClusterEvent]) -> None:
        for event in events:
            self.handle(event)

    def _lone(self, pod: Pod) -> Workload:
        return Workload(
            pod.name, pod.namespace, (pod,), self.quotas.queue_for(pod), pod.priority,
            labels=pod.labels,
        )  # fmt: skip

    def add(self, workload: Workload) -> None:
        """A new workload to admit (a repeated key is ignored; an unknown queue is an error)."""
        if workload.key in self.running or workload.key in self.pending:
            return
        if workload.queue not in self.quotas.queues:
            raise ValueError(f"workload {workload.key} names unknown queue {workload.queue!r}")
        for pod in workload.pods:
            self.engine.observe(pod)
        self._enqueue(workload)

    def _enqueue(self, workload: Workload, not_before: float = 0.0) -> None:
        for pod in workload.pods:
            self._waiting_pod[pod.key] = workload.key
        self.pending.add(workload, self.now, not_before)

    def _dequeue(self, key: str) -> None:
        workload = self.pending.remove(key)
        self._failures.pop(key, None)
        self.nominated.pop(key, None)
        self._release_hold(key)
        if workload is not None:
            for pod in workload.pods:
                self._waiting_pod.pop(pod.key, None)
            if self.reservation is not None and self.reservation.owner == key:
                self._drop_reservation()

    def _on_pod_deleted(self, key: str) -> None:
        waiting = self._waiting_pod.get(key)
        if waiting is not None:
            # A waiting pod is gone (deleted, or dropped by a fill-up run): so is its workload,
            # since a gang without all its pods cannot start.
            self._dequeue(waiting)
            return
        owner_key = self.owner.pop(key, None)
        if owner_key is None:
            return
        running = self.running.get(owner_key) or self.evicting.get(owner_key)
        if running is None:
            return
        bound = running.bound.pop(key, None)
        if bound is not None:
            self._release_pod(running, bound)
        if running.bound:
            return
        if self.evicting.pop(owner_key, None) is not None:
            self._enqueue(running.workload, self._requeue_at.pop(owner_key, 0.0))
            for victims in self.nominated.values():
                victims.discard(owner_key)
        else:
            self._failures.pop(owner_key, None)
            self._forget(running)

    def _release_pod(self, running: RunningWorkload, bound: Bound) -> None:
        self.engine.release(bound.allocation)
        share = used([bound], [self.table.nodes[bound.allocation.row].gpu_model])
        self.quotas.refund(running.workload, share)
        for k, v in share.items():
            running.usage[k] = running.usage.get(k, 0) - v
        self._wake_for_rows([bound.allocation.row])
        self.pending.wake_all(Parked.QUOTA)

    def _on_bind_failed(self, key: str, reason: str) -> None:
        owner_key = self.owner.get(key)
        running = self.running.get(owner_key or "")
        if running is None:
            return
        bound = running.bound.pop(key, None)
        del self.owner[key]
        if bound is not None:
            self._release_pod(running, bound)
        # The rest of the gang (if any) is evicted next cycle; all of it retries after backoff.
        self._requeue_at[running.key] = self.now + self._backoff(running)
        if running.bound:
            self._failed_binds.append((running.key, f"bind of {key} failed: {reason}"))
        else:
            self._forget(running)
            self._enqueue(running.workload, self._requeue_at.pop(running.key))

    def _on_pod_bound(self, pod: Pod, placement: Placement) -> None:
        """Take exactly the devices a pod already holds (bound by someone else, or a resync)."""
        if pod.key in self.owner:
            return
        waiting = self._waiting_pod.get(pod.key)
        if waiting is not None:
            self._dequeue(waiting)
        table = self.table
        row = table.row_of[placement.node]
        demand = self.engine.demand(pod)
        node = table.nodes[row]
        position_of = {gpu.index: p for p, gpu in enumerate(node.gpus)}
        slots = tuple((position_of[g], slot) for g, slot in placement.mig_slices)
        milli = placement.gpu_milli_per_device or (MILLI_PER_GPU if placement.gpu_indices else 0)
        allocation = table.allocate(
            row,
            pod.cpu_milli,
            pod.memory_mib,
            tuple(position_of[i] for i in placement.gpu_indices),
            milli,
            demand.mig_profile if slots else -1,
            slots,
            demand.tag,
        )
        bound = Bound(pod, placement, allocation)
        usage = used([bound], [node.gpu_model])
        workload = self._lone(pod)
        self.quotas.charge(workload, usage)
        self._track(RunningWorkload(workload, {pod.key: bound}, usage, self.now))

    # ----------------------------------------------------------------------------- book-keeping
    def _track(self, running: RunningWorkload) -> None:
        workload = running.workload
        self.running[workload.key] = running
        self._by_queue.setdefault(workload.queue, {})[workload.key] = running
        self._reclaimable.pop(workload.queue, None)
        self._priorities.setdefault(workload.queue, Counter())[workload.priority] += 1
        for key in running.bound:
            self.owner[key] = workload.key
        if workload.preemptible:
            heapq.heappush(
                self._eligible, (running.started + self.config.min_runtime, workload.key)
            )

    def _untrack(self, running: RunningWorkload) -> None:
        workload = running.workload
        self.running.pop(workload.key, None)
        self._by_queue[workload.queue].pop(workload.key, None)
        self._reclaimable.pop(workload.queue, None)
        counts = self._priorities[workload.queue]
        counts[workload.priority] -= 1
        if not counts[workload.priority]:
            del counts[workload.priority]

    def _forget(self, running: RunningWorkload) -> None:
        """A workload whose pods are all gone (finished)."""
        if running.key in self.running:
            self._untrack(running)

    # ----------------------------------------------------------------------------- cycle
    def cycle(self, now: float | None = None) -> list[Action]:
        """One scheduling cycle; see the module docstring."""
        if now is not None:
            self.now = max(self.now, now)
        actions: list[Action] = []
        self._victim_costs.clear()
        self._reclaimable.clear()
        self.pending.release_backoff(self.now)
        for key in sorted(self._deferred):
            group = self.pending.group_of(key)
            if group is not None and group.parked is not None:
                self.pending.unpark(group)
                group.freed_rows = None
        self._deferred.clear()
        self._evict_failed(actions)
        self._wake_preemptors()
        if self.config.aging_interval and self.now - self._aged_at >= self.config.aging_interval:
            self.pending.reprioritize()
            self._aged_at = self.now
        for key in [k for k, victims in self.nominated.items() if not victims]:
            del self.nominated[key]
            self._release_hold(key)
            group = self.pending.group_of(key)
            if group is not None and group.head.workload.key == key:
                self.pending.unpark(group)
                self._attempt(group, actions, allow_preemption=False, nominated=True)
        self._admit_by_share(actions)
        return actions

    def _admit_by_share(self, actions: list[Action]) -> None:
        """Up to one admission per queue with work: always from the queue with the lowest
        weighted share (recomputed after each admission), ties to the queue that admitted
        least this cycle, then by name."""
        queues = self.pending.queues()
        share: Callable[[str], tuple[float, ...]] = _no_share
        if self.quotas.tree.keys:
            share = self.quotas.tree.share
        elif len(queues) > 1:  # no queue names a quota: weigh the GPUs each queue holds
            share = self._gpu_share
        heap = [(share(q), 0, q) for q in queues]
        heapq.heapify(heap)
        self._search_budget = self.config.max_preemption_searches
        budget = len(queues)
        while heap and budget > 0:
            _, turns, queue = heapq.heappop(heap)
            for group in self.pending.ready_groups(queue):
                if group.head.workload.key in self.nominated:
                    continue
                outcome = self._attempt(group, actions, allow_preemption=True)
                if outcome == BLOCKED:
                    continue
                budget -= 1
                heapq.heappush(heap, (share(queue), turns + 1, queue))
                break

    def _gpu_share(self, queue: str) -> tuple[float, ...]:
        """The weighted share when the quota tree accounts no resource: the GPUs held by each
        queue on the path (its subtree), top first, divided by its weight."""
        tree = self.quotas.tree
        path = tree.paths[tree.index[queue]]
        held = dict.fromkeys(path, 0)
        for name, running in self._by_queue.items():
            gpu = sum(r.usage.get(GPU, 0) for r in running.values())
            for i in tree.paths[tree.index[name]]:
                if i in held:
                    held[i] += gpu
        return tuple(held[i] / float(tree.weight[i]) for i in path)

    def run_until_idle(self, now: float | None = None, max_cycles: int = 1_000_000) -> list[Action]:
        """Cycles until one admits and evicts nothing; all their actions."""
        actions: list[Action] = []
        for _ in range(max_cycles):
            step = self.cycle(now)
            actions.extend(step)
            if not any(isinstance(a, Bind | Evict) for a in step):
                break
        return actions

    def _effective_priority(self, pending: PendingWorkload) -> int:
        base = pending.workload.priority
        interval = self.config.aging_interval
        if not interval:
            return base
        return base + self.config.aging_step * int((self.now - pending.since) // interval)

    def _evict_failed(self, actions: list[Action]) -> None:
        """Gangs with a failed bind, and gangs not ready in time: released, retried later."""
        for key, reason in self._failed_binds:
            running = self.running.get(key)
            if running is not None:
                self._evict(running, reason, actions, None)
        self._failed_binds.clear()
        deadlines = self._ready_deadlines
        while deadlines and deadlines[0][0] <= self.now:
            deadline, key = heapq.heappop(deadlines)
            running = self.running.get(key)
            if running is None or running.ready_by != deadline or not running.unready:
                continue  # ready, gone, or admitted again since
            self._requeue_at[key] = self.now + self._backoff(running)
            timeout = self.config.gang_ready_timeout
            self._evict(running, f"gang not ready within {timeout:.0f}s", actions, None)

    def _wake_preemptors(self) -> None:
        """Workloads past their minimum run time become candidate victims: wake the parked
        workloads that could preempt them."""
        if self._victims_ripen is not None and self._victims_ripen <= self.now:
            self._victims_ripen = None
        due: list[RunningWorkload] = []
        eligible = self._eligible
        while eligible and eligible[0][0] <= self.now:
            running = self.running.get(heapq.heappop(eligible)[1])
            if running is not None:
                due.append(running)
        if not due or not self.pending.any_parked:
            return

        def could_preempt(group: Group) -> bool:
            workload = group.head.workload
            reclaim = self._may_reclaim(workload)
            return any(self._is_candidate(workload, r, reclaim) for r in due)

        self.pending.wake_preemptors(could_preempt)

    # ----------------------------------------------------------------------------- attempt
    def _attempt(
        self, group: Group, actions: list[Action], allow_preemption: bool, nominated: bool = False
    ) -> str:
        """Try to admit the head of ``group``. ``nominated``: it preempted and its victims
        are gone; a reservation made since (while it waited for them) does not bind it."""
        pending = group.head
        workload = pending.workload
        pending.attempts += 1
        may_preempt = workload.preemption_policy is not PreemptionPolicy.NEVER
        freed = group.freed_rows
        group.freed_rows = None
        if freed is not None and not self._fits_some_row(workload, freed):
            self.pending.park(group, Parked.CAPACITY, may_preempt)
            return BLOCKED
        check = self.quotas.check(workload, requested(workload.pods[: workload.gang_size]))
        if not check.admits:
            if allow_preemption and self._preempt(workload, actions):
                return PREEMPTED
            self._park(group, actions, Parked.QUOTA, f"waiting for quota: {check.message()}")
            return BLOCKED
        table = self.table
        mark = table.begin_trial()
        restrict = self._restrict_for(workload, keep_reservation=not nominated)
        result = place_workload(self.engine, workload, restrict, explain=self.explain_failures)
        if isinstance(result, Unschedulable):
            table.rollback(mark)
            if allow_preemption and self._preempt(workload, actions):
                return PREEMPTED
            self._plan_backfill(workload)
            self._park(group, actions, Parked.CAPACITY, self._unfit_message(workload, result))
            return BLOCKED
        usage = used(result, [table.nodes[b.allocation.row].gpu_model for b in result])
        exact = self.quotas.check(workload, usage)
        if not exact.admits:  # GPUs of a model its quota lacks: try the models it has room on
            table.rollback(mark)
            mark = table.begin_trial()
            retry = self._place_within_model_quota(workload, restrict)
            if retry is None:
                table.rollback(mark)
                self._park(group, actions, Parked.QUOTA, f"waiting for quota: {exact.message()}")
                return BLOCKED
            result, usage = retry
        if self._holds and not self._holds_survive(workload, usage):
            table.rollback(mark)
            self._park(group, actions, Parked.QUOTA, "waiting for quota: held for a preemptor")
            return BLOCKED
        table.commit(mark)
        self.pending.pop_head(group)
        self._admit(workload, result, usage, actions)
        return ADMITTED

    def _fits_some_row(self, workload: Workload, rows: Iterable[int]) -> bool:
        engine = self.engine
        demands = {p.signature: engine.demand(p) for p in workload.pods[: workload.gang_size]}
        alive = self.table.alive
        return any(
            bool(alive[row]) and engine.fits_row(d, row) for row in rows for d in demands.values()
        )

    def _place_within_model_quota(
        self, workload: Workload, base: BoolArray | None
    ) -> tuple[list[Bound], dict[str, int]] | None:
        table = self.table
        n = table.size
        tree = self.quotas.tree
        index = tree.index[workload.queue]
        if workload.preemptible:
            room = tree.available(workload.queue) - tree.usage[index]
        else:  # non-preemptible work must stay within nominal, on every level
            pinned = self.quotas.pinned_usage
            room = np.min([tree.nominal[i] - pinned[i] for i in tree.paths[index]], axis=0)
        ok_models = [
            model_id
            for model_id, model in enumerate(table.model_names)
            if (j := tree.key_index.get(f"{GPU}.{model}")) is None or room[j] > 0
        ]
        restrict = np.isin(table.model_id[:n], np.asarray(ok_models, np.int64)) | (
            table.gpu_count[:n] == 0
        )
        if base is not None:
            restrict &= base[:n]
        result = place_workload(self.engine, workload, restrict)
        if isinstance(result, Unschedulable):
            return None
        usage = used(result, [table.nodes[b.allocation.row].gpu_model for b in result])
        if not self.quotas.check(workload, usage).admits:
            return None
        return result, usage

    def _admit(
        self,
        workload: Workload,
        bound: Sequence[Bound],
        usage: dict[str, int],
        actions: list[Action],
    ) -> None:
        for pod in workload.pods:
            self._waiting_pod.pop(pod.key, None)
        self.quotas.charge(workload, usage)
        gang = workload.pods[: workload.gang_size]
        running = RunningWorkload(
            workload.with_pods(gang) if len(gang) < len(workload.pods) else workload,
            {b.pod.key: b for b in bound},
            dict(usage),
            self.now,
            unready={b.pod.key for b in bound} if len(bound) > 1 else set(),
        )
        if len(bound) > 1:
            running.ready_by = self.now + self.config.gang_ready_timeout
            heapq.heappush(self._ready_deadlines, (running.ready_by, workload.key))
        self._track(running)
        for b in bound:
            actions.append(Bind(b.pod, b.placement))
        # Pods beyond minMember start like lone pods once their gang runs.
        for pod in workload.pods[workload.gang_size :]:
            self._enqueue(workload.extra(pod))
        if self.reservation is not None and self.reservation.owner == workload.key:
            self._drop_reservation()

    # ----------------------------------------------------------------------------- blocked
    def _park(self, group: Group, actions: list[Action], why: str, message: str) -> None:
        workload = group.head.workload
        may_preempt = workload.preemption_policy is not PreemptionPolicy.NEVER
        self.pending.park(group, why, may_preempt)
        if self.reservation is not None and self.reservation.owner == workload.key:
            message += f" Capacity reserved for it from t={self.reservation.start:.0f}s."
        for pending in group.items:
            pending.reason = why
            if pending.told != message:
                pending.told = message
                for pod in pending.workload.pods:
                    actions.append(MarkUnschedulable(pod, message))

    def _unfit_message(self, workload: Workload, unfit: Unschedulable) -> str:
        if not self.explain_failures:
            return "no node fits"
        message = unfit.message()
        if (workload.gang_size > 1 or workload.topology) and self._never_fits(workload):
            message = f"{workload.key} can never fit on this cluster as a whole. {message}"
        return message

    def _never_fits(self, workload: Workload) -> bool:
        """Would the gang not fit even if nothing else ran? (Cached per shape until nodes
        change.)"""
        key = (
            tuple(p.signature for p in workload.pods[: workload.gang_size]),
            workload.topology,
        )
        known = self._never_fits_cache.get(key)
        if known is None:
            table = self.table
            mark = table.begin_trial()
            try:
                for running in (*self.running.values(), *self.evicting.values()):
                    for bound in running.bound.values():
                        table.release(bound.allocation)
                known = isinstance(place_workload(self.engine, workload), Unschedulable)
            finally:
                table.rollback(mark)
            self._never_fits_cache[key] = known
        return known

    def _plan_backfill(self, workload: Workload) -> None:
        if not self.config.backfill:
            return
        if self.reservation is not None and self.reservation.owner != workload.key:
            return
        if workload.gang_size <= 1 and workload.topology is None:
            return  # a lone pod finds room soon enough; reservations are for gangs
        previous = self.reservation
        if (
            previous is not None
            and previous.owner == workload.key
            and self.now - self._planned_at < self.config.replan_interval
        ):
            return  # the plan is an estimate: re-planning at every freed pod costs too much
        self._planned_at = self.now
        self.reservation = self._estimate(workload)
        current = self.reservation
        if (previous is None) != (current is None) or (
            previous is not None
            and current is not None
            and not np.array_equal(previous.rows, current.rows)
        ):
            self.pending.wake_all(Parked.CAPACITY)  # the rows others may use changed

    def _estimate(self, workload: Workload) -> Reservation | None:
        """Where and when ``workload`` could start if running work ends as expected."""
        table = self.table

        def rows_taken() -> BoolArray | None:
            mark = table.begin_trial()
            try:
                result = place_workload(self.engine, workload)
                if isinstance(result, Unschedulable):
                    return None
                rows = np.zeros(table.size, np.bool_)
                rows[[b.allocation.row for b in result]] = True
                return rows
            finally:
                table.rollback(mark)

        return plan_reservation(
            table,
            workload.key,
            list(self.running.values()),
            self.config.default_expected_runtime,
            rows_taken,
            self.now,
        )

    def _drop_reservation(self) -> None:
        self.reservation = None
        self.pending.wake_all(Parked.CAPACITY)

    def _restrict_for(self, workload: Workload, keep_reservation: bool = True) -> BoolArray | None:
        """Rows ``workload`` may use: all but those held for a preemptor whose victims are
        leaving, and those reserved for a blocked gang (unless it is expected to end first)."""
        n = self.table.size
        allowed: BoolArray | None = None
        reservation = self.reservation
        if keep_reservation and reservation is not None and reservation.owner != workload.key:
            runtime = workload.expected_runtime or self.config.default_expected_runtime
            if self.now + runtime > reservation.start:
                allowed = np.ones(n, np.bool_)
                allowed[: min(n, reservation.rows.size)] &= ~reservation.rows[:n]
        if self.nominated and workload.key not in self.nominated:
            for victim_key in set().union(*self.nominated.values()):
                victim = self.evicting.get(victim_key)
                if victim is None:
                    continue
                if allowed is None:
                    allowed = np.ones(n, np.bool_)
                for bound in victim.bound.values():
                    allowed[bound.allocation.row] = False
            for owner, (_, _, rows) in self._holds.items():
                if owner != workload.key:
                    if allowed is None:
                        allowed = np.ones(n, np.bool_)
                    allowed[rows[rows < n]] = False
        return allowed

    def _release_hold(self, key: str) -> None:
        hold = self._holds.pop(key, None)
        if hold is not None:
            self.quotas.refund(hold[0], hold[1])
            self.pending.wake_all(Parked.QUOTA)

    def _holds_survive(self, workload: Workload, usage: Mapping[str, int]) -> bool:
        """Would every preemptor whose victims are leaving still pass its quota check with
        ``workload`` admitted too? (A preemptor within nominal must not lose the quota its
        preemption freed to work that borrows it back.)"""
        quotas = self.quotas
        quotas.charge(workload, usage)
        try:
            for owner, (holder, request, _) in self._holds.items():
                if owner == workload.key:
                    continue
                # As it will be when its victims are gone (they are charged until then).
                leaving = [
                    self.evicting[v] for v in self.nominated.get(owner, ()) if v in self.evicting
                ]
                quotas.refund(holder, request)
                for victim in leaving:
                    quotas.refund(victim.workload, victim.usage)
                try:
                    if not quotas.check(holder, request).admits:
                        return False
                finally:
                    quotas.charge(holder, request)
                    for victim in leaving:
                        quotas.charge(victim.workload, victim.usage)
            return True
        finally:
            quotas.refund(workload, usage)

    # ----------------------------------------------------------------------------- preemption
    def _preempt(self, workload: Workload, actions: list[Action]) -> bool:
        if workload.preemption_policy is PreemptionPolicy.NEVER:
            return False
        candidates = self._candidates(workload)
        if not candidates:
            self._note_young_victims(workload)
            return False
        if self._search_budget <= 0:  # searched enough this cycle: its turn comes next cycle
            self._deferred.add(workload.key)
            return False
        self._search_budget -= 1
        limit = self.config.max_victim_candidates
        need = max(
            p.gpu.count * MILLI_PER_GPU if p.gpu.milli >= MILLI_PER_GPU else 0
            for p in workload.pods[: workload.gang_size]
        )
        if need >= MILLI_PER_GPU and len(candidates) > 1:  # whole GPUs: a node must free them
            ordered = victim_order(
                candidates, self.quotas.borrowing_queues(), self.now, None, self._victim_costs
            )
            ordered = node_first(ordered, self.table, need)[:limit]
        else:
            ordered = victim_order(
                candidates, self.quotas.borrowing_queues(), self.now, limit, self._victim_costs
            )[:limit]
        request = requested(workload.pods[: workload.gang_size])
        table = self.table
        planned: list[IntArray] = []  # rows of the last placement that fitted

        def may_fit() -> bool:
            """The quota checks of fits(): evicting more victims never makes them fail."""
            if not self.quotas.check(workload, request).admits:
                return False
            return not self._holds or self._holds_survive(workload, request)

        def fits() -> bool:
            # The quota checks first: they do not depend on the placement and cost far less.
            if not may_fit():
                return False
            mark = table.begin_trial()
            try:
                placed = place_workload(self.engine, workload, self._restrict_for(workload))
                if isinstance(placed, Unschedulable):
                    return False
                planned.append(np.array([b.allocation.row for b in placed], np.int64))
                return True
            finally:
                table.rollback(mark)

        def still_candidate(victim: RunningWorkload) -> bool:
            queue = victim.workload.queue
            return queue == workload.queue or self.quotas.subtree_borrowing(queue)

        victims = find_victims(table, self.quotas, ordered, fits, may_fit, still_candidate)
        if victims is None:
            self._note_young_victims(workload)
            return False
        self.nominated[workload.key] = {v.key for v in victims}
        self.quotas.charge(workload, request)
        self._holds[workload.key] = (workload, request, planned[-1])
        pending = self.pending.get(workload.key)
        if pending is not None:
            pending.reason = "preempting"
        for victim in victims:
            self.preemptions.append((self.now, workload.key, victim.key))
            self._evict(victim, f"preempted by {workload.key}", actions, workload.key)
        return True

    def _may_reclaim(self, workload: Workload) -> bool:
        """Is the workload's queue within nominal quota for it (so it may reclaim)?"""
        if not self.quotas.tree.keys:
            return False
        return self.quotas.within_nominal(
            workload.queue, requested(workload.pods[: workload.gang_size])
        )

    def _is_candidate(
        self,
        workload: Workload,
        running: RunningWorkload,
        reclaim: bool,
        min_runtime: float | None = None,
    ) -> bool:
        """May ``workload`` evict ``running``: lower priority in the same queue; or, when the
        preemptor reclaims (its queue is within nominal for it), a workload whose queue (or an
        ancestor) borrows, of any priority if so configured, else lower. (For reclaim,
        :meth:`_candidates` applies the same tests through :meth:`_reclaimable_in`: keep them
        alike.)"""
        other = running.workload
        if not other.preemptible or running.key not in self.running:
            return False
        least = self.config.min_runtime if min_runtime is None else min_runtime
        if self.now - running.started < least:
            return False
        if other.queue == workload.queue:
            return other.priority < workload.priority
        return (
            reclaim
            and (self.config.reclaim_any_priority or other.priority < workload.priority)
            and self.quotas.subtree_borrowing(other.queue)
        )

    def _candidates(
        self, workload: Workload, min_runtime: float | None = None
    ) -> list[RunningWorkload]:
        own = self._priorities.get(workload.queue)
        out: list[RunningWorkload] = []
        if own and min(own) < workload.priority:
            out.extend(
                r
                for r in self._by_queue[workload.queue].values()
                if self._is_candidate(workload, r, False, min_runtime)
            )
        tree = self.quotas.tree
        if tree.keys and tree.borrowing().any() and self._may_reclaim(workload):
            least = self.config.min_runtime if min_runtime is None else min_runtime
            any_priority = self.config.reclaim_any_priority
            for queue in sorted(self._under_borrowing() - {workload.queue}):
                # _is_candidate with reclaim (the queue is under a borrowing one by definition)
                # on a list kept for the cycle: this runs at every search.
                eligible = self._reclaimable_in(queue, least)
                if any_priority:
                    out.extend(eligible)
                else:
                    out.extend(r for r in eligible if r.workload.priority < workload.priority)
        return out

    def _reclaimable_in(self, queue: str, least: float) -> list[RunningWorkload]:
        """The running workloads of ``queue`` that are preemptible and ran ``least`` seconds,
        in ``_by_queue`` order (the tests of :meth:`_is_candidate` that do not depend on the
        preemptor)."""
        by_least = self._reclaimable.setdefault(queue, {})
        found = by_least.get(least)
        if found is None:
            now, running = self.now, self.running
            found = by_least[least] = [
                r
                for key, r in self._by_queue[queue].items()
                if r.workload.preemptible and key in running and not now - r.started < least
            ]
        return found

    def _note_young_victims(self, workload: Workload) -> None:
        """After a failed search: when would a victim now too young to evict become one?
        (The loop wakes the core then; see :meth:`next_timer`.)"""
        young = self._candidates(workload, min_runtime=0.0)
        least, now = self.config.min_runtime, self.now
        first = min((t for r in young if (t := r.started + least) > now), default=None)
        if first is not None and (self._victims_ripen is None or first < self._victims_ripen):
            self._victims_ripen = first

    def next_timer(self, aging: bool = True) -> float:
        """The next time the core has something timed to do: a backoff ends, a gang's ready
        deadline, a blocked preemptor's victim reaches its minimum run time, priorities age
        (unless ``aging`` is False); ``inf`` if none. A backend's wait should not sleep past
        it."""
        times = [math.inf]
        if self.pending.next_due is not None:
            times.append(self.pending.next_due)
        deadlines = self._ready_deadlines
        while deadlines:
            running = self.running.get(deadlines[0][1])
            if running is not None and running.ready_by == deadlines[0][0] and running.unready:
                times.append(deadlines[0][0])
                break
            heapq.heappop(deadlines)  # ready, gone or evicted since
        if self._victims_ripen is not None:
            times.append(self._victims_ripen)
        if self._deferred:
            times.append(self.now + 1.0)
        if aging and self.config.aging_interval and len(self.pending):
            times.append(self._aged_at + self.config.aging_interval)
        return max(min(times), self.now)

    def _under_borrowing(self) -> set[str]:
        """Queues with running work that borrow, or whose ancestor does (their work then
        counts as borrowed too)."""
        tree = self.quotas.tree
        flags = tree.borrowing()
        return {
            name
            for name, i in tree.index.items()
            if name in self._by_queue and any(bool(flags[a]) for a in tree.paths[i])
        }

    def _evict(
        self, running: RunningWorkload, reason: str, actions: list[Action], preemptor: str | None
    ) -> None:
        running.evicted_for = reason
        self._untrack(running)
        self.evicting[running.key] = running
        for bound in running.bound.values():
            actions.append(Evict(bound.pod, reason, preemptor))

    def _backoff(self, running: RunningWorkload) -> float:
        running.attempts = self._failures[running.key] = self._failures.get(running.key, 0) + 1
        return float(
            min(self.config.backoff_max, self.config.backoff_base * 2 ** (running.attempts - 1))
        )

    # ----------------------------------------------------------------------------- waking
    def _wake_for_rows(self, rows: list[int]) -> None:
        if len(self.pending):
            self.pending.wake(lambda group: self._fits_some_row(group.head.workload, rows), rows)

    # ----------------------------------------------------------------------------- queries
    def why(self, pod: Pod) -> Unschedulable:
        """Why ``pod`` cannot be placed now (nodes per reason)."""
        return self.engine.explain(pod)

    def placement_of(self, pod_key: str) -> Placement | None:
        running = self.running.get(self.owner.get(pod_key, ""))
        if running is None:
            return None
        bound = running.bound.get(pod_key)
        return bound.placement if bound is not None else None

    def explain_pending(self, estimate: bool = True) -> list[PendingExplanation]:
        """For every waiting workload: why, its position in its queue, and an estimated start
        (from the backfill plan for the head of a group blocked by capacity, from the expected
        ends of running work for quota)."""
        by_queue: dict[str, list[PendingWorkload]] = {}
        for pending in self.pending.workloads():
            by_queue.setdefault(pending.workload.queue, []).append(pending)
        heads = {id(g.head) for g in self.pending.groups()}
        out: list[PendingExplanation] = []
        for queue, items in sorted(by_queue.items()):
            items.sort(key=lambda p: (-self._effective_priority(p), p.not_before, p.seq))
            for position, pending in enumerate(items, start=1):
                key = pending.workload.key
                waiting_for = pending.reason or "not tried yet"
                start: float | None = None
                if key in self.nominated:
                    waiting_for = "preempting"
                    start = self.now
                elif waiting_for == "backoff":
                    start = pending.not_before
                elif estimate and id(pending) in heads:
                    start = self._estimated_start(pending.workload, waiting_for)
                message = pending.told or (
                    f"in backoff until t={pending.not_before:.0f}s"
                    if waiting_for == "backoff"
                    else "not tried yet"
                )
                out.append(PendingExplanation(key, queue, position, waiting_for, message, start))
        return out

    def _estimated_start(self, workload: Workload, waiting_for: str) -> float | None:
        reservation = self.reservation
        if reservation is not None and reservation.owner == workload.key:
            return reservation.start
        if waiting_for == Parked.CAPACITY:
            plan = self._estimate(workload)
            return plan.start if plan is not None else None
        if waiting_for == Parked.QUOTA:
            return self._quota_start(workload)
        return None

    def _quota_start(self, workload: Workload) -> float | None:
        """When enough running work ends (as expected) for ``workload`` to pass its quota."""
        request = requested(workload.pods[: workload.gang_size])
        default = self.config.default_expected_runtime
        snapshot = self.quotas.snapshot()
        try:
            for running in sorted(self.running.values(), key=lambda r: r.expected_end(default)):
                self.quotas.refund(running.workload, running.usage)
                if self.quotas.check(workload, request).admits:
                    return max(self.now, running.expected_end(default))
            return None
        finally:
            self.quotas.restore(snapshot)
