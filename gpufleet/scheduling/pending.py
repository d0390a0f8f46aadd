"""Workloads waiting to be admitted, per queue, in groups of interchangeable workloads.

Workloads of one queue and namespace with the same pods (by signature), gang size, topology
request, preemptibility, priority and expected run time form a group, first in, first out: if
the group's head cannot be placed, neither can the others until something changes. A group that
did not fit is *parked* and leaves its queue's heap: for capacity, until capacity frees on a
node where one of its pods could go (the rows that freed are kept, since only they can help);
for quota, until some quota is given back; for preemption, until a running workload becomes a
candidate victim; for an admission check, until the check wakes it (or a wake it named: its
``requeue_on``). Each queue keeps a heap of its ready groups' heads by (priority, arrival); the
cycle takes the best head of each queue. Arrival is a workload's ``order``: the core keeps a
preempted workload's first one (Kueue orders by creation time), so that it returns to its place.
Workloads in backoff (a gang that did not start in time) wait aside, in a heap by due time,
until their time comes.

What it does not do: decide anything about fit or quota (the cycle does), or the order across
queues (:mod:`.ordering`).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.model.workload import Workload

GroupKey = tuple[object, ...]
#: (-priority, head's order, head's seq, group version, group number, group): never all the
#: same up to the group, which is not comparable.
HeapEntry = tuple[int, int, int, int, int, "Group"]


def group_key(workload: Workload) -> GroupKey:
    return (
        workload.queue,
        workload.namespace,  # namespaces have ResourceQuota caps of their own
        tuple(p.signature for p in workload.pods),
        workload.gang_size,
        workload.topology,
        workload.preemptible,
        workload.priority,
        workload.priority_class,  # its queue may allow one class and not another of equal value
        workload.preemption_policy,
        workload.expected_runtime,  # a short one may backfill where a long one may not
    )


class Parked(StrEnum):
    """Why a group is parked (None on a group means it is ready). Each value is the string
    explain and the metrics say it waits for (a :class:`PendingWorkload`'s ``reason``), and
    the name an admission check's ``requeue_on`` gives."""

    CAPACITY = "capacity"
    QUOTA = "quota"
    #: Its queue does not admit its namespace or priority class: only a new core (new queues)
    #: changes that, so nothing wakes it but waking every group.
    QUEUE_POLICY = "queue policy"
    #: An admission check refused it (``Group.refused_by``): the check wakes it
    #: (:meth:`PendingWorkloads.wake_refused_by`), and so do the wakes the check names.
    ADMISSION_CHECK = "admission check"


@dataclass(slots=True)
class PendingWorkload:
    workload: Workload
    seq: int
    since: float
    #: Its place among equal priorities (the first arrival's number; ``seq`` if not given).
    order: int = 0
    attempts: int = 0
    not_before: float = 0.0
    #: The last reason this workload was told it waits (told again only when it changes).
    told: str = ""
    #: Why it waits, for explain: "quota", "capacity", "preempting", "backoff", "namespace"
    #: or "priority-class" (its queue refuses it), an admission check's name, or "".
    reason: str = ""


@dataclass(slots=True)
class Group:
    key: GroupKey
    queue: str
    priority: int
    items: deque[PendingWorkload] = field(default_factory=deque)
    #: Why it is parked, or None when it is ready.
    parked: Parked | None = None
    #: Parked after a preemption search failed: woken too when a new candidate victim appears.
    may_preempt: bool = False
    #: The admission check that refused it, when parked for one (``Parked.ADMISSION_CHECK``).
    refused_by: str = ""
    #: Rows where capacity freed since it was parked (only they can help it now); None when it
    #: was not woken by freed capacity.
    freed_rows: set[int] | None = None
    #: Bumped on every push onto the heap: only the entry of the latest push is live.
    version: int = 0
    #: Numbers the group among those its PendingWorkloads ever made (the parked set's key:
    #: group keys are slow to hash).
    number: int = 0
    #: False once it has left its PendingWorkloads (emptied): heap entries may outlive it.
    live: bool = True

    @property
    def head(self) -> PendingWorkload:
        return self.items[0]


class PendingWorkloads:
    """See the module docstring."""

    def __init__(self, priority_of: Callable[[PendingWorkload], int] | None = None) -> None:
        #: Effective priority of a waiting workload (its own, or raised by aging).
        self.priority_of = priority_of or (lambda p: p.workload.priority)
        self._groups: dict[GroupKey, Group] = {}
        self._heaps: dict[str, list[HeapEntry]] = {}
        self._where: dict[str, GroupKey] = {}
        self._backoff: dict[str, PendingWorkload] = {}
        self._due: list[tuple[float, int, str]] = []
        self._parked: dict[int, Group] = {}
        #: Each queue's live groups (for :meth:`first_group`).
        self._by_queue: dict[str, dict[int, Group]] = {}
        self._seq = 0
        self._numbered = 0
        #: Workloads that joined a group while it was parked, not told why yet.
        self._joined_parked: list[PendingWorkload] = []
        #: Admission check -> the park reasons whose wakes also wake what it refused.
        self.requeue_on: dict[str, frozenset[str]] = {}
        #: The groups parked for an admission check, by number (apart: a wake for quota or
        #: capacity looks at them only when there are some).
        self._refused: dict[int, Group] = {}

    def __len__(self) -> int:
        return len(self._where) + len(self._backoff)

    def __contains__(self, key: str) -> bool:
        return key in self._where or key in self._backoff

    def add(
        self, workload: Workload, now: float, not_before: float = 0.0, order: int | None = None
    ) -> PendingWorkload:
        if workload.key in self:
            raise ValueError(f"workload {workload.key} is already pending")
        self._seq += 1
        pending = PendingWorkload(
            workload, self._seq, now, self._seq if order is None else order, not_before=not_before
        )
        if not_before > now:
            pending.reason = "backoff"
            self._backoff[workload.key] = pending
            heapq.heappush(self._due, (not_before, pending.seq, workload.key))
        else:
            self._enqueue(pending)
        return pending

    def _enqueue(self, pending: PendingWorkload) -> None:
        workload = pending.workload
        key = group_key(workload)
        group = self._groups.get(key)
        if group is None:
            self._numbered += 1
            group = Group(key, workload.queue, workload.priority, number=self._numbered)
            self._groups[key] = group
            self._by_queue.setdefault(workload.queue, {})[group.number] = group
        if group.items and group.items[-1].order > pending.order:
            # Back in its place (preempted, then queued again): ahead of later arrivals.
            items = sorted([*group.items, pending], key=lambda p: p.order)
            was_head = items[0] is pending
            group.items = deque(items)
            self._where[workload.key] = key
            if was_head:
                self._push(group)
        else:
            group.items.append(pending)
            self._where[workload.key] = key
            if len(group.items) == 1:
                self._push(group)
        if group.parked is not None:
            self._joined_parked.append(pending)

    def _push(self, group: Group) -> None:
        if group.parked is not None:
            return
        group.version += 1
        heap = self._heaps.setdefault(group.queue, [])
        head = group.head
        entry = (-self.priority_of(head), head.order, head.seq, group.version, group.number, group)
        heapq.heappush(heap, entry)

    @property
    def next_due(self) -> float | None:
        """When the first workload in backoff may be tried again."""
        due = self._due
        while due and (due[0][2] not in self._backoff or self._backoff[due[0][2]].seq != due[0][1]):
            heapq.heappop(due)
        return due[0][0] if due else None

    def release_backoff(self, now: float) -> None:
        """Workloads whose backoff has passed join their groups again."""
        due = self._due
        while due and due[0][0] <= now:
            _, seq, key = heapq.heappop(due)
            pending = self._backoff.get(key)
            if pending is not None and pending.seq == seq:
                del self._backoff[key]
                pending.reason = ""
                self._enqueue(pending)

    def remove(self, key: str) -> Workload | None:
        pending = self._backoff.pop(key, None)
        if pending is not None:
            return pending.workload
        gkey = self._where.pop(key, None)
        if gkey is None:
            return None
        group = self._groups[gkey]
        for i, item in enumerate(group.items):
            if item.workload.key == key:
                was_head = i == 0
                del group.items[i]
                break
        else:  # pragma: no cover - the index and the groups disagree
            raise AssertionError(f"workload {key} indexed but not in its group")
        if not group.items:
            self._drop(group)
        elif was_head:
            self._push(group)
        return item.workload

    def pop_head(self, group: Group) -> PendingWorkload:
        pending = group.items.popleft()
        del self._where[pending.workload.key]
        if group.items:
            self._push(group)
        else:
            self._drop(group)
        return pending

    def _drop(self, group: Group) -> None:
        del self._groups[group.key]
        del self._by_queue[group.queue][group.number]
        self._parked.pop(group.number, None)
        if group.refused_by:
            del self._refused[group.number]
            group.refused_by = ""
        group.live = False

    def get(self, key: str) -> PendingWorkload | None:
        if key in self._backoff:
            return self._backoff[key]
        gkey = self._where.get(key)
        if gkey is None:
            return None
        return next(p for p in self._groups[gkey].items if p.workload.key == key)

    def group_of(self, key: str) -> Group | None:
        gkey = self._where.get(key)
        return self._groups.get(gkey) if gkey is not None else None

    # ----------------------------------------------------------------------------- heads
    def queues(self) -> list[str]:
        """Queues whose heap is not empty (it may hold only stale entries)."""
        return [q for q, heap in self._heaps.items() if heap]

    def ready_groups(self, queue: str) -> Iterator[Group]:
        """The queue's ready groups, best head first, lazily from the heap. A yielded group
        that is still ready with the same head when iteration stops goes back on the heap;
        one parked meanwhile leaves it."""
        heap = self._heaps.get(queue, [])
        yielded: list[tuple[HeapEntry, Group]] = []
        try:
            while heap:
                entry = heapq.heappop(heap)
                group = entry[5]
                if not self._live(entry):
                    continue  # stale: the group is gone, parked, or pushed again since
                yielded.append((entry, group))
                yield group
        finally:
            for entry, _ in yielded:
                if self._live(entry):
                    heapq.heappush(heap, entry)

    @staticmethod
    def _live(entry: HeapEntry) -> bool:
        """Is a heap entry its group's latest push, with the group ready and the same head?"""
        group = entry[5]
        return (
            group.live
            and group.parked is None
            and group.version == entry[3]
            and bool(group.items)
            and group.head.seq == entry[2]
        )

    def peek(self, queue: str) -> Group | None:
        """The queue's best ready group (as ``ready_groups`` would yield first), or None."""
        heap = self._heaps.get(queue, [])
        while heap and not self._live(heap[0]):
            heapq.heappop(heap)
        return heap[0][5] if heap else None

    def first_group(self, queue: str) -> Group | None:
        """The group whose head comes first in the queue's order, parked or not (a StrictFIFO
        queue admits nothing else before it)."""
        best: Group | None = None
        best_key: tuple[int, int] | None = None
        for group in self._by_queue.get(queue, {}).values():
            head = group.head
            key = (-self.priority_of(head), head.order)
            if best_key is None or key < best_key:
                best, best_key = group, key
        return best

    def groups(self) -> list[Group]:
        return list(self._groups.values())

    def park(self, group: Group, why: Parked, may_preempt: bool = False, by: str = "") -> None:
        """Park ``group`` for ``why``; ``by``: the admission check that refused it (only
        with ``Parked.ADMISSION_CHECK``)."""
        if by:
            self._refused[group.number] = group
        elif group.refused_by:
            del self._refused[group.number]
        group.parked = why
        group.may_preempt = may_preempt
        group.refused_by = by
        group.freed_rows = None
        self._parked[group.number] = group

    def unpark(self, group: Group) -> None:
        if group.parked is not None:
            if group.refused_by:
                del self._refused[group.number]
                group.refused_by = ""
            group.parked = None
            group.may_preempt = False
            self._parked.pop(group.number, None)
            self._push(group)

    def take_joined_parked(self) -> list[tuple[PendingWorkload, Group]]:
        """Workloads that joined a parked group and wait in it parked now, with their group
        (each returned once). One whose group was woken meanwhile is kept for a later call
        (its group's next attempt may park it again as it was told); one that left is
        dropped."""
        joined, self._joined_parked = self._joined_parked, []
        out: list[tuple[PendingWorkload, Group]] = []
        for pending in joined:
            group = self.group_of(pending.workload.key)
            if group is None:
                continue
            if group.parked is None:
                self._joined_parked.append(pending)
            else:
                out.append((pending, group))
        return out

    def parked_groups(self) -> list[Group]:
        return list(self._parked.values())

    def wake(self, could_fit: Callable[[Group], bool], rows: list[int]) -> None:
        """Unpark capacity-parked groups that ``could_fit`` on the freed ``rows``; a ready
        group that was woken so adds them to its freed rows."""
        capacity = Parked.CAPACITY  # read once: an enum's member is slow to look up
        for group in self.parked_groups():
            if group.parked is capacity and could_fit(group):
                self.unpark(group)
                group.freed_rows = set(rows)
        for key in self._woken_by_rows():
            group = self._groups[key]
            if group.freed_rows is not None:
                group.freed_rows.update(rows)

    def _woken_by_rows(self) -> list[GroupKey]:
        return [k for k, g in self._groups.items() if g.parked is None and g.freed_rows]

    def wake_all(self, why: Parked | None = None) -> None:
        """Unpark every group parked for ``why`` (every parked group if None), and those
        refused by an admission check that ``why``'s wakes may help (its ``requeue_on``)."""
        for group in self.parked_groups():
            if why is None or group.parked is why:
                self.unpark(group)
                group.freed_rows = None
        if why is not None and self._refused:
            requeue_on = self.requeue_on
            for group in list(self._refused.values()):
                if why in requeue_on.get(group.refused_by, ()):
                    self.unpark(group)
                    group.freed_rows = None
        if why is None or why is Parked.CAPACITY:
            # Groups woken earlier by freed rows would try only those: anywhere may do now.
            for key in self._woken_by_rows():
                self._groups[key].freed_rows = None

    def wake_refused_by(self, check: str) -> None:
        """Unpark every group the admission check ``check`` refused (it may admit now)."""
        for group in list(self._refused.values()):
            if group.refused_by == check:
                self.unpark(group)
                group.freed_rows = None

    def wake_preemptors(self, could_preempt: Callable[[Group], bool]) -> None:
        """Unpark groups parked after a failed preemption search that ``could_preempt`` now."""
        for group in self.parked_groups():
            if group.may_preempt and could_preempt(group):
                self.unpark(group)
                group.freed_rows = None
        for key in self._woken_by_rows():  # they would try only the freed rows, not preempt
            group = self._groups[key]
            if group.may_preempt and could_preempt(group):
                group.freed_rows = None

    @property
    def any_parked(self) -> bool:
        return bool(self._parked)

    def reprioritize(self) -> None:
        """Rebuild the heaps (after priorities changed by aging)."""
        self._heaps = {}
        for group in self._groups.values():
            self._push(group)

    def workloads(self) -> Iterator[PendingWorkload]:
        for group in list(self._groups.values()):
            yield from group.items
        yield from list(self._backoff.values())
