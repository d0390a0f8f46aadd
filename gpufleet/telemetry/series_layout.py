"""The shape of the time-series store: what a metric is, how its values become small integers,
how many points each ring keeps, and how a series is named.

Owns :class:`MetricSpec` (a metric's name, unit and value range), :class:`Quantizer` (the
linear code of a value range in ``uint8`` or ``uint16``, one code reserved for "no sample"),
:class:`StoreShape` (the two rings' steps, lengths and code widths) and the label helpers
(:data:`Labels`, :func:`as_labels`, :func:`matches`). It stores nothing and reads no clock.

Why codes and not float32: 1,000 GPUs x 5 metrics over 30 days must fit in 200 MB, i.e. 40 KB
a series for 5,760 fine and 4,320 coarse points (10 minutes: 5 would leave no room for the
process around the arrays). float32 fine points alone would take 23 KB a series; float32
coarse points (sum, max, min) 52 KB more. So a fine point is
a ``uint16`` code over the metric's range (error at most ``(hi - lo) / 131,068``: 0.0008 % for
utilisation, 1.5 MiB for memory over 0..192 GiB) and a coarse point three ``uint8`` codes
(mean, max, min; error at most ``(hi - lo) / 508``: 0.2 % for utilisation, 0.25 C over 0..127 C).
A value outside the range is clipped to it and counted (``SeriesStore.clipped``). Sealed chunks
keep these codes packed without loss (``series_packing``), so these bounds are all the error.

Exact at integers: a metric with a ``resolution`` (a power of two: 1/512 for utilisation and
temperature, 1/256 for XIDs, 1/32 W for power, 4 MiB for memory) is coded in fine steps of
exactly that size (its code spans ``lo .. lo + levels * resolution``, a little wider than its
range), so every multiple of the resolution, every integer among them, is stored and decoded
exactly in binary floating point: an XID 79 reads back 79, 85 C reads back 85, a threshold
compared with ``==``, ``>=`` or ``<=`` sees the value the device reported. Any other value is
off by at most half a resolution (1/1024 %, 1/1024 C, 1/64 W, 2 MiB). A coarse point (windows
longer than the fine ring) is still off by at most ``span / 508`` of that wider span.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.model.alerts import AlertMetric

#: A series' labels, sorted by name: hashable, comparable, and what queries return as keys.
Labels = tuple[tuple[str, str], ...]

CODE_DTYPES: dict[str, type[np.unsignedinteger]] = {"uint8": np.uint8, "uint16": np.uint16}


def as_labels(labels: Mapping[str, str] | Iterable[tuple[str, str]]) -> Labels:
    """``labels`` as a sorted tuple of (name, value); a name given twice or empty is an error."""
    pairs = list(labels.items()) if isinstance(labels, Mapping) else list(labels)
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"labels {pairs!r} name a label more than once")
    if any(not name for name in names):
        raise ValueError(f"labels {pairs!r} have an empty label name")
    return tuple(sorted((str(name), str(value)) for name, value in pairs))


def matches(labels: Labels, matchers: Mapping[str, str] | None) -> bool:
    """Whether every matcher names a label ``labels`` has with that value (``""`` matches a
    label that is absent, as in Prometheus)."""
    if not matchers:
        return True
    have = dict(labels)
    return all(have.get(name, "") == value for name, value in matchers.items())


def pick(labels: Labels, names: Iterable[str]) -> Labels:
    """Only the labels named (absent ones left out): the key of a group."""
    wanted = set(names)
    return tuple((name, value) for name, value in labels if name in wanted)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """A metric the store keeps: values are clipped to ``lo..hi`` and coded over it."""

    name: str
    lo: float
    hi: float
    unit: str = ""
    #: The size of one fine code (a power of two), so that its multiples (integers, with a
    #: resolution of 1 or less) are exact; None: the range is split evenly over the codes.
    resolution: float | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a metric needs a name")
        if not (np.isfinite(self.lo) and np.isfinite(self.hi) and self.lo < self.hi):
            raise ValueError(
                f"metric {self.name}: range lo={self.lo} hi={self.hi} must be finite, lo < hi"
            )
        if self.resolution is not None:
            mantissa, _ = math.frexp(self.resolution)
            if not (self.resolution > 0 and mantissa == 0.5):
                raise ValueError(
                    f"metric {self.name}: resolution {self.resolution} must be a power of two"
                )
            if not float(self.lo / self.resolution).is_integer():
                raise ValueError(
                    f"metric {self.name}: lo={self.lo} must be a multiple of the resolution"
                )

    def code_top(self, levels: int) -> float:
        """The value of the highest of ``levels`` codes: ``lo + levels * resolution`` where
        that covers the range (each code then is exactly one resolution), else ``hi``."""
        if self.resolution is not None and self.lo + levels * self.resolution >= self.hi:
            return self.lo + levels * self.resolution
        return self.hi


#: The device metrics dcgm-exporter names and the node agent and simulator give, with ranges
#: wide enough for every GPU gpufleet knows (memory up to 192 GiB, power up to 1,500 W).
DEVICE_METRICS = (
    MetricSpec(AlertMetric.GPU_UTIL.value, 0.0, 100.0, "%", 2.0**-9),
    MetricSpec(AlertMetric.FB_USED.value, 0.0, 196_608.0, "MiB", 4.0),
    MetricSpec(AlertMetric.GPU_TEMP.value, 0.0, 127.0, "C", 2.0**-9),
    MetricSpec(AlertMetric.POWER_USAGE.value, 0.0, 1_500.0, "W", 2.0**-5),
    # XIDs are integer codes, compared with == and >: exact at every integer.
    MetricSpec(AlertMetric.XID_ERRORS.value, 0.0, 254.0, "", 2.0**-8),
)
#: Every metric an alert rule may watch (``AlertMetric``): the device metrics, memory used in
#: percent and a workload's utilisation. (``kube_pod_start_time``, a timestamp, is no gauge to
#: code over a range: whoever serves the rules answers it from the workloads' records.)
RULE_METRICS = (
    *DEVICE_METRICS,
    MetricSpec(AlertMetric.FB_USED_PERCENT.value, 0.0, 100.0, "%", 2.0**-9),
    MetricSpec(AlertMetric.WORKLOAD_GPU_UTIL.value, 0.0, 100.0, "%", 2.0**-9),
)


@dataclass(frozen=True, slots=True)
class Quantizer:
    """Codes ``0..levels`` of an integer dtype for the range ``lo..hi`` of each row; the
    dtype's largest value means "no sample". Rows may have different ranges (arrays)."""

    dtype: type[np.unsignedinteger]

    @property
    def missing(self) -> int:
        return int(np.iinfo(self.dtype).max)

    @property
    def levels(self) -> int:
        """The largest code of a value (``lo`` is 0, ``hi`` is ``levels``)."""
        return self.missing - 1

    def encode(
        self,
        values: npt.NDArray[np.float64],
        lo: npt.NDArray[np.float64],
        hi: npt.NDArray[np.float64],
    ) -> npt.NDArray[np.unsignedinteger]:
        """Codes of ``values`` (NaN: missing); values are clipped to their row's range."""
        scaled = (np.clip(values, lo, hi) - lo) / (hi - lo) * self.levels
        codes = np.rint(np.nan_to_num(scaled, nan=0.0)).astype(self.dtype)
        codes[np.isnan(values)] = self.missing
        return codes

    def decode(
        self,
        codes: npt.NDArray[np.floating] | npt.NDArray[np.unsignedinteger],
        lo: npt.NDArray[np.float64],
        hi: npt.NDArray[np.float64],
    ) -> npt.NDArray[np.float64]:
        """Values of ``codes`` (which may be fractional: the mean of codes decodes to the mean
        of the values, the code being linear); callers mask missing codes first."""
        return lo + np.asarray(codes, dtype=np.float64) * ((hi - lo) / self.levels)


@dataclass(frozen=True, slots=True)
class StoreShape:
    """The two rings: ``fine_points`` steps of ``fine_step_s`` (default 15 s for a day) and
    ``coarse_points`` steps of ``coarse_step_s`` (default 10 min for 30 days)."""

    fine_step_s: int = 15
    fine_points: int = 5_760
    coarse_step_s: int = 600
    coarse_points: int = 4_320
    fine_code: str = "uint16"
    coarse_code: str = "uint8"

    def __post_init__(self) -> None:
        if min(self.fine_step_s, self.fine_points, self.coarse_step_s, self.coarse_points) < 1:
            raise ValueError(f"store shape {self}: steps and point counts must be 1 or more")
        if self.coarse_step_s % self.fine_step_s:
            raise ValueError(
                f"store shape: coarse_step_s={self.coarse_step_s} must be a multiple of "
                f"fine_step_s={self.fine_step_s}"
            )
        if self.fine_span_s < self.coarse_step_s:
            raise ValueError(
                f"store shape: the fine ring ({self.fine_span_s} s) must span at least one "
                f"coarse step ({self.coarse_step_s} s) to roll it up"
            )
        for field, code in (("fine_code", self.fine_code), ("coarse_code", self.coarse_code)):
            if code not in CODE_DTYPES:
                raise ValueError(f"store shape: {field}={code!r} is not one of {list(CODE_DTYPES)}")

    @property
    def fine_span_s(self) -> int:
        return self.fine_step_s * self.fine_points

    @property
    def coarse_span_s(self) -> int:
        return self.coarse_step_s * self.coarse_points

    @property
    def fine_per_coarse(self) -> int:
        return self.coarse_step_s // self.fine_step_s

    @property
    def fine(self) -> Quantizer:
        return Quantizer(CODE_DTYPES[self.fine_code])

    @property
    def coarse(self) -> Quantizer:
        return Quantizer(CODE_DTYPES[self.coarse_code])
