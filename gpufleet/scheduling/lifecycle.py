"""How a workload moves between waiting, running and being evicted, as events and the cycle
move it.

A workload arrives (a Workload, or a lone pod that names none) and waits; the cycle admits it
(:meth:`Lifecycle.start`: charge its quota, track it, a Bind per pod; pods beyond the gang's
``minMember`` start like lone pods once it runs) or evicts it (:meth:`Lifecycle.evict`). Each
pod that ends gives its devices and quota back and wakes what that could help; when the last
pod of a workload being evicted is gone, the workload waits again, at its first arrival's
place (or, after a failure, as a new arrival once its backoff has passed). A failed bind
releases the gang, and a gang whose permit ended (not ready in time) is evicted: both wait
out a backoff that doubles with each failure. A workload whose node goes away
(:meth:`Lifecycle.disrupt`) is evicted whole by the next cycle and waits again at its place,
as a preemption victim does. A pod found bound by someone else takes exactly
the devices it holds. A running workload may be lowered to preemptible at the lowest priority
(:meth:`Lifecycle.demote`: an idle policy's ``Preemptible``), and stays so for its life.

What it does not do: decide who starts or who is evicted (the cycle and the post-filter do).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from gpufleet.model import Node, Placement, Pod
from gpufleet.model.actions import Action, Bind, Evict
from gpufleet.model.priorities import LOWEST_PRIORITY
from gpufleet.model.workload import Workload
from gpufleet.scheduling.engine import Bound
from gpufleet.scheduling.framework import Permit
from gpufleet.scheduling.node_table import Allocation
from gpufleet.scheduling.parking import Parking
from gpufleet.scheduling.pending import Parked
from gpufleet.scheduling.put_back import put_back
from gpufleet.scheduling.running import RunningWorkload

if TYPE_CHECKING:
    from gpufleet.scheduling.state import CoreState


class Lifecycle:
    """See the module docstring."""

    def __init__(self, state: CoreState, parking: Parking, permit: Permit) -> None:
        self.state = state
        self.parking = parking
        self.permit = permit
        #: Pod key -> workload key, for the pods of waiting workloads.
        self._waiting_pod: dict[str, str] = {}
        #: Workload key -> when it may be tried again, while it is being released.
        self._requeue_at: dict[str, float] = {}
        #: Workload key -> times it failed to start (a bind failed, a gang not ready in time),
        #: kept while it waits again, so that its backoff grows.
        self._failures: dict[str, int] = {}
        self._failed_binds: list[tuple[str, str]] = []
        #: (workload or pod key, why) of running workloads to evict whole next cycle.
        self._disrupted: list[tuple[str, str]] = []

    # ----------------------------------------------------------------------------- arrivals
    def lone(
        self,
        pod: Pod,
        preemptible: bool = True,
        bound: bool = False,
        ran_as: Workload | None = None,
    ) -> Workload:
        """A pod's workload of its own; ``bound``: a pod placed already, which charges only a
        queue that admits its namespace. ``ran_as``: the workload a world says it ran as (see
        :class:`PodBound`): that very workload when it is this pod's alone, else its queue
        (while the queue is defined)."""
        if ran_as is not None and ran_as.queue in self.state.quotas.queues:
            if ran_as.pods == (pod,):
                return ran_as if preemptible else replace(ran_as, preemptible=False)
            queue = ran_as.queue
        else:
            queue = self.state.quotas.queue_for(pod, admitted_only=bound)
        return Workload(
            pod.name, pod.namespace, (pod,), queue, pod.priority,
            preemptible=preemptible, labels=pod.labels,
        )  # fmt: skip

    def add(self, workload: Workload) -> None:
        """A new workload to admit (a repeated key is ignored; an unknown queue is an error)."""
        state = self.state
        key = workload.key
        if key in state.running or key in state.pending or key in state.held:
            return
        if workload.queue not in state.quotas.queues:
            raise ValueError(f"workload {workload.key} names unknown queue {workload.queue!r}")
        if state.held.hold(workload, state.now):
            return
        for pod in workload.pods:
            state.engine.observe(pod)
        self.enqueue(workload)

    def release(self, workload: Workload) -> None:
        """A held workload's gates went or it was resumed: queued once nothing holds it."""
        state = self.state
        if workload.queue not in state.quotas.queues:
            raise ValueError(f"workload {workload.key} names unknown queue {workload.queue!r}")
        released = state.held.release(workload, state.now)
        if released is not None:
            for pod in released.pods:
                state.engine.observe(pod)
            self.enqueue(released, again=True)

    def pod_added(self, pod: Pod) -> None:
        state = self.state
        if (
            pod.key not in state.running.owner
            and pod.key not in self._waiting_pod
            and state.held.owner_of(pod.key) is None
        ):
            self.add(self.lone(pod))

    def enqueue(self, workload: Workload, not_before: float = 0.0, again: bool = False) -> None:
        """Queue ``workload``: at its first arrival's place (a preempted workload goes back
        where it was, as Kueue orders by creation time), or, ``again``, as a new arrival (one
        that failed to start: Kueue's eviction timestamp)."""
        state = self.state
        for pod in workload.pods:
            self._waiting_pod[pod.key] = workload.key
        order = state.arrivals.arrive(workload.key, state.now, again)
        state.pending.add(workload, state.now, not_before, order=order)

    def dequeue(self, key: str) -> None:
        state = self.state
        state.holds.changed()
        workload = state.pending.remove(key)
        state.arrivals.forget(key)
        self._failures.pop(key, None)
        state.holds.forget(key)
        if workload is not None:
            for pod in workload.pods:
                self._waiting_pod.pop(pod.key, None)
            state.holds.drop_reservation_of(key)

    # ----------------------------------------------------------------------------- running
    def start(
        self,
        workload: Workload,
        bound: Sequence[Bound],
        usage: dict[str, int],
        actions: list[Action],
    ) -> None:
        """Admit ``workload`` placed as ``bound``, holding ``usage``."""
        state = self.state
        for pod in workload.pods:
            self._waiting_pod.pop(pod.key, None)
        state.quotas.charge(workload, usage)
        gang = workload.pods[: workload.gang_size]
        running = RunningWorkload(
            workload.with_pods(gang) if len(gang) < len(workload.pods) else workload,
            {b.pod.key: b for b in bound},
            dict(usage),
            state.now,
            state.arrivals.queued_at(workload.key, state.now),
        )
        state.running.track(running)
        for b in bound:
            actions.append(Bind(b.pod, b.placement))
        # Pods beyond minMember start like lone pods once their gang runs.
        for pod in workload.pods[workload.gang_size :]:
            self.enqueue(workload.extra(pod))
        state.holds.drop_reservation_of(workload.key)

    def demote(self, key: str) -> bool:
        """Lower the running (or being evicted) workload ``key`` to preemptible at
        :data:`LOWEST_PRIORITY`: its quota charge moves out of the non-preemptible usage, and
        what waits may preempt it now (if it is evicted, it waits so lowered). False when it
        is neither running nor being evicted, or is so lowered already. ``key`` may name one
        of its bound pods instead (a world that sees pods, not workloads)."""
        state = self.state
        key = state.running.owner.get(key, key)
        running = state.running.get(key) or state.running.evicting.get(key)
        if running is None:
            return False
        before = running.workload
        if before.preemptible and before.priority == LOWEST_PRIORITY:
            return False
        lowered = replace(before, priority=LOWEST_PRIORITY, preemptible=True)
        state.quotas.refund(before, running.usage)
        state.running.retag(running, lowered)
        state.quotas.charge(lowered, running.usage)
        state.holds.changed()
        state.pending.wake_all(Parked.QUOTA)  # non-preemptible usage went down
        return True

    def evict(
        self, running: RunningWorkload, reason: str, actions: list[Action], preemptor: str | None
    ) -> None:
        self.state.running.start_evicting(running, reason)
        self.state.holds.changed()
        for bound in running.bound.values():
            actions.append(Evict(bound.pod, reason, preemptor))

    def disrupt(self, key: str, reason: str) -> None:
        """Evict the running workload ``key`` (or the one that owns the pod ``key``) whole
        next cycle: its node goes away. See :class:`~gpufleet.model.events.WorkloadDisrupted`."""
        if not isinstance(key, str):  # kept for the next cycle: checked now, not there
            raise ValueError(f"a disrupted workload's key must be a name, got {key!r}")
        self._disrupted.append((key, str(reason)))

    def evict_failed(self, actions: list[Action]) -> None:
        """Gangs with a failed bind, and gangs whose permit ended: released, retried later.
        Workloads whose node goes away: evicted whole, waiting again at their place."""
        state = self.state
        for key, reason in self._disrupted:
            running = state.running.get(state.running.owner.get(key, key))
            if running is not None:
                self.evict(running, reason, actions, None)
        self._disrupted.clear()
        for key, reason in self._failed_binds:
            running = state.running.get(key)
            if running is not None:
                self.evict(running, reason, actions, None)
        self._failed_binds.clear()
        for running, reason in self.permit.revoked(state.now):
            if state.running.get(running.key) is running:
                self._requeue_at[running.key] = state.now + self._backoff(running)
                self.evict(running, reason, actions, None)

    def pod_ready(self, key: str) -> None:
        running = self.state.running.of_pod(key)
        if running is not None:
            self.permit.pod_ready(running, key)

    # ----------------------------------------------------------------------------- pods gone
    def pod_deleted(self, key: str) -> None:
        state = self.state
        held = state.held.owner_of(key)
        if held is not None:  # a held gang without all its pods: gone too, as a waiting one
            state.held.drop(held)
            return
        waiting = self._waiting_pod.get(key)
        if waiting is not None:
            # A waiting pod is gone (deleted, or dropped by a fill-up run): so is its workload,
            # since a gang without all its pods cannot start.
            self.dequeue(waiting)
            return
        owner_key = state.running.disown(key)
        if owner_key is None:
            return
        running = state.running.get(owner_key) or state.running.evicting.get(owner_key)
        if running is None:
            return
        state.holds.changed()  # a victim's rows and usage may be freed, or it gone
        bound = running.bound.pop(key, None)
        if bound is not None:
            self._release_pod(running, bound)
        if running.bound:
            if owner_key in state.running:
                # It ended while the rest runs on (a Job's pod): if the rest is evicted, the
                # workload comes back without it.
                running.workload = running.workload.without(key)
            return
        if state.running.evicting.pop(owner_key, None) is not None:
            retry_at = self._requeue_at.pop(owner_key, None)
            self.enqueue(running.workload, retry_at or 0.0, again=retry_at is not None)
            state.holds.victim_left(owner_key)
        else:
            self._failures.pop(owner_key, None)
            self._forget(running)

    def _release_pod(self, running: RunningWorkload, bound: Bound) -> None:
        state = self.state
        state.engine.release(bound.allocation)
        share = state.requests.usage_of([bound])
        state.quotas.refund(running.workload, share)
        state.running.shrink(running, share)
        self.parking.wake_for_rows([bound.allocation.row])
        state.pending.wake_all(Parked.QUOTA)

    def bind_failed(self, key: str, reason: str) -> None:
        state = self.state
        running = state.running.of_pod(key)
        if running is None:
            return
        state.holds.changed()
        bound = running.bound.pop(key, None)
        state.running.disown(key)
        if bound is not None:
            self._release_pod(running, bound)
        # The rest of the gang (if any) is evicted next cycle; all of it retries after backoff.
        self._requeue_at[running.key] = state.now + self._backoff(running)
        if running.bound:
            self._failed_binds.append((running.key, f"bind of {key} failed: {reason}"))
        else:
            self._forget(running)
            self.enqueue(running.workload, self._requeue_at.pop(running.key), again=True)

    def pod_bound(
        self,
        pod: Pod,
        placement: Placement,
        preemptible: bool = True,
        ran_as: Workload | None = None,
    ) -> None:
        """Take exactly the devices a pod already holds (bound by someone else, or a resync);
        ``preemptible`` False: never evict it; ``ran_as``: see :meth:`lone`. Devices its node
        no longer lists (the device plugin withdrew them) stay counted: see :meth:`hold`."""
        state = self.state
        if pod.key in state.running.owner:
            return
        if placement.node not in state.table.row_of:
            raise ValueError(f"pod {pod.key} is bound to {placement.node!r}, a node not known")
        waiting = self._waiting_pod.get(pod.key)
        if waiting is not None:
            self.dequeue(waiting)
        bound = Bound(pod, placement, self.hold(pod, placement))
        usage = state.requests.usage_of([bound])
        workload = self.lone(pod, preemptible, bound=True, ran_as=ran_as)
        state.quotas.charge(workload, usage)
        state.running.track(
            RunningWorkload(workload, {pod.key: bound}, usage, state.now, state.now)
        )

    def hold(self, pod: Pod, placement: Placement, beyond: bool = False) -> Allocation:
        """Take on the node table what a pod running at ``placement`` holds there: the devices
        the node lists, and those it no longer lists counted apart (the allocation keeps them;
        its units count against what the node advertises, so nothing new goes there until
        usage fits again, as kube-scheduler counts a node's requested resources). ``beyond``:
        it ran there before the node shrank, so it is counted even beyond what is free."""
        state = self.state
        return put_back(state.table, pod, placement, state.engine.demand(pod), beyond)

    # ----------------------------------------------------------------------------- nodes
    def held_on(self, row: int) -> list[tuple[RunningWorkload, Bound]]:
        """The pods (running or being evicted) that hold something on ``row``."""
        running = self.state.running
        return [
            (r, bound)
            for group in (running.workloads, running.evicting)
            for r in group.values()
            for bound in r.bound.values()
            if bound.allocation.row == row
        ]

    def renew_node(self, row: int, node: Node, held: list[tuple[RunningWorkload, Bound]]) -> None:
        """``node`` comes back under the name of ``row`` (re-created, or changed: allocatable
        lowered, devices withdrawn) while the pods ``held`` still hold the row: the row takes
        the new node and those pods hold on it again what they hold, counted even beyond
        what it offers now (a pod whose devices the node no longer lists keeps them)."""
        state = self.state
        for _, bound in held:
            state.table.release(bound.allocation)
        state.table.renew_node(row, node)
        for running, bound in held:
            retaken = Bound(bound.pod, bound.placement, self.hold(bound.pod, bound.placement, True))
            running.bound[bound.pod.key] = retaken
            before = state.requests.usage_of([bound])
            after = state.requests.usage_of([retaken])
            if after != before:  # another GPU model: the quota keys of its GPUs move
                state.quotas.refund(running.workload, before)
                state.quotas.charge(running.workload, after)
                for k, v in after.items():
                    running.usage[k] = running.usage.get(k, 0) + v
                state.running.shrink(running, before)
        state.holds.changed()

    def _forget(self, running: RunningWorkload) -> None:
        """A workload whose pods are all gone (finished)."""
        self.state.arrivals.forget(running.key)
        if running.key in self.state.running:
            self.state.running.untrack(running)

    def _backoff(self, running: RunningWorkload) -> float:
        config = self.state.config
        running.attempts = self._failures[running.key] = self._failures.get(running.key, 0) + 1
        return float(min(config.backoff_max, config.backoff_base * 2 ** (running.attempts - 1)))
