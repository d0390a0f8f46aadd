"""Alert rules and alerts: plain data, the same for gpufleet's own engine and for Prometheus.

Owns what an alert rule says (:class:`AlertRule`: which metric, how it is aggregated over a
window, the comparison with a threshold, the ``for`` duration, the severity, the scope of
series it looks at, and for a workload metric how long the workload must have run), the metric
names a rule may use (:class:`AlertMetric`: dcgm-exporter's ``DCGM_FI_DEV_*`` and two of
gpufleet's, derived from them), and what evaluation produces: an :class:`Alert` per label set in
a state (:class:`AlertState`) and the :class:`AlertTransition` of a round; and how a rule's
durations and numbers are written for Prometheus and in annotations (:func:`promql_duration`,
:func:`promql_number`). Reading rules from YAML is :mod:`gpufleet.io.fleet.alert_rules`; evaluating
them is :mod:`gpufleet.telemetry.rules`; writing them as a ``PrometheusRule`` is
:mod:`gpufleet.io.fleet.prometheus_rules`; their alerts' annotations are
:mod:`gpufleet.model.alert_annotations`. Nothing here reads a series or a clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

#: The labels of one series (and of one alert), sorted by name: hashable, comparable.
LabelSet = tuple[tuple[str, str], ...]

#: Prometheus' label names (and so the label names a scope may select on).
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: How far back a rule that aggregates with ``last`` looks for a sample, as Prometheus' default
#: lookback delta of an instant query does.
LOOKBACK_S = 300.0


def label_set(labels: Mapping[str, str]) -> LabelSet:
    """``labels`` as a :data:`LabelSet` (sorted by name)."""
    return tuple(sorted(labels.items()))


class AlertMetric(StrEnum):
    """The series a rule may watch. Device metrics have one series per GPU (and MIG instance),
    with dcgm-exporter's labels (``gpu``, ``UUID``, ``Hostname``, ``modelName``, and ``pod``,
    ``namespace``, ``container`` of the pod holding it); workload metrics one per pod holding
    GPUs (``namespace``, ``pod``)."""

    GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
    #: Framebuffer memory used, in MiB.
    FB_USED = "DCGM_FI_DEV_FB_USED"
    #: Framebuffer memory used, in percent: 100 * FB_USED / (FB_USED + FB_FREE).
    FB_USED_PERCENT = "gpufleet_gpu_memory_used_percent"
    GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
    POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
    #: The last XID the device raised (0: none).
    XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
    #: A pod's GPU utilisation: the average of DCGM_FI_DEV_GPU_UTIL over the GPUs it holds.
    WORKLOAD_GPU_UTIL = "gpufleet_workload_gpu_util"

    @property
    def per_workload(self) -> bool:
        return self is AlertMetric.WORKLOAD_GPU_UTIL

    @property
    def unit(self) -> str:
        return METRIC_UNITS[self]


METRIC_UNITS: dict[AlertMetric, str] = {
    AlertMetric.GPU_UTIL: "%",
    AlertMetric.FB_USED: "MiB",
    AlertMetric.FB_USED_PERCENT: "%",
    AlertMetric.GPU_TEMP: "C",
    AlertMetric.POWER_USAGE: "W",
    AlertMetric.XID_ERRORS: "",
    AlertMetric.WORKLOAD_GPU_UTIL: "%",
}

#: The start of each pod, in the cluster's clock's seconds (kube-state-metrics' name; labels
#: ``namespace`` and ``pod``): what a rule's ``min_running_s`` is measured from.
WORKLOAD_START_TIME = "kube_pod_start_time"
#: The labels that name a workload in per-workload series, and join them with their start.
WORKLOAD_LABELS = ("namespace", "pod")
#: The label a device series carries (non-empty) while a pod holds the device.
HOLDER_LABEL = "pod"
#: The labels of a device series, dcgm-exporter's (``GPU_I_*`` on MIG instances,
#: ``DCGM_FI_DRIVER_VERSION`` where the driver is known, the holder's ``container``,
#: ``namespace`` and ``pod`` on a device a pod holds), in both engines.
DEVICE_SERIES_LABELS = (
    "gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID",
    "Hostname", "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod",
)  # fmt: skip
#: What ``DCGM_FI_DEV_XID_ERRORS`` adds: the XID and NVIDIA's name of it.
XID_LABELS = ("err_code", "err_msg")


def series_labels(metric: AlertMetric) -> tuple[str, ...]:
    """The labels ``metric``'s series carry in Prometheus (and so in gpufleet's engine): what
    a rule's scope may select on. A workload's utilisation is ``avg by (namespace, pod)``."""
    if metric.per_workload:
        return WORKLOAD_LABELS
    if metric is AlertMetric.XID_ERRORS:
        return (*DEVICE_SERIES_LABELS, *XID_LABELS)
    return DEVICE_SERIES_LABELS


class Aggregation(StrEnum):
    """How the samples of a series in a window become one value (``*_over_time``)."""

    AVG = "avg"
    MAX = "max"
    MIN = "min"
    #: The latest sample (within :data:`LOOKBACK_S` when the rule gives no window).
    LAST = "last"
    #: The rule's ``quantile`` (0..1) of the samples.
    QUANTILE = "quantile"


class Comparison(StrEnum):
    """How a value is compared with a rule's threshold (PromQL's comparison operators)."""

    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="
    EQ = "=="
    NE = "!="

    def holds(self, value: float, threshold: float) -> bool:
        """Whether ``value <op> threshold``; never for NaN, as in PromQL."""
        if math.isnan(value):
            return False
        match self:
            case Comparison.GT:
                return value > threshold
            case Comparison.GE:
                return value >= threshold
            case Comparison.LT:
                return value < threshold
            case Comparison.LE:
                return value <= threshold
            case Comparison.EQ:
                return value == threshold
            case Comparison.NE:
                return value != threshold


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class AlertState(StrEnum):
    """Prometheus' states of an alert, with ``resolved`` for one that fired and stopped.

    ``inactive``: its condition does not hold (a pending alert whose condition stops returns
    here, never having fired). ``pending``: it holds, for less than the rule's ``for``.
    ``firing``: it has held for at least ``for``. ``resolved``: it fired and no longer holds.
    """

    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class AlertScope:
    """Which series a rule looks at: every one (the default), or those whose labels match;
    with ``allocated``, only devices a pod holds (their series carry a non-empty ``pod``, as
    dcgm-exporter labels a device held by a pod: ``pod!=""`` in PromQL)."""

    namespace: str | None = None
    queue: str | None = None
    labels: LabelSet = ()
    allocated: bool = False

    def admits(self, series: LabelSet) -> bool:
        """Whether series with these labels are in scope beyond the equality matchers (only
        ``allocated`` says more: a non-empty ``pod``)."""
        return not self.allocated or any(name == HOLDER_LABEL and v for name, v in series)

    def matchers(self) -> dict[str, str]:
        """Equality matchers on series labels (``namespace``, ``queue``, then ``labels``)."""
        matchers = dict(self.labels)
        if self.namespace is not None:
            matchers["namespace"] = self.namespace
        if self.queue is not None:
            matchers["queue"] = self.queue
        return matchers


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One alert rule: ``aggregation(metric[window]) comparison threshold``, held for
    ``for_s``, over the series ``scope`` selects; for a workload metric, only workloads that
    have run at least ``min_running_s``. Checked on construction (ValueError)."""

    name: str
    metric: AlertMetric
    comparison: Comparison
    threshold: float
    aggregation: Aggregation = Aggregation.LAST
    #: Seconds; 0 with ``last`` means :data:`LOOKBACK_S`.
    window_s: float = 0.0
    for_s: float = 0.0
    severity: Severity = Severity.WARNING
    scope: AlertScope = field(default_factory=AlertScope)
    #: The quantile (0..1) of :attr:`Aggregation.QUANTILE`; None otherwise.
    quantile: float | None = None
    #: For a workload metric: how long it must have run (0: any).
    min_running_s: float = 0.0
    summary: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an alert rule needs a name")
        if not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be a finite number, got {self.threshold}")
        for what, seconds in (("window", self.window_s), ("for", self.for_s)):
            if not math.isfinite(seconds) or seconds < 0:
                raise ValueError(f"{what} must be a duration of 0 or more, got {seconds}")
        if not math.isfinite(self.min_running_s) or self.min_running_s < 0:
            raise ValueError(f"minRunning must be 0 or more, got {self.min_running_s}")
        if self.aggregation is not Aggregation.LAST and self.window_s <= 0:
            raise ValueError(f"aggregation {self.aggregation} needs a window longer than 0")
        if (self.aggregation is Aggregation.QUANTILE) != (self.quantile is not None):
            raise ValueError("a quantile is given with aggregation quantile, and only then")
        if self.quantile is not None and not 0.0 <= self.quantile <= 1.0:
            raise ValueError(f"quantile must be between 0 and 1, got {self.quantile}")
        if self.min_running_s > 0 and not self.metric.per_workload:
            raise ValueError(
                f"minRunning applies to workload metrics ({_workload_metrics()}), not {self.metric}"
            )
        for key, _ in self.scope.labels:
            if not LABEL_NAME.fullmatch(key):
                raise ValueError(f"scope label {key!r} is not a Prometheus label name")
        self._check_scope_labels()

    def _check_scope_labels(self) -> None:
        """A scope selects only on labels the metric's series carry: on any other (a queue,
        a team) the exported rule would match nothing in Prometheus, and the engine either."""
        if self.scope.queue is not None:
            raise ValueError(
                f"scope queue: {self.metric} series carry no queue label (dcgm-exporter's "
                "series name the pod, not its queue), so Prometheus would never fire the rule; "
                "scope by the queue's namespace instead"
            )
        known = series_labels(self.metric)
        for key, _ in self.scope.labels:
            if key not in known:
                raise ValueError(
                    f"scope label {key!r}: {self.metric} series carry no such label, so the "
                    f"rule would match nothing (they carry {', '.join(known)})"
                )

    @property
    def alert_name(self) -> str:
        """The ``alertname`` of its alerts in both engines: ``gpu-memory-high`` is
        ``GpuMemoryHigh``."""
        return "".join(
            part[:1].upper() + part[1:] for part in re.split(r"[^a-zA-Z0-9]+", self.name)
        )

    @property
    def lookback_s(self) -> float:
        """The window the aggregation runs over."""
        if self.aggregation is Aggregation.LAST and self.window_s == 0:
            return LOOKBACK_S
        return self.window_s

    @property
    def condition(self) -> str:
        """The rule in one line: ``avg(DCGM_FI_DEV_GPU_UTIL[1h]) < 20 for 2h`` (``{pod!=""}``
        after the metric when it looks only at allocated GPUs)."""
        fn = self.aggregation.value
        if self.quantile is not None:
            fn = f"quantile({self.quantile:g})"
        held = '{pod!=""}' if self.scope.allocated else ""
        text = f"{fn}({self.metric.value}{held}[{short_duration(self.lookback_s)}])"
        text += f" {self.comparison.value} {self.threshold:g}"
        if self.for_s:
            text += f" for {short_duration(self.for_s)}"
        if self.min_running_s:
            text += f" after running {short_duration(self.min_running_s)}"
        return text

    def alert_labels(self, series: LabelSet) -> LabelSet:
        """An alert's identity: the series' labels, with ``alertname`` and ``severity`` set."""
        labels = dict(series)
        labels["alertname"] = self.alert_name
        labels["severity"] = self.severity.value
        return label_set(labels)


def promql_duration(seconds: float) -> str:
    """A Prometheus duration: ``1h``, ``5m``, ``1h30m``, ``90s`` -> ``1m30s``, ``1500ms`` ->
    ``1s500ms``; whole milliseconds (ValueError otherwise)."""
    millis = round(seconds * 1000)
    if seconds < 0 or not math.isclose(millis, seconds * 1000, abs_tol=1e-6):
        raise ValueError(f"a Prometheus duration is whole milliseconds, not {seconds}s")
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def promql_number(value: float) -> str:
    """A number as the exported rules write it, in PromQL and in annotations: ``20``, not
    ``20.0``; ``0.95``."""
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def short_duration(seconds: float) -> str:
    """``5400`` as ``1h30m``: the largest units that divide it (``0s`` for 0)."""
    left = round(seconds)
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts) or "0s"


def _workload_metrics() -> str:
    return ", ".join(metric.value for metric in AlertMetric if metric.per_workload)


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert of a rule: a label set in a state, with the last value that was compared.

    ``active_at``: when its condition started holding (this run); ``fired_at``: when it turned
    firing (None before); ``resolved_at``: when it stopped (None while it holds).
    """

    rule: str
    labels: LabelSet
    state: AlertState
    value: float
    active_at: float
    fired_at: float | None = None
    resolved_at: float | None = None

    def label(self, name: str) -> str:
        return dict(self.labels).get(name, "")


@dataclass(frozen=True, slots=True)
class AlertTransition:
    """An alert that changed state in a round at ``at``: ``before`` -> ``after``, with the
    value that made it (the last value compared, when it stopped holding)."""

    rule: str
    labels: LabelSet
    before: AlertState
    after: AlertState
    value: float
    at: float
