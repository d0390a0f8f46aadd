"""Pending pods, grouped by shape, ordered by priority then arrival.

Pods with the same signature and priority form a group (first in, first out). A group whose
head did not fit is *parked*: trying its other pods is pointless until something frees capacity,
because placements only ever take capacity away. When capacity frees on some rows, only groups
that fit on one of those rows are woken (the idea behind kube-scheduler's queueing hints).
Across groups the cycle visits heads in (priority desc, arrival) order.

What it does not do: decide fit (the engine does) or queue by team (admission comes later).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from gpufleet.model import Pod

GroupKey = tuple[tuple[object, ...], int]


@dataclass(slots=True)
class PendingGroup:
    key: GroupKey
    pods: deque[tuple[int, Pod]] = field(default_factory=deque)
    parked: bool = False
    #: Unparked because capacity freed on some rows: only those rows can help it now.
    woken_by_rows: bool = False
    #: Pods not yet told why they wait (each is told once; some may have left since).
    untold: list[Pod] = field(default_factory=list)
    message: str = ""

    @property
    def head(self) -> tuple[int, Pod]:
        return self.pods[0]


class PendingQueue:
    """Pending pods by group; see the module docstring."""

    def __init__(self) -> None:
        self._groups: dict[GroupKey, PendingGroup] = {}
        self._group_of: dict[str, GroupKey] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._group_of)

    def __contains__(self, key: str) -> bool:
        return key in self._group_of

    def add(self, pod: Pod) -> PendingGroup:
        if pod.key in self._group_of:
            raise ValueError(f"pod {pod.key} is already pending")
        key: GroupKey = (pod.signature, pod.priority)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = PendingGroup(key)
        self._seq += 1
        group.pods.append((self._seq, pod))
        group.untold.append(pod)
        self._group_of[pod.key] = key
        return group

    def remove(self, pod_key: str) -> Pod | None:
        """Drop a pending pod (deleted, or bound elsewhere). Returns it if it was here."""
        key = self._group_of.pop(pod_key, None)
        if key is None:
            return None
        group = self._groups[key]
        for i, (_, pod) in enumerate(group.pods):
            if pod.key == pod_key:
                del group.pods[i]
                break
        else:  # pragma: no cover - the index and the groups disagree
            raise AssertionError(f"pod {pod_key} indexed but not in its group")
        if not group.pods:
            del self._groups[key]
        return pod

    def pop_head(self, group: PendingGroup) -> Pod:
        _, pod = group.pods.popleft()
        del self._group_of[pod.key]
        if not group.pods:
            del self._groups[group.key]
        return pod

    def active_heads(self) -> list[tuple[int, int, GroupKey]]:
        """Heap entries (-priority, arrival, group) of the groups that may run now."""
        heads = [(-g.key[1], g.head[0], g.key) for g in self._groups.values() if not g.parked]
        heapq.heapify(heads)
        return heads

    def group(self, key: GroupKey) -> PendingGroup | None:
        return self._groups.get(key)

    def groups(self) -> Iterator[PendingGroup]:
        return iter(list(self._groups.values()))

    def take_untold(self, group: PendingGroup) -> list[Pod]:
        """The group's pods that have not been told why they wait (and are still here)."""
        untold = [p for p in group.untold if self._group_of.get(p.key) == group.key]
        group.untold.clear()
        return untold

    def parked_groups(self) -> list[PendingGroup]:
        return [g for g in self._groups.values() if g.parked]
