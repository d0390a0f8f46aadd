"""The one way the scheduling core memoises: answers keyed by the versions they came from.

A :class:`VersionedMemo` keeps each answer with the versions of everything it was derived from
(the node table's ``state`` or ``topology_version``, the running set's or the quota usage's
``version``, ...). The caller names those versions each time it asks; an answer made under
other versions is never read, so nothing has to tell the memo that something changed. It is
bounded: past its size it is emptied, which costs only recomputation.

What it does not do: decide what an answer depends on. The caller passes the versions; a
version left out is a stale answer waiting to happen (the memo property tests guard that).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

__all__ = ["VersionedMemo"]


class VersionedMemo(Generic[K, V]):
    """Answers by key, each read only under the versions it was computed under."""

    __slots__ = ("_entries", "_limit")

    def __init__(self, limit: int) -> None:
        self._entries: dict[K, tuple[Hashable, V]] = {}
        self._limit = limit

    def get(self, key: K, versions: Hashable, compute: Callable[[], V]) -> V:
        """The answer for ``key`` under ``versions``: the kept one if it was made under
        them, else ``compute()`` (kept)."""
        entry = self._entries.get(key)
        if entry is not None and entry[0] == versions:
            return entry[1]
        entries = self._entries
        if len(entries) >= self._limit:
            entries.clear()
        value = compute()
        entries[key] = (versions, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)
