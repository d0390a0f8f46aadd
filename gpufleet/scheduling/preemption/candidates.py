"""Who a preemptor may evict now: Kueue's rules (:mod:`.reclaim`) on columns of running work.

Each queue's preemptible running workloads are kept as numpy columns (:class:`QueueVictims`:
appended as workloads start, marked gone as they stop), so that a search of a busy cluster
does not list thousands of them anew. For one preemptor, :meth:`Candidates.parts` gives per
queue which of them are candidates and in which group (hierarchical reclaim, reclaim by
priority, its own queue): preemptible, past the minimum run time, and allowed by its queue's
policies; :meth:`Candidates.is_candidate` asks the same of one workload (the two must agree).

Kept here, beside the columns they read: the reclaim plan per (queue, request), whether a
preemptor has any candidate, when a victim now too young first ripens, and which of a queue's
victims ran long enough; all keyed by the running set's and the quota usage's versions and the
time.

What it does not do: order candidates or try evictions (:mod:`.victims`), or evict.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.model.queues import (
    BorrowWithinCohortPolicy,
    QueuePreemption,
    ReclaimPolicy,
    WithinQueuePolicy,
)
from gpufleet.model.workload import Workload
from gpufleet.scheduling.node_table import BoolArray
from gpufleet.scheduling.preemption.reclaim import (
    CandidateQueue,
    ReclaimPlan,
    Variant,
    plan,
    policy_of,
    victim_priority_allowed,
)
from gpufleet.scheduling.preemption.victims import VictimColumns, VictimFacts, victim_facts
from gpufleet.scheduling.running import RunningWorkload

if TYPE_CHECKING:
    from gpufleet.scheduling.state import CoreState


class QueueVictims:
    """A queue's preemptible running workloads, in the order they started, with what ordering
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


@dataclass(slots=True)
class CandidatePart:
    """One queue's candidate victims for one preemptor: which of the queue's running
    workloads (``chosen``, over ``victims``'s columns), in which group (``variant``), and the
    other queue's terms (``candidate``; None for the preemptor's own queue)."""

    queue: str
    victims: QueueVictims
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


class Candidates:
    """See the module docstring."""

    def __init__(self, state: CoreState) -> None:
        self.state = state
        #: Queue -> its preemptible running workloads (the candidates of the reclaim scan).
        self.queue_victims: dict[str, QueueVictims] = {}
        #: (queue, run time) -> which of them ran that long, and their lowest priority
        #: (inf if none), kept while the queue's victims (by version) and the time are the
        #: same.
        self._eligible: dict[
            tuple[str, float], tuple[tuple[int, float], tuple[BoolArray, float]]
        ] = {}
        #: The running set's version, the quota usage's and the time when the memos below
        #: were made.
        self._memo_at: tuple[int, int, float] = (-1, -1, -math.inf)
        #: Per (queue, request): whom it may preempt (:func:`reclaim.plan`); per (queue,
        #: priority, request, ...): whether it has candidate victims / when a young one ripens.
        self._plans: dict[tuple[str, tuple[int, ...]], ReclaimPlan] = {}
        self._has_victims: dict[tuple[object, ...], bool] = {}
        self._young: dict[tuple[object, ...], float | None] = {}

    # ----------------------------------------------------------------------------- columns
    def started(self, running: RunningWorkload) -> None:
        queue = running.workload.queue
        victims = self.queue_victims.get(queue)
        if victims is None:
            victims = self.queue_victims[queue] = QueueVictims()
        victims.add(victim_facts(running))

    def stopped(self, running: RunningWorkload) -> None:
        victims = self.queue_victims.get(running.workload.queue)
        if victims is not None:
            victims.drop(running.key)

    def shrunk(self, running: RunningWorkload) -> None:
        victims = self.queue_victims.get(running.workload.queue)
        if victims is not None:
            victims.refresh(victim_facts(running))

    def retagged(self, running: RunningWorkload) -> None:
        """Its priority or preemptibility changed: a victim now with its new facts, or none."""
        victims = self.queue_victims.get(running.workload.queue)
        if not running.workload.preemptible:
            self.stopped(running)
        elif victims is not None and running.key in victims.where:
            victims.refresh(victim_facts(running))  # its place in the start order stays
        else:
            self.started(running)

    # ----------------------------------------------------------------------------- rules
    def plan_for(self, workload: Workload, amounts: tuple[int, ...] | None = None) -> ReclaimPlan:
        """:func:`reclaim.plan` for the workload's queue and request (``amounts``; by
        default its request's), kept per usage state."""
        self._fresh_memo()
        state = self.state
        memo_key = (
            workload.queue,
            state.requests.amounts_of(workload) if amounts is None else amounts,
        )
        found = self._plans.get(memo_key)
        if found is None:
            quotas = state.quotas
            found = self._plans[memo_key] = plan(
                quotas.tree, quotas.queues, workload.queue, memo_key[1]
            )
        return found

    def is_candidate(
        self,
        workload: Workload,
        running: RunningWorkload,
        min_runtime: float | None = None,
    ) -> bool:
        """May ``workload`` evict ``running`` now, by :mod:`.reclaim`'s rules (its queue's
        policies, the other queue still borrowing) and gpufleet's (preemptible, past its
        minimum run time)? (:meth:`parts` applies the same tests on columns: keep them
        alike.)"""
        state = self.state
        other = running.workload
        if not other.preemptible or running.key not in state.running:
            return False
        least = state.config.min_runtime if min_runtime is None else min_runtime
        if state.now - running.started < least:
            return False
        plan_ = self.plan_for(workload)
        if not plan_.may_preempt:
            return False
        policy = policy_of(state.quotas.queues, workload.queue)
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
            state.arrivals.queued_at(workload.key, state.now),
            other.priority,
            running.queued,
        )

    def candidates(
        self, workload: Workload, min_runtime: float | None = None
    ) -> list[RunningWorkload]:
        """Every running workload ``workload`` may evict (:meth:`is_candidate`), queue by
        queue as :meth:`parts` lists them, each queue's in the order they started."""
        least = self.state.config.min_runtime if min_runtime is None else min_runtime
        out: list[RunningWorkload] = []
        for part in self.parts(workload, least):
            facts = part.victims.facts
            out.extend(facts[i].running for i in np.flatnonzero(part.chosen).tolist())
        return out

    def parts(
        self,
        workload: Workload,
        least: float | None = None,
        amounts: tuple[int, ...] | None = None,
    ) -> list[CandidatePart]:
        """:meth:`candidates` by queue: each queue's victims and which of them are
        candidates (queues without any are left out): the other queues of the plan in its
        order, then its own. :meth:`is_candidate`'s tests, on columns (keep them alike)."""
        parts = list(self._parts(workload, least, amounts))
        if _priority_only_unusable(policy_of(self.state.quotas.queues, workload.queue), parts):
            return []
        return parts

    def _parts(
        self, workload: Workload, least: float | None, amounts: tuple[int, ...] | None
    ) -> Iterator[CandidatePart]:
        """:meth:`parts`, one at a time and before the rule on priority candidates of other
        queues (:func:`_priority_only_unusable`), which needs them all."""
        state = self.state
        if least is None:
            least = state.config.min_runtime
        plan_ = self.plan_for(workload, amounts)
        if not plan_.may_preempt:
            return
        priority = workload.priority
        policy = policy_of(state.quotas.queues, workload.queue)
        lower_only = policy.reclaim_within_cohort is ReclaimPolicy.LOWER_PRIORITY
        for candidate in plan_.others:
            eligible, lowest = self._eligible_in(candidate.name, least)
            if lowest >= (priority if lower_only else math.inf):
                continue
            victims = self.queue_victims[candidate.name]
            if lower_only:
                eligible = eligible & (victims.columns().priority < priority)
            yield CandidatePart(
                candidate.name, victims, eligible, candidate.variant, candidate, policy, priority
            )
        if plan_.own_queue and self._may_evict_own(workload, policy):
            eligible, lowest = self._eligible_in(workload.queue, least)
            newer_equal = policy.within_queue is WithinQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
            if lowest < priority or (newer_equal and lowest <= priority):
                victims = self.queue_victims[workload.queue]
                columns = victims.columns()
                chosen = eligible & (columns.priority < priority)
                if newer_equal:
                    queued = state.arrivals.queued_at(workload.key, state.now)
                    chosen |= eligible & (columns.priority == priority) & (columns.queued > queued)
                yield CandidatePart(
                    workload.queue, victims, chosen, Variant.WITHIN_QUEUE, None, policy, priority
                )

    def _eligible_in(self, queue: str, least: float) -> tuple[BoolArray, float]:
        """Which of ``queue``'s preemptible workloads are running and ran ``least`` seconds
        (the tests of :meth:`is_candidate` that do not depend on the preemptor), and the
        lowest priority among them (inf if none)."""
        now = self.state.now
        victims = self.queue_victims.get(queue)
        # Only this queue's victims and the time count: a preemption elsewhere leaves it be.
        at = (-1 if victims is None else victims.version, now)
        known = self._eligible.get((queue, least))
        if known is not None and known[0] == at:
            return known[1]
        if victims is None or not victims.where:
            found = (np.zeros(0 if victims is None else len(victims.facts), np.bool_), math.inf)
        else:
            eligible = victims.eligible(now, least)
            priorities = victims.columns().priority[eligible]
            found = (eligible, float(priorities.min()) if priorities.size else math.inf)
        self._eligible[(queue, least)] = (at, found)
        return found

    def _may_evict_own(self, workload: Workload, policy: QueuePreemption) -> bool:
        """Does the workload's queue run anything its policy could let it evict (lower
        priority, or equal where newer equal priority is allowed)?"""
        lowest = self.state.running.lowest_priority(workload.queue)
        if lowest is None:
            return False
        if policy.within_queue is WithinQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
            return lowest <= workload.priority
        return lowest < workload.priority

    def has_candidates(self, workload: Workload) -> bool:
        """Whether :meth:`candidates` is not empty, without listing them."""
        self._fresh_memo()
        state = self.state
        policy = policy_of(state.quotas.queues, workload.queue)
        newer_equal = policy.within_queue is WithinQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
        memo_key = (
            workload.queue,
            workload.priority,
            state.requests.amounts_of(workload),
            state.arrivals.queued_at(workload.key, state.now) if newer_equal else None,
        )
        known = self._has_victims.get(memo_key)
        if known is None:
            # As any(part.chosen.any() for part in self.parts(workload)), stopping at the
            # first part that settles it (most preemptors that have candidates have them in
            # one of the first queues asked).
            never = policy.borrow_within_cohort is BorrowWithinCohortPolicy.NEVER
            chosen = False
            priority_only = True
            for part in self._parts(workload, None, None):
                priority_only = priority_only and part.variant is Variant.PRIORITY
                chosen = chosen or bool(part.chosen.any())
                if chosen and not (never and priority_only):
                    break
            known = chosen and not (never and priority_only)
            self._has_victims[memo_key] = known
        return known

    def first_ripening(self, workload: Workload) -> float | None:
        """When a running workload now too young to be its victim first reaches the minimum
        run time (None: no such workload)."""
        self._fresh_memo()
        state = self.state
        memo_key = (workload.queue, workload.priority, state.requests.amounts_of(workload))
        if memo_key in self._young:
            return self._young[memo_key]
        young = self.candidates(workload, min_runtime=0.0)
        least, now = state.config.min_runtime, state.now
        first = min((t for r in young if (t := r.started + least) > now), default=None)
        self._young[memo_key] = first
        return first

    def _fresh_memo(self) -> None:
        """Drop what was derived from the running set and the quota usage if either changed
        (or the time did)."""
        state = self.state
        at = (state.running.version, state.quotas.tree.version, state.now)
        if at != self._memo_at:
            self._memo_at = at
            self._has_victims.clear()
            self._young.clear()
            self._plans.clear()


def _priority_only_unusable(policy: QueuePreemption, parts: Sequence[CandidatePart]) -> bool:
    """Priority candidates of other queues only, where the preemptor's queue never borrows to
    preempt: they are taken only if the preemptor then fits its queue's nominal quota, which
    it does not now (they would be hierarchical), and evicting them does not lower its
    queue's usage. None of them can help."""
    return policy.borrow_within_cohort is BorrowWithinCohortPolicy.NEVER and all(
        part.variant is Variant.PRIORITY for part in parts
    )
