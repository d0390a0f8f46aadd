"""What a caller of window queries needs and nothing else: :class:`GroupedSeriesQuery`, the
rule engine's ``SeriesQuery`` (``gpufleet.telemetry.rules``) plus aggregation across series by
label (for cost allocation and the dashboard), implemented by
:class:`gpufleet.telemetry.series.SeriesStore` in embedded mode and by a Prometheus reader
on Kubernetes (``gpufleet.backends.prometheus``); and the errors: :class:`UnknownMetricError`
names a metric nobody keeps, :class:`SeriesUnavailableError` says the series cannot be read now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from gpufleet.telemetry.series_layout import Labels
from gpufleet.telemetry.series_window import Where


class UnknownMetricError(KeyError):
    """A query named a metric the store does not keep."""

    def __init__(self, metric: str, known: Sequence[str]) -> None:
        super().__init__(metric)
        self.metric = metric
        self.known = tuple(known)

    def __str__(self) -> str:
        return f"unknown metric {self.metric!r}; known: {', '.join(self.known) or 'none'}"


class SeriesUnavailableError(RuntimeError):
    """The series could not be read now (their server is down or answered nonsense); the
    message says where and what failed. A query may succeed later."""


class GroupedSeriesQuery(Protocol):
    """Window queries, PromQL's ``<fn>_over_time(metric{matchers}[window])`` evaluated at
    ``now`` (seconds since the epoch; no clock is read), optionally aggregated as
    ``<across> by (<by>) (...)``.

    ``fn``: ``avg``, ``max``, ``min``, ``quantile`` (``quantile`` in 0..1), ``last``,
    ``count``; ``across``: ``sum``, ``avg``, ``max``, ``min``, ``count``.
    ``matchers``: label equalities a series must have (``""`` matches an absent label).
    The window is ``(now - window_s, now]``. Returns the value of each series that has points
    in the window, keyed by its labels (sorted (name, value) pairs, the metric name left out);
    with ``by``, one value per group keyed by the ``by`` labels (``by=()``: one group, key
    ``()``). Raises :class:`UnknownMetricError` for a metric not kept, ``ValueError`` for a
    bad ``fn``, ``across``, ``quantile`` or a window that is not positive, and (a remote
    source) :class:`SeriesUnavailableError` when it cannot be read.
    """

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
    ) -> dict[Labels, float]: ...


@runtime_checkable
class FilteringQuery(Protocol):
    """A source that takes a query's condition (``where``) and returns only what satisfies it:
    the rule engine pushes its comparison down to it (fewer series to build and to send)."""

    def query_where(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str],
        quantile: float | None,
        where: Where,
    ) -> Mapping[Labels, float]: ...


#: One raw sample: its time, its value, and for how long after it the value stands at most
#: (the source's step: the store's fine step or coarse bucket, Prometheus' staleness).
RawSample = tuple[float, float, float]


@runtime_checkable
class SampleQuery(Protocol):
    """Raw samples rather than a window's reduction: the samples of each series of ``metric``
    that match ``matchers``, timed within ``[start, end)``, oldest first, keyed as
    :class:`GroupedSeriesQuery` keys them (series without samples there are absent). Cost
    allocation weighs each sample by the time it stands for
    (:mod:`gpufleet.economics.coverage`). Raises as :meth:`GroupedSeriesQuery.query` does."""

    def samples(
        self,
        metric: str,
        start: float,
        end: float,
        matchers: Mapping[str, str] | None = None,
    ) -> dict[Labels, list[RawSample]]: ...
