"""The default queue sort: fair share across queues (Kueue's fair sharing with borrowing).

Queues take turns by their key, least first: first how far the queue's next workload would
borrow (0: within its nominal quota; then from the closest ancestor that has room,
:meth:`~gpufleet.scheduling.quota.QuotaTree.borrow_level`), then the queue's weighted dominant
resource share along its path, top first (so the surplus goes by weight). When no queue names
a quota, the share is the GPUs each queue on the path holds, divided by its weight (with one
queue, there is nothing to order).

With fair sharing over time on (the profile's ``fairSharing``), the queues' decayed usage comes
between the two: after the borrowing level, the queue whose subtree used least of its share
over time goes first, level by level from the top (Slurm's fair-share factor,
:meth:`~gpufleet.scheduling.usage_history.UsageHistory.ratios`); the share held now breaks
ties. A queue's nominal quota stays its own: a head within it goes before any that borrows.

What it does not do: order workloads within a queue (priority, then arrival: :mod:`..ordering`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gpufleet.model.resources import GPU
from gpufleet.scheduling.framework import QueueKey

if TYPE_CHECKING:
    from gpufleet.scheduling.state import CoreState


def _same_key(queue: str) -> QueueKey:
    return (0, ())


class FairShare:
    """See the module docstring."""

    name = "fair-share"

    def __init__(self, state: CoreState) -> None:
        self.state = state

    def key_for(self, queues: Sequence[str]) -> Callable[[str], QueueKey]:
        tree = self.state.quotas.tree
        history = self.state.usage_history
        if history is not None and (tree.keys or len(queues) > 1):
            ratios = history.ratios()  # time does not pass in a cycle: once per cycle

            def by_usage(queue: str) -> QueueKey:
                now = tree.share(queue) if tree.keys else self._gpu_share(queue)
                level = self._head_level(queue) if tree.keys else 0
                return (level, history.key_of(ratios, queue), now)

            return by_usage
        if tree.keys:

            def by_quota(queue: str) -> QueueKey:
                return (self._head_level(queue), tree.share(queue))

            return by_quota
        if len(queues) > 1:  # no queue names a quota: weigh the GPUs each queue holds
            return lambda queue: (0, self._gpu_share(queue))
        return _same_key

    def _head_level(self, queue: str) -> int:
        """How far the queue's next workload would borrow (0 if it has none ready)."""
        state = self.state
        group = state.pending.peek(queue)
        if group is None:
            return 0
        amounts = state.requests.amounts_of(group.head.workload)
        return state.quotas.tree.borrow_level(queue, amounts)

    def _gpu_share(self, queue: str) -> tuple[float, ...]:
        """The GPUs held by each queue on the path (its subtree), top first, divided by its
        weight."""
        tree = self.state.quotas.tree
        path = tree.paths[tree.index[queue]]
        held = dict.fromkeys(path, 0)
        for name, running in self.state.running.by_queue.items():
            gpu = sum(r.usage.get(GPU, 0) for r in running.values())
            for i in tree.paths[tree.index[name]]:
                if i in held:
                    held[i] += gpu
        return tuple(held[i] / float(tree.weight[i]) for i in path)
