"""The scheduling core: cluster events in, actions out. Pure, synchronous, deterministic.

One call of :meth:`SchedulerCore.cycle` is one scheduling cycle (a workload is one pod or a
gang), in the steps of ``docs/architecture.md``; each concern lives in a module of its own,
and what a profile configures is a plugin (:mod:`.framework`, :mod:`.profile`):

1. **Order the heads.** Release workloads whose backoff has passed, evict gangs whose permit
   ended (the profile's Permit: pods not ready in time), wake what inter-pod rules or victims
   past their minimum run time may help; first try the preemptors whose victims are gone;
   then give up to one admission to each queue with work, from the queue whose key is least
   under the profile's QueueSort (fair share by default; with the profile's ``fairSharing``,
   by usage decayed over time too: :mod:`.usage_history`), each queue's heads by priority,
   then arrival (:mod:`.ordering`).
2. **Admission.** Whether its queue admits its namespace and priority class (a workload it
   does not waits, told why, as Kueue's does), the profile's admission checks, then quota
   (queue tree and namespace caps; one GPU model at a time where the queue lists models,
   :mod:`.flavors`, and one implicit flavor where it lists none), on the rows not held for
   preemptors or reserved for a blocked gang (:mod:`.holds`). Steps 2 to 7 are one pipeline
   for every queue (:mod:`.admission_pipeline`), answering Admitted, Preempted or Blocked.
3. **Placement** of every pod of the gang on a trial of the node table, all or none (inside
   one topology domain if it asks); then the exact quota, GPUs counted per model.
4. **Preemption** if quota or capacity kept it out: the profile's PostFilter chooses victims
   on a trial (:mod:`.preemption`); the core holds their room for the preemptor and evicts
   them.
5. **Reserve devices**: each pod's GPUs or MIG slices are taken as it is placed on the trial.
6. **Commit** the trial and emit a Bind per pod (:mod:`.lifecycle`).
7. **Park** what could not run, telling each workload why once per reason, until an event
   that could help (:mod:`.parking`); the first gang blocked by capacity gets a backfill
   reservation (:mod:`.backfill`).

Events (:meth:`SchedulerCore.handle`) move workloads between waiting, running and being
evicted (:mod:`.lifecycle`; evicted whole by the next cycle when a node they run on goes away:
``WorkloadDisrupted``); a node's devices failing or recovering (``DeviceHealthChanged``) change
what its row offers at once, and so does a node that stops or resumes taking new pods, or
whose taints change (``NodeSchedulingChanged``) (:mod:`.node_table`). Call cycles until one
admits and evicts nothing (:meth:`SchedulerCore.run_until_idle`); with one queue
without quota and one-pod workloads this is the plain placement loop of the fill-up mode. What
waits and why, and what runs where, reads as values: :meth:`SchedulerCore.view` (:mod:`.view`,
filled by :mod:`.explain`).

What it does not do: I/O, clocks (the caller passes ``now``), or deciding the placement of one
pod (the :class:`~gpufleet.scheduling.engine.PlacementEngine`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from gpufleet.model import Node, Placement, Pod
from gpufleet.model.actions import Action, Bind, Evict
from gpufleet.model.events import (
    BindFailed,
    ClusterEvent,
    DeviceHealthChanged,
    NodeAdded,
    NodeRemoved,
    NodeSchedulingChanged,
    PodAdded,
    PodBound,
    PodDeleted,
    PodReady,
    WorkloadAdded,
    WorkloadDemoted,
    WorkloadDisrupted,
    WorkloadReleased,
)
from gpufleet.model.queues import Queue, ResourceQuota
from gpufleet.model.times import TimeFormat, simulated_time
from gpufleet.model.workload import Workload
from gpufleet.scheduling.admission import (
    AdmissionConfig,
    Quotas,
    cluster_capacity,
    model_quota_warnings,
)
from gpufleet.scheduling.admission_pipeline import AdmissionPipeline, Blocked
from gpufleet.scheduling.backfill import Backfill, Reservation
from gpufleet.scheduling.engine import PlacementEngine, Unschedulable
from gpufleet.scheduling.explain import Explainer
from gpufleet.scheduling.framework import (
    REQUEUE_ON_QUOTA,
    Policy,
    Requeued,
    Timed,
    TurnHooks,
)
from gpufleet.scheduling.lifecycle import Lifecycle
from gpufleet.scheduling.node_table import IntArray, NodeTable
from gpufleet.scheduling.ordering import QueueOrder
from gpufleet.scheduling.parking import Parking
from gpufleet.scheduling.pending import Parked
from gpufleet.scheduling.preemption.candidates import Candidates
from gpufleet.scheduling.profile import DEFAULT_PROFILE, Profile
from gpufleet.scheduling.registry import Registry
from gpufleet.scheduling.running import RunningWorkload
from gpufleet.scheduling.state import CoreState
from gpufleet.scheduling.usage_history import UsageHistory
from gpufleet.scheduling.view import PendingExplanation, SchedulerView, admitted

#: Actions that make a cycle worth following with another (a tuple: no union made per test).
BIND_OR_EVICT = (Bind, Evict)

__all__ = ["PendingExplanation", "SchedulerCore"]


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
        profile: Profile = DEFAULT_PROFILE,
        registry: Registry | None = None,
        quota_capacity: Mapping[str, int] | None = None,
    ) -> None:
        """``quota_capacity``: the cluster's capacity as the quotas count it at their top
        (default: the table's nodes', following the nodes as they join and leave); a cluster
        that grows (node pools) passes what it may grow to, fixed, so that work within its
        quota is admitted and waits for nodes rather than for a quota capped by the nodes there
        now."""
        registry = registry or Registry.default()
        registry.check(profile)
        name = profile.name
        scores = [(registry.scores.build(s, table, name), s.weight) for s in profile.scores]
        if scores:
            policy = replace(policy, scorers=[*policy.scorers, *scores])
        filters = [registry.filters.build(spec, table, name) for spec in profile.filters]
        engine = PlacementEngine(table, policy, filters, tie_rank=tie_rank)
        #: Whether the quotas' root follows the nodes (not when the caller fixed it).
        self._capacity_follows_nodes = quota_capacity is None
        if quota_capacity is None:
            quota_capacity = cluster_capacity(table.nodes)
        quotas = Quotas(queues or {}, quota_capacity, resource_quotas)
        state = CoreState(table, engine, quotas, config or AdmissionConfig(), time_format, explain)
        self.state = state
        self.profile = profile
        self.post_filter = registry.post_filters.build(profile.post_filter, state, name)
        self.permit = registry.permits.build(profile.permit, state, name)
        self.admission_checks = [
            registry.admission_checks.build(spec, state, name) for spec in profile.admission_checks
        ]
        state.running.watchers.extend([self.post_filter, self.permit, *self.admission_checks])
        if profile.fair_sharing is not None:
            history = UsageHistory(
                profile.fair_sharing.usage_half_life, quotas.tree, lambda: state.now
            )
            state.usage_history = history
            state.running.watchers.append(history)
        #: Checks the world's loop tells of each turn, and those that wait on time.
        self.turn_hooked = [c for c in self.admission_checks if isinstance(c, TurnHooks)]
        self.timed_checks = [c for c in self.admission_checks if isinstance(c, Timed)]
        state.pending.requeue_on = {
            c.name: c.requeue_on if isinstance(c, Requeued) else REQUEUE_ON_QUOTA
            for c in self.admission_checks
        }
        queue_sort = registry.queue_sorts.build(profile.queue_sort, state, name)
        self.order = QueueOrder(state.pending, quotas.queues, queue_sort, state.config)
        self.parking = Parking(state)
        self.backfill = Backfill(state)
        self.explainer = Explainer(state, self.order, self.backfill)
        found = getattr(self.post_filter, "candidates", None)
        self.explainer.candidates = found if isinstance(found, Candidates) else None
        self.lifecycle = Lifecycle(state, self.parking, self.permit)
        #: Steps 2-7 for one waiting workload (:mod:`.admission_pipeline`).
        self.admission = AdmissionPipeline(
            state,
            self.parking,
            self.backfill,
            self.lifecycle,
            self.post_filter,
            self.admission_checks,
            self.explainer.unfit_message,
        )
        #: (time, preemptor, victim) of every preemption, for reports and invariants.
        self.preemptions: list[tuple[float, str, str]] = self.admission.preemptions
        # The core's own parts, by the names its tests and benchmarks read.
        self.table, self.engine, self.quotas = table, engine, quotas
        self.config, self.time_format = state.config, time_format
        self.pending = state.pending
        self.running: Mapping[str, RunningWorkload] = state.running.workloads
        self.evicting: Mapping[str, RunningWorkload] = state.running.evicting
        self.owner: Mapping[str, str] = state.running.owner
        self.nominated: Mapping[str, set[str]] = state.holds.nominated

    @property
    def now(self) -> float:
        return self.state.now

    @now.setter
    def now(self, now: float) -> None:
        self.state.now = now

    @property
    def reservation(self) -> Reservation | None:
        return self.state.holds.reservation

    # ----------------------------------------------------------------------------- events
    def handle(self, event: ClusterEvent) -> None:
        lifecycle = self.lifecycle
        if isinstance(event, WorkloadAdded):
            lifecycle.add(event.workload)
        elif isinstance(event, PodAdded):
            lifecycle.pod_added(event.pod)
        elif isinstance(event, PodDeleted):
            lifecycle.pod_deleted(event.key)
        elif isinstance(event, PodReady):
            lifecycle.pod_ready(event.key)
        elif isinstance(event, PodBound):
            lifecycle.pod_bound(event.pod, event.placement, event.preemptible, event.workload)
        elif isinstance(event, BindFailed):
            lifecycle.bind_failed(event.key, event.reason)
        elif isinstance(event, NodeAdded):
            row = self._node_added(event.node)
            self.parking.wake_for_rows([row])
            self._capacity_changed(event.node, 1)
        elif isinstance(event, NodeRemoved):
            row = self.table.row_of[event.name]
            was_alive = bool(self.table.alive[row])
            self.table.remove_node(event.name)
            if was_alive:
                self._capacity_changed(self.table.nodes[row], -1)
        elif isinstance(event, DeviceHealthChanged):
            self._device_health(event)
        elif isinstance(event, NodeSchedulingChanged):
            self._node_scheduling(event)
        elif isinstance(event, WorkloadDemoted):
            lifecycle.demote(event.key)
        elif isinstance(event, WorkloadDisrupted):
            lifecycle.disrupt(event.key, event.reason)
        elif isinstance(event, WorkloadReleased):
            lifecycle.release(event.workload)

    def _node_added(self, node: Node) -> int:
        """A node joins: a new row; or, when pods still hold the row of a node of its name
        that left (deleted and re-created under running pods, or changed: the backend tells a
        change as the node leaving and joining), that row again, with what those pods hold
        counted on it, as kube-scheduler keeps a removed node's entry while pods name it."""
        table = self.table
        row = table.row_of.get(node.name)
        if row is not None and not table.alive[row]:
            held = self.lifecycle.held_on(row)
            if held:
                self.lifecycle.renew_node(row, node, held)
                return row
        return table.add_node(node)

    def _capacity_changed(self, node: Node, sign: int) -> None:
        """``node`` joined (1) or left (-1): the quotas' root follows the cluster, and what
        waits for quota may fit now (a scale-up) or be told again. A root the caller fixed
        (what node pools may grow to) stays."""
        if self._capacity_follows_nodes and self.quotas.change_capacity((node,), sign):
            self.state.pending.wake_all(Parked.QUOTA)

    def _node_scheduling(self, event: NodeSchedulingChanged) -> None:
        """A node stops or resumes taking new pods, or its taints change: applied at once,
        pods running there or not (they stay); what waits may fit on it now."""
        table = self.table
        row = table.row_of.get(event.node)
        if row is None or not table.alive[row]:
            return
        if table.set_scheduling(row, not event.unschedulable, event.reason, event.taints):
            self.parking.wake_for_rows([row])

    def _device_health(self, event: DeviceHealthChanged) -> None:
        """Some GPUs of a node failed or recovered: applied at once, pods running there or
        not (they keep what they hold); what waits may fit on a device back in service."""
        table = self.table
        row = table.row_of.get(event.node)
        if row is None or not table.alive[row]:
            return
        if table.set_unhealthy(row, event.unhealthy):
            self.parking.wake_for_rows([row])

    def handle_all(self, events: Iterable[ClusterEvent]) -> None:
        for event in events:
            self.handle(event)

    def add(self, workload: Workload) -> None:
        """A new workload to admit (a repeated key is ignored; an unknown queue is an error)."""
        self.lifecycle.add(workload)

    # ----------------------------------------------------------------------------- cycle
    def cycle(self, now: float | None = None) -> list[Action]:
        """One scheduling cycle; see the module docstring."""
        state = self.state
        if now is not None:
            state.now = max(state.now, now)
        actions: list[Action] = []
        holds, pending = state.holds, state.pending
        attempt = self.admission.attempt
        # Memos that hold for one cycle key by its number; nothing else is reset here. The
        # steps run in this order (the decision dump pins it): backoffs end before anything
        # is woken, so that a workload back from its backoff is in its group when a wake
        # unparks the group; failed gangs are evicted before the wakes, so that what is woken
        # sees the cluster after those evictions.
        state.cycle += 1
        self._release_backoffs()
        self._reopen_preemption_searches()
        self._evict_failed_gangs(actions)
        self._wake_what_may_now_fit()
        self.order.age(state.now)
        # 1. Order the heads: preemptors whose victims are gone first, then by queue.
        for key in holds.victims_gone():
            holds.end_nomination(key)
            group = pending.group_of(key)
            if group is not None and group.head.workload.key == key:
                pending.unpark(group)
                attempt(group, actions, allow_preemption=False, nominated=True)
        turns = self.order.turns(holds.nominated)
        for group in turns:
            if not isinstance(attempt(group, actions, allow_preemption=True), Blocked):
                turns.took()
        self.parking.tell_joined(actions)
        return actions

    def _release_backoffs(self) -> None:
        """Workloads whose backoff passed wait in their groups again."""
        self.state.pending.release_backoff(self.state.now)

    def _reopen_preemption_searches(self) -> None:
        """Victim searches may run again; those put off last cycle are woken."""
        self.parking.wake_put_off(self.post_filter.begin_cycle())

    def _evict_failed_gangs(self, actions: list[Action]) -> None:
        """Gangs whose bind failed or whose permit ended, and workloads whose node left."""
        self.lifecycle.evict_failed(actions)

    def _wake_what_may_now_fit(self) -> None:
        """What inter-pod rules held back while their pods came or went, and preemptors
        whose victims became eligible."""
        self.parking.wake_for_pod_rules()
        self.post_filter.wake()

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
            if not self.post_filter.searches_put_off() and not any(
                isinstance(a, BIND_OR_EVICT) for a in step
            ):
                break
        return actions

    def next_timer(self, aging: bool = True) -> float:
        """The next time the core has something timed to do: a backoff ends, a gang's permit
        may end, a blocked preemptor's victim reaches its minimum run time, priorities age
        (unless ``aging`` is False); ``inf`` if none. A backend's wait should not sleep past
        it."""
        first = math.inf
        for due in (
            self.state.pending.next_due,
            self.permit.next_deadline(),
            self.post_filter.next_timer(),
            self.order.next_aging() if aging else None,
        ):
            if due is not None and due < first:
                first = due
        return max(first, self.state.now)

    def check_timer(self, now: float) -> float:
        """When an admission check may admit what it refused without any event (a budget's
        next period, a calendar window's opening); ``inf`` if none. Apart from
        :meth:`next_timer`: a world whose events are over does not wait for it."""
        first = math.inf
        for check in self.timed_checks:
            due = check.next_timer(now)
            if due is not None and due < first:
                first = due
        return first

    # ----------------------------------------------------------------------------- queries
    def view(self, estimate: bool = False) -> SchedulerView:
        """What waits (why, for what, since when, where it stands; with ``estimate``, when it
        may start) and what runs where, as frozen values."""
        running, table = self.state.running, self.table
        return SchedulerView(
            self.state.now,
            tuple(self.explainer.waiting(estimate)),
            tuple(admitted(r, table) for r in running.workloads.values()),
            tuple(admitted(r, table) for r in running.evicting.values()),
        )

    def explain_pending(self, estimate: bool = True) -> list[PendingExplanation]:
        """For every waiting workload: why, its position in its queue, and an estimated start
        (from the backfill plan for the head of a group blocked by capacity, from the expected
        ends of running work for quota)."""
        return self.explainer.explanations(estimate)

    def quota_warnings(self) -> list[str]:
        """Quotas that can never be used (:func:`model_quota_warnings` of the nodes known)."""
        return model_quota_warnings(self.quotas.queues, self.table.model_names)

    def why(self, pod: Pod) -> Unschedulable:
        """Why ``pod`` cannot be placed now (nodes per reason)."""
        return self.engine.explain(pod)

    def placement_of(self, pod_key: str) -> Placement | None:
        running = self.state.running.of_pod(pod_key)
        if running is None:
            return None
        bound = running.bound.get(pod_key)
        return bound.placement if bound is not None else None
