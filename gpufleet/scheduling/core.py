"""The scheduling core: cluster events in, actions out. Pure, synchronous, deterministic.

It keeps the node table, the queue quotas, the admitted workloads and the waiting ones. One call
of :meth:`SchedulerCore.cycle` is one scheduling cycle (a workload is one pod or a gang):

1. release workloads whose backoff has passed; evict gangs that did not become ready in time;
   wake workloads with inter-pod rules (affinity, anti-affinity, spread) when pods those rules
   count came or went; wake workloads that may now preempt someone who has run its minimum
   time;
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
from gpufleet.model.gpu import model_matches
from gpufleet.model.tenancy import (
    CPU,
    GPU,
    MEMORY,
    BorrowWithinCohortPolicy,
    FungibilityPolicy,
    PreemptionPolicy,
    Queue,
    QueueingStrategy,
    QueuePreemption,
    ReclaimPolicy,
    ResourceQuota,
    TopologyMode,
    WithinQueuePolicy,
    Workload,
)
from gpufleet.model.times import TimeFormat, format_duration, simulated_time
from gpufleet.scheduling.admission import (
    AdmissionConfig,
    Quotas,
    cluster_capacity,
    model_quota_warnings,
    requested,
    used,
)
from gpufleet.scheduling.backfill import Reservation, plan_reservation
from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.engine import Bound, PlacementEngine, Unschedulable
from gpufleet.scheduling.framework import Policy
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable
from gpufleet.scheduling.pending import Group, Parked, PendingWorkload, PendingWorkloads
from gpufleet.scheduling.preemption.reclaim import (
    CandidateQueue,
    ReclaimPlan,
    Variant,
    plan,
    policy_of,
    still_borrowing,
    victim_priority_allowed,
)
from gpufleet.scheduling.preemption.victims import (
    VictimColumns,
    VictimFacts,
    cheapest_victims,
    find_victims,
    victim_facts,
)
from gpufleet.scheduling.quota import UsageView, Verdict
from gpufleet.scheduling.running import RunningWorkload
from gpufleet.scheduling.topology import least_gpu_milli, one_model, place_workload

ADMITTED = "admitted"
HELD_FOR_PREEMPTOR = "waiting for quota: held for a preemptor"
PREEMPTED = "preempted"
BLOCKED = "blocked"
#: _surely_places's answers kept at most per cycle (over the table states seen lately), and
#: the columns derived for them (each as long as the table).
_SURE_MEMO_SIZE = 4096
_COLUMN_MEMO_SIZE = 256


def _no_share(queue: str) -> tuple[float, ...]:
    return ()


def _no_level(queue: str) -> int:
    return 0


class _QueueVictims:
    """A queue's preemptible running workloads, in ``_by_queue`` order, with what ordering
    them as victims reads, as numpy columns: kept as workloads start (appended) and stop
    (marked gone), so that a search of a busy cluster does not list thousands of them anew."""

    def __init__(self) -> None:
        self.facts: list[VictimFacts] = []
        self.where: dict[str, int] = {}
        self.alive: list[bool] = []
        #: Bumped on every change (a workload added, dropped or refreshed).
        self.version = 0
        self._columns: VictimColumns | None = None
        self._alive: BoolArray | None = None

    def add(self, fact: VictimFacts) -> None:
        self.drop(fact.running.key)  # (not expected: a workload starts once until it stops)
        self.version += 1
        self.where[fact.running.key] = len(self.facts)
        self.facts.append(fact)
        self.alive.append(True)
        self._columns = self._alive = None

    def drop(self, key: str) -> None:
        i = self.where.pop(key, None)
        if i is None:
            return
        self.version += 1
        self.alive[i] = False
        if self._alive is not None:
            self._alive[i] = False
        if len(self.facts) > 64 and 2 * len(self.where) < len(self.facts):
            # Mostly gone: keep only the live ones, in their order.
            self.facts = [f for f, live in zip(self.facts, self.alive, strict=True) if live]
            self.alive = [True] * len(self.facts)
            self.where = {f.running.key: i for i, f in enumerate(self.facts)}
            self._columns = self._alive = None

    def refresh(self, fact: VictimFacts) -> None:
        """The workload's pods changed (one ended): its place stays, its facts change."""
        i = self.where.get(fact.running.key)
        if i is not None:
            self.version += 1
            self.facts[i] = fact
            self._columns = None

    def columns(self) -> VictimColumns:
        if self._columns is None:
            self._columns = VictimColumns.of(self.facts)
        return self._columns

    def eligible(self, now: float, least: float) -> BoolArray:
        """Which are running and ran ``least`` seconds (as ``not now - started < least``)."""
        if self._alive is None:
            self._alive = np.array(self.alive, np.bool_)
        ripe: BoolArray = ~(now - self.columns().started < least) & self._alive
        return ripe


@dataclass(frozen=True, slots=True)
class _ModelChoice:
    """One GPU model a queue lists: its name, the rows it may use (nodes of a matching GPU
    model, and CPU-only nodes for the gang's CPU pods), and its per-model quota key."""

    name: str
    rows: BoolArray
    key: str | None


@dataclass(slots=True)
class _CandidatePart:
    """One queue's candidate victims for one preemptor: which of the queue's running
    workloads (``chosen``, over ``victims``'s columns), in which group (``variant``), and the
    other queue's terms (``candidate``; None for the preemptor's own queue)."""

    queue: str
    victims: _QueueVictims
    chosen: BoolArray
    variant: Variant
    candidate: CandidateQueue | None
    policy: QueuePreemption
    preemptor_priority: int

    def chosen_when(self, borrowing: bool) -> BoolArray:
        """The candidates of an attempt that may leave the preemptor borrowing: a priority
        candidate then only under borrowWithinCohort (:func:`reclaim.taken_while_borrowing`,
        on columns)."""
        if not borrowing or self.variant is not Variant.PRIORITY:
            return self.chosen
        policy = self.policy
        if policy.borrow_within_cohort is BorrowWithinCohortPolicy.NEVER:
            return np.zeros_like(self.chosen)
        priority = self.victims.columns().priority
        allowed = self.chosen & (priority < self.preemptor_priority)
        if policy.max_priority_threshold is not None:
            allowed &= priority <= policy.max_priority_threshold
        return allowed


@dataclass(frozen=True, slots=True)
class PendingExplanation:
    """Why a workload waits, where it stands in its queue, and when it may start."""

    workload: str
    queue: str
    #: 1 for the next workload its queue will try.
    position: int
    #: "quota", "capacity", "preempting" (victims are leaving), "backoff", "queue order" (behind
    #: the first workload of a StrictFIFO queue) or "not tried yet".
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
        time_format: TimeFormat = simulated_time,
    ) -> None:
        self.table = table
        #: How the instants in messages read (``now`` is the world's clock: simulated seconds,
        #: or Unix seconds on Kubernetes, whose backend gives a wall-clock format).
        self.time_format = time_format
        self.engine = PlacementEngine(table, policy, tie_rank=tie_rank)
        self.config = config or AdmissionConfig()
        self.quotas = Quotas(queues or {}, cluster_capacity(table.nodes), resource_quotas)
        self._quota_keys_beyond_request = bool(set(self.quotas.tree.keys) - {CPU, MEMORY, GPU})
        #: The per-model quota key a GPU model counts under (None: no quota names it).
        self._model_key = self.quotas.tree.model_keys
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
        #: Queue -> its preemptible running workloads (the candidates of the reclaim scan).
        self._queue_victims: dict[str, _QueueVictims] = {}
        #: (queue, run time) -> which of them ran that long, and their lowest priority
        #: (inf if none), kept while the queue's victims (by version) and the time are the
        #: same.
        self._eligible_masks: dict[
            tuple[str, float], tuple[tuple[int, float], tuple[BoolArray, float]]
        ] = {}
        #: Bumped when the running set changes; with the quota usage's version and the time it
        #: keys what is derived from both (who may be a victim of whom).
        self._running_version = 0
        self._victims_memo_at: tuple[int, int, float] = (-1, -1, -math.inf)
        #: Per (queue, request): whom it may preempt (:func:`reclaim.plan`); per (queue,
        #: priority, request, ...): whether it has candidate victims / when a young one ripens.
        self._plans: dict[tuple[str, tuple[int, ...]], ReclaimPlan] = {}
        self._has_victims_memo: dict[tuple[object, ...], bool] = {}
        self._young_memo: dict[tuple[object, ...], float | None] = {}
        #: Each waiting or admitted workload's arrival: its number in the FIFO order and when
        #: (Kueue's queue order timestamp: creation, kept when it is preempted).
        self._arrival: dict[str, tuple[int, float]] = {}
        self._arrivals = 0
        #: Answers of _holds_survive, while the state it reads is the same.
        self._holds_memo_at: tuple[int, int] = (-1, -1)
        #: Bumped by _preemptions_changed.
        self._preemption_epoch = 0
        self._holds_memo: dict[tuple[object, ...], list[tuple[tuple[int, ...], bool]]] = {}
        #: The same answers by the exact question (most questions repeat one asked before).
        self._holds_exact: dict[tuple[tuple[object, ...], tuple[int, ...]], bool] = {}
        #: Per preemptor, made when first asked in the state above: its request as amounts,
        #: and the usage (and non-preemptible usage) as it will be when its victims are gone.
        self._holder_views: dict[str, tuple[tuple[int, ...], UsageView, UsageView | None]] = {}
        #: The usage and non-preemptible usage the views start from (None: not read yet).
        self._holder_usage: tuple[list[list[int]], list[list[int]]] | None = None
        #: _restrict_for's answers (cleared where what it reads changes), and
        #: _surely_places's (by the table's state).
        self._restrictions: dict[tuple[object, ...], BoolArray | None] = {}
        self._sure: dict[tuple[object, ...], tuple[BoolArray | None, bool]] = {}
        self._feasible_memo: dict[tuple[object, ...], BoolArray] = {}
        self._fit_memo: dict[tuple[object, ...], IntArray | None] = {}
        self._free_milli: tuple[tuple[int, int, int], IntArray] = (
            (-1, -1, -1),
            np.zeros(0, np.int64),
        )
        #: Requests of the workloads tried (each gang's, before placement), and as the quota
        #: tree's amounts; kept while they wait (pruned when most have left).
        self._requests: dict[str, tuple[Workload, dict[str, int], tuple[int, ...]]] = {}
        self._requests_least = MILLI_PER_GPU
        self._never_fits_cache: dict[object, bool] = {}
        #: Per (queue, table size, topology version): the GPU models it lists, as rows.
        self._model_choices: dict[tuple[str, int, int], list[_ModelChoice]] = {}
        self._aged_at = 0.0
        self._planned_at = -math.inf
        #: Preemption searches left this cycle, and workloads whose search was put off.
        self._search_budget = 0
        self._deferred: set[str] = set()
        #: (time, preemptor, victim) of every preemption, for reports and invariants.
        self.preemptions: list[tuple[float, str, str]] = []
        #: The pod index's (changes, repelling pods) when parked workloads were last woken.
        self._pod_rules_seen = (0, 0)

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

    def _enqueue(self, workload: Workload, not_before: float = 0.0, again: bool = False) -> None:
        """Queue ``workload``: at its first arrival's place (a preempted workload goes back
        where it was, as Kueue orders by creation time), or, ``again``, as a new arrival (one
        that failed to start: Kueue's eviction timestamp)."""
        for pod in workload.pods:
            self._waiting_pod[pod.key] = workload.key
        arrival = None if again else self._arrival.get(workload.key)
        if arrival is None:
            self._arrivals += 1
            arrival = self._arrival[workload.key] = (self._arrivals, self.now)
        self.pending.add(workload, self.now, not_before, order=arrival[0])

    def _dequeue(self, key: str) -> None:
        self._preemptions_changed()
        workload = self.pending.remove(key)
        self._arrival.pop(key, None)
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
        self._preemptions_changed()  # a victim's rows and usage may be freed, or it gone
        bound = running.bound.pop(key, None)
        if bound is not None:
            self._release_pod(running, bound)
        if running.bound:
            if owner_key in self.running:
                # It ended while the rest runs on (a Job's pod): if the rest is evicted, the
                # workload comes back without it.
                running.workload = running.workload.without(key)
            return
        if self.evicting.pop(owner_key, None) is not None:
            retry_at = self._requeue_at.pop(owner_key, None)
            self._enqueue(running.workload, retry_at or 0.0, again=retry_at is not None)
            for victims in self.nominated.values():
                victims.discard(owner_key)
        else:
            self._failures.pop(owner_key, None)
            self._forget(running)

    def _release_pod(self, running: RunningWorkload, bound: Bound) -> None:
        self.engine.release(bound.allocation)
        share = used([bound], [self.table.nodes[bound.allocation.row].gpu_model], self._model_key)
        self.quotas.refund(running.workload, share)
        for k, v in share.items():
            running.usage[k] = running.usage.get(k, 0) - v
        victims = self._queue_victims.get(running.workload.queue)
        if victims is not None:
            victims.refresh(victim_facts(running))
        self._wake_for_rows([bound.allocation.row])
        self.pending.wake_all(Parked.QUOTA)

    def _on_bind_failed(self, key: str, reason: str) -> None:
        owner_key = self.owner.get(key)
        running = self.running.get(owner_key or "")
        if running is None:
            return
        self._preemptions_changed()
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
            self._enqueue(running.workload, self._requeue_at.pop(running.key), again=True)

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
            # What it holds, as far as the node has it: a bound pod is a fact, not a request.
            tuple(
                (rid, min(amount, int(table.ext_free[row, rid])))
                for rid, amount in demand.extended
                if rid >= 0
            ),
            table.pod_index.identity(pod),
            demand.units if placement.gpu_indices else 0,
        )
        bound = Bound(pod, placement, allocation)
        usage = used([bound], [node.gpu_model], self._model_key)
        workload = self._lone(pod)
        self.quotas.charge(workload, usage)
        self._track(RunningWorkload(workload, {pod.key: bound}, usage, self.now, self.now))

    # ----------------------------------------------------------------------------- book-keeping
    def _track(self, running: RunningWorkload) -> None:
        workload = running.workload
        self.running[workload.key] = running
        self._by_queue.setdefault(workload.queue, {})[workload.key] = running
        self._running_version += 1
        self._priorities.setdefault(workload.queue, Counter())[workload.priority] += 1
        for key in running.bound:
            self.owner[key] = workload.key
        if workload.preemptible:
            heapq.heappush(
                self._eligible, (running.started + self.config.min_runtime, workload.key)
            )
            victims = self._queue_victims.setdefault(workload.queue, _QueueVictims())
            victims.add(victim_facts(running))

    def _untrack(self, running: RunningWorkload) -> None:
        workload = running.workload
        self.running.pop(workload.key, None)
        self._by_queue[workload.queue].pop(workload.key, None)
        self._running_version += 1
        victims = self._queue_victims.get(workload.queue)
        if victims is not None:
            victims.drop(workload.key)
        counts = self._priorities[workload.queue]
        counts[workload.priority] -= 1
        if not counts[workload.priority]:
            del counts[workload.priority]

    def _forget(self, running: RunningWorkload) -> None:
        """A workload whose pods are all gone (finished)."""
        self._arrival.pop(running.key, None)
        if running.key in self.running:
            self._untrack(running)

    # ----------------------------------------------------------------------------- cycle
    def cycle(self, now: float | None = None) -> list[Action]:
        """One scheduling cycle; see the module docstring."""
        if now is not None:
            self.now = max(self.now, now)
        actions: list[Action] = []
        self._preemptions_changed()
        if len(self._requests) > 2 * len(self.pending) + 1024:
            self._requests.clear()
        # Keyed by table states of the last cycle, which its binds and evictions left behind.
        self._sure.clear()
        self._feasible_memo.clear()
        self._fit_memo.clear()
        self.pending.release_backoff(self.now)
        for key in sorted(self._deferred):
            group = self.pending.group_of(key)
            if group is not None and group.parked is not None:
                self.pending.unpark(group)
                group.freed_rows = None
        self._deferred.clear()
        self._evict_failed(actions)
        self._wake_for_pod_rules()
        self._wake_preemptors()
        if self.config.aging_interval and self.now - self._aged_at >= self.config.aging_interval:
            self.pending.reprioritize()
            self._aged_at = self.now
        for key in [k for k, victims in self.nominated.items() if not victims]:
            self._preemptions_changed()
            del self.nominated[key]
            self._release_hold(key)
            group = self.pending.group_of(key)
            if group is not None and group.head.workload.key == key:
                self.pending.unpark(group)
                self._attempt(group, actions, allow_preemption=False, nominated=True)
        self._admit_by_share(actions)
        return actions

    def _admit_by_share(self, actions: list[Action]) -> None:
        """Up to one admission per queue with work: always from the queue whose head would
        borrow least (Kueue: requests within nominal quota first; then from the closest
        ancestor, :meth:`QuotaTree.borrow_level`), then with the lowest weighted share (both
        recomputed after each admission), ties to the queue that admitted least this cycle,
        then by name. A StrictFIFO queue tries only its first workload."""
        queues = self.pending.queues()
        share: Callable[[str], tuple[float, ...]] = _no_share
        level: Callable[[str], int] = _no_level
        if self.quotas.tree.keys:
            share = self.quotas.tree.share
            level = self._head_level
        elif len(queues) > 1:  # no queue names a quota: weigh the GPUs each queue holds
            share = self._gpu_share
        heap = [(level(q), share(q), 0, q) for q in queues]
        heapq.heapify(heap)
        self._search_budget = self.config.max_preemption_searches
        budget = len(queues)
        while heap and budget > 0:
            _, _, turns, queue = heapq.heappop(heap)
            strict = self._strict_fifo(queue)
            first = self.pending.first_group(queue) if strict else None
            for group in self.pending.ready_groups(queue):
                if strict and group is not first:
                    break  # its first workload waits (parked): nothing passes it
                if group.head.workload.key in self.nominated:
                    if strict:
                        break
                    continue
                outcome = self._attempt(group, actions, allow_preemption=True)
                if outcome == BLOCKED:
                    if strict:
                        break
                    continue
                budget -= 1
                heapq.heappush(heap, (level(queue), share(queue), turns + 1, queue))
                break

    def _head_level(self, queue: str) -> int:
        """How far the queue's next workload would borrow (0 if it has none ready)."""
        group = self.pending.peek(queue)
        if group is None:
            return 0
        return self.quotas.tree.borrow_level(queue, self._amounts_of(group.head.workload))

    def _strict_fifo(self, queue: str) -> bool:
        found = self.quotas.queues.get(queue)
        return found is not None and found.queueing_strategy is QueueingStrategy.STRICT_FIFO

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

    def run_until_idle(
        self,
        now: float | None = None,
        max_cycles: int = 1_000_000,
        on_cycle: Callable[[list[Action]], None] | None = None,
    ) -> list[Action]:
        """Cycles until one admits and evicts nothing and put off no preemption search; all
        their actions. ``on_cycle`` gets each cycle's actions as it ends (a backend that binds
        while the next cycle runs). (It ends: a cycle that changes nothing parks every
        workload it searched for victims, and nothing wakes them until time or the cluster
        changes.)"""
        actions: list[Action] = []
        for _ in range(max_cycles):
            step = self.cycle(now)
            if on_cycle is not None and step:
                on_cycle(step)
            actions.extend(step)
            if not self._deferred and not any(isinstance(a, Bind | Evict) for a in step):
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
            timeout = format_duration(self.config.gang_ready_timeout)
            self._evict(running, f"gang not ready within {timeout}", actions, None)

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
            return any(self._is_candidate(workload, r) for r in due)

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
        models = self._model_order(workload)
        if models:
            return self._attempt_by_model(group, actions, allow_preemption, nominated, models)
        _, request, amounts = self._request_entry(workload)
        check = self.quotas.check(workload, request, amounts)
        if not check.admits:
            if allow_preemption and self._preempt(workload, actions):
                return PREEMPTED
            self._park(group, actions, Parked.QUOTA, f"waiting for quota: {check.message()}")
            return BLOCKED
        table = self.table
        restrict = self._restrict_for(workload, keep_reservation=not nominated)
        if (
            self._holds
            and self._usage_is_request(workload)
            and not self._holds_survive(workload, request, amounts)
            and self._surely_places(workload, restrict)
        ):
            # What placing it would end in, without placing it: it fits, its exact usage is
            # its request (so the exact check passes), and a preemptor's hold refuses it.
            self._park(group, actions, Parked.QUOTA, HELD_FOR_PREEMPTOR)
            return BLOCKED
        mark = table.begin_trial()
        result = place_workload(self.engine, workload, restrict, explain=self.explain_failures)
        if isinstance(result, Unschedulable):
            table.rollback(mark)
            if allow_preemption and self._preempt(workload, actions):
                return PREEMPTED
            self._plan_backfill(workload)
            self._park(group, actions, Parked.CAPACITY, self._unfit_message(workload, result))
            return BLOCKED
        usage = self._usage_of(result)
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
            self._park(group, actions, Parked.QUOTA, HELD_FOR_PREEMPTOR)
            return BLOCKED
        table.commit(mark)
        self.pending.pop_head(group)
        self._admit(workload, result, usage, actions)
        return ADMITTED

    def _model_order(self, workload: Workload) -> list[_ModelChoice]:
        """The GPU models its queue lists, in order, that some node has (and that the gang's
        pods allow); empty when the queue lists none or the gang asks for no GPU."""
        queue = self.quotas.queues.get(workload.queue)
        if queue is None or not queue.gpu_models:
            return []
        gang = workload.pods[: workload.gang_size]
        if not any(p.gpu.count or p.gpu.mig_count for p in gang):
            return []
        table = self.table
        memo_key = (queue.name, table.size, table.topology_version)
        choices = self._model_choices.get(memo_key)
        if choices is None:
            n = table.size
            no_gpu = table.gpu_count[:n] == 0
            choices = []
            for name in queue.gpu_models:
                ids = [i for i, m in enumerate(table.model_names) if model_matches(name, m)]
                if ids:
                    rows = np.isin(table.model_id[:n], ids) | no_gpu
                    rows.flags.writeable = False
                    choices.append(_ModelChoice(name, rows, self._model_key(name)))
            self._model_choices[memo_key] = choices
        allowed = [p.gpu_models for p in gang if p.gpu_models is not None]
        if not allowed:
            return choices
        return [
            c for c in choices
            if all(any(model_matches(a, c.name) or model_matches(c.name, a) for a in pod)
                   for pod in allowed)
        ]  # fmt: skip

    def _attempt_by_model(
        self,
        group: Group,
        actions: list[Action],
        allow_preemption: bool,
        nominated: bool,
        models: Sequence[_ModelChoice],
    ) -> str:
        """:meth:`_attempt` for a queue that orders GPU models (Kueue's flavors with
        flavorFungibility): the models in order; one where it fits within nominal quota wins
        at once; one where it fits by borrowing wins unless ``whenCanBorrow`` is
        TryNextFlavor; one where it needs preemption is tried at once under
        ``whenCanPreempt: MayStopSearch``, else after every model was looked at, and only if
        none lets it start by borrowing (Kueue: BorrowingOverPreemption)."""
        workload = group.head.workload
        fungibility = self.quotas.queues[workload.queue].fungibility
        stop_to_borrow = fungibility.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
        stop_to_preempt = fungibility.when_can_preempt is FungibilityPolicy.MAY_STOP_SEARCH
        _, request, _ = self._request_entry(workload)
        table = self.table
        base = self._restrict_for(workload, keep_reservation=not nominated)
        borrow_on: BoolArray | None = None
        to_preempt: list[_ModelChoice] = []
        told: list[str] = []
        quota_short = False
        for choice in models:
            restrict = choice.rows if base is None else base[: choice.rows.size] & choice.rows
            usage = dict(request)
            if choice.key is not None:
                usage[choice.key] = request[GPU]
            check = self.quotas.check(workload, usage)
            if check.admits:
                mark = table.begin_trial()
                placed = place_workload(self.engine, workload, restrict, self.explain_failures)
                if isinstance(placed, Unschedulable):
                    table.rollback(mark)
                    told.append(f"{choice.name}: {self._unfit_message(workload, placed)}")
                else:
                    usage = self._usage_of(placed)
                    exact = self.quotas.check(workload, usage)
                    if exact.admits and (not self._holds or self._holds_survive(workload, usage)):
                        if exact.verdict is not Verdict.BORROWS or stop_to_borrow:
                            table.commit(mark)
                            self.pending.pop_head(group)
                            self._admit(workload, placed, usage, actions)
                            return ADMITTED
                        table.rollback(mark)
                        if borrow_on is None:
                            borrow_on = restrict
                        continue
                    table.rollback(mark)
                    quota_short = True
                    why = (
                        f"waiting for quota: {exact.message()}"
                        if not exact.admits
                        else HELD_FOR_PREEMPTOR
                    )
                    told.append(f"{choice.name}: {why}")
            else:
                quota_short = True
                told.append(f"{choice.name}: waiting for quota: {check.message()}")
            if allow_preemption and stop_to_preempt:
                if self._preempt(workload, actions, choice):
                    return PREEMPTED
            else:
                to_preempt.append(choice)
        if borrow_on is not None:
            placed = place_workload(self.engine, workload, borrow_on)
            assert not isinstance(placed, Unschedulable), f"{workload.key} no longer places"
            self.pending.pop_head(group)
            self._admit(workload, placed, self._usage_of(placed), actions)
            return ADMITTED
        if allow_preemption:
            for choice in to_preempt:
                if self._preempt(workload, actions, choice):
                    return PREEMPTED
        if not told:
            told.append("no node has a GPU model its queue lists")
        why = Parked.QUOTA if quota_short else Parked.CAPACITY
        if not quota_short:
            self._plan_backfill(workload)
        self._park(group, actions, why, "; ".join(told))
        return BLOCKED

    def _usage_of(self, bound: Sequence[Bound]) -> dict[str, int]:
        """:func:`used` of placed pods, GPUs per model under the quota keys of their models."""
        nodes = self.table.nodes
        return used(bound, [nodes[b.allocation.row].gpu_model for b in bound], self._model_key)

    def _usage_is_request(self, workload: Workload) -> bool:
        """Is what the workload's gang will hold once placed, as quotas count it, what it asks
        (:func:`used` equals :func:`requested` on every key a quota limits), wherever it goes?
        Not with per-model quotas or namespace caps (keys the request lacks), nor for GPU
        memory shares or MIG slices (their milli-GPU depends on the node)."""
        if self._quota_keys_beyond_request or self.quotas.namespace_caps:
            return False
        if self.table.time_sliced:  # whole GPUs hold a replica or a device
            return False
        return all(
            not p.gpu.memory_mib and not p.gpu.mig_count and not (p.gpu.is_shared and p.gpu.units)
            for p in workload.pods[: workload.gang_size]
        )

    def _least_whole_milli(self) -> int:
        """The least a whole-GPU unit holds on any node (a replica where nodes time-slice)."""
        table = self.table
        if not table.time_sliced:
            return MILLI_PER_GPU
        n = table.size
        usable = table.whole_milli[:n][table.alive[:n] & (table.gpu_count[:n] > 0)]
        return int(usable.min()) if usable.size else MILLI_PER_GPU

    def _surely_places(self, workload: Workload, restrict: BoolArray | None) -> bool:
        """Would :func:`place_workload` place the gang on ``restrict`` now? True only when
        cheap checks make it certain: one pod, or identical pods of whole GPUs (or none), and
        the rows it may use have room for every pod between them (each pod placed takes one
        pod's room from one row, whichever row the policy picks); with a required topology,
        the rows of one domain that place_workload would try; with a preferred one, anywhere
        (where it falls back to)."""
        table = self.table
        if len(self._sure) > _SURE_MEMO_SIZE:
            self._sure.clear()
        # By the table's state, which a rolled-back trial (a victim search) restores, so that
        # answers hold across searches. By id: the entry holds the mask, so no other object
        # has its id meanwhile.
        gang = workload.pods[: workload.gang_size]
        memo_key = (
            table.state,
            table.topology_version,
            id(restrict),
            workload.topology,
            *(p.signature for p in gang),
        )
        known = self._sure.get(memo_key)
        if known is None or known[0] is not restrict:
            known = self._sure[memo_key] = (restrict, self._surely_places_now(workload, restrict))
        return known[1]

    def _surely_places_now(self, workload: Workload, restrict: BoolArray | None) -> bool:
        pods = workload.pods[: workload.gang_size]
        first = pods[0]
        if any(p.signature != first.signature for p in pods[1:]):
            return False
        if self.table.pod_index.repelling or (len(pods) > 1 and first.rules is not None):
            return False  # running pods' anti-affinity reads labels; a gang's pods may repel
        engine, table = self.engine, self.table
        demand = engine.demand(first)
        feasible = self._feasible(first.signature, demand)
        mask = feasible if restrict is None else feasible & restrict[: feasible.size]
        topology = workload.topology
        spread = topology is None or topology.mode is TopologyMode.PREFERRED
        if len(pods) == 1:
            if spread:
                return bool(mask.any())  # (room.sum() >= 1 with room the mask as 0/1)
            room: IntArray = mask.astype(np.int64)
        elif demand.shared or demand.mig_count or demand.milli_by_row is not None:
            return False
        else:
            # Room for len(pods) where the mask allows (free amounts are never negative).
            fit = self._pods_per_row(first.signature, demand)
            if fit is None:
                room = np.where(mask, len(pods), 0)
            else:
                room = np.where(mask, np.minimum(fit[: mask.size], len(pods)), 0)
        by_model = one_model(workload) and len(table.model_names) > 1
        if topology is None or topology.mode is TopologyMode.PREFERRED:
            if by_model:  # room for the whole gang on one GPU model
                ids = table.model_id[: room.size]
                gpu_rows = ids >= 0
                per_model = np.bincount(ids[gpu_rows], weights=room[gpu_rows])
                return bool((per_model >= len(pods)).any())
            return int(room.sum()) >= len(pods)
        # As place_workload picks domains: labelled, allowed rows; enough free GPUs in all.
        column = table.label_ids.get(topology.level)
        if column is None:
            return False
        n = room.size
        if n != table.size:
            return False
        ids = column[:n]
        allowed = table.schedulable[:n]
        if restrict is not None:
            allowed = allowed & restrict[:n]
        labelled = (ids >= 0) & allowed
        # Per label value id (no domain of place_workload's is left out; a value without
        # labelled rows adds room 0, which never suffices).
        domains = ids[labelled]
        capacity = np.bincount(domains, weights=self._free_gpu_milli()[labelled])
        need = least_gpu_milli(engine, pods)
        if by_model:  # room for the whole gang on one GPU model of a domain
            width = len(table.model_names) + 1
            pairs = domains * width + table.model_id[:n][labelled] + 1
            room_in = np.bincount(pairs, weights=room[labelled])
            in_domain = np.arange(room_in.size) // width
            return bool(((room_in >= len(pods)) & (capacity[in_domain] >= need)).any())
        room_in = np.bincount(domains, weights=room[labelled])
        return bool(((capacity >= need) & (room_in >= len(pods))).any())

    def _feasible(self, signature: tuple[object, ...], demand: Demand) -> BoolArray:
        """``engine.feasible(demand)`` (read-only; kept while the table's state is the same:
        many workloads of a cycle share a pod shape, and victim searches roll back)."""
        table = self.table
        if len(self._feasible_memo) > _COLUMN_MEMO_SIZE:
            self._feasible_memo.clear()
        memo_key = (table.state, table.topology_version, table.size, signature)
        mask = self._feasible_memo.get(memo_key)
        if mask is None:
            mask = self.engine.feasible(demand)
            mask.flags.writeable = False
            self._feasible_memo[memo_key] = mask
        return mask

    def _pods_per_row(self, signature: tuple[object, ...], demand: Demand) -> IntArray | None:
        """How many pods of a whole-GPU ``demand`` each row has room for by its free whole
        GPUs, CPU and memory (None: it asks none of them); read-only, kept while the table's
        state is the same."""
        table = self.table
        if len(self._fit_memo) > _COLUMN_MEMO_SIZE:
            self._fit_memo.clear()
        memo_key = (table.state, table.topology_version, table.size, signature)
        if memo_key in self._fit_memo:
            return self._fit_memo[memo_key]
        fit: IntArray | None = None
        n = table.size
        for free, need in (
            (table.full_free, demand.gpu_count),
            (table.cpu_free, demand.cpu_milli),
            (table.mem_free, demand.memory_mib),
        ):
            if need > 0:
                room = free[:n] // need
                fit = room if fit is None else np.minimum(fit, room)
        if fit is not None:
            fit.flags.writeable = False
        self._fit_memo[memo_key] = fit
        return fit

    def _free_gpu_milli(self) -> IntArray:
        """Free milli-GPU per row (read-only; kept while the table's state is the same)."""
        table = self.table
        at = (table.state, table.topology_version, table.size)
        if self._free_milli[0] != at:
            free = table.gpu_free[: table.size].sum(axis=1)
            free.flags.writeable = False
            self._free_milli = (at, free)
        return self._free_milli[1]

    def _request_of(self, workload: Workload) -> dict[str, int]:
        """:func:`requested` of the gang (read-only; kept while it waits)."""
        return self._request_entry(workload)[1]

    def _amounts_of(self, workload: Workload) -> tuple[int, ...]:
        """:meth:`_request_of` as the quota tree's amounts (``tree.limited``)."""
        return self._request_entry(workload)[2]

    def _request_entry(
        self, workload: Workload
    ) -> tuple[Workload, dict[str, int], tuple[int, ...]]:
        least = self._least_whole_milli()
        if least != self._requests_least:
            self._requests.clear()
            self._requests_least = least
        known = self._requests.get(workload.key)
        if known is None or known[0] is not workload:
            request = requested(workload.pods[: workload.gang_size], least)
            amounts = self.quotas.tree.limited(request)
            known = self._requests[workload.key] = (workload, request, amounts)
        return known

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
            if (key := self._model_key(model)) is None or room[tree.key_index[key]] > 0
        ]
        restrict = np.isin(table.model_id[:n], np.asarray(ok_models, np.int64)) | (
            table.gpu_count[:n] == 0
        )
        if base is not None:
            restrict &= base[:n]
        result = place_workload(self.engine, workload, restrict)
        if isinstance(result, Unschedulable):
            return None
        usage = self._usage_of(result)
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
            self._queued_at(workload.key),
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
            start = self.time_format(self.reservation.start)
            message += f" Capacity reserved for it from {start}."
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
        self._preemptions_changed()
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
        self._preemptions_changed()
        self.pending.wake_all(Parked.CAPACITY)

    def _preemptions_changed(self) -> None:
        """The reservation, the preemptors, their holds or their victims (or what those hold)
        changed: what was derived from them is dropped."""
        self._preemption_epoch += 1
        self._restrictions.clear()

    def _restrict_for(self, workload: Workload, keep_reservation: bool = True) -> BoolArray | None:
        """Rows ``workload`` may use: all but those held for a preemptor whose victims are
        leaving, and those reserved for a blocked gang (unless it is expected to end first).
        The same for every workload alike in what it reads; read-only, kept until the
        reservation, the preemptors, their holds or their victims change."""
        reservation = self.reservation
        keeps = (
            keep_reservation
            and reservation is not None
            and reservation.owner != workload.key
            and self.now + (workload.expected_runtime or self.config.default_expected_runtime)
            > reservation.start
        )
        nominated = workload.key in self.nominated
        memo_key = (
            self.table.size,
            self.now,
            keeps,
            nominated,
            workload.key if not nominated and workload.key in self._holds else None,
        )
        if memo_key not in self._restrictions:
            allowed = self._compute_restrict(workload, keeps)
            if allowed is not None:
                allowed.flags.writeable = False
            self._restrictions[memo_key] = allowed
        return self._restrictions[memo_key]

    def _compute_restrict(self, workload: Workload, keeps: bool) -> BoolArray | None:
        n = self.table.size
        allowed: BoolArray | None = None
        reservation = self.reservation
        if keeps and reservation is not None:
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
        self._preemptions_changed()
        hold = self._holds.pop(key, None)
        if hold is not None:
            self.quotas.refund(hold[0], hold[1])
            self.pending.wake_all(Parked.QUOTA)

    def _holds_survive(
        self,
        workload: Workload,
        usage: Mapping[str, int],
        limited: tuple[int, ...] | None = None,
    ) -> bool:
        """Would every preemptor whose victims are leaving still pass its quota check with
        ``workload`` admitted too? (A preemptor within nominal must not lose the quota its
        preemption freed to work that borrows it back.)"""
        # The answer depends on the usage (named by its version), the holds and their victims
        # still leaving, and the workload's queue, namespace, kind and usage.
        self._fresh_holds_memo()
        quotas = self.quotas
        skipped = workload.key if workload.key in self._holds else None
        if quotas.namespace_caps:
            memo_key: tuple[object, ...] = (
                skipped, workload.queue, workload.namespace, workload.preemptible,
                *sorted(usage.items()),
            )  # fmt: skip
            amounts: tuple[int, ...] = ()
        else:
            # Only the keys quotas limit count. More usage charged to the queue only takes
            # more room from the preemptors: a usage below one that passed passes, and one
            # above one that failed fails.
            memo_key = (skipped, workload.queue, workload.preemptible)
            amounts = quotas.tree.limited(usage) if limited is None else limited
        exact = self._holds_exact.get((memo_key, amounts))
        if exact is not None:
            return exact
        known = self._holds_memo.setdefault(memo_key, [])
        for seen, survives in known:
            if survives and all(a <= b for a, b in zip(amounts, seen, strict=True)):
                break
            if not survives and all(a >= b for a, b in zip(amounts, seen, strict=True)):
                break
        else:
            survives = self._holds_survive_now(workload, usage, limited)
            known.append((amounts, survives))
        self._holds_exact[(memo_key, amounts)] = survives
        return survives

    def _fresh_holds_memo(self) -> None:
        """Drop what was derived for the holds if the usage or the holds changed."""
        state = (self.quotas.tree.version, self._preemption_epoch)
        if state != self._holds_memo_at:
            self._holds_memo_at = state
            self._holds_memo.clear()
            self._holds_exact.clear()
            self._holder_views.clear()
            self._holder_usage = None

    def _holds_survive_now(
        self,
        workload: Workload,
        usage: Mapping[str, int],
        limited: tuple[int, ...] | None = None,
    ) -> bool:
        if self.quotas.namespace_caps:
            return self._holds_survive_by_trial(workload, usage)
        self._fresh_holds_memo()
        # Each preemptor as it will be when its victims are gone, seen once for this state
        # (the memo was reset with it), asked with the workload's usage added; made only
        # when reached (the first that refuses ends the question).
        tree = self.quotas.tree
        amounts = tree.limited(usage) if limited is None else limited
        pinned = amounts if not workload.preemptible else (0,) * len(amounts)
        views = self._holder_views
        for owner, (holder, held, _) in self._holds.items():
            if owner == workload.key:
                continue
            known = views.get(owner)
            if known is None:
                known = views[owner] = self._holder_view(owner, holder, held)
            request, view, pinned_view = known
            if not view.admits(holder.queue, request, workload.queue, amounts):
                return False
            if pinned_view is not None and not pinned_view.within_nominal(
                holder.queue, request, workload.queue, pinned
            ):
                return False
        return True

    def _holder_view(
        self, owner: str, holder: Workload, request: Mapping[str, int]
    ) -> tuple[tuple[int, ...], UsageView, UsageView | None]:
        """For one preemptor: its request as amounts, and the usage with its request and its
        leaving victims refunded (and the non-preemptible usage, if it is non-preemptible: it
        must stay within nominal), as Quotas.refund would leave them."""
        tree = self.quotas.tree
        if self._holder_usage is None:
            self._holder_usage = (tree.usage.tolist(), self.quotas.pinned_usage.tolist())
        usage, pinned = self._holder_usage

        def refund(rows: list[list[int]], queue: str, amounts: tuple[int, ...]) -> None:
            for i in tree.paths[tree.index[queue]]:
                row = rows[i]
                for j, amount in enumerate(amounts):
                    row[j] -= amount

        leaving = [self.evicting[v] for v in self.nominated.get(owner, ()) if v in self.evicting]
        gone = [(w.workload, tree.limited(w.usage)) for w in leaving]
        amounts = tree.limited(request)
        rows = [row[:] for row in usage]
        refund(rows, holder.queue, amounts)
        for victim, taken in gone:
            refund(rows, victim.queue, taken)
        pinned_view = None
        if not holder.preemptible:
            pinned_rows = [row[:] for row in pinned]
            refund(pinned_rows, holder.queue, amounts)
            for victim, taken in gone:
                if not victim.preemptible:
                    refund(pinned_rows, victim.queue, taken)
            pinned_view = UsageView(tree, pinned_rows)
        return amounts, UsageView(tree, rows), pinned_view

    def _holds_survive_by_trial(self, workload: Workload, usage: Mapping[str, int]) -> bool:
        quotas = self.quotas
        # Restored as a snapshot, so that the usage keeps its version (and what was memoised).
        before = quotas.snapshot()
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
            quotas.restore(before)

    # ----------------------------------------------------------------------------- preemption
    def _preempt(
        self, workload: Workload, actions: list[Action], model: _ModelChoice | None = None
    ) -> bool:
        """Evict the cheapest victims whose eviction admits ``workload`` (Kueue's rules of
        :mod:`.reclaim`; the search of :func:`find_victims`); on one GPU model (its rows, its
        GPUs charged to its quota key) if ``model`` is given."""
        if workload.preemption_policy is PreemptionPolicy.NEVER:
            return False
        if self._search_budget <= 0:
            # Most attempts of a busy cycle end here: only whether victims exist matters.
            if not self._has_candidates(workload):
                self._note_young_victims(workload)
            else:  # searched enough this cycle: its turn comes next cycle
                self._deferred.add(workload.key)
            return False
        _, request, amounts = self._request_entry(workload)
        if model is not None and model.key is not None:
            request = {**request, model.key: request[GPU]}
            amounts = self.quotas.tree.limited(request)
        parts = self._candidate_parts(workload, amounts=amounts)
        count = sum(int(part.chosen.sum()) for part in parts)
        if not count:
            self._note_young_victims(workload)
            return False
        self._search_budget -= 1
        limit = self.config.max_victim_candidates
        need = max(
            p.gpu.count * MILLI_PER_GPU if p.gpu.milli >= MILLI_PER_GPU else 0
            for p in workload.pods[: workload.gang_size]
        )
        table = self.table
        tree = self.quotas.tree
        queue_index = tree.index[workload.queue]
        planned: list[IntArray | None] = []  # rows of each placement that fitted
        restrict = self._restrict_for(workload)
        if model is not None:
            on_model = model.rows
            restrict = on_model if restrict is None else restrict & on_model[: restrict.size]
        by_queue = {part.queue: part.candidate for part in parts if part.candidate is not None}

        def place() -> IntArray | None:
            """The rows the gang would take now, on a trial; None if it does not fit."""
            mark = table.begin_trial()
            try:
                placed = place_workload(self.engine, workload, restrict)
                if isinstance(placed, Unschedulable):
                    return None
                return np.array([b.allocation.row for b in placed], np.int64)
            finally:
                table.rollback(mark)

        def places() -> bool:
            """The placement part of fits()."""
            if self._surely_places(workload, restrict):
                planned.append(None)  # where: placed below if this stays the last fit
                return True
            rows = place()
            if rows is None:
                return False
            planned.append(rows)
            return True

        def still_candidate(victim: RunningWorkload) -> bool:
            candidate = by_queue.get(victim.workload.queue)
            return candidate is None or still_borrowing(tree, candidate, amounts)

        nodes_short: bool | None = None  # found out once, when first needed
        victims: list[RunningWorkload] | None = None
        for borrowing in self._plan_for(workload, amounts).attempts:

            def may_fit(borrowing: bool = borrowing) -> bool:
                """The quota checks of fits(): evicting more victims never makes them fail."""
                if not self.quotas.check(workload, request, amounts).admits:
                    return False
                if not borrowing and not tree.fits_nominal(queue_index, amounts):
                    return False
                return not self._holds or self._holds_survive(workload, request, amounts)

            def fits(may_fit: Callable[[], bool] = may_fit) -> bool:
                # The quota checks first: they do not depend on the placement and cost far less.
                return may_fit() and places()

            columns = [
                (part.victims.columns(), part.chosen_when(borrowing), int(part.variant))
                for part in parts
            ]
            ordered = cheapest_victims(columns, self.now, limit)
            if len(ordered) > 1:
                if not self._quota_could_fit(ordered, may_fit):
                    continue  # (find_victims would find the same at once)
                # Regroup victims node by node only when nodes, not quota, are short: where
                # the gang already places, the cheapest victims overall are the ones to take.
                if need >= MILLI_PER_GPU:
                    if nodes_short is None:
                        nodes_short = not places()
                        planned.clear()
                    if nodes_short:
                        ordered = cheapest_victims(columns, self.now, limit, table, need)
                if nodes_short is not False and not self._places_without(ordered, places):
                    planned.clear()
                    continue  # not even with every candidate gone: no search can succeed
                planned.clear()
            victims = find_victims(
                table, self.quotas, ordered, fits, may_fit, still_candidate, places
            )
            if victims is not None:
                break
        if victims is None:
            self._note_young_victims(workload)
            return False
        rows = planned[-1]
        if rows is None:
            # The last fit was certain without placing: place now, with the same victims gone
            # (find_victims ends with exactly the victims of its last fit evicted).
            mark = table.begin_trial()
            try:
                for victim in victims:
                    for bound in victim.bound.values():
                        table.release(bound.allocation)
                rows = place()
            finally:
                table.rollback(mark)
            assert rows is not None, f"{workload.key} no longer fits where it surely did"
        self._preemptions_changed()
        self.nominated[workload.key] = {v.key for v in victims}
        self.quotas.charge(workload, request)
        self._holds[workload.key] = (workload, request, rows)
        pending = self.pending.get(workload.key)
        if pending is not None:
            pending.reason = "preempting"
        for victim in victims:
            self.preemptions.append((self.now, workload.key, victim.key))
            self._evict(victim, f"preempted by {workload.key}", actions, workload.key)
        return True

    def _places_without(
        self, candidates: Sequence[RunningWorkload], places: Callable[[], bool]
    ) -> bool:
        """Would the preemptor place with every candidate gone (a trial, rolled back)? Most
        searches on a busy cluster fail so, at the cost of one placement instead of one per
        candidate."""
        table = self.table
        mark = table.begin_trial()
        try:
            for candidate in candidates:
                for bound in candidate.bound.values():
                    table.release(bound.allocation)
            return places()
        finally:
            table.rollback(mark)

    def _quota_could_fit(
        self, candidates: Sequence[RunningWorkload], may_fit: Callable[[], bool]
    ) -> bool:
        """Would the quota checks pass with every candidate gone? (If not, no set of them
        admits the preemptor: :func:`find_victims` starts with the same test.)"""
        mark = self.quotas.snapshot()
        self.quotas.refund_all((c.workload, c.usage) for c in candidates)
        try:
            return may_fit()
        finally:
            self.quotas.restore(mark)

    def _plan_for(self, workload: Workload, amounts: tuple[int, ...] | None = None) -> ReclaimPlan:
        """:func:`reclaim.plan` for the workload's queue and request (``amounts``; by
        default its request's), kept per usage state."""
        self._fresh_victims_memo()
        memo_key = (workload.queue, self._amounts_of(workload) if amounts is None else amounts)
        found = self._plans.get(memo_key)
        if found is None:
            tree = self.quotas.tree
            found = self._plans[memo_key] = plan(
                tree, self.quotas.queues, workload.queue, memo_key[1]
            )
        return found

    def _queued_at(self, key: str) -> float:
        """When a workload arrived (see :meth:`_enqueue`)."""
        arrival = self._arrival.get(key)
        return self.now if arrival is None else arrival[1]

    def _is_candidate(
        self,
        workload: Workload,
        running: RunningWorkload,
        min_runtime: float | None = None,
    ) -> bool:
        """May ``workload`` evict ``running`` now, by :mod:`.reclaim`'s rules (its queue's
        policies, the other queue still borrowing) and gpufleet's (preemptible, past its
        minimum run time)? (:meth:`_candidate_parts` applies the same tests on columns: keep
        them alike.)"""
        other = running.workload
        if not other.preemptible or running.key not in self.running:
            return False
        least = self.config.min_runtime if min_runtime is None else min_runtime
        if self.now - running.started < least:
            return False
        plan_ = self._plan_for(workload)
        if not plan_.may_preempt:
            return False
        policy = policy_of(self.quotas.queues, workload.queue)
        if other.queue == workload.queue:
            variant = Variant.WITHIN_QUEUE
            if not plan_.own_queue:
                return False
        else:
            found = next((c for c in plan_.others if c.name == other.queue), None)
            if found is None:
                return False
            variant = found.variant
        return victim_priority_allowed(
            policy,
            variant,
            workload.priority,
            self._queued_at(workload.key),
            other.priority,
            running.queued,
        )

    def _candidates(
        self, workload: Workload, min_runtime: float | None = None
    ) -> list[RunningWorkload]:
        """Every running workload ``workload`` may evict (:meth:`_is_candidate`), queue by
        queue as :meth:`_candidate_parts` lists them, each queue's in ``_by_queue`` order."""
        least = self.config.min_runtime if min_runtime is None else min_runtime
        out: list[RunningWorkload] = []
        for part in self._candidate_parts(workload, least):
            facts = part.victims.facts
            out.extend(facts[i].running for i in np.flatnonzero(part.chosen).tolist())
        return out

    def _candidate_parts(
        self,
        workload: Workload,
        least: float | None = None,
        amounts: tuple[int, ...] | None = None,
    ) -> list[_CandidatePart]:
        """:meth:`_candidates` by queue: each queue's victims and which of them are
        candidates (queues without any are left out): the other queues of the plan in its
        order, then its own. :meth:`_is_candidate`'s tests, on columns (keep them alike)."""
        if least is None:
            least = self.config.min_runtime
        plan_ = self._plan_for(workload, amounts)
        if not plan_.may_preempt:
            return []
        priority = workload.priority
        policy = policy_of(self.quotas.queues, workload.queue)
        parts: list[_CandidatePart] = []
        lower_only = policy.reclaim_within_cohort is ReclaimPolicy.LOWER_PRIORITY
        for candidate in plan_.others:
            eligible, lowest = self._eligible_in(candidate.name, least)
            if lowest >= (priority if lower_only else math.inf):
                continue
            victims = self._queue_victims[candidate.name]
            if lower_only:
                eligible = eligible & (victims.columns().priority < priority)
            parts.append(
                _CandidatePart(
                    candidate.name,
                    victims,
                    eligible,
                    candidate.variant,
                    candidate,
                    policy,
                    priority,
                )
            )
        if plan_.own_queue and self._may_evict_own(workload, policy):
            eligible, lowest = self._eligible_in(workload.queue, least)
            newer_equal = policy.within_queue is WithinQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
            if lowest < priority or (newer_equal and lowest <= priority):
                victims = self._queue_victims[workload.queue]
                columns = victims.columns()
                chosen = eligible & (columns.priority < priority)
                if newer_equal:
                    queued = self._queued_at(workload.key)
                    chosen |= eligible & (columns.priority == priority) & (columns.queued > queued)
                parts.append(
                    _CandidatePart(
                        workload.queue,
                        victims,
                        chosen,
                        Variant.WITHIN_QUEUE,
                        None,
                        policy,
                        priority,
                    )
                )
        if policy.borrow_within_cohort is BorrowWithinCohortPolicy.NEVER and all(
            part.variant is Variant.PRIORITY for part in parts
        ):
            # Priority candidates of other queues only, taken only if the preemptor then fits
            # its queue's nominal quota: it does not now (they would be hierarchical), and
            # evicting them does not lower its queue's usage. None of them can help.
            return []
        return parts

    def _eligible_in(self, queue: str, least: float) -> tuple[BoolArray, float]:
        """Which of ``queue``'s preemptible workloads are running and ran ``least`` seconds
        (the tests of :meth:`_is_candidate` that do not depend on the preemptor), and the
        lowest priority among them (inf if none)."""
        victims = self._queue_victims.get(queue)
        # Only this queue's victims and the time count: a preemption elsewhere leaves it be.
        at = (-1 if victims is None else victims.version, self.now)
        known = self._eligible_masks.get((queue, least))
        if known is not None and known[0] == at:
            return known[1]
        if victims is None or not victims.where:
            found = (np.zeros(0 if victims is None else len(victims.facts), np.bool_), math.inf)
        else:
            eligible = victims.eligible(self.now, least)
            priorities = victims.columns().priority[eligible]
            found = (eligible, float(priorities.min()) if priorities.size else math.inf)
        self._eligible_masks[(queue, least)] = (at, found)
        return found

    def _may_evict_own(self, workload: Workload, policy: QueuePreemption) -> bool:
        """Does the workload's queue run anything its policy could let it evict (lower
        priority, or equal where newer equal priority is allowed)?"""
        own = self._priorities.get(workload.queue)
        if own is None or not own:
            return False
        lowest = min(own)
        if policy.within_queue is WithinQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
            return lowest <= workload.priority
        return lowest < workload.priority

    def _has_candidates(self, workload: Workload) -> bool:
        """Whether :meth:`_candidates` is not empty, without listing them."""
        self._fresh_victims_memo()
        policy = policy_of(self.quotas.queues, workload.queue)
        newer_equal = policy.within_queue is WithinQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
        memo_key = (
            workload.queue,
            workload.priority,
            self._amounts_of(workload),
            self._queued_at(workload.key) if newer_equal else None,
        )
        known = self._has_victims_memo.get(memo_key)
        if known is None:
            known = any(part.chosen.any() for part in self._candidate_parts(workload))
            self._has_victims_memo[memo_key] = known
        return known

    def _fresh_victims_memo(self) -> None:
        """Drop what was derived from the running set and the quota usage if either changed
        (or the time did)."""
        at = (self._running_version, self.quotas.tree.version, self.now)
        if at != self._victims_memo_at:
            self._victims_memo_at = at
            self._has_victims_memo.clear()
            self._young_memo.clear()
            self._plans.clear()

    def _note_young_victims(self, workload: Workload) -> None:
        """After a failed search: when would a victim now too young to evict become one?
        (The loop wakes the core then; see :meth:`next_timer`.)"""
        self._fresh_victims_memo()
        memo_key = (workload.queue, workload.priority, self._amounts_of(workload))
        if memo_key in self._young_memo:
            first = self._young_memo[memo_key]
        else:
            young = self._candidates(workload, min_runtime=0.0)
            least, now = self.config.min_runtime, self.now
            first = min((t for r in young if (t := r.started + least) > now), default=None)
            self._young_memo[memo_key] = first
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

    def _evict(
        self, running: RunningWorkload, reason: str, actions: list[Action], preemptor: str | None
    ) -> None:
        running.evicted_for = reason
        self._untrack(running)
        self._preemptions_changed()
        self.evicting[running.key] = running
        for bound in running.bound.values():
            actions.append(Evict(bound.pod, reason, preemptor))

    def _backoff(self, running: RunningWorkload) -> float:
        running.attempts = self._failures[running.key] = self._failures.get(running.key, 0) + 1
        return float(
            min(self.config.backoff_max, self.config.backoff_base * 2 ** (running.attempts - 1))
        )

    # ----------------------------------------------------------------------------- waking
    def _wake_for_pod_rules(self) -> None:
        """Pods that some inter-pod rule counts came or went since the last cycle: a workload
        parked for capacity whose pods have such rules may fit anywhere now (a domain's count
        changed, not a row's capacity); if a pod with required anti-affinity went, any may."""
        index = self.table.pod_index
        seen = (index.changes, index.repelling)
        if seen == self._pod_rules_seen:
            return
        repelled_less = index.repelling < self._pod_rules_seen[1]
        self._pod_rules_seen = seen
        for group in self.pending.parked_groups():
            pods = group.head.workload.pods
            if group.parked == Parked.CAPACITY and (
                repelled_less or any(p.rules is not None for p in pods)
            ):
                self.pending.unpark(group)
                group.freed_rows = None

    def _wake_for_rows(self, rows: list[int]) -> None:
        if len(self.pending):
            self.pending.wake(lambda group: self._fits_some_row(group.head.workload, rows), rows)

    # ----------------------------------------------------------------------------- queries
    def quota_warnings(self) -> list[str]:
        """Quotas that can never be used (:func:`model_quota_warnings` of the nodes known)."""
        return model_quota_warnings(self.quotas.queues, self.table.model_names)

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
            items.sort(key=lambda p: (-self._effective_priority(p), p.not_before, p.order))
            strict = self._strict_fifo(queue)
            for position, pending in enumerate(items, start=1):
                key = pending.workload.key
                waiting_for = pending.reason or "not tried yet"
                told = pending.told
                if strict and position > 1 and not told:
                    waiting_for = "queue order"
                    told = f"waiting behind {items[0].workload.key}: queue {queue} is StrictFIFO"
                start: float | None = None
                if key in self.nominated:
                    waiting_for = "preempting"
                    start = self.now
                elif waiting_for == "backoff":
                    start = pending.not_before
                elif estimate and id(pending) in heads:
                    start = self._estimated_start(pending.workload, waiting_for)
                message = told or (
                    f"in backoff until {self.time_format(pending.not_before)}"
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
        request = requested(workload.pods[: workload.gang_size], self._least_whole_milli())
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
