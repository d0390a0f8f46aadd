"""The columnar time-series store of the control plane: device and workload metrics over a day
at fine resolution and 30 days at coarse, in bounded memory, and window queries over them.

Owns :class:`SeriesStore`: which series exist (a metric and its labels: node, gpu, uuid, model;
workload, namespace, queue, tenant for workload series), their column in the rings, vectorised
appends of whole snapshots (one time, arrays of series ids and values), dropping a series that
went away, window queries (:class:`~gpufleet.telemetry.series_query.SeriesQuery`) and the
durable form (``durable``, ``to_bytes``/``from_bytes``, in ``series_codec.py``). Memory is
two rings of time chunks, each holding only the series written in it (``series_rings.py``):
a series costs the chunks it was written in (a pod's series of an hour costs an hour), and
only the per-id columns here (a few bytes an id) grow by doubling.

Why sealed chunks are kept packed (issue 29 item 12: 1,000 GPUs, 5 metrics, 5,000 pods a day
over 30 days in 200 MB): the codes alone were 131 MB for the device series (a day of 15 s
``uint16`` codes, 58 MB; 30 days of 10-minute mean, max and min ``uint8`` codes, 65 MB), and
with the interpreter (55 MB) and 150,000 pods' summaries and series the process held 291 MB.
Keeping less would have cost answers: a coarse plane fewer loses ``avg``, ``max`` or ``min``
over 30 days, and narrower codes lose the exactness at integers that alert thresholds need
(item 1). A sealed chunk never changes, so it is kept packed, losslessly
(``series_packing``: differences from the step before, zigzag, byte planes, zlib), and
unpacked when a query reads it: every answer is the one the codes give, to the bit. What it
costs is time for old data: ``avg``, ``max``, ``min`` and ``count`` over a window covering
sealed chunks whole read each chunk's summary (folded at sealing: exactly the sums, maxima
and minima of its codes), so only the window's edges are unpacked; ``last`` and ``quantile``
unpack every chunk they cover (the newest sealed one stays unpacked for the next read).

Time is what callers pass (seconds since the epoch); a point is stamped with the start of its
fine step, one point per step and series (a later append in the same step replaces it, as a
gauge's newest reading).

Not here: the arithmetic of reductions (``series_window.py``), the rings' chunks
(``series_rings.py``), codes and shapes (``series_layout.py``), where samples come from (a
``TelemetrySource``), and rules (the alert engine calls ``query``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, cast

import numpy as np
import numpy.typing as npt

from gpufleet.model.alerts import LOOKBACK_S
from gpufleet.telemetry import series_codec
from gpufleet.telemetry.series_layout import (
    RULE_METRICS,
    Labels,
    MetricSpec,
    StoreShape,
    as_labels,
    matches,
)
from gpufleet.telemetry.series_packing import Packed, unpack_plane
from gpufleet.telemetry.series_query import UnknownMetricError
from gpufleet.telemetry.series_rings import Chunk, Rings
from gpufleet.telemetry.series_window import (
    ACROSS_FNS,
    FOLDABLE,
    WINDOW_FNS,
    Across,
    Where,
    WindowFn,
    aggregate,
    filtered,
    holding,
    reduce_coarse,
    reduce_fine,
    reduce_folded,
)

SeriesKey = tuple[str, Labels]
#: A factor per series, from the series' labels in the order given (see ``SeriesStore.query``).
Scale = Callable[[Sequence[Labels]], npt.NDArray[np.float64]]


class CoarsePoints(NamedTuple):
    """A series' coarse points: bucket start times, mean, max, min and snapshots rolled up."""

    times: npt.NDArray[np.float64]
    mean: npt.NDArray[np.float64]
    max: npt.NDArray[np.float64]
    min: npt.NDArray[np.float64]
    snapshots: npt.NDArray[np.float64]


def _as_codes(plane: npt.NDArray[Any] | Packed, dtype: type[np.unsignedinteger[Any]]) -> Any:
    """A restored plane in the ring's code dtype (a packed one as it is if it is of it)."""
    if isinstance(plane, Packed):
        return plane if plane.dtype == dtype else unpack_plane(plane).astype(dtype)
    return plane.astype(dtype, copy=False)


class SeriesStore:
    """Time series of the ``metrics`` given, shaped by ``shape``; implements ``SeriesQuery``."""

    def __init__(
        self,
        metrics: Iterable[MetricSpec] = RULE_METRICS,
        shape: StoreShape | None = None,
        capacity: int = 64,
    ) -> None:
        self.shape = shape or StoreShape()
        self.metrics: dict[str, MetricSpec] = {}
        for spec in metrics:
            if spec.name in self.metrics:
                raise ValueError(f"metric {spec.name} is given twice")
            self.metrics[spec.name] = spec
        capacity = max(1, capacity)
        self._rings = Rings(self.shape, capacity)
        self._ids: dict[str, dict[Labels, int]] = {name: {} for name in self.metrics}
        self._keys: list[SeriesKey | None] = [None] * capacity
        self._free: list[int] = []
        self._used = 0
        #: Each series' range (values are clipped to it) and the value of its top code (the
        #: range's top, or above it for a metric coded in steps of its resolution).
        self._lo = np.zeros(capacity)
        self._top = np.ones(capacity)
        self._hi = np.ones(capacity)
        self._last_step = np.full(capacity, -1, np.int64)
        self._by_metric: dict[str, tuple[list[Labels], npt.NDArray[np.int64]]] = {}
        #: How many appended values fell outside their metric's range and were clipped to it.
        self.clipped = 0
        #: How many series of each metric were dropped so far (whoever keeps ids may check
        #: that none of the metrics it keeps them for lost one: ``SeriesRecorder``'s cache).
        self.drops: dict[str, int] = dict.fromkeys(self.metrics, 0)

    # -- series -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._ids.values())

    def add(self, metric: str, labels: Mapping[str, str] | Labels) -> int:
        """The id of the series ``metric{labels}``, made if new (ids of dropped series are
        reused)."""
        spec = self._spec(metric)
        key = as_labels(labels)
        existing = self._ids[metric].get(key)
        if existing is not None:
            return existing
        if self._free:
            row = self._free.pop()
        else:
            if self._used == self._rings.capacity:
                self._grow(2 * self._rings.capacity)
            row, self._used = self._used, self._used + 1
        self._ids[metric][key] = row
        self._keys[row] = (metric, key)
        self._rings.claim(row)
        self._set_range(row, spec)
        self._last_step[row] = -1
        self._by_metric.pop(metric, None)
        return row

    def add_many(
        self, metric: str, labels: Iterable[Mapping[str, str] | Labels]
    ) -> npt.NDArray[np.int64]:
        """The ids of many series of one metric (made if new), in order: a snapshot's ids."""
        return np.fromiter((self.add(metric, one) for one in labels), np.int64)

    def key_of(self, series_id: int) -> SeriesKey:
        """The metric and labels of a live series id."""
        key = self._keys[series_id] if 0 <= series_id < len(self._keys) else None
        if key is None:
            raise KeyError(f"no series with id {series_id}")
        return key

    def series(self, metric: str, matchers: Mapping[str, str] | None = None) -> dict[Labels, int]:
        """The ids of ``metric``'s series that match, by labels."""
        self._spec(metric)
        return {k: i for k, i in self._ids[metric].items() if matches(k, matchers)}

    def drop(self, series_id: int) -> None:
        """Forget a series and its points (a device gone); its id may be reused."""
        metric, key = self.key_of(series_id)
        del self._ids[metric][key]
        self._keys[series_id] = None
        self._rings.clear_columns(np.array([series_id]))
        self._free.append(series_id)
        self.drops[metric] += 1
        self._by_metric.pop(metric, None)

    def drop_idle(self, now: float, idle_s: float) -> list[SeriesKey]:
        """Drop every series whose newest point is ``idle_s`` or more before ``now`` (those
        never appended to are kept); returns what was dropped."""
        stamp = self._last_step * self.shape.fine_step_s
        idle = np.flatnonzero((self._last_step >= 0) & (stamp <= now - idle_s))
        dropped = [self.key_of(int(row)) for row in idle if self._keys[int(row)] is not None]
        for row in idle:
            if self._keys[int(row)] is not None:
                self.drop(int(row))
        return dropped

    # -- appends ------------------------------------------------------------------------------

    @property
    def newest_time(self) -> float | None:
        """The start of the newest fine step written (None: nothing yet)."""
        newest = self._rings.newest
        return None if newest is None else float(newest * self.shape.fine_step_s)

    def append(self, time: float, ids: npt.ArrayLike, values: npt.ArrayLike) -> None:
        """One snapshot: ``values[i]`` of series ``ids[i]`` at ``time`` (NaN: no sample).
        Checked whole before anything is written: ids live and distinct, lengths equal, time
        not before the newest step."""
        columns = np.asarray(ids, dtype=np.int64).reshape(-1)
        readings = np.asarray(values, dtype=np.float64).reshape(-1)
        if columns.shape != readings.shape:
            raise ValueError(f"append: {columns.size} ids but {readings.size} values")
        if not math.isfinite(time) or time < 0:
            raise ValueError(f"append: time {time} must be finite and not negative")
        step = int(time // self.shape.fine_step_s)
        newest = self._rings.newest
        if newest is not None and step < newest:
            raise ValueError(
                f"append: time {time} is before the newest step written "
                f"({newest * self.shape.fine_step_s} s); appends go forward in time"
            )
        if columns.size and (columns.min() < 0 or columns.max() >= self._used):
            raise ValueError(f"append: ids must be live series ids, got {columns.min()}..")
        if columns.size and not self._rings.alive[columns].all():
            dead = [int(row) for row in columns if self._keys[int(row)] is None]
            raise ValueError(f"append: ids {dead[:5]} are not live series (dropped or never added)")
        if np.unique(columns).size != columns.size:
            raise ValueError("append: an id appears more than once in one snapshot")
        lo, top = self._lo[columns], self._top[columns]
        self.clipped += int(np.count_nonzero((readings < lo) | (readings > top)))
        readings = np.clip(readings, lo, top)
        self._rings.write(step, columns, self.shape.fine.encode(readings, lo, self._hi[columns]))
        self._last_step[columns[~np.isnan(readings)]] = step

    # -- queries ------------------------------------------------------------------------------

    def query(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str] | None = None,
        quantile: float | None = None,
        *,
        by: Sequence[str] | None = None,
        across: str = "sum",
        where: Where | None = None,
        scale: Scale | None = None,
    ) -> dict[Labels, float]:
        """See :class:`~gpufleet.telemetry.series_query.GroupedSeriesQuery` (and the rule
        engine's ``SeriesQuery``, which this answers); ``where`` keeps only the values that
        satisfy it (after the aggregation, as a PromQL comparison would). ``scale`` gives a
        factor per series (from the series' labels, in the order given; a series whose factor
        is not finite is left out), applied to its window value before ``where`` and the
        grouping: a series over a constant of its own, such as memory used over each device's
        memory. A window that fits the fine ring's retention is answered exactly from it; a
        longer one from the coarse ring, aligned to its buckets (see ``series_window``).
        ``last`` over :data:`~gpufleet.model.alerts.LOOKBACK_S` is an instant query, as in
        PromQL: a series missing from the newest snapshot is stale and left out."""
        if fn not in WINDOW_FNS:
            raise ValueError(f"query: fn {fn!r} is not one of {list(WINDOW_FNS)}")
        if across not in ACROSS_FNS:
            raise ValueError(f"query: across {across!r} is not one of {list(ACROSS_FNS)}")
        if fn == "quantile" and (quantile is None or not 0.0 <= quantile <= 1.0):
            raise ValueError(f"query: fn quantile needs a quantile within 0..1, got {quantile}")
        phi = 0.5 if quantile is None else quantile
        if not (math.isfinite(window_s) and window_s > 0 and math.isfinite(now)):
            raise ValueError(f"query: window {window_s} s must be positive and now {now} finite")
        labels, rows = self._rows_of(metric, matchers)
        if not rows.size or self._rings.newest is None:
            return {}
        values, has = self._reduce(cast(WindowFn, fn), rows, window_s, now, phi)
        if fn == "last" and window_s == LOOKBACK_S:
            has &= self._fresh(rows, now)
        if scale is not None:
            factors = scale(labels)
            has &= np.isfinite(factors)
            values = values * np.where(has, factors, 0.0)
        if where is not None and by is None:
            has &= holding(values, where)
        kept = [labels[i] for i in np.flatnonzero(has)]
        if by is None:
            return {key: float(value) for key, value in zip(kept, values[has], strict=True)}
        grouped = aggregate(cast(Across, across), kept, values[has], by)
        return grouped if where is None else filtered(grouped, where)

    def query_where(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str],
        quantile: float | None,
        where: Where,
    ) -> dict[Labels, float]:
        """The rule engine's query with its condition pushed down (``FilteringSeriesQuery``)."""
        return self.query(metric, fn, window_s, now, matchers, quantile, where=where)

    def _reduce(
        self, fn: WindowFn, rows: npt.NDArray[np.int64], window_s: float, now: float, phi: float
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        shape, rings = self.shape, self._rings
        newest = rings.newest
        assert newest is not None
        lo, hi = self._lo[rows], self._hi[rows]
        first = math.floor((now - window_s) / shape.fine_step_s) + 1
        last = min(math.floor(now / shape.fine_step_s), newest)
        oldest_kept = newest - shape.fine_points + 1
        if first >= oldest_kept:
            if fn in FOLDABLE:  # sealed chunks' summaries: no unpacking
                return reduce_folded(fn, *rings.fine_folded(first, last, rows), shape.fine, lo, hi)
            fine, stamped = rings.fine_block(first, last, rows)
            return reduce_fine(fn, fine[stamped], shape.fine, lo, hi, phi)
        newest_bucket = newest // shape.fine_per_coarse
        buckets = (
            max(
                math.floor((now - window_s) / shape.coarse_step_s) + 1,
                newest_bucket - shape.coarse_points + 1,
            ),
            min(math.floor(now / shape.coarse_step_s), newest_bucket),
        )
        if fn in FOLDABLE:
            folded = rings.coarse_folded(*buckets, rows)
            return reduce_folded(fn, *folded, shape.coarse, lo, hi)
        (mean, highest, lowest), counts = rings.coarse_block(*buckets, rows)
        values, has = reduce_coarse(fn, mean, highest, lowest, counts, shape.coarse, lo, hi, phi)
        if fn == "last":
            # The newest point is exact wherever the fine part of the window has one.
            fine, stamped = rings.fine_block(oldest_kept, last, rows)
            recent, in_fine = reduce_fine("last", fine[stamped], shape.fine, lo, hi)
            values = np.where(in_fine, recent, values)
        return values, has

    def _fresh(self, rows: npt.NDArray[np.int64], now: float) -> npt.NDArray[np.bool_]:
        """Which series are not stale at ``now``: an instant query (``last`` over the
        lookback, :data:`LOOKBACK_S`) leaves out a series the newest snapshot at or before
        ``now`` did not have, as Prometheus marks a series stale at the first scrape without it
        (a GPU that stops reporting resolves its alerts then, not 5 minutes later)."""
        newest = self._rings.newest
        assert newest is not None
        step = min(math.floor(now / self.shape.fine_step_s), newest)
        if not self._rings.stamped(step):
            return np.ones(rows.size, np.bool_)  # no snapshot at that step: nothing to judge by
        fresh: npt.NDArray[np.bool_] = self._last_step[rows] >= step
        return fresh

    def _rows_of(
        self, metric: str, matchers: Mapping[str, str] | None
    ) -> tuple[list[Labels], npt.NDArray[np.int64]]:
        self._spec(metric)
        cached = self._by_metric.get(metric)
        if cached is None:
            ids = self._ids[metric]
            cached = (list(ids), np.fromiter(ids.values(), np.int64, len(ids)))
            self._by_metric[metric] = cached
        if not matchers:
            return cached
        chosen = [i for i, key in enumerate(cached[0]) if matches(key, matchers)]
        return [cached[0][i] for i in chosen], cached[1][chosen]

    def fine_points(
        self, series_id: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """A series' fine points, oldest first: their times and values (for charts and checks)."""
        self.key_of(series_id)
        newest = self._rings.newest
        if newest is None:
            return np.zeros(0), np.zeros(0)
        first = newest - self.shape.fine_points + 1
        block, stamped = self._rings.fine_block(first, newest, np.array([series_id]))
        codes = block[:, 0]
        kept = stamped & (codes != self.shape.fine.missing)
        lo, hi = self._lo[series_id], self._hi[series_id]
        times = (np.flatnonzero(kept) + first).astype(np.float64) * self.shape.fine_step_s
        return times, self.shape.fine.decode(codes[kept], lo, hi)

    def coarse_points(self, series_id: int) -> CoarsePoints:
        """A series' coarse points, oldest first (the current bucket included, as it stands)."""
        self.key_of(series_id)
        newest = self._rings.newest
        if newest is None:
            return CoarsePoints(*(np.zeros(0) for _ in range(5)))
        last = newest // self.shape.fine_per_coarse
        first = last - self.shape.coarse_points + 1
        planes, counts = self._rings.coarse_block(first, last, np.array([series_id]))
        mean, highest, lowest = (plane[:, 0] for plane in planes)
        kept = mean != self.shape.coarse.missing
        lo, hi = self._lo[series_id], self._hi[series_id]
        decode = self.shape.coarse.decode
        return CoarsePoints(
            (np.flatnonzero(kept) + first).astype(np.float64) * self.shape.coarse_step_s,
            decode(mean[kept], lo, hi),
            decode(highest[kept], lo, hi),
            decode(lowest[kept], lo, hi),
            counts[kept].astype(np.float64),
        )

    # -- memory and durability ----------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes of every array the store keeps (the chunks and the per-series columns)."""
        columns = self._lo.nbytes + self._top.nbytes + self._hi.nbytes + self._last_step.nbytes
        return self._rings.nbytes() + columns

    def durable(self) -> series_codec.Durable:
        """The store's durable form now, cheap enough to take under a lock: the open chunks
        and per-id arrays copied, the sealed chunks shared (they are never changed in place),
        so the bytes (:meth:`~series_codec.Durable.head`, ``chunk_bytes``) may be made after
        the lock is let go. An incremental save writes the head and the sealed chunks it has
        not written yet (by key and version); ``from_bytes`` restores from them."""
        keys = [(row, key[0], key[1]) for row, key in enumerate(self._keys) if key is not None]
        header = series_codec.Header(
            shape=self.shape,
            metrics=list(self.metrics.values()),
            series=keys,
            used=self._used,
            newest=self._rings.newest,
            clipped=self.clipped,
        )
        used = self._used
        per_id = {
            "last_step": self._last_step[:used].copy(),
            "born_fine": self._rings.born_fine[:used].copy(),
            "born_coarse": self._rings.born_coarse[:used].copy(),
        }
        open_: list[series_codec.ChunkForm] = []
        sealed: dict[str, series_codec.ChunkForm] = {}
        for name, ring in (("fine", self._rings.fine), ("coarse", self._rings.coarse)):
            for chunk in ring:
                ids, planes = chunk.columns()
                if chunk.sealed:
                    form = series_codec.ChunkForm(
                        name, chunk.start, chunk.version, True, ids, planes, chunk.marks
                    )
                    sealed[form.key] = form
                else:
                    open_.append(
                        series_codec.ChunkForm(
                            name,
                            chunk.start,
                            chunk.version,
                            False,
                            ids.copy(),
                            [p[:, : chunk.n].copy() for p in chunk.planes],
                            chunk.marks.copy(),
                        )
                    )
        return series_codec.Durable(header, per_id, open_, sealed)

    def to_bytes(self, compress: bool = False) -> bytes:
        """The whole store in one piece, versioned, to restore with :meth:`from_bytes`
        (``compress``: zlib, worthwhile while the chunks are mostly empty)."""
        return self.durable().whole(compress)

    @classmethod
    def from_bytes(cls, data: bytes, chunks: Mapping[str, bytes] | None = None) -> SeriesStore:
        """A store as :meth:`to_bytes` wrote it, or as a head and its sealed ``chunks`` (by
        key) of :meth:`durable`, or in format 1 (the dense rings of before, converted); a
        clear ``ValueError`` for anything else."""
        version, meta, arrays, packed = series_codec.unpack_piece(data)
        if version == 1:
            old = series_codec.header_of(meta)
            series_codec.check_v1(old, arrays)
            store = cls(old.metrics, old.shape, max(1, old.used))
            store._restore_series(old)
            store._last_step[: old.used] = arrays["last_step"][: old.used]
            store._rings.load_dense(arrays, np.array(sorted(row for row, _, _ in old.series)))
            return store
        header, per_id, forms = series_codec.read(meta, arrays, chunks or {}, packed)
        store = cls(header.metrics, header.shape, max(1, header.used))
        store._restore_series(header)
        store._last_step[: header.used] = per_id["last_step"]
        store._rings.born_fine[: header.used] = per_id["born_fine"]
        store._rings.born_coarse[: header.used] = per_id["born_coarse"]
        for form in forms:
            ring = store._rings.fine if form.ring == "fine" else store._rings.coarse
            ring.chunks.append(
                Chunk(
                    form.start,
                    form.ids.astype(np.int64, copy=False),
                    [_as_codes(p, ring.dtype) for p in form.planes],
                    form.marks.astype(ring.marks_dtype, copy=False),
                    form.sealed,
                    form.version,
                )
            )
        return store

    def _restore_series(self, header: series_codec.Header) -> None:
        """Take up ``header``'s series, newest step and counters (a store being restored)."""
        self._rings.newest = header.newest
        self._used = header.used
        self.clipped = header.clipped
        for row, metric, labels in header.series:
            self._keys[row] = (metric, labels)
            self._ids[metric][labels] = row
            self._set_range(row, self.metrics[metric])
            self._rings.claim(row)
        self._free = [row for row in range(self._used) if self._keys[row] is None]

    # -- internals ----------------------------------------------------------------------------

    def _spec(self, metric: str) -> MetricSpec:
        spec = self.metrics.get(metric)
        if spec is None:
            raise UnknownMetricError(metric, list(self.metrics))
        return spec

    def _set_range(self, row: int, spec: MetricSpec) -> None:
        self._lo[row], self._top[row] = spec.lo, spec.hi
        self._hi[row] = spec.code_top(self.shape.fine.levels)

    def _grow(self, capacity: int) -> None:
        extra = capacity - self._rings.capacity
        self._rings.grow(capacity)
        self._keys.extend([None] * extra)
        self._lo = np.concatenate([self._lo, np.zeros(extra)])
        self._top = np.concatenate([self._top, np.ones(extra)])
        self._hi = np.concatenate([self._hi, np.ones(extra)])
        self._last_step = np.concatenate([self._last_step, np.full(extra, -1, np.int64)])
