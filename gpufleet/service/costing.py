"""Cost per workload, namespace, queue, tenant, label or annotation of a control plane's book.

Owns :func:`cost_report`: the pods of a plane's records over a window (what they held, from
:mod:`gpufleet.service.cost_holdings`) and their mean GPU utilisation over it from the plane's
series (``gpufleet_workload_gpu_util`` averaged per pod: :func:`mean_utilisation`), given to
:func:`gpufleet.economics.reports.cost_of_runs`, which prices them, splits them three ways
(allocated, used, idle, as OpenCost splits GPU cost; a pod nobody measured is unmeasured,
never 0 %), groups them and adds the GPU time of the cluster's nodes nobody held
(``__idle__``). A series that cannot be read leaves every pod unmeasured, with a note. Nothing
here reads a clock or a file: the caller gives ``now`` and the price list
(``gpufleet.io.prices``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from gpufleet.economics import PriceList, Window
from gpufleet.economics.reports import CostReport, cost_of_runs, parse_by
from gpufleet.service.cost_holdings import pod_runs
from gpufleet.service.protocol import Plane
from gpufleet.service.records import WorkloadRecord
from gpufleet.telemetry.series_query import GroupedSeriesQuery, UnknownMetricError

#: The per-pod utilisation series (percent, dcgm-exporter's unit).
UTIL_METRIC = "gpufleet_workload_gpu_util"


def mean_utilisation(series: GroupedSeriesQuery, window: Window) -> dict[tuple[str, str], float]:
    """Each pod's mean GPU utilisation (0 to 1) over ``window`` from ``series``, by
    (namespace, pod); pods with no samples in it are absent."""
    found = series.query(
        UTIL_METRIC, "avg", max(window.end - window.start, 1e-9), window.end,
        by=("namespace", "pod"), across="avg",
    )  # fmt: skip
    out = {}
    for labels, value in found.items():
        named = dict(labels)
        out[(named.get("namespace", ""), named.get("pod", ""))] = min(max(value / 100, 0.0), 1.0)
    return out


def cost_report(
    plane: Plane,
    window_s: float,
    by: str | Sequence[str],
    now: float,
    prices: PriceList,
    *,
    series: GroupedSeriesQuery | None = None,
    visible: Callable[[WorkloadRecord], bool] | None = None,
) -> CostReport:
    """The cost of ``plane``'s workloads over the ``window_s`` seconds before ``now``
    (clipped at the plane's ``book_start``: an embedded plane's clock starts at 0, a local
    server's book at its first start: its GPUs were nobody's idle cost before), grouped ``by``;
    ``visible`` keeps the records a caller may see (and leaves the cluster's idle out, which
    is everyone's); ``series``: the plane's utilisation series (None: unmeasured)."""
    if not window_s > 0:
        raise ValueError(f"window: must be more than 0 seconds, got {window_s}")
    parse_by(by)
    window = Window(min(max(now - window_s, plane.book_start), now), now)
    with plane.lock:
        records = [r for r in plane.records.values() if visible is None or visible(r)]
        runs = pod_runs(records, plane.cluster_nodes(), now)
        nodes = list(plane.cluster_nodes())
    utilisation: dict[tuple[str, str], float] | None = None
    notes: list[str] = []
    if series is not None and window.end > window.start:
        try:
            utilisation = mean_utilisation(series, window)
        except UnknownMetricError:
            utilisation = {}
        except RuntimeError as error:  # the series' server is down (SeriesUnavailableError)
            notes.append(f"utilisation unavailable: {error}")
    report = cost_of_runs(
        runs, nodes, prices, window, by, utilisation, cluster_idle=visible is None
    )
    return replace(report, notes=report.notes + tuple(notes)) if notes else report
