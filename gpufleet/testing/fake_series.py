"""An in-memory series store for tests of the rule engine: samples kept as written, queries
answered by :class:`~gpufleet.telemetry.rules.SeriesQuery`'s definition, plainly, with no
downsampling and no bounds (the real store is ``gpufleet.telemetry.series``)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from gpufleet.model.alerts import LabelSet, label_set


def quantile_of(q: float, values: list[float]) -> float:
    """PromQL's ``quantile_over_time``: linear interpolation between the closest ranks."""
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    weight = rank - low
    return ordered[low] * (1 - weight) + ordered[high] * weight


class FakeSeries:
    """Samples by metric and label set; :meth:`query` as the engine's protocol says."""

    def __init__(self) -> None:
        self.samples: dict[str, dict[LabelSet, list[tuple[float, float]]]] = {}
        self.queries: list[tuple[str, str, float, float, dict[str, str]]] = []

    def add(self, metric: str, labels: Mapping[str, str], at: float, value: float) -> None:
        series = self.samples.setdefault(metric, {}).setdefault(label_set(labels), [])
        series.append((at, value))
        series.sort(key=lambda sample: sample[0])  # stable: a rewrite at one time comes last

    def query(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str],
        quantile: float | None = None,
    ) -> dict[LabelSet, float]:
        self.queries.append((metric, fn, window_s, now, dict(matchers)))
        found: dict[LabelSet, float] = {}
        for labels, samples in self.samples.get(metric, {}).items():
            named = dict(labels)
            if any(named.get(key) != value for key, value in matchers.items()):
                continue
            values = [value for at, value in samples if now - window_s < at <= now]
            if not values:
                continue
            if fn == "avg":
                found[labels] = sum(values) / len(values)
            elif fn == "max":
                found[labels] = max(values)
            elif fn == "min":
                found[labels] = min(values)
            elif fn == "last":
                found[labels] = values[-1]
            elif fn == "quantile":
                assert quantile is not None
                found[labels] = quantile_of(quantile, values)
            else:
                raise ValueError(f"unknown aggregation {fn!r}")
        return found
