"""Cost per workload, namespace, queue, tenant, label or annotation of a control plane's book.

Owns :func:`cost_report`: the pods of a plane's records over a window (what they held, from
:mod:`gpufleet.service.cost_holdings`) and their GPU utilisation from the plane's series
(``gpufleet_workload_gpu_util``'s samples, each standing for the time until the next, for at
most a step: :func:`utilisation_spans`, :func:`measure`), given to
:func:`gpufleet.economics.reports.cost_of_runs`, which prices them, splits them three ways
(allocated, used, idle, as OpenCost splits GPU cost; held time no sample stands for is
unmeasured, never 0 %: :mod:`gpufleet.economics.coverage`), groups them and adds the GPU time
of the cluster's nodes nobody held (``__idle__``). A series that cannot be read leaves every
pod unmeasured, with a note. Nothing here reads a clock or a file: the caller gives ``now`` and
the price list (``gpufleet.io.fleet.prices``). The ``/metrics`` counters
(:mod:`gpufleet.service.cost_meter`) split by the same :func:`measure`, so they add up to this
report over any window they have passed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpufleet.economics import PriceList, Window
from gpufleet.economics.coverage import Sample, Span, sample_spans
from gpufleet.economics.reports import CostReport, cost_of_runs, parse_by
from gpufleet.service.cost_holdings import pod_runs
from gpufleet.service.observatory import STEP_S
from gpufleet.service.protocol import Plane
from gpufleet.service.records import WorkloadRecord
from gpufleet.telemetry.series_query import GroupedSeriesQuery, SampleQuery, UnknownMetricError

#: The per-pod utilisation series (percent, dcgm-exporter's unit).
UTIL_METRIC = "gpufleet_workload_gpu_util"
#: How far before a window a sample may lie and still stand for part of it: the longest a
#: source's sample stands (the store's coarse bucket, 10 min; Prometheus' lookback, 5 min).
REACH_S = 600.0
#: How many of the observatory's steps a sample stands for at most: its own and the next, as
#: a round runs a step after the previous one ends and so now and then stamps a step later.
STEPS_STOOD = 2


def mean_utilisation(series: GroupedSeriesQuery, window: Window) -> dict[tuple[str, str], float]:
    """Each pod's mean GPU utilisation (0 to 1) over ``window`` from ``series``, by
    (namespace, pod); pods with no samples in it are absent. For a series that keeps no raw
    samples only (:func:`utilisation_spans` is the definition the report and the counters
    share)."""
    found = series.query(
        UTIL_METRIC, "avg", max(window.end - window.start, 1e-9), window.end,
        by=("namespace", "pod"), across="avg",
    )  # fmt: skip
    out = {}
    for labels, value in found.items():
        named = dict(labels)
        out[(named.get("namespace", ""), named.get("pod", ""))] = min(max(value / 100, 0.0), 1.0)
    return out


def utilisation_spans(
    series: SampleQuery, window: Window, step_s: float = STEP_S
) -> dict[tuple[str, str], tuple[Span, ...]]:
    """The time each pod's utilisation samples stand for near ``window``, by (namespace, pod):
    a sample stands until the next, for at most its source's step or :data:`STEPS_STOOD`
    of ``step_s`` (the observatory's), whichever is longer
    (:func:`gpufleet.economics.coverage.sample_spans`)."""
    stood = STEPS_STOOD * step_s
    reach = max(REACH_S, stood)
    found = series.samples(UTIL_METRIC, window.start - reach, max(window.end, window.start + 1e-9))
    by_pod: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for labels, points in found.items():
        named = dict(labels)
        pod = (named.get("namespace", ""), named.get("pod", ""))
        by_pod[pod].extend(Sample(t, v / 100, max(span, stood)) for t, v, span in points)
    return {pod: sample_spans(samples) for pod, samples in by_pod.items()}


@dataclass(frozen=True, slots=True)
class Measured:
    """What a window's utilisation says, as :func:`~gpufleet.economics.reports.cost_of_runs`
    takes it: ``spans`` (the shared, additive definition) or, from a series without raw
    samples, ``utilisation`` (each pod's mean); both None: nothing could be read."""

    spans: dict[tuple[str, str], tuple[Span, ...]] | None = None
    utilisation: dict[tuple[str, str], float] | None = None
    note: str | None = None


def measure(series: GroupedSeriesQuery | None, window: Window, step_s: float = STEP_S) -> Measured:
    """The utilisation of ``window`` from ``series`` (None: unmeasured); a series that cannot
    be read leaves everything unmeasured, with a note saying why."""
    if series is None:
        return Measured()
    try:
        if isinstance(series, SampleQuery):
            return Measured(spans=utilisation_spans(series, window, step_s))
        if not window.end > window.start:
            return Measured(utilisation={})
        return Measured(utilisation=mean_utilisation(series, window))
    except UnknownMetricError:
        return Measured(spans={})
    except RuntimeError as error:  # the series' server is down (SeriesUnavailableError)
        return Measured(note=f"utilisation unavailable: {error}")


def cost_report(
    plane: Plane,
    window_s: float,
    by: str | Sequence[str],
    now: float,
    prices: PriceList,
    *,
    series: GroupedSeriesQuery | None = None,
    visible: Callable[[WorkloadRecord], bool] | None = None,
    step_s: float = STEP_S,
) -> CostReport:
    """The cost of ``plane``'s workloads over the ``window_s`` seconds before ``now``
    (clipped at the plane's ``book_start``: an embedded plane's clock starts at 0, a local
    server's book at its first start: its GPUs were nobody's idle cost before), grouped ``by``;
    ``visible`` keeps the records a caller may see (and leaves the cluster's idle out, which
    is everyone's); ``series``: the plane's utilisation series (None: unmeasured), ``step_s``
    its observatory's step (how long a sample stands at least)."""
    if not window_s > 0:
        raise ValueError(f"window: must be more than 0 seconds, got {window_s}")
    parse_by(by)
    window = Window(min(max(now - window_s, plane.book_start), now), now)
    with plane.lock:
        records = [r for r in plane.records.values() if visible is None or visible(r)]
        runs = pod_runs(records, plane.cluster_nodes(), now)
        nodes = list(plane.cluster_nodes())
    measured = measure(series, window, step_s)
    report = cost_of_runs(
        runs, nodes, prices, window, by, measured.utilisation,
        cluster_idle=visible is None, spans=measured.spans,
    )  # fmt: skip
    if measured.note is None:
        return report
    return replace(report, notes=(*report.notes, measured.note))
