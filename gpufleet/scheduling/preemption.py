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

from collections.abc import Callable, Sequence

from gpufleet.scheduling.admission import Quotas
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.running import RunningWorkload


def victim_order(
    candidates: Sequence[RunningWorkload], borrowing: set[str], now: float
) -> list[RunningWorkload]:
    return sorted(
        candidates,
        key=lambda r: (
            r.workload.queue not in borrowing,
            r.workload.priority,
            r.work_lost(now),
            r.gpu_milli,
            -r.started,
        ),
    )


def find_victims(
    table: NodeTable,
    quotas: Quotas,
    candidates: Sequence[RunningWorkload],
    fits: Callable[[], bool],
) -> list[RunningWorkload] | None:
    """The smallest prefix-and-pruned set of ``candidates`` (already in order) whose eviction
    lets ``fits()`` succeed, or None. ``fits`` checks quota and placement on the current trial
    state and must leave the table as it found it."""
    table_mark = table.begin_trial()
    quota_mark = quotas.snapshot()
    chosen: list[RunningWorkload] = []
    try:
        for candidate in candidates:
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
