"""Which reader reads an object: readers registered by API group and kind, as a Kubernetes
``runtime.Scheme`` maps a group, version and kind to the type it decodes into.

Owns :class:`Scheme`: a mapping from ``(group, kind)`` (``""`` is the core group: a Pod is
``("", "Pod")``, a Job ``("batch", "Job")``) to a reader, filled where the readers of a face are
put together (:meth:`Scheme.register` as a decorator, or :meth:`Scheme.add`), and the lookup of
an object's reader (:meth:`Scheme.reader_of`). The version is the reader's to check, and so is
a group it does not read: an object whose apiVersion names no group registered for its kind (or
that gives no apiVersion) goes to the reader of that kind when there is one only, whose own
check then says which apiVersion it expects; when groups read one kind differently, it has no
reader.

It reads nothing itself, and knows nothing of what a kind means or of the kinds a reader sets
aside (``kinds``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from gpufleet.io.kinds import api_group

R = TypeVar("R")


class Scheme(Generic[R]):
    """Readers of type ``R`` by ``(API group, kind)``."""

    def __init__(self) -> None:
        self._by_group: dict[tuple[str, str], R] = {}
        self._by_kind: dict[str, list[R]] = {}

    def add(self, group: str, kind: str, reader: R) -> None:
        """``reader`` reads objects of ``kind`` in API group ``group``."""
        if (group, kind) in self._by_group:
            raise ValueError(f"kind {kind} of API group {group!r} has a reader already")
        self._by_group[(group, kind)] = reader
        readers = self._by_kind.setdefault(kind, [])
        if reader not in readers:
            readers.append(reader)

    def register(self, group: str, *kinds: str) -> Callable[[R], R]:
        """A decorator: the function it decorates reads ``kinds`` of API group ``group``."""

        def add_reader(reader: R) -> R:
            for kind in kinds:
                self.add(group, kind, reader)
            return reader

        return add_reader

    @property
    def kinds(self) -> frozenset[str]:
        """Every kind some reader reads."""
        return frozenset(self._by_kind)

    def reader_of(self, obj: Mapping[str, Any]) -> R | None:
        """The reader of ``obj``: by its apiVersion's group and its kind, else the one reader of
        its kind (which checks the apiVersion); None when none, or several, read its kind."""
        kind = obj.get("kind")
        if not isinstance(kind, str):
            return None
        group = api_group(obj.get("apiVersion"))
        if group is not None and (group, kind) in self._by_group:
            return self._by_group[(group, kind)]
        readers = self._by_kind.get(kind, [])
        return readers[0] if len(readers) == 1 else None
