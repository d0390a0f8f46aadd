"""Cost per workload over a window, split as OpenCost splits it: allocated, used and idle.

Owns the arithmetic. Its inputs are plain records any world can produce: what a workload held
(:class:`Holding`: how much of a GPU, of which model, on which capacity type, from when to
when, with the CPU and memory it requested and the mean GPU utilisation measured while it held
it) and, optionally, what the cluster offered (:class:`GpuCapacity`). Over a :class:`Window`:

- allocated = GPU-hours held x GPU price + vCPU-hours requested x vCPU price + GiB-hours
  requested x memory price (OpenCost charges the greater of request and use; gpufleet knows
  no CPU or memory use, so the request);
- used = the allocated GPU cost x the measured utilisation, + the CPU and memory cost;
- idle = allocated - used: the GPU time held but not used (the workload's idle).

A GPU held in part counts by its part: a share by its fraction, a MIG slice by its compute
slices out of seven (:func:`mig_fraction`). GPU-hours nobody held, where the capacity is known,
are the cluster's idle, one line named ``__idle__`` (OpenCost's name) priced by model and
capacity type. Grouping the lines by namespace, queue, tenant, label or annotation is
:mod:`gpufleet.economics.aggregation`. Nothing here reads a clock, a file or a metric.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpufleet.economics.prices import CapacityType, PriceList
from gpufleet.model.gpu import (
    MIG_COMPUTE_SLICES,
    MILLI_PER_GPU,
    canonical_model,
    parse_mig_profile,
)

SECONDS_PER_HOUR = 3600.0
#: The line of GPU time nobody held (OpenCost's name for it).
IDLE = "__idle__"
#: How much more GPU time than the cluster offered the holdings may claim before it is an
#: error, relative to what was offered (floating-point sums, not real over-allocation).
_TOLERANCE = 1e-9


def mig_fraction(profile: str) -> float:
    """The part of a GPU a MIG slice is: its compute slices out of seven (``3g.40gb``: 3/7)."""
    return parse_mig_profile(profile).compute_slices / MIG_COMPUTE_SLICES


def milli_fraction(milli: int) -> float:
    """The part of a GPU ``milli`` milli-GPU are (250: 0.25)."""
    return milli / MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class Window:
    """A span of time in seconds (any epoch, the same as the records'): ``[start, end)``."""

    start: float
    end: float

    def __post_init__(self) -> None:
        if not self.end >= self.start:
            raise ValueError(f"a window ends after it starts, got {self.start} to {self.end}")

    @property
    def hours(self) -> float:
        return (self.end - self.start) / SECONDS_PER_HOUR

    def overlap_hours(self, start: float, end: float) -> float:
        """Hours of ``[start, end)`` inside the window."""
        return max(0.0, min(end, self.end) - max(start, self.start)) / SECONDS_PER_HOUR


@dataclass(frozen=True, slots=True)
class Holding:
    """What one workload held from ``start`` to ``end`` (seconds).

    ``gpus``: how much GPU, of model ``gpu_model`` (the product a node reports): 1.0 a whole
    GPU, 0.25 a quarter share, :func:`mig_fraction` of a MIG slice; 0 for a workload without
    GPUs (then ``gpu_model`` may be empty). ``utilisation``: the mean GPU utilisation of what
    it held over the window, 0 to 1 (dcgm-exporter's percent / 100). ``cpu`` vCPUs and
    ``memory_gib`` as requested. The rest says whose it is, for grouping.
    """

    workload: str
    namespace: str
    start: float
    end: float
    gpus: float = 0.0
    gpu_model: str = ""
    capacity: CapacityType = CapacityType.ON_DEMAND
    utilisation: float = 0.0
    cpu: float = 0.0
    memory_gib: float = 0.0
    queue: str = ""
    tenant: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        who = f"workload {self.namespace}/{self.workload}"
        if not self.end >= self.start:
            raise ValueError(
                f"{who}: it holds until after it starts, got {self.start} to {self.end}"
            )
        for name, value in (("gpus", self.gpus), ("cpu", self.cpu), ("memory", self.memory_gib)):
            if not 0.0 <= value < float("inf"):
                raise ValueError(
                    f"{who}: {name} must be a finite amount of at least 0, got {value}"
                )
        if not 0.0 <= self.utilisation <= 1.0:
            raise ValueError(
                f"{who}: utilisation is a fraction from 0 to 1, got {self.utilisation}"
            )
        if self.gpus > 0 and not self.gpu_model.strip():
            raise ValueError(f"{who}: holds GPUs but names no GPU model")


@dataclass(frozen=True, slots=True)
class GpuCapacity:
    """``gpus`` GPUs of ``gpu_model`` a node offered from ``start`` to ``end``, bought as
    ``capacity``."""

    node: str
    gpu_model: str
    gpus: float
    start: float
    end: float
    capacity: CapacityType = CapacityType.ON_DEMAND

    def __post_init__(self) -> None:
        if not self.end >= self.start:
            raise ValueError(f"node {self.node}: offered until after it starts")
        if not 0.0 <= self.gpus < float("inf"):
            raise ValueError(f"node {self.node}: gpus must be at least 0, got {self.gpus}")


@dataclass(frozen=True, slots=True)
class CostLine:
    """The cost of one line (a workload, a group, or ``__idle__``), in the price list's
    currency. ``gpu_cost`` is what the GPU time held cost, ``gpu_used_cost`` the part of it
    used; ``estimated``: some price in it was estimated from an on-demand price."""

    name: str
    gpu_hours: float = 0.0
    gpu_cost: float = 0.0
    gpu_used_cost: float = 0.0
    cpu_cost: float = 0.0
    memory_cost: float = 0.0
    estimated: bool = False

    @property
    def gpu_idle_cost(self) -> float:
        return self.gpu_cost - self.gpu_used_cost

    @property
    def allocated(self) -> float:
        return self.gpu_cost + self.cpu_cost + self.memory_cost

    @property
    def used(self) -> float:
        return self.gpu_used_cost + self.cpu_cost + self.memory_cost

    @property
    def idle(self) -> float:
        return self.gpu_idle_cost

    @property
    def gpu_efficiency(self) -> float:
        """Used over allocated GPU cost (OpenCost's GPU efficiency); 0 without GPU cost."""
        return self.gpu_used_cost / self.gpu_cost if self.gpu_cost > 0 else 0.0

    def plus(self, other: CostLine, name: str | None = None) -> CostLine:
        """This line and ``other`` added up, named ``name`` (default: this one's name)."""
        return CostLine(
            self.name if name is None else name,
            self.gpu_hours + other.gpu_hours,
            self.gpu_cost + other.gpu_cost,
            self.gpu_used_cost + other.gpu_used_cost,
            self.cpu_cost + other.cpu_cost,
            self.memory_cost + other.memory_cost,
            self.estimated or other.estimated,
        )


@dataclass(frozen=True, slots=True)
class WorkloadCost:
    """One holding and what it cost over the window."""

    holding: Holding
    cost: CostLine


@dataclass(frozen=True, slots=True)
class Allocation:
    """The costs of a window: one per holding, and the cluster's idle (``__idle__``; all zero
    where the capacity was not given)."""

    window: Window
    workloads: tuple[WorkloadCost, ...]
    idle: CostLine
    currency: str = "USD"

    @property
    def total(self) -> CostLine:
        """Everything: the workloads and the cluster's idle."""
        total = CostLine("__total__")
        for item in self.workloads:
            total = total.plus(item.cost)
        return total.plus(self.idle)


def holding_cost(holding: Holding, prices: PriceList, window: Window) -> CostLine:
    """What ``holding`` cost within ``window``."""
    hours = window.overlap_hours(holding.start, holding.end)
    gpu_hours = holding.gpus * hours
    estimated = False
    gpu_cost = 0.0
    if gpu_hours > 0:
        gpu_rate = prices.gpu_rate(holding.gpu_model, holding.capacity)
        gpu_cost = gpu_hours * gpu_rate.hourly
        estimated = gpu_rate.estimated
    cpu_cost = memory_cost = 0.0
    if holding.cpu > 0 and hours > 0:
        cpu_rate = prices.cpu_rate(holding.capacity)
        cpu_cost = holding.cpu * hours * cpu_rate.hourly
        estimated = estimated or cpu_rate.estimated
    if holding.memory_gib > 0 and hours > 0:
        memory_rate = prices.memory_rate(holding.capacity)
        memory_cost = holding.memory_gib * hours * memory_rate.hourly
        estimated = estimated or memory_rate.estimated
    return CostLine(
        f"{holding.namespace}/{holding.workload}",
        gpu_hours,
        gpu_cost,
        gpu_cost * holding.utilisation,
        cpu_cost,
        memory_cost,
        estimated,
    )


def allocate(
    holdings: Iterable[Holding],
    prices: PriceList,
    window: Window,
    capacity: Iterable[GpuCapacity] | None = None,
) -> Allocation:
    """The cost of every holding within ``window`` and, given the GPUs the cluster offered,
    the cost of the GPU time nobody held (``__idle__``). A ValueError if the holdings claim
    more GPU time of a model and capacity type than the cluster offered;
    :class:`~gpufleet.economics.prices.MissingPriceError` if a price is missing."""
    held = tuple(holdings)
    costs = tuple(WorkloadCost(h, holding_cost(h, prices, window)) for h in held)
    idle = CostLine(IDLE)
    if capacity is not None:
        idle = _cluster_idle(held, tuple(capacity), prices, window)
    return Allocation(window, costs, idle, prices.currency)


def _cluster_idle(
    held: tuple[Holding, ...],
    offered: tuple[GpuCapacity, ...],
    prices: PriceList,
    window: Window,
) -> CostLine:
    offered_hours: dict[tuple[str, CapacityType], float] = defaultdict(float)
    product: dict[tuple[str, CapacityType], str] = {}
    for node in offered:
        key = (canonical_model(node.gpu_model), node.capacity)
        offered_hours[key] += node.gpus * window.overlap_hours(node.start, node.end)
        product.setdefault(key, node.gpu_model)
    held_hours: dict[tuple[str, CapacityType], float] = defaultdict(float)
    for holding in held:
        if holding.gpus > 0:
            key = (canonical_model(holding.gpu_model), holding.capacity)
            held_hours[key] += holding.gpus * window.overlap_hours(holding.start, holding.end)
    idle = CostLine(IDLE)
    for key in sorted(set(offered_hours) | set(held_hours)):
        spare = offered_hours[key] - held_hours[key]
        if spare < -_TOLERANCE * max(1.0, offered_hours[key]):
            model, capacity = key
            raise ValueError(
                f"workloads held {held_hours[key]:.6g} GPU-hours of {model} ({capacity}) in the "
                f"window, more than the {offered_hours[key]:.6g} the cluster offered"
            )
        if spare <= 0:
            continue
        rate = prices.gpu_rate(product[key], key[1])
        cost = spare * rate.hourly
        idle = idle.plus(CostLine(IDLE, spare, cost, 0.0, 0.0, 0.0, rate.estimated))
    return idle
