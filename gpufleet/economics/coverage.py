"""How much of a pod's held time was used, idle or unmeasured: one definition, additive in time.

Owns :class:`Sample` (one utilisation reading of a pod), :func:`sample_spans` (the time each
sample stands for) and :func:`coverage` (a hold's time within a window, split
:class:`Coverage`: used, idle, unmeasured). The cost report (:mod:`gpufleet.economics.reports`)
and the ``/metrics`` cost counters (``gpufleet.service.cost_meter``) both split GPU cost by it,
so the counters' increments over consecutive windows add up to the report over their union.

The definition: a sample at ``t`` stands for ``[t, min(next sample, t + span_s))`` (``span_s``:
how long a reading stays current, the observatory's step or Prometheus' staleness); held time a
sample stands for is used in the sample's utilisation and idle in the rest; held time no sample
stands for is *unmeasured*. Each part is an integral over time, so splitting a window in two
splits every part in two: the parts of ``[a, c)`` are those of ``[a, b)`` plus those of
``[b, c)``. Nothing here reads a clock, a file or a metric.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpufleet.economics.allocation import Window


@dataclass(frozen=True, slots=True)
class Sample:
    """A pod's GPU utilisation (0 to 1) read at ``time``, current for at most ``span_s``."""

    time: float
    utilisation: float
    span_s: float


@dataclass(frozen=True, slots=True)
class Span:
    """``[start, end)`` stood for by one sample of utilisation ``utilisation``."""

    start: float
    end: float
    utilisation: float


@dataclass(frozen=True, slots=True)
class Coverage:
    """Seconds of held time: used (x utilisation), idle (x 1 - utilisation), unmeasured."""

    used_s: float = 0.0
    idle_s: float = 0.0
    unmeasured_s: float = 0.0

    @property
    def held_s(self) -> float:
        return self.used_s + self.idle_s + self.unmeasured_s

    @property
    def measured_s(self) -> float:
        return self.used_s + self.idle_s

    @property
    def utilisation(self) -> float | None:
        """The mean utilisation over the measured time; None: nothing measured."""
        measured = self.measured_s
        return self.used_s / measured if measured > 0 else None


def sample_spans(samples: Iterable[Sample]) -> tuple[Span, ...]:
    """The time each of ``samples`` stands for: from it to the next (by time) or ``span_s``
    after it, whichever comes first. Of samples at the same time the last given wins; a
    utilisation outside 0..1 is clipped to it."""
    by_time: dict[float, Sample] = {}
    for sample in samples:
        by_time[sample.time] = sample
    ordered = [by_time[t] for t in sorted(by_time)]
    spans = []
    for i, sample in enumerate(ordered):
        end = sample.time + max(sample.span_s, 0.0)
        if i + 1 < len(ordered):
            end = min(end, ordered[i + 1].time)
        if end > sample.time:
            spans.append(Span(sample.time, end, min(max(sample.utilisation, 0.0), 1.0)))
    return tuple(spans)


def coverage(start: float, end: float, spans: Sequence[Span], window: Window) -> Coverage:
    """The split of the hold ``[start, end)`` within ``window`` by ``spans`` (disjoint, as
    :func:`sample_spans` makes them): see the module docstring."""
    lo, hi = max(start, window.start), min(end, window.end)
    if not hi > lo:
        return Coverage()
    used = idle = covered = 0.0
    for span in spans:
        overlap = min(span.end, hi) - max(span.start, lo)
        if overlap > 0:
            covered += overlap
            used += overlap * span.utilisation
            idle += overlap * (1.0 - span.utilisation)
    return Coverage(used, idle, max((hi - lo) - covered, 0.0))
