"""The two rings of coded points behind the store, time-major (one row of the array per step,
one column per series) so that a snapshot writes one contiguous row and a window reads a
contiguous block.

Owns the arrays and how they move: a fine ring of codes per step with the step each slot holds
(shared by all series, -1: none), and a coarse ring of mean, max and min codes per bucket with
the bucket each slot holds and how many fine steps with a snapshot it rolled up (shared too).
Writing a step clears the slots it passes over, so a slot is either this round's or empty; the
coarse point of the step's bucket is recomputed from the fine points it covers (at most
``coarse_step_s / fine_step_s`` of them), so it is always current and a late rewrite of a step
stays consistent. Series identity, labels, ranges and queries live in ``series.py``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpufleet.telemetry.series_layout import StoreShape

IntArray = npt.NDArray[np.int64]
CodeArray = npt.NDArray[np.unsignedinteger]


class Rings:
    """Fine and coarse rings for ``capacity`` series columns."""

    def __init__(self, shape: StoreShape, capacity: int) -> None:
        self.shape = shape
        self.fine_missing = shape.fine.missing
        self.coarse_missing = shape.coarse.missing
        self.fine = np.full((shape.fine_points, capacity), self.fine_missing, shape.fine.dtype)
        self.fine_step = np.full(shape.fine_points, -1, np.int64)
        coarse = (shape.coarse_points, capacity)
        self.coarse_mean = np.full(coarse, self.coarse_missing, shape.coarse.dtype)
        self.coarse_max = np.full(coarse, self.coarse_missing, shape.coarse.dtype)
        self.coarse_min = np.full(coarse, self.coarse_missing, shape.coarse.dtype)
        self.coarse_bucket = np.full(shape.coarse_points, -1, np.int64)
        self.coarse_count = np.zeros(shape.coarse_points, np.uint16)
        #: The newest fine step written (None: nothing yet).
        self.newest: int | None = None

    @property
    def capacity(self) -> int:
        return int(self.fine.shape[1])

    def arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """Every array by name (what the codec writes and reads back)."""
        return {
            "fine": self.fine,
            "fine_step": self.fine_step,
            "coarse_mean": self.coarse_mean,
            "coarse_max": self.coarse_max,
            "coarse_min": self.coarse_min,
            "coarse_bucket": self.coarse_bucket,
            "coarse_count": self.coarse_count,
        }

    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays().values())

    def grow(self, capacity: int) -> None:
        """Room for ``capacity`` series columns, new ones empty."""
        extra = capacity - self.capacity
        if extra <= 0:
            return
        self.fine = _widen(self.fine, extra, self.fine_missing)
        self.coarse_mean = _widen(self.coarse_mean, extra, self.coarse_missing)
        self.coarse_max = _widen(self.coarse_max, extra, self.coarse_missing)
        self.coarse_min = _widen(self.coarse_min, extra, self.coarse_missing)

    def clear_columns(self, columns: IntArray) -> None:
        """Forget every point of these series (a dropped series' column, before reuse)."""
        self.fine[:, columns] = self.fine_missing
        self.coarse_mean[:, columns] = self.coarse_missing
        self.coarse_max[:, columns] = self.coarse_missing
        self.coarse_min[:, columns] = self.coarse_missing

    def write(self, step: int, columns: IntArray, codes: CodeArray) -> None:
        """Fine codes of ``columns`` at fine step ``step`` (not older than the newest), and
        their coarse point rolled up again."""
        if self.newest is not None and step < self.newest:
            raise ValueError(f"fine step {step} is older than the newest written, {self.newest}")
        self._advance(step)
        self.fine[step % self.shape.fine_points, columns] = codes
        self._roll_up(step // self.shape.fine_per_coarse, columns)

    def _advance(self, step: int) -> None:
        fine_points, coarse_points = self.shape.fine_points, self.shape.coarse_points
        per = self.shape.fine_per_coarse
        if self.newest == step:
            return
        first = step - fine_points + 1 if self.newest is None else self.newest + 1
        passed = np.arange(max(first, step - fine_points + 1), step + 1)
        self.fine[passed % fine_points] = self.fine_missing
        self.fine_step[passed % fine_points] = -1
        self.fine_step[step % fine_points] = step
        bucket = step // per
        first_bucket = bucket - coarse_points + 1 if self.newest is None else self.newest // per + 1
        buckets = np.arange(max(first_bucket, bucket - coarse_points + 1), bucket + 1)
        slots = buckets % coarse_points
        for ring in (self.coarse_mean, self.coarse_max, self.coarse_min):
            ring[slots] = self.coarse_missing
        self.coarse_bucket[slots] = buckets
        self.coarse_count[slots] = 0
        self.newest = step

    def _roll_up(self, bucket: int, columns: IntArray) -> None:
        per = self.shape.fine_per_coarse
        steps = np.arange(bucket * per, bucket * per + per)
        slots = steps % self.shape.fine_points
        slots = slots[self.fine_step[slots] == steps]
        block = self.fine[np.ix_(slots, columns)]
        present = block != self.fine_missing
        count = present.sum(axis=0)
        total = np.where(present, block, 0).sum(axis=0, dtype=np.int64)
        highest = np.where(present, block, 0).max(axis=0)
        lowest = np.where(present, block, self.fine_missing).min(axis=0)
        ratio = self.shape.coarse.levels / self.shape.fine.levels
        mean = total / np.maximum(count, 1)
        empty = count == 0
        coarse_slot = bucket % self.shape.coarse_points
        for ring, codes in (
            (self.coarse_mean, mean),
            (self.coarse_max, highest),
            (self.coarse_min, lowest),
        ):
            coded = np.rint(np.asarray(codes, np.float64) * ratio).astype(ring.dtype)
            coded[empty] = self.coarse_missing
            ring[coarse_slot, columns] = coded
        self.coarse_count[coarse_slot] = len(slots)


def _widen(ring: CodeArray, extra: int, missing: int) -> CodeArray:
    return np.concatenate([ring, np.full((ring.shape[0], extra), missing, ring.dtype)], axis=1)
