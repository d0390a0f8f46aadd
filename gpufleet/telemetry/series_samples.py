"""Raw samples out of a :class:`~gpufleet.telemetry.series.SeriesStore`: a query beside it.

Owns :func:`store_samples`, the store's answer to
:class:`~gpufleet.telemetry.series_query.SampleQuery`: each matching series' points within a
time range, oldest first, from the fine ring where it still holds them (each standing for one
fine step) and from the coarse ring before that (each bucket's mean, standing for one coarse
step). It reads the store through its public methods only (``series``, ``fine_points``,
``coarse_points``), changing nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_layout import Labels
from gpufleet.telemetry.series_query import RawSample


def store_samples(
    store: SeriesStore,
    metric: str,
    start: float,
    end: float,
    matchers: Mapping[str, str] | None = None,
) -> dict[Labels, list[RawSample]]:
    """See the module docstring (UnknownMetricError for a metric the store does not keep)."""
    fine_s, coarse_s = float(store.shape.fine_step_s), float(store.shape.coarse_step_s)
    found: dict[Labels, list[RawSample]] = {}
    for labels, series_id in store.series(metric, matchers).items():
        times, values = store.fine_points(series_id)
        oldest_fine = float(times[0]) if len(times) else end
        out: list[RawSample] = []
        if start < oldest_fine:
            coarse = store.coarse_points(series_id)
            for t, mean in zip(coarse.times.tolist(), coarse.mean.tolist(), strict=True):
                if start <= t < end and t + coarse_s <= oldest_fine:
                    out.append((t, mean, coarse_s))
        out.extend(
            (t, v, fine_s)
            for t, v in zip(times.tolist(), values.tolist(), strict=True)
            if start <= t < end
        )
        if out:
            found[labels] = out
    return found
