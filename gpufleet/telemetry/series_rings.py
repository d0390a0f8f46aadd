"""The two rings of coded points behind the store, kept as time chunks that hold only the
series written in them, so memory follows what was written, not every series ever made.

Owns :class:`Chunk` (a fixed span of steps, time-major: one row per step, one column per series
written in it, each column named by its series id), :class:`ChunkedRing` (the chunks of one
ring, oldest first, the newest open for writing, older ones sealed) and :class:`Rings` (the
fine ring of codes and the coarse ring of mean, max and min codes, and how a write rolls up).

Why chunks: a series that lives an hour (a pod's) takes an hour's chunks, not a day's fine
ring and 30 days' coarse ring; a fleet's store grows a chunk at a time, never doubles. A
chunk is sealed (columns trimmed and sorted by id) when the next one opens; a sealed chunk is
never changed in place (a compaction or a drop replaces it with a new object), so whoever
keeps one (the incremental save) may read it without a lock. A dropped series' columns are
cleared in the open chunks and disowned in the sealed ones: each series id has a ``born``
chunk start per ring, and a column of a chunk that starts before it belongs to a former owner
of the id (left out of reads, removed by compaction when a quarter of a chunk is such).
A sealed chunk keeps its planes packed (``series_packing``: lossless, a few times smaller for
a GPU's readings) and a per-column summary (:class:`Folded`: points, weight, sum, max, min of
its codes), so a window covering it whole is answered without unpacking it; an open chunk's
planes are arrays, written in place, grown by an eighth when a new series needs a column.
Each step (fine) or bucket (coarse) also has a mark: whether a snapshot was taken then (fine)
or how many fine snapshots the bucket rolled up (coarse). Series identity, labels, ranges and
queries live in ``series.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from gpufleet.telemetry.series_layout import StoreShape
from gpufleet.telemetry.series_packing import Packed, pack_plane, unpack_plane

IntArray = npt.NDArray[np.int64]
CodeArray = npt.NDArray[np.unsignedinteger]
#: Target steps of a fine chunk (an hour of 15 s steps) and buckets of a coarse one (a day of
#: 10 minutes): the largest divisor of the ring's points not above these.
FINE_CHUNK = 240
COARSE_CHUNK = 144
#: A sealed chunk is compacted when this fraction of its columns or more are disowned.
COMPACT_FRACTION = 0.25
#: An open chunk short of columns grows by an eighth (not double: its room to grow is memory
#: held for the rest of its span; a fleet adds a few pods' columns an hour).
GROWTH = 8
#: Sealed chunks a ring keeps unpacked after a read (the rules' windows read the newest ones
#: round after round; a chunk is unpacked again only when another was read since).
UNPACKED_KEPT = 1


class Folded(NamedTuple):
    """Series' points over a span folded into what ``avg``, ``max``, ``min`` and ``count``
    need, exactly (sums of integer codes): per series, its points present, their weight (a
    step's mark: 1 a fine step, the snapshots of a coarse bucket), the weighted sum of the
    first plane's codes, the largest code of the second plane (0: none) and the least of the
    third (the missing code: none); a one-plane ring's planes are all its one."""

    present: IntArray
    weight: IntArray
    total: IntArray
    highest: IntArray
    lowest: IntArray

    @staticmethod
    def empty(size: int, missing: int) -> Folded:
        return Folded(
            np.zeros(size, np.int64),
            np.zeros(size, np.int64),
            np.zeros(size, np.int64),
            np.zeros(size, np.int64),
            np.full(size, missing, np.int64),
        )

    def plus(self, other: Folded) -> Folded:
        return Folded(
            self.present + other.present,
            self.weight + other.weight,
            self.total + other.total,
            np.maximum(self.highest, other.highest),
            np.minimum(self.lowest, other.lowest),
        )

    def compact(self, code: type[np.unsignedinteger]) -> Folded:
        """The same in the narrowest types that hold a chunk's (points and weights of at
        most a chunk's steps times a bucket's snapshots, codes of ``code``): what a sealed
        chunk keeps, 20 bytes a column instead of 40 (sums stay 64-bit)."""
        return Folded(
            self.present.astype(np.int32),
            self.weight.astype(np.int32),
            self.total,
            self.highest.astype(code),
            self.lowest.astype(code),
        )

    def at(self, pos: npt.NDArray[np.int32], size: int, missing: int) -> Folded:
        """Column ``pos[i]`` in row ``i`` (a negative ``pos``: nothing there) of ``size``."""
        out = Folded.empty(size, missing)
        ok = np.flatnonzero(pos >= 0)
        for mine, theirs in zip(self, out, strict=True):
            theirs[ok] = mine[pos[ok]]
        return out


def fold(planes: Sequence[CodeArray], marks: npt.NDArray[np.generic], missing: int) -> Folded:
    """``planes`` (steps x columns) folded over their steps, each weighted by its mark."""
    first, high, low = planes[0], planes[min(1, len(planes) - 1)], planes[-1]
    present = first != missing
    weight = np.where(present, marks.astype(np.int64)[:, None], 0)
    return Folded(
        present.sum(axis=0, dtype=np.int64),
        weight.sum(axis=0),
        (np.where(present, first, 0).astype(np.int64) * weight).sum(axis=0),
        np.where(present, high, 0).max(axis=0, initial=0).astype(np.int64),
        np.where(present, low, missing).min(axis=0, initial=missing).astype(np.int64),
    )


class Chunk:
    """``span`` steps from ``start`` of the series ``ids[:n]``: ``planes`` code arrays (steps
    x columns) and a mark per step. An open chunk keeps its planes as arrays; a sealed one
    keeps them packed (``series_packing``) and unpacks them when read."""

    __slots__ = (
        "_packed", "_raw", "ids", "marks", "n", "sealed", "start", "summary", "version", "where",
    )  # fmt: skip

    def __init__(
        self,
        start: int,
        ids: IntArray,
        planes: Sequence[CodeArray | Packed],
        marks: npt.NDArray[np.generic],
        sealed: bool,
        version: int = 0,
        n: int | None = None,
    ) -> None:
        self.start = start
        self.ids = ids
        self.n = int(ids.size) if n is None else n
        self._raw: list[CodeArray] | None = None
        self._packed: list[Packed] | None = None
        #: A sealed chunk's points folded per column (what a window over all of it needs).
        self.summary: Folded | None = None
        if sealed:
            arrays = [unpack_plane(p) if isinstance(p, Packed) else p for p in planes]
            self._packed = [p if isinstance(p, Packed) else pack_plane(p) for p in planes]
            missing = int(np.iinfo(arrays[0].dtype).max) if arrays else 0
            self.summary = (
                fold(arrays, marks, missing).compact(arrays[0].dtype.type) if arrays else None
            )
        else:
            self._raw = [unpack_plane(p) if isinstance(p, Packed) else p for p in planes]
        self.marks = marks
        self.sealed = sealed
        self.version = version
        self.where = np.full(0, -1, np.int32)
        self._index(self.n)

    @property
    def planes(self) -> list[CodeArray]:
        """The code planes (a sealed chunk's unpacked afresh: read them, do not keep them)."""
        if self._raw is not None:
            return self._raw
        assert self._packed is not None
        return [unpack_plane(p) for p in self._packed]

    @property
    def packed(self) -> list[Packed] | None:
        """A sealed chunk's packed planes (None: an open chunk)."""
        return self._packed

    @property
    def span(self) -> int:
        return int(self.marks.size)

    def _index(self, upto: int) -> None:
        top = int(self.ids[:upto].max()) + 1 if upto else 0
        if top > self.where.size:
            self.where = np.concatenate(
                [self.where, np.full(max(top, 2 * self.where.size) - self.where.size, -1, np.int32)]
            )
        self.where[self.ids[:upto]] = np.arange(upto, dtype=np.int32)

    def positions(self, rows: IntArray) -> npt.NDArray[np.int32]:
        """Each row's column here (-1: none)."""
        pos = np.full(rows.size, -1, np.int32)
        inside = rows < self.where.size
        pos[inside] = self.where[rows[inside]]
        return pos

    def ensure(self, rows: IntArray, missing: int) -> npt.NDArray[np.int32]:
        """The columns of ``rows`` in this open chunk, adding those it lacks."""
        pos = self.positions(rows)
        new = rows[pos < 0]
        if new.size:
            need = self.n + new.size
            if need > self.ids.size:
                capacity = max(need, self.ids.size + self.ids.size // GROWTH, 16)
                self.ids = np.concatenate([self.ids, np.zeros(capacity - self.ids.size, np.int64)])
                self._raw = [
                    np.concatenate(
                        [p, np.full((p.shape[0], capacity - p.shape[1]), missing, p.dtype)], axis=1
                    )
                    for p in self.planes
                ]
            self.ids[self.n : need] = new
            self.n = need
            self._index(need)
            pos = self.positions(rows)
        return pos

    def owned(self, alive: npt.NDArray[np.bool_], born: IntArray) -> npt.NDArray[np.bool_]:
        """Which of the columns belong to the series now holding their id."""
        ids = self.ids[: self.n]
        ok = ids < alive.size
        ok[ok] = alive[ids[ok]] & (born[ids[ok]] <= self.start)
        return ok

    def kept(self, columns: npt.NDArray[np.int64], version: int) -> Chunk:
        """A sealed copy holding only ``columns`` (indices of columns), sorted by id."""
        order = columns[np.argsort(self.ids[columns], kind="stable")]
        return Chunk(
            self.start,
            self.ids[order].copy(),
            [p[:, order] for p in self.planes],
            self.marks.copy(),
            True,
            version,
        )

    def nbytes(self) -> int:
        planes = self._raw if self._raw is not None else self._packed or []
        summary = sum(int(a.nbytes) for a in self.summary) if self.summary is not None else 0
        return (
            summary
            + sum(int(p.nbytes) for p in planes)
            + int(self.ids.nbytes + self.marks.nbytes + self.where.nbytes)
        )

    def columns(self) -> tuple[IntArray, list[CodeArray] | list[Packed]]:
        """The ids and planes of the columns in use: an open chunk's as views, a sealed one's
        packed (what it keeps: they never change)."""
        if self._packed is not None:
            return self.ids[: self.n], self._packed
        return self.ids[: self.n], [p[:, : self.n] for p in self.planes]


class ChunkedRing:
    """The chunks of a ring of ``points`` slots: ``planes`` code arrays of ``dtype``."""

    def __init__(
        self,
        points: int,
        target_span: int,
        planes: int,
        dtype: type[np.unsignedinteger],
        missing: int,
        marks: type[np.generic],
    ) -> None:
        self.points = points
        self.span = max(d for d in range(1, min(points, target_span) + 1) if points % d == 0)
        self.n_planes = planes
        self.dtype = dtype
        self.missing = missing
        self.marks_dtype = marks
        self.chunks: list[Chunk] = []
        self._unpacked: list[tuple[Chunk, list[CodeArray]]] = []

    def __iter__(self) -> Iterator[Chunk]:
        return iter(self.chunks)

    @property
    def open_start(self) -> int:
        """The start of the newest chunk (0: none yet)."""
        return self.chunks[-1].start if self.chunks else 0

    def open_at(self, index: int, alive: npt.NDArray[np.bool_], born: IntArray) -> Chunk:
        """The chunk holding ``index`` (not older than the newest), opened if new: the newest
        is sealed, chunks past the ring's points are let go, disowned columns compacted."""
        start = index - index % self.span
        if self.chunks and self.chunks[-1].start == start:
            return self.chunks[-1]
        if self.chunks and self.chunks[-1].start > start:
            raise ValueError(f"ring index {index} is older than the newest chunk")
        if self.chunks:
            newest = self.chunks[-1]
            owned = newest.owned(alive, born)
            self.chunks[-1] = newest.kept(np.flatnonzero(owned), newest.version)
            self._compact(alive, born)
        oldest = index - self.points + 1
        self.chunks = [c for c in self.chunks if c.start + self.span > oldest]
        self._unpacked = [(c, p) for c, p in self._unpacked if any(c is k for k in self.chunks)]
        width = self.chunks[-1].n + 16 if self.chunks else 16
        chunk = Chunk(
            start,
            np.zeros(width, np.int64),
            [np.full((self.span, width), self.missing, self.dtype) for _ in range(self.n_planes)],
            np.zeros(self.span, self.marks_dtype),
            False,
            n=0,
        )
        self.chunks.append(chunk)
        return chunk

    def _compact(self, alive: npt.NDArray[np.bool_], born: IntArray) -> None:
        for i, chunk in enumerate(self.chunks):
            owned = chunk.owned(alive, born)
            gone = chunk.n - int(owned.sum())
            if gone and gone >= COMPACT_FRACTION * chunk.n:
                self.chunks[i] = chunk.kept(np.flatnonzero(owned), chunk.version + 1)

    def clear(self, rows: IntArray) -> None:
        """Forget the points of ``rows`` in the open chunk (in place: it is rewritten whole)."""
        if self.chunks and not self.chunks[-1].sealed:
            chunk = self.chunks[-1]
            pos = chunk.positions(rows)
            pos = pos[pos >= 0]
            for plane in chunk.planes:
                plane[:, pos] = self.missing

    def gather(
        self, first: int, last: int, rows: IntArray, born: IntArray
    ) -> tuple[list[CodeArray], npt.NDArray[np.generic]]:
        """Steps ``first..last`` of ``rows``: a (steps x rows) block per plane (missing where
        nothing was written) and the steps' marks."""
        length = max(0, last - first + 1)
        blocks = [
            np.full((length, rows.size), self.missing, self.dtype) for _ in range(self.n_planes)
        ]
        marks = np.zeros(length, self.marks_dtype)
        for chunk in self.chunks:
            lo, hi = max(first, chunk.start), min(last, chunk.start + self.span - 1)
            if lo > hi:
                continue
            src, dst = (
                slice(lo - chunk.start, hi - chunk.start + 1),
                slice(lo - first, hi - first + 1),
            )
            marks[dst] = chunk.marks[src]
            pos = chunk.positions(rows)
            ok = pos >= 0
            ok[ok] = born[rows[ok]] <= chunk.start
            if not ok.any():
                continue
            planes = self._planes_of(chunk)
            if ok.all():
                run = int(pos[-1]) - int(pos[0]) + 1 == pos.size and (
                    pos.size == 1 or bool((pos[1:] > pos[:-1]).all())
                )
                for block, plane in zip(blocks, planes, strict=True):
                    if run:
                        block[dst] = plane[src, int(pos[0]) : int(pos[-1]) + 1]
                    else:
                        block[dst] = plane[src][:, pos]
                continue
            cols = np.flatnonzero(ok)
            for block, plane in zip(blocks, planes, strict=True):
                block[dst, cols] = plane[src][:, pos[cols]]
        return blocks, marks

    def fold(self, first: int, last: int, rows: IntArray, born: IntArray) -> Folded:
        """Steps ``first..last`` of ``rows`` folded (:class:`Folded`): a sealed chunk the
        span covers whole from its summary, without unpacking it; the rest from its codes."""
        folded = Folded.empty(rows.size, self.missing)
        for chunk in self.chunks:
            lo, hi = max(first, chunk.start), min(last, chunk.start + self.span - 1)
            if lo > hi:
                continue
            if chunk.summary is not None and (lo, hi) == (chunk.start, chunk.start + self.span - 1):
                pos = chunk.positions(rows)
                owned = pos >= 0
                owned[owned] = born[rows[owned]] <= chunk.start
                pos[~owned] = -1
                folded = folded.plus(chunk.summary.at(pos, rows.size, self.missing))
            else:
                blocks, marks = self.gather(lo, hi, rows, born)
                folded = folded.plus(fold(blocks, marks, self.missing))
        return folded

    def _planes_of(self, chunk: Chunk) -> list[CodeArray]:
        """A chunk's planes, a sealed one's from the few kept unpacked if it is there."""
        if not chunk.sealed:
            return chunk.planes
        for kept, planes in self._unpacked:
            if kept is chunk:
                return planes
        planes = chunk.planes
        self._unpacked = [*self._unpacked, (chunk, planes)][-UNPACKED_KEPT:]
        return planes

    def write(
        self,
        index: int,
        rows: IntArray,
        codes: Sequence[CodeArray],
        mark: int,
        alive: npt.NDArray[np.bool_],
        born: IntArray,
    ) -> None:
        """``codes[p]`` of ``rows`` at ``index`` in plane ``p``, and the index's mark."""
        chunk = self.open_at(index, alive, born)
        pos = chunk.ensure(rows, self.missing)
        for plane, coded in zip(chunk.planes, codes, strict=True):
            plane[index - chunk.start, pos] = coded
        chunk.marks[index - chunk.start] = mark

    def nbytes(self) -> int:
        """The chunks' bytes and those of the sealed chunks kept unpacked."""
        unpacked = sum(int(p.nbytes) for _, planes in self._unpacked for p in planes)
        return sum(chunk.nbytes() for chunk in self.chunks) + unpacked


class Rings:
    """The fine and coarse rings, and each series id's ``born`` chunk start in each."""

    def __init__(self, shape: StoreShape, capacity: int) -> None:
        self.shape = shape
        self.fine_missing = shape.fine.missing
        self.coarse_missing = shape.coarse.missing
        self.fine = ChunkedRing(
            shape.fine_points, FINE_CHUNK, 1, shape.fine.dtype, self.fine_missing, np.bool_
        )
        self.coarse = ChunkedRing(
            shape.coarse_points, COARSE_CHUNK, 3, shape.coarse.dtype, self.coarse_missing, np.uint16
        )
        self.alive = np.zeros(capacity, np.bool_)
        self.born_fine = np.zeros(capacity, np.int64)
        self.born_coarse = np.zeros(capacity, np.int64)
        #: The newest fine step written (None: nothing yet).
        self.newest: int | None = None

    @property
    def capacity(self) -> int:
        return int(self.alive.size)

    def nbytes(self) -> int:
        per_id = self.alive.nbytes + self.born_fine.nbytes + self.born_coarse.nbytes
        return self.fine.nbytes() + self.coarse.nbytes() + int(per_id)

    def grow(self, capacity: int) -> None:
        """Room for ``capacity`` series ids."""
        extra = capacity - self.capacity
        if extra > 0:
            self.alive = np.concatenate([self.alive, np.zeros(extra, np.bool_)])
            self.born_fine = np.concatenate([self.born_fine, np.zeros(extra, np.int64)])
            self.born_coarse = np.concatenate([self.born_coarse, np.zeros(extra, np.int64)])

    def claim(self, row: int) -> None:
        """Series id ``row`` is (again) a live series."""
        self.alive[row] = True

    def clear_columns(self, columns: IntArray) -> None:
        """Forget every point of these series (a dropped series' id, before reuse)."""
        self.alive[columns] = False
        self.fine.clear(columns)
        self.coarse.clear(columns)
        self.born_fine[columns] = self.fine.open_start
        self.born_coarse[columns] = self.coarse.open_start

    def stamped(self, step: int) -> bool:
        """Whether a snapshot was taken at fine ``step`` (one the ring still holds)."""
        if self.newest is None or not self.newest - self.shape.fine_points < step <= self.newest:
            return False
        _, marks = self.fine.gather(step, step, np.zeros(0, np.int64), self.born_fine)
        return bool(marks[0])

    def fine_block(
        self, first: int, last: int, rows: IntArray
    ) -> tuple[CodeArray, npt.NDArray[np.bool_]]:
        """Fine codes of ``rows`` at steps ``first..last`` and which steps had a snapshot."""
        (block,), marks = self.fine.gather(first, last, rows, self.born_fine)
        return block, marks.astype(np.bool_)

    def coarse_block(
        self, first: int, last: int, rows: IntArray
    ) -> tuple[list[CodeArray], npt.NDArray[np.uint16]]:
        """Mean, max and min codes of ``rows`` in buckets ``first..last``, and each bucket's
        snapshots."""
        blocks, marks = self.coarse.gather(first, last, rows, self.born_coarse)
        return blocks, marks.astype(np.uint16)

    def fine_folded(self, first: int, last: int, rows: IntArray) -> Folded:
        """Fine steps ``first..last`` of ``rows`` folded (:meth:`ChunkedRing.fold`)."""
        return self.fine.fold(first, last, rows, self.born_fine)

    def coarse_folded(self, first: int, last: int, rows: IntArray) -> Folded:
        """Coarse buckets ``first..last`` of ``rows`` folded, each mean weighted by the
        bucket's snapshots (:meth:`ChunkedRing.fold`)."""
        return self.coarse.fold(first, last, rows, self.born_coarse)

    def write(self, step: int, columns: IntArray, codes: CodeArray) -> None:
        """Fine codes of ``columns`` at fine step ``step`` (not older than the newest), and
        their coarse point rolled up again."""
        if self.newest is not None and step < self.newest:
            raise ValueError(f"fine step {step} is older than the newest written, {self.newest}")
        self.newest = step
        self.fine.write(step, columns, [codes], 1, self.alive, self.born_fine)
        self._roll_up(step // self.shape.fine_per_coarse, columns)

    def load_dense(self, arrays: dict[str, npt.NDArray[np.generic]], rows: IntArray) -> None:
        """Take up the dense rings of format 1 (``fine``, ``fine_step``, ``coarse_mean``,
        ``coarse_max``, ``coarse_min``, ``coarse_bucket``, ``coarse_count``: steps x ids) for
        the live series ``rows``, each point in its chunk."""
        fine, steps = arrays["fine"], arrays["fine_step"]
        for slot in np.argsort(steps, kind="stable"):
            if steps[slot] >= 0:
                codes = fine[slot, rows]
                has = codes != self.fine_missing
                self.fine.write(
                    int(steps[slot]), rows[has], [codes[has]], 1, self.alive, self.born_fine
                )
        buckets = arrays["coarse_bucket"]
        for slot in np.argsort(buckets, kind="stable"):
            if buckets[slot] >= 0:
                planes = [arrays[f"coarse_{name}"][slot, rows] for name in ("mean", "max", "min")]
                has = planes[0] != self.coarse_missing
                self.coarse.write(
                    int(buckets[slot]),
                    rows[has],
                    [plane[has] for plane in planes],
                    int(arrays["coarse_count"][slot]),
                    self.alive,
                    self.born_coarse,
                )

    def _roll_up(self, bucket: int, columns: IntArray) -> None:
        per = self.shape.fine_per_coarse
        assert self.newest is not None
        first = max(bucket * per, self.newest - self.shape.fine_points + 1)
        block, stamped = self.fine_block(first, bucket * per + per - 1, columns)
        block = block[stamped]
        present = block != self.fine_missing
        count = present.sum(axis=0)
        total = np.where(present, block, 0).sum(axis=0, dtype=np.int64)
        highest = np.where(present, block, 0).max(axis=0, initial=0)
        lowest = np.where(present, block, self.fine_missing).min(axis=0, initial=self.fine_missing)
        ratio = self.shape.coarse.levels / self.shape.fine.levels
        mean = total / np.maximum(count, 1)
        empty = count == 0
        coded = []
        for codes in (mean, highest, lowest):
            one = np.rint(np.asarray(codes, np.float64) * ratio).astype(self.shape.coarse.dtype)
            one[empty] = self.coarse_missing
            coded.append(one)
        self.coarse.write(bucket, columns, coded, int(stamped.sum()), self.alive, self.born_coarse)
