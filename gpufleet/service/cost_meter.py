"""Cost as counters: what a plane's workloads ran up since it started, for ``/metrics``.

Owns :class:`CostMeter`. Each :meth:`CostMeter.advance` prices the time from where the previous
one stopped up to the *settled* time (the plane's ``now`` less :func:`settle_s`: by then every
utilisation sample that stands for that time has been written) with the report's own
definition (:func:`gpufleet.service.costing.measure`, :func:`gpufleet.economics.reports.
cost_of_runs`: each sample stands for the time until the next, for at most a step; held time no
sample stands for is unmeasured) and adds it to running totals per (namespace, queue, tenant)
and split (allocated, used, idle, unmeasured), and the idle GPU-hours per (namespace, queue).
That definition adds up over time, so the counters' increases over any span they have passed
equal ``gpufleet cost`` over that span, split for split. The totals only grow, as Prometheus
counters must; no span is priced twice, and the settled time is served
(:attr:`CostMeter.priced_until`) so a reader knows which window the counters cover. It serves
nothing itself (the API's metrics collector reads it at each scrape).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

from gpufleet.economics import PriceList, Window
from gpufleet.economics.reports import cost_of_runs
from gpufleet.economics.runs import PodRun
from gpufleet.service.cost_holdings import pod_runs
from gpufleet.service.costing import measure
from gpufleet.service.observatory import STEP_S
from gpufleet.service.protocol import Plane
from gpufleet.telemetry.series_query import GroupedSeriesQuery

#: The splits of ``gpufleet_cost_dollars_total``: allocated = used + idle + unmeasured.
SPLITS = ("allocated", "used", "idle", "unmeasured")

Owner = tuple[str, str, str]


def settle_s(step_s: float) -> float:
    """How far behind the plane's clock the counters stay: two of the observatory's steps (a
    sample is stamped with the start of its step and written within it; one more step for a
    round that runs late)."""
    return 2 * step_s


class CostMeter:
    """See the module docstring. ``prices`` gives the price list (called when first needed),
    ``series`` the plane's utilisation series now (None: unmeasured), ``step_s`` its
    observatory's step."""

    def __init__(
        self,
        plane: Plane,
        prices: Callable[[], PriceList],
        series: Callable[[], GroupedSeriesQuery | None],
        step_s: Callable[[], float] = lambda: STEP_S,
    ) -> None:
        self.plane = plane
        self.prices = prices
        self._series = series
        self._step_s = step_s
        self._lock = threading.Lock()
        #: The end of the time priced so far (None: nothing yet).
        self.priced_until: float | None = None
        self.dollars: dict[tuple[str, str, str, str], float] = defaultdict(float)
        self.idle_gpu_hours: dict[tuple[str, str], float] = defaultdict(float)

    def advance(self) -> None:
        """Price the settled time since the previous call (the first: since the earliest pod
        began)."""
        with self._lock:
            plane = self.plane
            with plane.lock:
                now = plane.now()
                runs = pod_runs(plane.records.values(), plane.cluster_nodes(), now)
            step = self._step_s()
            settled = now - settle_s(step)
            start = self.priced_until
            if start is None:
                start = min((r.start for r in runs), default=settled)
                self.priced_until = min(start, settled)
            if not settled > start:
                return
            self.priced_until = settled
            self.add(runs, Window(start, settled), step)

    def add(self, runs: list[PodRun], window: Window, step_s: float) -> None:
        """Add what ``runs`` cost within ``window`` to the totals (the caller holds the lock)."""
        measured = measure(self._series(), window, step_s)
        report = cost_of_runs(
            runs, [], self.prices(), window, "namespace", measured.utilisation,
            cluster_idle=False, spans=measured.spans,
        )  # fmt: skip
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
