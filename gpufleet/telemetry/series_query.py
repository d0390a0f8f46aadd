"""What a caller of window queries needs and nothing else: the :class:`SeriesQuery` protocol
the rule engine (and later the cost allocation and the dashboard) call, implemented by
:class:`gpufleet.telemetry.series.SeriesStore` in embedded mode and by a Prometheus reader on
Kubernetes, and :class:`UnknownMetricError`, the error naming a metric nobody keeps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from gpufleet.telemetry.series_layout import Labels
from gpufleet.telemetry.series_window import Across, WindowFn


class UnknownMetricError(KeyError):
    """A query named a metric the store does not keep."""

    def __init__(self, metric: str, known: Sequence[str]) -> None:
        super().__init__(metric)
        self.metric = metric
        self.known = tuple(known)

    def __str__(self) -> str:
        return f"unknown metric {self.metric!r}; known: {', '.join(self.known) or 'none'}"


class SeriesQuery(Protocol):
    """Window queries, PromQL's ``<fn>_over_time(metric{matchers}[window])`` evaluated at
    ``now`` (seconds since the epoch; no clock is read), optionally aggregated as
    ``<across> by (<by>) (...)``.

    ``fn``: ``avg``, ``max``, ``min``, ``quantile`` (``phi`` in 0..1), ``last``, ``count``.
    ``matchers``: label equalities a series must have (``""`` matches an absent label).
    The window is ``(now - window_s, now]``. Returns the value of each series that has points
    in the window, keyed by its labels (sorted (name, value) pairs, the metric name left out);
    with ``by``, one value per group keyed by the ``by`` labels (``by=()``: one group, key
    ``()``). Raises :class:`UnknownMetricError` for a metric not kept and ``ValueError`` for a bad
    ``fn``, ``across``, ``phi`` or a window that is not positive.
    """

    def query(
        self,
        metric: str,
        fn: WindowFn,
        window_s: float,
        now: float,
        matchers: Mapping[str, str] | None = None,
        *,
        phi: float = 0.5,
        by: Sequence[str] | None = None,
        across: Across = "sum",
    ) -> dict[Labels, float]: ...
