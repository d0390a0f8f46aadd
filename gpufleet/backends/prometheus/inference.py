"""An inference workload's metrics read from Prometheus, as the replica autoscaler reads them.

Owns :class:`ServingPods` (which pods serve one workload now, and which of them are ready),
the PromQL of each metric over those pods (:func:`metric_query`) and
:class:`PrometheusInferenceMetrics`, which sends one instant query per metric and turns the
answer into :class:`~gpufleet.model.autoscaling.MetricReading`: each ready pod's own value, and
the workload's natural figure (:mod:`gpufleet.model.autoscaling` says which).

A workload's series are those of its namespace whose ``pod`` is one of its pods (written as
prometheus-adapter writes a pod selector, ``pod=~"a|b|c"``), and those that name the workload
itself, ``deployment="chat"`` (``statefulset``, ``replicaset``: the kind in lowercase, as
kube-state-metrics names its labels): a router's or gateway's queue, which is all there is while
the workload has no replica. The two are joined with ``or``, so a series that carries both
labels counts once. The queries:

* queue depth: ``sum by (pod) (gpufleet_inference_queue_depth{...} or ...)``; the figure is the
  sum of every series (the router's included), a replica's value its pod's;
* requests per second: ``sum by (pod)`` of the gauge ``gpufleet_inference_requests_per_second``,
  ``or`` (for the pods that export no gauge) of ``rate(gpufleet_inference_requests_total[1m])``;
* p95 latency: ``histogram_quantile(0.95, sum by (le) (rate(
  gpufleet_inference_latency_seconds_bucket{...}[2m])))``, the workload's only (a quantile is
  not made of the pods' quantiles); no request in the window (``NaN``) is no value;
* GPU utilisation: ``avg by (pod) (DCGM_FI_DEV_GPU_UTIL{...})``, each pod's mean over the GPUs
  it holds (``gpufleet_workload_gpu_util``), for the ready pods; no figure of its own.

A metric without a single series has no value (not 0): the autoscaler then holds the count, as
the HorizontalPodAutoscaler does when a metric is missing. A pod that is not ready gives no
replica value (a replica loading its model says nothing about serving). Prometheus being down
raises :class:`~gpufleet.backends.prometheus.series.PrometheusUnavailableError`; nothing is
cached. It decides nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from gpufleet.backends.prometheus.promql import duration
from gpufleet.backends.prometheus.series import PrometheusSeries
from gpufleet.model.autoscaling import InferenceMetric, MetricReading
from gpufleet.telemetry.series_layout import Labels

QUEUE_DEPTH = InferenceMetric.QUEUE_DEPTH.value
REQUESTS_PER_SECOND = InferenceMetric.REQUESTS_PER_SECOND.value
REQUESTS_TOTAL = "gpufleet_inference_requests_total"
LATENCY_BUCKETS = f"{InferenceMetric.LATENCY_P95.value}_bucket"
GPU_UTIL = InferenceMetric.GPU_UTILIZATION.value
#: The windows of the rates, in seconds: four 15-second scrapes for requests, eight for latency
#: (a p95 needs enough requests to be one).
RATE_WINDOW_S = 60.0
LATENCY_WINDOW_S = 120.0
LATENCY_QUANTILE = 0.95
#: The label that names a workload of each kind on its series (kube-state-metrics' names).
WORKLOAD_LABELS = {
    "Deployment": "deployment",
    "StatefulSet": "statefulset",
    "ReplicaSet": "replicaset",
}
_REGEX_SPECIAL = frozenset("\\.^$|?*+()[]{}")


@dataclass(frozen=True, slots=True)
class ServingPods:
    """The pods of one workload (``kind``/``name`` in ``namespace``) now: ``pods`` every one
    not finished or being deleted, ``ready`` those of them whose Ready condition is true."""

    namespace: str
    kind: str
    name: str
    pods: tuple[str, ...] = ()
    ready: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.kind not in WORKLOAD_LABELS:
            raise ValueError(f"{self.kind} is not a kind whose replicas are scaled")
        if not self.ready <= set(self.pods):
            raise ValueError(f"ready pods {sorted(self.ready - set(self.pods))} are not its pods")


def promql_string(value: str) -> str:
    """A PromQL string literal of ``value``."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _alternation(names: Collection[str]) -> str:
    """An RE2 alternation that matches exactly ``names`` (Prometheus anchors a regex)."""
    return "|".join(
        "".join(f"\\{c}" if c in _REGEX_SPECIAL else c for c in name) for name in sorted(names)
    )


def series_selectors(serving: ServingPods) -> list[str]:
    """The label matchers of the workload's series: its pods', then those naming it."""
    namespace = f"namespace={promql_string(serving.namespace)}"
    found = []
    if serving.pods:
        found.append(f"{namespace}, pod=~{promql_string(_alternation(serving.pods))}")
    label = WORKLOAD_LABELS[serving.kind]
    found.append(f"{namespace}, {label}={promql_string(serving.name)}")
    return found


def _union(serving: ServingPods, series: Callable[[str], str]) -> str:
    return " or ".join(series(matchers) for matchers in series_selectors(serving))


def metric_query(
    metric: InferenceMetric,
    serving: ServingPods,
    rate_window_s: float = RATE_WINDOW_S,
    latency_window_s: float = LATENCY_WINDOW_S,
) -> str:
    """The PromQL that reads ``metric`` of ``serving`` (see the module docstring)."""
    if metric is InferenceMetric.QUEUE_DEPTH:
        return f"sum by (pod) ({_union(serving, lambda m: f'{QUEUE_DEPTH}{{{m}}}')})"
    if metric is InferenceMetric.REQUESTS_PER_SECOND:
        gauge = _union(serving, lambda m: f"{REQUESTS_PER_SECOND}{{{m}}}")
        window = duration(rate_window_s)
        rate = _union(serving, lambda m: f"rate({REQUESTS_TOTAL}{{{m}}}[{window}])")
        return f"sum by (pod) ({gauge}) or sum by (pod) ({rate})"
    if metric is InferenceMetric.LATENCY_P95:
        window = duration(latency_window_s)
        rates = _union(serving, lambda m: f"rate({LATENCY_BUCKETS}{{{m}}}[{window}])")
        return f"histogram_quantile({LATENCY_QUANTILE}, sum by (le) ({rates}))"
    if not serving.pods:
        raise ValueError("GPU utilisation is read of a workload's pods, and it has none")
    return f"avg by (pod) ({GPU_UTIL}{{{series_selectors(serving)[0]}}})"


def _by_pod(answer: Mapping[Labels, float]) -> dict[str, float]:
    """{pod: value} of an answer grouped by pod ("" for series without one); values that are
    not finite numbers of 0 or more are left out."""
    found: dict[str, float] = {}
    for labels, value in answer.items():
        if math.isfinite(value) and value >= 0:
            found[dict(labels).get("pod", "")] = value
    return found


def reading_of(
    metric: InferenceMetric, serving: ServingPods, answer: Mapping[Labels, float]
) -> MetricReading:
    """The reading of ``metric`` that an answer to :func:`metric_query` gives."""
    if metric is InferenceMetric.LATENCY_P95:
        values = _by_pod(answer)
        return MetricReading((), values.get(""))
    by_pod = _by_pod(answer)
    replicas = tuple(by_pod[pod] for pod in sorted(serving.ready) if pod in by_pod)
    if metric is InferenceMetric.GPU_UTILIZATION:
        return MetricReading(replicas)
    total = math.fsum(by_pod.values()) if by_pod else None
    return MetricReading(replicas, total)


class PrometheusInferenceMetrics:
    """Reads a workload's metrics from the Prometheus server of ``series`` (thread-safe, as
    the reader is), with rates over ``rate_window_s`` and ``latency_window_s``."""

    def __init__(
        self,
        series: PrometheusSeries,
        rate_window_s: float = RATE_WINDOW_S,
        latency_window_s: float = LATENCY_WINDOW_S,
    ) -> None:
        if not (rate_window_s > 0 and latency_window_s > 0):
            raise ValueError("rate windows must be positive")
        self.series = series
        self.rate_window_s = rate_window_s
        self.latency_window_s = latency_window_s

    def read(
        self, serving: ServingPods, metrics: Collection[InferenceMetric], now: float
    ) -> dict[InferenceMetric, MetricReading]:
        """Each of ``metrics`` of ``serving`` at ``now``; raises
        :class:`~gpufleet.backends.prometheus.series.PrometheusUnavailableError` when the
        server cannot answer."""
        readings: dict[InferenceMetric, MetricReading] = {}
        for metric in sorted(set(metrics)):
            if metric is InferenceMetric.GPU_UTILIZATION and not serving.pods:
                readings[metric] = MetricReading()
                continue
            promql = metric_query(metric, serving, self.rate_window_s, self.latency_window_s)
            answer = self.series.instant(promql, now)
            readings[metric] = reading_of(metric, serving, answer)
        return readings
