"""Cost as counters: what a plane's workloads ran up since it started, for ``/metrics``.

Owns :class:`CostMeter`. Each :meth:`CostMeter.advance` prices the time since the previous one
(``(last, now]``, with each pod's utilisation measured over that span) with
:func:`gpufleet.economics.reports.cost_of_runs` and adds it to running totals per
(namespace, queue, tenant) and split (allocated, used, idle, unmeasured), and the idle
GPU-hours per (namespace, queue). The totals only grow, as Prometheus counters must; a span
nobody priced is never priced twice. It serves nothing itself (the API's metrics collector
reads it at each scrape).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

from gpufleet.economics import PriceList, Window
from gpufleet.economics.reports import cost_of_runs
from gpufleet.service.cost_holdings import pod_runs
from gpufleet.service.costing import mean_utilisation
from gpufleet.service.protocol import Plane
from gpufleet.telemetry.series_query import GroupedSeriesQuery, UnknownMetricError

#: The splits of ``gpufleet_cost_dollars_total``: allocated = used + idle + unmeasured.
SPLITS = ("allocated", "used", "idle", "unmeasured")

Owner = tuple[str, str, str]


class CostMeter:
    """See the module docstring. ``prices`` gives the price list (called when first needed),
    ``series`` the plane's utilisation series now (None: unmeasured)."""

    def __init__(
        self,
        plane: Plane,
        prices: Callable[[], PriceList],
        series: Callable[[], GroupedSeriesQuery | None],
    ) -> None:
        self.plane = plane
        self.prices = prices
        self._series = series
        self._lock = threading.Lock()
        self._last: float | None = None
        self.dollars: dict[tuple[str, str, str, str], float] = defaultdict(float)
        self.idle_gpu_hours: dict[tuple[str, str], float] = defaultdict(float)

    def advance(self) -> None:
        """Price the time since the previous call (the first: since the earliest pod began)."""
        with self._lock:
            plane = self.plane
            with plane.lock:
                now = plane.now()
                runs = pod_runs(plane.records.values(), plane.cluster_nodes(), now)
            start = self._last
            if start is None:
                start = min((r.start for r in runs), default=now)
            self._last = max(now, start)
            if not now > start:
                return
            window = Window(start, now)
            utilisation = None
            series = self._series()
            if series is not None:
                try:
                    utilisation = mean_utilisation(series, window)
                except UnknownMetricError:
                    utilisation = {}
                except RuntimeError:  # the series' server is down: unmeasured this span
                    utilisation = None
            report = cost_of_runs(
                runs, [], self.prices(), window, "namespace", utilisation, cluster_idle=False
            )
            for item in report.runs:
                run, cost = item.run, item.cost
                owner = (run.namespace, run.queue, run.tenant)
                for split, value in zip(
                    SPLITS,
                    (cost.allocated, cost.used, max(cost.idle, 0.0), cost.gpu_unmeasured_cost),
                    strict=True,
                ):
                    self.dollars[(*owner, split)] += value
                self.idle_gpu_hours[(run.namespace, run.queue)] += cost.idle_gpu_hours

    def totals(
        self,
    ) -> tuple[dict[tuple[str, str, str, str], float], dict[tuple[str, str], float]]:
        """Copies of the totals: dollars by (namespace, queue, tenant, split), idle GPU-hours by
        (namespace, queue)."""
        with self._lock:
            return dict(self.dollars), dict(self.idle_gpu_hours)
