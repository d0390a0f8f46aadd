"""Every pod's utilisation summary over the store's 30 days, in compact columns.

Owns :class:`PodUsage` (one pod's summary: samples, their sum, first and last time) and
:class:`PodUsageTable`, the summaries of every pod seen, read as a mapping from
(namespace, pod) to :class:`PodUsage` in the order of the pods' last samples (oldest first).

Why columns: a fleet running 5,000 pods a day keeps 150,000 summaries for 30 days; as a dict of
objects (a key tuple, a ``PodUsage`` and its three floats each) they took some 350 bytes a pod,
and the save's copy of them as JSON-ready rows 190 more (80 MB in all). Here a pod costs its key,
one string ``namespace/pod`` (the key of the saved form too), its row number and 32 bytes of
columns. The order of last samples is the key dict's own order: a pod sampled again is moved
to its end. Reading the table hands out ``PodUsage`` values made on demand (copies).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

PodKey = tuple[str, str]
#: Summaries turned into JSON at a time when saving (bounds the save's passing memory: the
#: rows as Python lists and their text, a block at a time, not all 150,000 at once).
SAVE_BLOCK = 4_096


@dataclass(slots=True)
class PodUsage:
    """A pod's utilisation samples so far: how many, their sum, the first and last time."""

    samples: int = 0
    total: float = 0.0
    first: float = math.inf
    last: float = -math.inf

    @property
    def mean(self) -> float:
        return self.total / self.samples if self.samples else math.nan

    def add(self, now: float, value: float) -> None:
        self.samples += 1
        self.total += value
        self.first = min(self.first, now)
        self.last = max(self.last, now)


def joined(pod: PodKey) -> str:
    """A pod's key in the table and in the saved form (a namespace holds no ``/``)."""
    return f"{pod[0]}/{pod[1]}"


def split(key: str) -> PodKey:
    namespace, _, pod = key.partition("/")
    return namespace, pod


class PodUsageTable(Mapping[PodKey, PodUsage]):
    """The summaries of every pod, by (namespace, pod), in the order of their last samples."""

    def __init__(self, capacity: int = 64) -> None:
        self._rows: dict[str, int] = {}
        self._free: list[int] = []
        self._samples = np.zeros(capacity, np.int64)
        self._total = np.zeros(capacity)
        self._first = np.full(capacity, math.inf)
        self._last = np.full(capacity, -math.inf)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[PodKey]:
        return (split(key) for key in self._rows)

    def __contains__(self, pod: object) -> bool:
        return isinstance(pod, tuple) and len(pod) == 2 and joined(pod) in self._rows

    def __getitem__(self, pod: PodKey) -> PodUsage:
        row = self._rows[joined(pod)]
        return PodUsage(
            int(self._samples[row]),
            float(self._total[row]),
            float(self._first[row]),
            float(self._last[row]),
        )

    def last_of(self, pod: PodKey) -> float | None:
        """When ``pod`` was last sampled (None: not in the table)."""
        row = self._rows.get(joined(pod))
        return None if row is None else float(self._last[row])

    def add(self, pod: PodKey, now: float, value: float) -> None:
        """One more sample of ``pod`` (made if new), which moves to the end of the order."""
        key = joined(pod)
        row = self._rows.pop(key, None)
        if row is None:
            row = self._claim()
        self._rows[key] = row
        self._samples[row] += 1
        self._total[row] += value
        self._first[row] = min(self._first[row], now)
        self._last[row] = max(self._last[row], now)

    def put(self, pod: PodKey, usage: PodUsage) -> None:
        """Set ``pod``'s summary (a restored one), at the end of the order."""
        key = joined(pod)
        row = self._rows.pop(key, None)
        if row is None:
            row = self._claim()
        self._rows[key] = row
        self._samples[row] = usage.samples
        self._total[row] = usage.total
        self._first[row] = usage.first
        self._last[row] = usage.last

    def put_all(self, items: Iterable[tuple[PodKey, PodUsage]]) -> None:
        for pod, usage in items:
            self.put(pod, usage)

    def forget_stale(self, before: float) -> list[PodKey]:
        """Forget the pods last sampled at or before ``before``; returns them. The order of
        last samples puts them first: the scan stops at the first fresh pod."""
        stale: list[str] = []
        for key, row in self._rows.items():
            if self._last[row] > before:
                break
            stale.append(key)
        for key in stale:
            self._free.append(self._rows.pop(key))
        return [split(key) for key in stale]

    def rows(self) -> tuple[list[str], npt.NDArray[np.float64]]:
        """A copy of every summary in the saved form: the keys (``namespace/pod``) and a
        (pods x 4) array of samples, sum, first and last time, in that order."""
        return self.snapshot().rows()

    def snapshot(self) -> UsageSnapshot:
        """The table as it is now, for :meth:`UsageSnapshot.rows` later: a copy of the keys'
        rows and of the columns, the least work that keeps it (taken under a lock; the rows
        are made after it is let go)."""
        columns = np.stack([self._samples, self._total, self._first, self._last], axis=1)
        return UsageSnapshot(dict(self._rows), columns)

    def saved_rows(
        self, pods: Iterable[PodKey]
    ) -> tuple[list[tuple[str, int, float, float, float]], list[str]]:
        """The saved form of ``pods``' summaries (``namespace/pod``, samples, sum, first and
        last time) and the keys of those no longer in the table: what a save writes and
        deletes of the pods that changed since the last one (a few hundred rows, not all)."""
        rows: list[tuple[str, int, float, float, float]] = []
        gone: list[str] = []
        for pod in pods:
            key = joined(pod)
            row = self._rows.get(key)
            if row is None:
                gone.append(key)
                continue
            rows.append(
                (
                    key,
                    int(self._samples[row]),
                    float(self._total[row]),
                    float(self._first[row]),
                    float(self._last[row]),
                )
            )
        return rows, gone

    def nbytes(self) -> int:
        """The columns' bytes (the keys are Python strings besides)."""
        arrays = (self._samples, self._total, self._first, self._last)
        return sum(int(a.nbytes) for a in arrays)

    def _claim(self) -> int:
        if self._free:
            row = self._free.pop()
            self._samples[row], self._total[row] = 0, 0.0
            self._first[row], self._last[row] = math.inf, -math.inf
            return row
        row = len(self._rows)
        if row == self._samples.size:
            extra = self._samples.size
            self._samples = np.concatenate([self._samples, np.zeros(extra, np.int64)])
            self._total = np.concatenate([self._total, np.zeros(extra)])
            self._first = np.concatenate([self._first, np.full(extra, math.inf)])
            self._last = np.concatenate([self._last, np.full(extra, -math.inf)])
        return row


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    """A :class:`PodUsageTable` as it was (:meth:`PodUsageTable.snapshot`)."""

    keys: dict[str, int]
    columns: npt.NDArray[np.float64]

    def rows(self) -> tuple[list[str], npt.NDArray[np.float64]]:
        """The keys in the order of last samples and their (pods x 4) summaries."""
        keys = list(self.keys)
        at = np.fromiter(self.keys.values(), np.int64, len(keys))
        return keys, self.columns[at]


def saved_form(keys: list[str], summaries: npt.NDArray[np.float64]) -> bytes:
    """What :meth:`PodUsageTable.rows` gave as the saved JSON object: ``{"namespace/pod":
    [samples, sum, first, last], ...}``, made a block of rows at a time."""
    parts = []
    for lo in range(0, len(keys), SAVE_BLOCK):
        block = summaries[lo : lo + SAVE_BLOCK].tolist()
        rows = {
            key: [int(samples), total, first, last]
            for key, (samples, total, first, last) in zip(
                keys[lo : lo + SAVE_BLOCK], block, strict=True
            )
        }
        parts.append(json.dumps(rows)[1:-1].encode())
    return b"{" + b", ".join(parts) + b"}"
