"""Who may evict whom to admit a workload: Kueue's classical preemption rules on the queue tree.

gpufleet's queue tree is Kueue's cohort tree with a queue at every node: a parent's nominal
quota is its subtree's (Kueue's cohort ``SubtreeQuota``), and above the top-level queues the
cluster is the root cohort, whose quota is the cluster's capacity. With that reading the rules
are Kueue's (pkg/scheduler/preemption: ``classical``, ``candidate_generator``,
``hierarchical_preemption``; flavorassigner's ``fitsResourceQuota``):

* **May it preempt at all?** Only if its request fits its queue's nominal quota (Kueue:
  request <= nominalQuota), or some queue on its path would hold it within nominal (reclaim in
  the hierarchy), or its queue lets it borrow while preempting (``borrowWithinCohort``).
* **Its own queue**: workloads that ``withinQueue`` allows (lower priority; or also equal
  priority but queued later).
* **Other queues**: walking up from its queue, at each ancestor A the queues of A's subtree
  outside the branch already walked, descending only into subtrees that use more than their
  nominal quota of what it asks, and taking the queues that do. Their workloads must satisfy
  ``reclaimWithinCohort`` (lower priority, or any). A candidate is *hierarchical* when the
  preemptor's branch below A holds the request within nominal (its quota is what the candidate
  borrows: reclaimed whatever borrowing follows); else a *priority* candidate, taken only if
  the preemptor ends within its nominal quota, unless ``borrowWithinCohort`` lets it borrow and
  the candidate has lower priority (at most ``maxPriorityThreshold``).
* **Order**: hierarchical candidates, then priority candidates, then its own queue's (the core
  orders each group cheapest first).
* **Attempts**: with and without borrowing, in Kueue's order (:attr:`ReclaimPlan.attempts`).
* **While victims are chosen** a candidate of another queue counts only while its queue, and
  every queue between it and the common ancestor, still uses more than its nominal quota
  (:func:`still_borrowing`): reclaim never pushes a queue below its nominal quota.

"What it asks" is every key quotas limit that the request names (Kueue: the flavor-resources
that need preemption). What it does not do: order victims, try evictions or place (the core and
:mod:`.preemption` do), or decide anything about nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from gpufleet.model.queues import (
    BorrowWithinCohortPolicy,
    Queue,
    QueuePreemption,
    ReclaimPolicy,
    WithinQueuePolicy,
)
from gpufleet.scheduling.quota import QuotaTree

#: The cluster above the top-level queues, where a lowest common ancestor is none of them.
CLUSTER = -1


class Variant(IntEnum):
    """A candidate's group, in the order victims are taken (Kueue's candidate iterator)."""

    #: The preemptor's subtree holds the quota the candidate's queue borrows.
    HIERARCHICAL = 0
    #: Another queue's workload, taken by priority (reclaim, or borrowWithinCohort).
    PRIORITY = 1
    #: A workload of the preemptor's own queue.
    WITHIN_QUEUE = 2


@dataclass(frozen=True, slots=True)
class CandidateQueue:
    """Another queue whose workloads may be victims, and on what terms."""

    name: str
    variant: Variant
    #: The lowest common ancestor with the preemptor's queue (tree index; CLUSTER above all).
    lca: int


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """What one preemptor may do, given the usage when it was made."""

    #: Kueue's precondition for any preemption (see the module docstring).
    may_preempt: bool
    #: Its own queue's workloads may be victims (``withinQueue`` is not Never).
    own_queue: bool
    #: Other queues with candidates, in tree-walk order.
    others: tuple[CandidateQueue, ...]
    #: Per attempt, whether the preemptor may end up borrowing (Kueue's attempt order).
    attempts: tuple[bool, ...]


def policy_of(queues: Mapping[str, Queue], name: str) -> QueuePreemption:
    queue = queues.get(name)
    return queue.preemption if queue is not None else QueuePreemption()


def plan(
    tree: QuotaTree, queues: Mapping[str, Queue], name: str, amounts: Sequence[int]
) -> ReclaimPlan:
    """Who a workload of queue ``name`` asking ``amounts`` (``tree.limited``) may preempt."""
    policy = policy_of(queues, name)
    i = tree.index[name]
    nominal = tree.scalars().nominal[i]
    within = all(a <= 0 or a <= nominal[j] for j, a in enumerate(amounts))
    borrow_ok = policy.borrow_within_cohort is not BorrowWithinCohortPolicy.NEVER
    in_hierarchy = tree.borrow_level(name, amounts) < tree.root_height
    may_preempt = within or in_hierarchy or borrow_ok
    own = policy.within_queue is not WithinQueuePolicy.NEVER
    others: list[CandidateQueue] = []
    if policy.reclaim_within_cohort is not ReclaimPolicy.NEVER:
        advantage = tree.fits_nominal(i, amounts)
        walked = i
        for ancestor in [*reversed(tree.paths[i][:-1]), CLUSTER]:
            variant = Variant.HIERARCHICAL if advantage else Variant.PRIORITY
            members = tree.top if ancestor == CLUSTER else tree.children[ancestor]
            for child in members:
                if child != walked:
                    _collect(tree, child, amounts, variant, ancestor, others)
            if ancestor != CLUSTER:
                advantage = advantage or tree.fits_nominal(ancestor, amounts)
                walked = ancestor
    has_other = bool(others)
    hierarchical = any(c.variant is Variant.HIERARCHICAL for c in others)
    if not has_other or (not borrow_ok and not tree.under_nominal(i, amounts)):
        attempts: tuple[bool, ...] = (True,)
    elif not borrow_ok and not hierarchical:
        attempts = (False, True)
    else:
        attempts = (True, False)
    return ReclaimPlan(may_preempt, own, tuple(others), attempts)


def _collect(
    tree: QuotaTree,
    i: int,
    amounts: Sequence[int],
    variant: Variant,
    lca: int,
    out: list[CandidateQueue],
) -> None:
    """The queues of ``i``'s subtree that use more than their nominal quota of what is asked,
    not descending into a subtree within its nominal quota."""
    if not tree.over_nominal(i, amounts):
        return
    out.append(CandidateQueue(tree.names[i], variant, lca))
    for child in tree.children[i]:
        _collect(tree, child, amounts, variant, lca, out)


def still_borrowing(tree: QuotaTree, candidate: CandidateQueue, amounts: Sequence[int]) -> bool:
    """Kueue's candidate check while victims are taken: the candidate's queue, and every queue
    between it and the common ancestor, still uses more than its nominal quota of what is
    asked (on the usage as the victims taken so far left it)."""
    for i in reversed(tree.paths[tree.index[candidate.name]]):
        if i == candidate.lca:
            return True
        if not tree.over_nominal(i, amounts):
            return False
    return True


def victim_priority_allowed(
    policy: QueuePreemption,
    variant: Variant,
    preemptor_priority: int,
    preemptor_queued: float,
    priority: int,
    queued: float,
) -> bool:
    """Does the preemptor's queue policy let it evict a workload of ``priority`` (queued at
    ``queued``) in a candidate group of ``variant``?"""
    if variant is Variant.WITHIN_QUEUE:
        if policy.within_queue is WithinQueuePolicy.NEVER:
            return False
        if priority < preemptor_priority:
            return True
        return (
            policy.within_queue is WithinQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
            and priority == preemptor_priority
            and preemptor_queued < queued
        )
    if policy.reclaim_within_cohort is ReclaimPolicy.ANY:
        return True
    return policy.reclaim_within_cohort is ReclaimPolicy.LOWER_PRIORITY and (
        priority < preemptor_priority
    )


def taken_while_borrowing(
    policy: QueuePreemption, variant: Variant, preemptor_priority: int, priority: int
) -> bool:
    """May a candidate be evicted while the preemptor ends up borrowing? Its own queue's and
    hierarchical candidates may; a priority candidate only under ``borrowWithinCohort``, with
    lower priority than the preemptor and at most the threshold."""
    if variant is not Variant.PRIORITY:
        return True
    if policy.borrow_within_cohort is BorrowWithinCohortPolicy.NEVER:
        return False
    if priority >= preemptor_priority:
        return False
    threshold = policy.max_priority_threshold
    return threshold is None or priority <= threshold
