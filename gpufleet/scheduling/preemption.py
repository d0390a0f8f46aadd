"""Choose whom to evict so that a workload can start: on a trial, with as little loss as possible.

Candidates come from the core's rules (lower priority in the same queue; workloads of queues
that borrow when the preemptor's queue is below its nominal quota), all preemptible and past
their minimum run time. They are tried cheapest first: workloads of borrowing queues, then lower
priority, then least work lost since their last checkpoint, then fewest GPUs, then the newest.
A whole workload (a gang) is one victim. Victims are evicted on a trial of the node table and
of the quota usage until the preemptor both passes its quota check and places; then each victim
but the last is given back if the preemptor still fits without evicting it. Everything is undone
before returning: the caller evicts for real only if a set was found, so a preemption is never
issued unless the preemptor is then admitted.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from gpufleet.scheduling.admission import Quotas
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.running import RunningWorkload


def victim_order(
    candidates: Sequence[RunningWorkload],
    borrowing: set[str],
    now: float,
    limit: int | None = None,
    memo: dict[int, tuple[RunningWorkload, float, int]] | None = None,
) -> list[RunningWorkload]:
    """``candidates`` cheapest first (see the module docstring); when ``limit`` is given, only
    the first ``limit`` of that order. ``memo`` keeps each workload's work lost and GPUs (by
    ``id``; it holds the workload) between calls at the same ``now`` while no pod of theirs is
    bound or released: the caller clears it."""

    def cost(r: RunningWorkload) -> tuple[bool, int, float, int, float]:
        known = memo.get(id(r)) if memo is not None else None
        if known is None:
            known = (r, r.work_lost(now), r.gpu_milli)
            if memo is not None:
                memo[id(r)] = known
        return (
            r.workload.queue not in borrowing,
            r.workload.priority,
            known[1],
            known[2],
            -r.started,
        )

    if limit is None or limit <= 0:
        return sorted(candidates, key=cost)
    # Equal to sorted(...)[:limit] (ties keep their order), without sorting them all.
    return heapq.nsmallest(limit, candidates, key=cost)


def node_first(
    ordered: Sequence[RunningWorkload], table: NodeTable, need_milli: int
) -> list[RunningWorkload]:
    """``ordered`` regrouped node by node, the way kube-scheduler picks a node and then the
    victims on it: a pod of ``need_milli`` GPU (whole GPUs) fits only where one node frees
    enough, and the cheapest victims overall are often spread over many nodes. Nodes where
    the free GPUs and those of the candidates on it would hold the pod come first, those that
    need the fewest victims before the others; on each, its victims in ``ordered``'s order;
    the candidates left over follow in their order."""
    position = {id(r): i for i, r in enumerate(ordered)}
    on_row: dict[int, list[RunningWorkload]] = {}
    for victim in ordered:
        for row in {b.allocation.row for b in victim.bound.values()}:
            on_row.setdefault(row, []).append(victim)
    plans: list[tuple[int, int, list[RunningWorkload]]] = []
    for row, victims in on_row.items():
        free = int(table.gpu_free[row, : table.gpu_count[row]].sum())
        prefix: list[RunningWorkload] = []
        for victim in victims:
            if free >= need_milli:
                break
            prefix.append(victim)
            free += sum(
                b.placement.gpu_milli_per_device * len(b.placement.gpu_indices)
                for b in victim.bound.values()
                if b.allocation.row == row
            )
        if free >= need_milli and prefix:
            plans.append((len(prefix), position[id(prefix[0])], prefix))
    plans.sort(key=lambda plan: (plan[0], plan[1]))
    seen: set[int] = set()
    out: list[RunningWorkload] = []
    for _, _, prefix in plans:
        for victim in prefix:
            if id(victim) not in seen:
                seen.add(id(victim))
                out.append(victim)
    out.extend(r for r in ordered if id(r) not in seen)
    return out


def find_victims(
    table: NodeTable,
    quotas: Quotas,
    candidates: Sequence[RunningWorkload],
    fits: Callable[[], bool],
    may_fit: Callable[[], bool] | None = None,
    still_candidate: Callable[[RunningWorkload], bool] | None = None,
) -> list[RunningWorkload] | None:
    """The smallest prefix-and-pruned set of ``candidates`` (already in order) whose eviction
    lets ``fits()`` succeed, or None. ``fits`` checks quota and placement on the current trial
    state and must leave the table as it found it. ``may_fit``, if given, is a part of ``fits``
    that reads only the quotas and that evicting more can only help (the quota checks): it is
    tried once with every candidate's usage refunded, and if it fails there no set can fit.
    ``still_candidate``, if given, is asked (on the trial state, the victims before it gone)
    before each candidate is taken: Kueue's rule that reclaim takes from a queue only while
    it still borrows, so that a queue is not pushed below its nominal quota (and does not
    then reclaim back)."""
    table_mark = table.begin_trial()
    quota_mark = quotas.snapshot()
    chosen: list[RunningWorkload] = []
    try:
        if may_fit is not None and candidates:
            # Most searches fail; this fails them at the cost of one check instead of one
            # per candidate (fits() would fail for every prefix, as the full set fails).
            for candidate in candidates:
                quotas.refund(candidate.workload, candidate.usage)
            possible = may_fit()
            quotas.restore(quota_mark)
            if not possible:
                return None
        for candidate in candidates:
            if still_candidate is not None and not still_candidate(candidate):
                continue
            _evict(table, quotas, candidate)
            chosen.append(candidate)
            if fits():
                break
        else:
            return None
        # Give back every victim but the last if the preemptor still fits without evicting it.
        for victim in reversed(chosen[:-1]):
            _restore(table, quotas, victim)
            if fits():
                chosen.remove(victim)
            else:
                _evict(table, quotas, victim)
        return chosen
    finally:
        table.rollback(table_mark)
        quotas.restore(quota_mark)


def _evict(table: NodeTable, quotas: Quotas, victim: RunningWorkload) -> None:
    for bound in victim.bound.values():
        table.release(bound.allocation)
    quotas.refund(victim.workload, victim.usage)


def _restore(table: NodeTable, quotas: Quotas, victim: RunningWorkload) -> None:
    for bound in victim.bound.values():
        a = bound.allocation
        node = table.nodes[a.row]
        position = {g.index: p for p, g in enumerate(node.gpus)}
        table.allocate(
            a.row,
            a.cpu_milli,
            a.memory_mib,
            tuple(position[i] for i in a.gpu_indices),
            a.gpu_milli_per_device,
            a.mig_profile,
            a.mig_slices,
            a.tag,
        )
    quotas.charge(victim.workload, victim.usage)
