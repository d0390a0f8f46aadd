"""Builders of small series stores for tests: a shape whose rings wrap within a few dozen
appends, and a store of one metric filled from a matrix of raw samples."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_layout import MetricSpec, StoreShape

#: 10 minutes of 15 s fine steps; 20 coarse buckets of 1 minute (4 fine steps each).
SMALL_SHAPE = StoreShape(fine_step_s=15, fine_points=40, coarse_step_s=60, coarse_points=20)
UTIL = MetricSpec("util", 0.0, 100.0, "%")


def filled_store(
    samples: npt.ArrayLike,
    *,
    start_step: int = 0,
    shape: StoreShape = SMALL_SHAPE,
    metric: MetricSpec = UTIL,
    labels: Sequence[dict[str, str]] | None = None,
) -> tuple[SeriesStore, npt.NDArray[np.int64]]:
    """A store with ``samples[t, s]`` (NaN: none) appended at fine step ``start_step + t`` for
    series ``s`` (labelled ``gpu=<s>`` unless ``labels`` says), and the series' ids."""
    raw = np.asarray(samples, dtype=np.float64)
    store = SeriesStore([metric], shape)
    names = labels or [{"gpu": str(s)} for s in range(raw.shape[1])]
    ids = store.add_many(metric.name, names)
    for t, row in enumerate(raw):
        store.append((start_step + t) * shape.fine_step_s, ids, row)
    return store, ids
