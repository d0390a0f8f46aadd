"""Queue ordering: which waiting workload the cycle tries next.

Within a queue, workloads go by effective priority (their own, raised by aging when it is on),
then arrival: :class:`Arrivals` numbers each workload when it first arrives and keeps the number
while it runs, so that a preempted workload goes back to its place (Kueue orders by creation
time); a workload that failed to start arrives anew. A StrictFIFO queue tries only its first
workload: nothing passes it while it waits.

Across queues, :class:`Turns` gives up to one admission to each queue with work, always from
the queue whose key is least under the profile's :class:`~.framework.QueueSort` (by default
fair share: the head that would borrow least, then the lowest weighted share), recomputed after
each admission; ties go to the queue that admitted least this cycle, then by name.

What it does not do: decide whether a workload gets in (the cycle's admission, placement and
preemption steps), or keep the waiting groups themselves (:mod:`.pending`).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterator

from gpufleet.model.queues import Queue, QueueingStrategy
from gpufleet.scheduling.config import AdmissionConfig
from gpufleet.scheduling.framework import QueueSort
from gpufleet.scheduling.pending import Group, PendingWorkload, PendingWorkloads


def aged_priority(pending: PendingWorkload, now: float, config: AdmissionConfig) -> int:
    """A waiting workload's priority, raised by ``aging_step`` per ``aging_interval`` waited."""
    base = pending.workload.priority
    interval = config.aging_interval
    if not interval:
        return base
    return base + config.aging_step * int((now - pending.since) // interval)


class Arrivals:
    """Each waiting or admitted workload's arrival: its number in the FIFO order and when
    (Kueue's queue order timestamp: creation, kept when it is preempted)."""

    def __init__(self) -> None:
        self._arrival: dict[str, tuple[int, float]] = {}
        self._count = 0

    def arrive(self, key: str, now: float, again: bool = False) -> int:
        """The workload's number in the FIFO order: its first arrival's, unless ``again``."""
        arrival = None if again else self._arrival.get(key)
        if arrival is None:
            self._count += 1
            arrival = self._arrival[key] = (self._count, now)
        return arrival[0]

    def queued_at(self, key: str, now: float) -> float:
        """When the workload arrived (``now`` if it is not known)."""
        arrival = self._arrival.get(key)
        return now if arrival is None else arrival[1]

    def forget(self, key: str) -> None:
        self._arrival.pop(key, None)


class QueueOrder:
    """See the module docstring."""

    def __init__(
        self,
        pending: PendingWorkloads,
        queues: dict[str, Queue],
        sort: QueueSort,
        config: AdmissionConfig,
    ) -> None:
        self.pending = pending
        self.queues = queues
        self.sort = sort
        self.config = config
        self._aged_at = 0.0

    def strict_fifo(self, queue: str) -> bool:
        found = self.queues.get(queue)
        return found is not None and found.queueing_strategy is QueueingStrategy.STRICT_FIFO

    def age(self, now: float) -> None:
        """Re-sort the queues when an aging interval has passed (priorities rose)."""
        interval = self.config.aging_interval
        if interval and now - self._aged_at >= interval:
            self.pending.reprioritize()
            self._aged_at = now

    def next_aging(self) -> float | None:
        """When priorities next age (None when aging is off or nothing waits)."""
        interval = self.config.aging_interval
        if not interval or not len(self.pending):
            return None
        return self._aged_at + interval

    def turns(self, skip: Collection[str]) -> Turns:
        """This cycle's heads in order; workloads in ``skip`` (preemptors waiting for their
        victims) are passed over."""
        return Turns(self, skip)


class Turns:
    """The heads a cycle tries, one queue's turn at a time. Iterate, and call :meth:`took` when
    the head just yielded used its queue's turn (it was admitted or preempted); a head that did
    not lets the next head of the same queue be tried (none, in a StrictFIFO queue)."""

    def __init__(self, order: QueueOrder, skip: Collection[str]) -> None:
        self._order = order
        self._skip = skip
        self._took = False

    def took(self) -> None:
        self._took = True

    def __iter__(self) -> Iterator[Group]:
        order = self._order
        pending = order.pending
        queues = pending.queues()
        key = order.sort.key_for(queues)
        heap = [(key(q), 0, q) for q in queues]
        heapq.heapify(heap)
        budget = len(queues)
        while heap and budget > 0:
            _, turns, queue = heapq.heappop(heap)
            strict = order.strict_fifo(queue)
            first = pending.first_group(queue) if strict else None
            for group in pending.ready_groups(queue):
                if strict and group is not first:
                    break  # its first workload waits (parked): nothing passes it
                if group.head.workload.key in self._skip:
                    if strict:
                        break
                    continue
                self._took = False
                yield group
                if not self._took:
                    if strict:
                        break
                    continue
                budget -= 1
                heapq.heappush(heap, (key(queue), turns + 1, queue))
                break
