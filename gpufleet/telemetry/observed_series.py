"""The window queries of a world whose telemetry gpufleet records itself (the embedded cluster).

Owns :class:`ObservedSeries`, the ``GroupedSeriesQuery`` (``series_query``; the rule engine's
``SeriesQuery`` too) over the store a ``SeriesRecorder`` (``recording``) feeds.
It answers as a Prometheus scraping dcgm-exporter and kube-state-metrics would:

* a device metric has one value per device, with the labels of the pod holding it now
  (``namespace``, ``pod``, ``container``; one entry per pod when several share it, none when
  nobody does), so a rule scoped to a namespace sees that namespace's devices. The value is
  the device's over the whole window, whoever held it then (the store keys devices alone: see
  ``recording``); Prometheus' per-pod series would cover only the holder's part of the window;
* ``gpufleet_gpu_memory_used_percent`` is ``DCGM_FI_DEV_FB_USED`` over the device's memory
  (used + free, as its latest reading said), as the exported rules compute it;
* ``DCGM_FI_DEV_XID_ERRORS`` adds dcgm-exporter's ``err_code`` and ``err_msg`` of the value
  (the XID itself), so a rule's alert carries them as Prometheus' does;
* ``gpufleet_workload_gpu_util`` is ``avg by (namespace, pod)`` of the store's workload series,
  as the exported rules and the Prometheus reader compute it: labelled ``namespace`` and
  ``pod`` only. The tags the store keeps on a series (queue, tenant, workload, kind) select
  and group (a matcher or ``by`` on them applies) but are not its labels: Prometheus' series
  carry none, and whether a pod's series has them depends on whether its record said it ran
  when the pod was first seen (:meth:`samples` still gives them, as recorded);
* ``kube_pod_start_time`` (``namespace``, ``pod``) is each running pod's start, given by the
  world (``starts``), not stored.

No clock and no I/O; a caller holding the store's writer serialises access.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

from gpufleet.model.alerts import WORKLOAD_LABELS, WORKLOAD_START_TIME, XID_LABELS, AlertMetric
from gpufleet.model.telemetry import DeviceUser, xid_labels
from gpufleet.telemetry.recording import HOLDER_LABELS, PodKey, SeriesRecorder
from gpufleet.telemetry.series import Scale
from gpufleet.telemetry.series_layout import Labels, as_labels, matches, pick
from gpufleet.telemetry.series_query import (
    FilteringQuery,
    GroupedSeriesQuery,
    RawSample,
    SampleQuery,
    UnknownMetricError,
)
from gpufleet.telemetry.series_samples import store_samples
from gpufleet.telemetry.series_window import ACROSS_FNS, Across, Where, aggregate, filtered

StartTimes = Callable[[], Mapping[PodKey, float]]


class ObservedSeries:
    """Queries over what ``recorder`` recorded, with pod start times from ``starts``."""

    def __init__(self, recorder: SeriesRecorder, starts: StartTimes) -> None:
        self.recorder = recorder
        self._starts = starts
        # Per device series: its labels with the holders they were made for.
        # Holders rarely change between rounds; rebuilding (and sorting) every device's
        # labels for every query was most of a round's time at 10,000 GPUs.
        self._held: dict[Labels, tuple[tuple[DeviceUser, ...], list[Labels]]] = {}
        self._start_labels: dict[PodKey, Labels] = {}
        #: A workload series' labels -> its ``namespace`` and ``pod`` (``_per_workload``).
        self._workload_labels: dict[Labels, Labels] = {}
        #: The factors of ``_percent_of_memory`` and what they were made for.
        self._percent_factors: tuple[Sequence[Labels], int, npt.NDArray[np.float64]] | None = None

    @property
    def metrics(self) -> list[str]:
        return [*self.recorder.store.metrics, WORKLOAD_START_TIME]

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
    ) -> dict[Labels, float]:
        if across not in ACROSS_FNS:
            raise ValueError(f"query: across {across!r} is not one of {list(ACROSS_FNS)}")
        return self._query(metric, fn, window_s, now, matchers, quantile, by, across, None)

    def query_where(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str],
        quantile: float | None,
        where: Where,
    ) -> dict[Labels, float]:
        """The rule engine's query with its condition pushed down to the store where the values
        are stored as compared (a device's series are expanded by holder only when they hold)."""
        return self._query(metric, fn, window_s, now, matchers, quantile, None, "sum", where)

    def samples(
        self,
        metric: str,
        start: float,
        end: float,
        matchers: Mapping[str, str] | None = None,
    ) -> dict[Labels, list[RawSample]]:
        """The store's raw samples of ``metric`` (``SampleQuery``), as recorded with their
        tags: the workload series' (a device's carry no holder in the store)."""
        return store_samples(self.recorder.store, metric, start, end, matchers)

    def _query(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str] | None,
        quantile: float | None,
        by: Sequence[str] | None,
        across: str,
        where: Where | None,
    ) -> dict[Labels, float]:
        if across not in ACROSS_FNS:
            raise ValueError(f"query: across {across!r} is not one of {list(ACROSS_FNS)}")
        if metric == WORKLOAD_START_TIME:
            found = self._start_times(matchers)
        elif metric == AlertMetric.FB_USED_PERCENT.value:
            pushed = where if by is None else None
            found = self._memory_percent(fn, window_s, now, matchers, quantile, pushed)
            if pushed is not None:
                return found
        elif metric == AlertMetric.WORKLOAD_GPU_UTIL.value:
            found = self.recorder.store.query(
                metric, fn, window_s, now, matchers, quantile, by=by, across=across, where=where
            )
            return found if by is not None else self._per_workload(found)
        elif metric == AlertMetric.XID_ERRORS.value:
            on_xid = {k: v for k, v in (matchers or {}).items() if k in XID_LABELS}
            rest = {k: v for k, v in (matchers or {}).items() if k not in XID_LABELS}
            pushed = where if by is None else None
            found = {
                labelled: value
                for labels, value in self._held_devices(
                    metric, fn, window_s, now, rest, quantile, pushed
                ).items()
                if matches(labelled := _with_xid(labels, value), on_xid)
            }
            if pushed is not None:
                return found
        else:
            pushed = where if by is None else None
            found = self._held_devices(metric, fn, window_s, now, matchers, quantile, pushed)
            if pushed is not None:
                return found
        if by is not None:
            keys = list(found)
            values = np.fromiter(found.values(), np.float64, len(found))
            found = aggregate(cast(Across, across), keys, values, by)
        return found if where is None else filtered(found, where)

    def _start_times(self, matchers: Mapping[str, str] | None) -> dict[Labels, float]:
        found: dict[Labels, float] = {}
        starts = self._starts()
        known = self._start_labels
        if len(known) > 2 * len(starts) + 1_000:  # pods come and go: forget the ended
            known = self._start_labels = {pod: known[pod] for pod in starts if pod in known}
        for pod, start in starts.items():
            labels = known.get(pod)
            if labels is None:
                labels = known[pod] = as_labels(dict(zip(WORKLOAD_LABELS, pod, strict=True)))
            if matches(labels, matchers):
                found[labels] = start
        return found

    def _per_workload(self, found: Mapping[Labels, float]) -> dict[Labels, float]:
        """Workload series keyed by their ``namespace`` and ``pod`` alone: ``avg by
        (namespace, pod)``, each group one series (the recorder keeps one series a pod), so
        the condition pushed down to the store holds for the group as for its series."""
        named = self._workload_labels
        if len(named) > 2 * max(len(self.recorder.usage), len(found)) + 1_000:  # pods go
            named.clear()
        out: dict[Labels, float] = {}
        for labels, value in found.items():
            key = named.get(labels)
            if key is None:
                key = named[labels] = pick(labels, WORKLOAD_LABELS)
            out[key] = value
        return out

    def _held_devices(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str] | None,
        quantile: float | None,
        where: Where | None = None,
        scale: Scale | None = None,
    ) -> dict[Labels, float]:
        matchers = matchers or {}
        on_device = {k: v for k, v in matchers.items() if k not in HOLDER_LABELS}
        on_holder = {k: v for k, v in matchers.items() if k in HOLDER_LABELS}
        values = self.recorder.store.query(
            metric, fn, window_s, now, on_device, quantile, where=where, scale=scale
        )
        found: dict[Labels, float] = {}
        for labels, value in values.items():
            for held in self._with_holders(labels):
                if not on_holder or matches(held, on_holder):
                    found[held] = value
        return found

    def _memory_percent(
        self,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str] | None,
        quantile: float | None,
        where: Where | None = None,
    ) -> dict[Labels, float]:
        """Memory in percent: the stored MiB over the device's memory, scaled in the store (so
        that a rule's comparison is pushed down too). Every window function but ``count``
        commutes with that positive scale."""
        metric = AlertMetric.FB_USED.value
        if fn == "count":
            return self._held_devices(metric, fn, window_s, now, matchers, quantile, where)
        return self._held_devices(
            metric, fn, window_s, now, matchers, quantile, where, self._percent_of_memory
        )

    def _percent_of_memory(self, devices: Sequence[Labels]) -> npt.NDArray[np.float64]:
        """100 over each device's memory in MiB (NaN where it is not known), kept for the
        list of every device the store hands over unfiltered (the same list until its series
        change) and the memory readings it was made from (``memory_version``)."""
        total = self.recorder.memory_mib
        made = self._percent_factors
        version = self.recorder.memory_version
        if made is not None and made[0] is devices and made[1] == version:
            return made[2]
        factors = np.fromiter(
            (100.0 / total[uuid] if total.get(uuid := self._uuid(labels)) else math.nan
             for labels in devices),
            np.float64,
            len(devices),
        )  # fmt: skip
        self._percent_factors = (devices, version, factors)
        return factors

    def _uuid(self, labels: Labels) -> str:
        """The device's own UUID as the latest reading said (a MIG instance's ``UUID`` label is
        its GPU's, and a recreated instance keeps its labels with a new UUID); the label for a
        device it did not name (a series restored, not read since)."""
        uuid = self.recorder.uuids.get(labels)
        return uuid if uuid is not None else dict(labels).get("UUID", "")

    def _with_holders(self, labels: Labels) -> list[Labels]:
        users = self.recorder.holders.get(self._uuid(labels), ())
        if not users:
            return [labels]
        made = self._held.get(labels)
        if made is not None and made[0] == users:
            return made[1]
        if len(self._held) > 2 * len(self.recorder.devices) + 1_000:
            self._held.clear()
        held = [
            as_labels(
                {
                    **dict(labels),
                    "namespace": user.namespace,
                    "pod": user.pod,
                    "container": user.container,
                }
            )
            for user in users
        ]
        self._held[labels] = (users, held)
        return held


def _with_xid(labels: Labels, value: float) -> Labels:
    """An XID series' labels with dcgm-exporter's ``err_code`` and ``err_msg`` of its value
    (the XID the window's value is: the latest one for ``last``, as Prometheus' instant
    series carries; for a window over several XIDs, the one the aggregation gave)."""
    code = int(value) if math.isfinite(value) and float(value).is_integer() else -1
    return as_labels({**dict(labels), **xid_labels(code)}) if code >= 0 else labels


class WithStartTimes:
    """Another world's series (a Prometheus server) with ``kube_pod_start_time`` answered from
    the plane's own records when the series have none (no kube-state-metrics scraped): the
    rules that wait for a pod to have run a while work either way."""

    def __init__(self, inner: GroupedSeriesQuery, starts: StartTimes) -> None:
        self.inner = inner
        self._starts = starts

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
    ) -> dict[Labels, float]:
        found = self.inner.query(
            metric, fn, window_s, now, matchers, quantile, by=by, across=across
        )
        if found or metric != WORKLOAD_START_TIME or by is not None:
            return found
        return self._own_starts(matchers)

    def query_where(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str],
        quantile: float | None,
        where: Where,
    ) -> dict[Labels, float]:
        inner = self.inner
        if metric == WORKLOAD_START_TIME or not isinstance(inner, FilteringQuery):
            return filtered(self.query(metric, fn, window_s, now, matchers, quantile), where)
        return dict(inner.query_where(metric, fn, window_s, now, matchers, quantile, where))

    def samples(
        self,
        metric: str,
        start: float,
        end: float,
        matchers: Mapping[str, str] | None = None,
    ) -> dict[Labels, list[RawSample]]:
        """The inner series' raw samples (``SampleQuery``); UnknownMetricError where it keeps
        none."""
        inner = self.inner
        if not isinstance(inner, SampleQuery):
            raise UnknownMetricError(metric, [])
        return inner.samples(metric, start, end, matchers)

    def _own_starts(self, matchers: Mapping[str, str] | None) -> dict[Labels, float]:
        return {
            as_labels(dict(zip(WORKLOAD_LABELS, pod, strict=True))): start
            for pod, start in self._starts().items()
            if matches(as_labels(dict(zip(WORKLOAD_LABELS, pod, strict=True))), matchers)
        }
