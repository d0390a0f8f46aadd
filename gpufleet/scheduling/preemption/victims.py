"""Choose whom to evict so that a workload can start: on a trial, with as little loss as possible.

Candidates come from the core's rules (:mod:`.reclaim`: Kueue's), all preemptible and past
their minimum run time, each in a group (its *rank*: hierarchical reclaim, then reclaim by
priority, then the preemptor's own queue, as Kueue takes them). They are tried cheapest first:
by group, then lower priority, then least work lost since their last checkpoint (KAI), then
fewest GPUs, then the newest.
A whole workload (a gang) is one victim. Victims are evicted on a trial of the node table and
of the quota usage until the preemptor both passes its quota check and places; then each victim
but the last is given back if the preemptor still fits without evicting it. Everything is undone
before returning: the caller evicts for real only if a set was found, so a preemption is never
issued unless the preemptor is then admitted.

A search of a busy cluster has thousands of candidates: :func:`cheapest_victims` gives the first
of :func:`victim_order` (then :func:`node_first`) from numpy columns kept per queue, the same
victims in the same order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.scheduling.admission import Quotas
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable
from gpufleet.scheduling.running import RunningWorkload

FloatArray = npt.NDArray[np.float64]


def victim_order(
    candidates: Sequence[RunningWorkload],
    rank: Mapping[str, int],
    now: float,
    limit: int | None = None,
    memo: dict[int, tuple[RunningWorkload, float, int]] | None = None,
) -> list[RunningWorkload]:
    """``candidates`` cheapest first (see the module docstring; ``rank``: each queue's
    group); when ``limit`` is given, only the first ``limit`` of that order. ``memo`` keeps
    each workload's work lost and GPUs (by ``id``; it holds the workload) between calls at the
    same ``now`` while no pod of theirs is bound or released: the caller clears it."""

    def cost(r: RunningWorkload) -> tuple[int, int, float, int, float]:
        known = memo.get(id(r)) if memo is not None else None
        if known is None:
            known = (r, r.work_lost(now), r.gpu_milli)
            if memo is not None:
                memo[id(r)] = known
        return (
            rank[r.workload.queue],
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
    victims on it, for when nodes (not quota) are short: a pod of ``need_milli`` GPU (whole
    GPUs) fits only where one node frees enough, and the cheapest victims overall are often
    spread over many nodes. Nodes where the free GPUs and those of the candidates on it would
    hold the pod come first, as kube-scheduler ranks them: the node whose dearest victim is
    cheapest, then the one that needs the fewest victims; on each, its victims in
    ``ordered``'s order; the candidates left over follow in their order."""
    position = {id(r): i for i, r in enumerate(ordered)}
    on_row: dict[int, list[RunningWorkload]] = {}
    for victim in ordered:
        for row in {b.allocation.row for b in victim.bound.values()}:
            on_row.setdefault(row, []).append(victim)
    plans: list[tuple[int, int, int, list[RunningWorkload]]] = []
    for row, victims in on_row.items():
        free = int(table.gpu_free[row, : table.gpu_count[row]].sum())
        prefix: list[RunningWorkload] = []
        for victim in victims:
            if free >= need_milli:
                break
            prefix.append(victim)
            free += sum(
                b.placement.gpu_milli for b in victim.bound.values() if b.allocation.row == row
            )
        if free >= need_milli and prefix:
            plans.append((position[id(prefix[-1])], len(prefix), position[id(prefix[0])], prefix))
    plans.sort(key=lambda plan: (plan[0], plan[1], plan[2]))
    seen: set[int] = set()
    out: list[RunningWorkload] = []
    for _, _, _, prefix in plans:
        for victim in prefix:
            if id(victim) not in seen:
                seen.add(id(victim))
                out.append(victim)
    out.extend(r for r in ordered if id(r) not in seen)
    return out


def _rows_held(victim: RunningWorkload) -> tuple[tuple[int, int], ...]:
    """(row, milli-GPU its pods hold there) for each row ``victim`` is on, rows in the order
    of a set of them."""
    bound = victim.bound.values()
    held = dict.fromkeys({b.allocation.row for b in bound}, 0)  # keeps the set's order
    for b in bound:
        held[b.allocation.row] += b.placement.gpu_milli
    return tuple(held.items())


@dataclass(frozen=True, slots=True)
class VictimFacts:
    """What :func:`victim_order` and :func:`node_first` read of a running workload, which does
    not change while none of its pods is bound or released (work lost is derived per call)."""

    running: RunningWorkload
    priority: int
    gpu_milli: int
    started: float
    queued: float
    #: Checkpoint interval in seconds; 0.0 when it has none.
    checkpoint: float
    #: :func:`_rows_held`: each row it is on (in a set's order) and the milli-GPU held there.
    rows: tuple[tuple[int, int], ...]


def victim_facts(running: RunningWorkload) -> VictimFacts:
    return VictimFacts(
        running,
        running.workload.priority,
        running.gpu_milli,
        running.started,
        running.queued,
        running.workload.checkpoint_interval or 0.0,
        _rows_held(running),
    )


@dataclass(frozen=True, slots=True)
class VictimColumns:
    """The :class:`VictimFacts` of a list of candidates (one queue's) as numpy columns, with
    one entry per (candidate, row it is on) in ``pair_*``."""

    workloads: list[RunningWorkload]
    priority: IntArray
    gpu_milli: IntArray
    started: FloatArray
    queued: FloatArray
    checkpoint: FloatArray
    pair_owner: IntArray
    pair_row: IntArray
    pair_milli: IntArray
    #: Where the row comes in its candidate's rows (node_first's order among equal plans).
    pair_rank: IntArray

    @classmethod
    def of(cls, facts: Sequence[VictimFacts]) -> VictimColumns:
        count = len(facts)
        # Column by column from iterators: a busy queue has thousands of workloads.
        held = np.fromiter((len(f.rows) for f in facts), np.int64, count)
        pairs = int(held.sum())
        rows = np.fromiter((row for f in facts for row, _ in f.rows), np.int64, pairs)
        milli = np.fromiter((m for f in facts for _, m in f.rows), np.int64, pairs)
        owner = np.repeat(np.arange(count), held)
        first = np.cumsum(held) - held  # where each candidate's pairs start
        return cls(
            [f.running for f in facts],
            np.fromiter((f.priority for f in facts), np.int64, count),
            np.fromiter((f.gpu_milli for f in facts), np.int64, count),
            np.fromiter((f.started for f in facts), np.float64, count),
            np.fromiter((f.queued for f in facts), np.float64, count),
            np.fromiter((f.checkpoint for f in facts), np.float64, count),
            owner,
            rows,
            milli,
            np.arange(owner.size) - first[owner],
        )


#: Candidates for one search, part by part: the columns, which of them are candidates (None:
#: all), and their group's rank (victim_order's first key).
CandidatePart = tuple[VictimColumns, BoolArray | None, int]


def cheapest_victims(
    parts: Sequence[CandidatePart],
    now: float,
    limit: int,
    table: NodeTable | None = None,
    need_milli: int = 0,
) -> list[RunningWorkload]:
    """The first ``limit`` candidates of ``parts`` (concatenated in order) by
    :func:`victim_order` or, with ``table``, by ``node_first(victim_order(...), table,
    need_milli)``: the same victims in the same order, from columns instead of a Python pass
    over every candidate (a search may have thousands)."""
    # Per part: the workloads and which of them are candidates, to name the chosen at the end.
    chosen_of: list[tuple[list[RunningWorkload], IntArray]] = []
    count = 0
    columns: dict[str, list[npt.NDArray[Any]]] = {
        name: []
        for name in (
            "rank", "priority", "gpu_milli", "started", "checkpoint",
            "owner", "row", "milli", "row_rank",
        )
    }  # fmt: skip
    for part, chosen, rank in parts:
        if chosen is None:
            picked = np.arange(len(part.workloads))
            pair_kept = np.ones(part.pair_owner.size, np.bool_)
        else:
            picked = np.flatnonzero(chosen)
            pair_kept = chosen[part.pair_owner]
        chosen_of.append((part.workloads, picked))
        # Local candidate index -> index in the concatenation.
        where = np.full(len(part.workloads), -1, np.int64)
        where[picked] = np.arange(picked.size) + count
        count += picked.size
        columns["rank"].append(np.full(picked.size, rank, np.int64))
        columns["priority"].append(part.priority[picked])
        columns["gpu_milli"].append(part.gpu_milli[picked])
        columns["started"].append(part.started[picked])
        columns["checkpoint"].append(part.checkpoint[picked])
        columns["owner"].append(where[part.pair_owner[pair_kept]])
        columns["row"].append(part.pair_row[pair_kept])
        columns["milli"].append(part.pair_milli[pair_kept])
        columns["row_rank"].append(part.pair_rank[pair_kept])
    if not count:
        return []
    starts = np.cumsum([0] + [picked.size for _, picked in chosen_of])

    def named(indices: Sequence[int]) -> list[RunningWorkload]:
        """The candidates at these places of the concatenation."""
        parts_of = np.searchsorted(starts, indices, side="right") - 1
        out = []
        for index, k in zip(indices, parts_of.tolist(), strict=True):
            workloads, picked = chosen_of[k]
            out.append(workloads[int(picked[index - starts[k]])])
        return out

    col = {name: np.concatenate(values) for name, values in columns.items()}
    # RunningWorkload.work_lost, element by element (the same float operations).
    ran = np.maximum(0.0, now - col["started"])
    interval = col["checkpoint"]
    periodic = interval > 0
    safe = np.where(periodic, interval, 1.0)
    since = np.where(periodic, ran - np.floor(ran / safe) * safe, ran)
    lost = since * np.maximum(col["gpu_milli"], 1)
    # victim_order's key, the first key last; lexsort is stable like sorted().
    order = np.lexsort((-col["started"], col["gpu_milli"], lost, col["priority"], col["rank"]))
    if table is None:
        return named(order[:limit].tolist())
    # A limit of 0 or less slices the whole order, as a list would.
    first = _node_first_positions(order, col, table, need_milli, limit if limit > 0 else order.size)
    return named(first[:limit])


def _node_first_positions(
    order: IntArray,
    col: Mapping[str, npt.NDArray[Any]],
    table: NodeTable,
    need_milli: int,
    limit: int,
) -> list[int]:
    """Candidate indices of ``node_first(ordered)[:limit]`` where ``ordered`` is the
    candidates in ``order``: per row, the victims on it in order until the free GPUs and theirs
    hold ``need_milli``; rows whose last victim comes first, then those needing fewest
    victims, then by their first victim's place, then by where the row comes among that
    victim's rows (node_first's row order)."""
    count = order.size
    position = np.empty(count, np.int64)
    position[order] = np.arange(count)
    pair_position = position[col["owner"]]
    rows = col["row"]
    by_row = np.lexsort((pair_position, rows))
    rows_sorted = rows[by_row]
    plans_out: list[int] = []
    if by_row.size:
        starts = np.flatnonzero(np.r_[True, rows_sorted[1:] != rows_sorted[:-1]])
        segment_rows = rows_sorted[starts]
        devices = np.arange(table.gpu_free.shape[1]) < table.gpu_count[segment_rows][:, None]
        free = np.where(devices, table.gpu_free[segment_rows], 0).sum(axis=1)
        segment = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, by_row.size]))
        freed = np.cumsum(col["milli"][by_row])
        before = np.r_[0, freed][starts]
        within = freed - before[segment]
        enough = (free[segment] < need_milli) & (free[segment] + within >= need_milli)
        hits = np.flatnonzero(enough)
        planned, first_hit = np.unique(segment[hits], return_index=True)
        ends = hits[first_hit]
        plan_starts = starts[planned]
        lengths = ends - plan_starts + 1
        plan_order = np.lexsort(
            (
                col["row_rank"][by_row[plan_starts]],
                pair_position[by_row[plan_starts]],
                lengths,
                pair_position[by_row[ends]],
            )
        )
        owners = col["owner"][by_row]
        seen: set[int] = set()
        for plan in plan_order.tolist():
            for owner in owners[plan_starts[plan] : ends[plan] + 1].tolist():
                if owner not in seen:
                    seen.add(owner)
                    plans_out.append(owner)
            if len(plans_out) >= limit:
                return plans_out[:limit]
        for owner in order.tolist():
            if len(plans_out) >= limit:
                break
            if owner not in seen:
                plans_out.append(owner)
        return plans_out
    first: list[int] = order[:limit].tolist()
    return first


def find_victims(
    table: NodeTable,
    quotas: Quotas,
    candidates: Sequence[RunningWorkload],
    fits: Callable[[], bool],
    may_fit: Callable[[], bool] | None = None,
    still_candidate: Callable[[RunningWorkload], bool] | None = None,
    places: Callable[[], bool] | None = None,
) -> list[RunningWorkload] | None:
    """The smallest prefix-and-pruned set of ``candidates`` (already in order) whose eviction
    lets ``fits()`` succeed, or None. ``fits`` checks quota and placement on the current trial
    state and must leave the table as it found it. ``may_fit``, if given, is a part of ``fits``
    that reads only the quotas and that evicting more can only help (the quota checks): it is
    tried once with every candidate's usage refunded, and if it fails there no set can fit.
    ``still_candidate``, if given, is asked (on the trial state, the victims before it gone)
    before each candidate is taken: Kueue's rule that reclaim takes from a queue only while
    it still borrows, so that a queue is not pushed below its nominal quota (and does not
    then reclaim back). ``places``, if given with ``may_fit``, is the rest of ``fits``
    (``fits()`` is ``may_fit() and places()``): once ``may_fit`` passed while victims are
    added, only ``places`` is asked."""
    table_mark = table.begin_trial()
    quota_mark = quotas.snapshot()
    chosen: list[RunningWorkload] = []
    try:
        if may_fit is not None and candidates:
            # Most searches fail; this fails them at the cost of one check instead of one
            # per candidate (fits() would fail for every prefix, as the full set fails).
            quotas.refund_all((c.workload, c.usage) for c in candidates)
            possible = may_fit()
            quotas.restore(quota_mark)
            if not possible:
                return None
        quota_passed = False  # may_fit() passed with the victims chosen so far
        for candidate in candidates:
            if still_candidate is not None and not still_candidate(candidate):
                continue
            _evict(table, quotas, candidate)
            chosen.append(candidate)
            if may_fit is None or places is None:
                if fits():
                    break
            elif quota_passed or may_fit():
                # More victims never fail may_fit: it holds for every longer prefix.
                quota_passed = True
                if places():
                    break
        else:
            return None
        # Give back every victim but the last if the preemptor still fits without evicting it.
        kept = chosen[-1:]  # newest first
        for victim in reversed(chosen[:-1]):
            _restore(table, quotas, victim)
            if not fits():
                _evict(table, quotas, victim)
                kept.append(victim)
        return kept[::-1]
    finally:
        table.rollback(table_mark)
        quotas.restore(quota_mark)


def _evict(table: NodeTable, quotas: Quotas, victim: RunningWorkload) -> None:
    for bound in victim.bound.values():
        table.release(bound.allocation)
    quotas.refund(victim.workload, victim.usage)


def _restore(table: NodeTable, quotas: Quotas, victim: RunningWorkload) -> None:
    for bound in victim.bound.values():
        table.reallocate(bound.allocation)
    quotas.charge(victim.workload, victim.usage)
