"""Reductions over a window of coded points, per series, and across series by label: the
arithmetic of queries, on arrays the store hands over. No store, no clock.

Owns :data:`WindowFn` and :data:`Across` (the function names queries accept),
:func:`reduce_fine` (exact over the fine points of a window), :func:`reduce_coarse` (over the
10-minute rollups) and :func:`aggregate` (sum/avg/max/min/count across series by label).

Over coarse points: ``avg`` weights each bucket's mean by the number of snapshots the store
took in it (exact for a series present at every snapshot, approximate for one with gaps);
``max``/``min`` are exact up to the coarse code's error; ``count`` is the number of snapshots
of the buckets the series has points in; ``last`` is the newest bucket's mean; and
``quantile`` is the quantile of the 10-minute means, an approximation whose error is bounded:
each raw sample lies between its bucket's min and max, so the raw quantile lies between the
same quantile of the buckets' mins and of their maxes (count-weighted), which tighten to the
means for flat series and widen for spiky ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

from gpufleet.telemetry.series_layout import Labels, Quantizer, pick

WindowFn = Literal["avg", "max", "min", "quantile", "last", "count"]
Across = Literal["sum", "avg", "max", "min", "count"]
WINDOW_FNS: tuple[str, ...] = get_args(WindowFn)
ACROSS_FNS: tuple[str, ...] = get_args(Across)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def reduce_fine(
    fn: WindowFn,
    block: npt.NDArray[np.unsignedinteger],
    quantizer: Quantizer,
    lo: FloatArray,
    hi: FloatArray,
    phi: float = 0.5,
) -> tuple[FloatArray, BoolArray]:
    """``fn`` over each column of ``block`` (steps x series, oldest first): the values and
    whether the series had any point (a series without one has no value)."""
    present = block != quantizer.missing
    count = present.sum(axis=0)
    has = count > 0
    if fn == "count":
        return count.astype(np.float64), has
    if fn == "avg":
        # The codes' sum less the missing ones' (each counted as the missing code): no copy.
        absent = block.shape[0] - count
        total = block.sum(axis=0, dtype=np.int64) - absent * np.int64(quantizer.missing)
        return quantizer.decode(total / np.maximum(count, 1), lo, hi), has
    if fn == "max":
        return quantizer.decode(np.where(present, block, 0).max(axis=0, initial=0), lo, hi), has
    if fn == "min":  # the missing code is the largest: it is never the least of a present one
        return quantizer.decode(block.min(axis=0, initial=quantizer.missing), lo, hi), has
    if fn == "last":
        return quantizer.decode(_last(block, present), lo, hi), has
    values = np.where(present, quantizer.decode(block, lo, hi), np.nan)
    return _quantile(values, has, phi), has


def reduce_coarse(
    fn: WindowFn,
    mean: npt.NDArray[np.unsignedinteger],
    highest: npt.NDArray[np.unsignedinteger],
    lowest: npt.NDArray[np.unsignedinteger],
    weights: npt.NDArray[np.integer],
    quantizer: Quantizer,
    lo: FloatArray,
    hi: FloatArray,
    phi: float = 0.5,
) -> tuple[FloatArray, BoolArray]:
    """``fn`` over each column of coarse buckets (buckets x series, oldest first), each
    bucket's mean weighted by ``weights`` (its snapshots); see the module's docstring."""
    present = mean != quantizer.missing
    weight = np.where(present, weights.astype(np.int64)[:, None], 0)
    count = weight.sum(axis=0)
    has = present.any(axis=0)
    if fn == "count":
        return count.astype(np.float64), has
    if fn == "avg":
        total = (np.where(present, mean, 0).astype(np.int64) * weight).sum(axis=0)
        return quantizer.decode(total / np.maximum(count, 1), lo, hi), has
    if fn == "max":
        return quantizer.decode(np.where(present, highest, 0).max(axis=0, initial=0), lo, hi), has
    if fn == "min":
        least = np.where(present, lowest, quantizer.missing).min(axis=0, initial=quantizer.missing)
        return quantizer.decode(least, lo, hi), has
    if fn == "last":
        return quantizer.decode(_last(mean, present), lo, hi), has
    values = np.where(present, quantizer.decode(mean, lo, hi), np.nan)
    return _quantile(values, has, phi), has


#: The window functions a fold of the points answers (``reduce_folded``): no codes needed.
FOLDABLE: tuple[str, ...] = ("avg", "max", "min", "count")


def reduce_folded(
    fn: WindowFn,
    present: npt.NDArray[np.int64],
    weight: npt.NDArray[np.int64],
    total: npt.NDArray[np.int64],
    highest: npt.NDArray[np.int64],
    lowest: npt.NDArray[np.int64],
    quantizer: Quantizer,
    lo: FloatArray,
    hi: FloatArray,
) -> tuple[FloatArray, BoolArray]:
    """``fn`` (one of :data:`FOLDABLE`) of each series from its points folded: how many are
    present, their weight (1 a fine point, its snapshots a coarse one), the weighted sum of
    their (mean) codes, the largest (max) code and the least (min) code; the same values as
    :func:`reduce_fine` and :func:`reduce_coarse` give from the points themselves."""
    has = present > 0
    if fn == "count":
        return weight.astype(np.float64), has
    if fn == "avg":
        return quantizer.decode(total / np.maximum(weight, 1), lo, hi), has
    if fn == "max":
        return quantizer.decode(highest.astype(np.float64), lo, hi), has
    if fn == "min":
        return quantizer.decode(lowest.astype(np.float64), lo, hi), has
    raise ValueError(f"reduce_folded: {fn!r} is not one of {list(FOLDABLE)}")


def aggregate(
    across: Across, labels: Sequence[Labels], values: FloatArray, by: Sequence[str]
) -> dict[Labels, float]:
    """``across`` of ``values`` over the series whose ``by`` labels are equal, keyed by those
    labels (a series lacking one is grouped with those lacking it, as Prometheus does)."""
    keys = [pick(series, by) for series in labels]
    groups: dict[Labels, int] = {}
    index = np.fromiter((groups.setdefault(k, len(groups)) for k in keys), np.int64, len(keys))
    size = len(groups)
    if across in ("sum", "avg", "count"):
        sums = np.bincount(index, weights=values, minlength=size)
        counts = np.bincount(index, minlength=size).astype(np.float64)
        result = {"sum": sums, "count": counts}.get(across, sums / np.maximum(counts, 1))
    elif across == "max":
        result = np.full(size, -np.inf)
        np.maximum.at(result, index, values)
    else:
        result = np.full(size, np.inf)
        np.minimum.at(result, index, values)
    return {key: float(result[i]) for key, i in groups.items()}


def _last(
    block: npt.NDArray[np.unsignedinteger], present: BoolArray
) -> npt.NDArray[np.unsignedinteger]:
    if block.shape[0] == 0:
        return np.zeros(block.shape[1], block.dtype)
    newest = block.shape[0] - 1 - np.argmax(present[::-1], axis=0)
    chosen: npt.NDArray[np.unsignedinteger] = block[newest, np.arange(block.shape[1])]
    return chosen


def _quantile(values: FloatArray, has: BoolArray, phi: float) -> FloatArray:
    result = np.full(values.shape[1], np.nan)
    if has.any():
        # Linear interpolation between closest ranks, as Prometheus' quantile_over_time.
        result[has] = np.nanquantile(values[:, has], phi, axis=0)
    return result


#: A condition on a query's values: (comparison, threshold); comparisons as PromQL's.
Where = tuple[str, float]
COMPARISONS = (">", ">=", "<", "<=", "==", "!=")


def holding(values: FloatArray, where: Where) -> BoolArray:
    """Which ``values`` satisfy ``where`` (NaN never does, as in PromQL)."""
    op, threshold = where
    if op not in _OPERATORS:
        raise ValueError(f"query: comparison {op!r} is not one of {list(COMPARISONS)}")
    kept: BoolArray = _OPERATORS[op](values, threshold) & ~np.isnan(values)
    return kept


_OPERATORS: dict[str, Callable[[FloatArray, float], BoolArray]] = {
    ">": np.greater,
    ">=": np.greater_equal,
    "<": np.less,
    "<=": np.less_equal,
    "==": np.equal,
    "!=": np.not_equal,
}


def filtered(found: Mapping[Labels, float], where: Where) -> dict[Labels, float]:
    """The entries of ``found`` whose value satisfies ``where``."""
    if not found:
        return {}
    values = np.fromiter(found.values(), np.float64, len(found))
    keep = holding(values, where)
    return {key: value for (key, value), ok in zip(found.items(), keep, strict=True) if ok}
