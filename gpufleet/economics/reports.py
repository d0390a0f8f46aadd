"""A cost report: pod runs priced, split three ways, grouped, with the cluster's idle.

Owns :func:`cost_of_runs` and what it gives (:class:`CostReport`, its lines
:class:`CostGroup`, each pod run's :class:`RunCost`): the :class:`~gpufleet.economics.runs.PodRun`
records of any world over a window, with each pod's mean GPU utilisation where it was
measured, priced and split by :mod:`gpufleet.economics.allocation` (allocated, used, idle, as
OpenCost splits GPU cost), grouped by one or more keys (:func:`parse_by`:
:mod:`gpufleet.economics.aggregation`'s keys), plus the GPU time of the cluster's nodes nobody
held (``__idle__``). The control plane's report (:mod:`gpufleet.service.costing`) and the
simulator's (:mod:`gpufleet.backends.sim.costs`) are both this one.

Held time whose utilisation nobody measured (no sample stands for it:
:mod:`gpufleet.economics.coverage`, the definition the ``/metrics`` counters share; or a pod
absent from the mean utilisation given, or no utilisation at all) is *unmeasured*: its GPU cost
counts as allocated and as ``unmeasured``, never as used or idle, so
``allocated = used + idle + unmeasured`` on every line and no unmeasured pod reads
as 0 %. A GPU model the price list does not price is *unpriced*: its GPU-hours are reported,
at no cost (those held and, in ``__idle__``, those nobody held), and the report names the
model. Nothing here reads a clock, a file or a metric.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gpufleet.economics.aggregation import (
    UNALLOCATED,
    GroupKey,
    group_key,
    group_name,
    missing_key_notes,
)
from gpufleet.economics.allocation import IDLE, GpuCapacity, Holding, Window, allocate
from gpufleet.economics.coverage import Coverage, Span, coverage
from gpufleet.economics.prices import CapacityType, MissingPriceError, PriceList
from gpufleet.economics.runs import PodRun, capacity_type
from gpufleet.model.gpu import canonical_model
from gpufleet.model.node import Node

#: A running workload whose measured utilisation is below this holds its GPUs idly (the
#: built-in ``workload-gpu-idle`` alert rule's threshold).
IDLE_HOLDER_BELOW = 0.40
#: Grouping keys a report takes when none is given.
DEFAULT_BY = ("namespace",)


@dataclass(frozen=True, slots=True)
class CostGroup:
    """One line of a report: a group's GPU-hours and what they cost, split three ways."""

    name: str
    workloads: int = 0
    gpu_hours: float = 0.0
    #: GPU-hours held but not used (of measured pods: hours x (1 - utilisation)).
    idle_gpu_hours: float = 0.0
    unmeasured_gpu_hours: float = 0.0
    unpriced_gpu_hours: float = 0.0
    gpu_cost: float = 0.0
    gpu_used_cost: float = 0.0
    gpu_unmeasured_cost: float = 0.0
    cpu_cost: float = 0.0
    memory_cost: float = 0.0
    estimated: bool = False

    @property
    def allocated(self) -> float:
        return self.gpu_cost + self.cpu_cost + self.memory_cost

    @property
    def used(self) -> float:
        return self.gpu_used_cost + self.cpu_cost + self.memory_cost

    @property
    def idle(self) -> float:
        return self.gpu_cost - self.gpu_used_cost - self.gpu_unmeasured_cost

    @property
    def utilisation(self) -> float | None:
        """Used over allocated GPU cost of the measured pods; None: none was measured."""
        measured = self.gpu_cost - self.gpu_unmeasured_cost
        return self.gpu_used_cost / measured if measured > 0 else None

    def plus(self, other: CostGroup, name: str | None = None) -> CostGroup:
        return CostGroup(
            self.name if name is None else name,
            self.workloads + other.workloads,
            self.gpu_hours + other.gpu_hours,
            self.idle_gpu_hours + other.idle_gpu_hours,
            self.unmeasured_gpu_hours + other.unmeasured_gpu_hours,
            self.unpriced_gpu_hours + other.unpriced_gpu_hours,
            self.gpu_cost + other.gpu_cost,
            self.gpu_used_cost + other.gpu_used_cost,
            self.gpu_unmeasured_cost + other.gpu_unmeasured_cost,
            self.cpu_cost + other.cpu_cost,
            self.memory_cost + other.memory_cost,
            self.estimated or other.estimated,
        )


@dataclass(frozen=True, slots=True)
class RunCost:
    """One pod run and its cost: ``utilisation`` None when unmeasured."""

    run: PodRun
    cost: CostGroup
    utilisation: float | None
    priced: bool


@dataclass(frozen=True, slots=True)
class IdleHolder:
    """A running workload holding GPUs at low measured utilisation over the window."""

    workload: str
    namespace: str
    queue: str
    tenant: str
    kind: str
    gpus: float
    gpu_hours: float
    utilisation: float
    idle: float
    held_since: float


@dataclass(frozen=True, slots=True)
class CostReport:
    """The cost of a window grouped ``by``: the groups by allocated cost, highest first, then
    ``__unallocated__`` (workloads without a value for a key), then ``__idle__`` (the GPU time
    of the nodes nobody held, for callers who see the whole cluster); ``total`` adds them up."""

    window: Window
    by: tuple[str, ...]
    currency: str
    groups: tuple[CostGroup, ...]
    total: CostGroup
    runs: tuple[RunCost, ...]
    #: Whether the world's utilisation could be read at all.
    measured: bool
    unpriced_models: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def idle_holders(self, below: float = IDLE_HOLDER_BELOW) -> list[IdleHolder]:
        """Running workloads holding GPUs whose measured utilisation is below ``below``, the
        most idle cost first (unmeasured ones are not judged)."""
        by_workload: dict[str, list[RunCost]] = defaultdict(list)
        for item in self.runs:
            if item.run.running and item.run.gpus > 0 and item.utilisation is not None:
                by_workload[item.run.workload].append(item)
        holders = []
        for key, items in by_workload.items():
            hours = sum(i.cost.gpu_hours for i in items)
            if hours <= 0:
                continue
            mean = sum(i.cost.gpu_hours * (i.utilisation or 0.0) for i in items) / hours
            if mean >= below:
                continue
            first = items[0].run
            gpus = sum(i.run.gpus for i in items)
            idle = sum(i.cost.idle for i in items)
            since = min(i.run.start for i in items)
            holders.append(
                IdleHolder(
                    key,
                    first.namespace,
                    first.queue,
                    first.tenant,
                    first.kind,
                    gpus,
                    hours,
                    mean,
                    idle,
                    since,
                )
            )
        return sorted(holders, key=lambda h: (-h.idle, -h.gpu_hours, h.workload))


def parse_by(text: str | Sequence[str]) -> tuple[GroupKey, ...]:
    """The grouping keys of ``text`` (``team``, ``namespace,queue``, ``label:team``): a
    ValueError naming what keys are, for one that names nothing."""
    parts = [text] if isinstance(text, str) else list(text)
    keys = [part for chunk in parts for part in chunk.split(",")]
    if not keys:
        raise ValueError("by: give a grouping key (namespace, queue, tenant, workload, ...)")
    try:
        return tuple(group_key(key) for key in keys)
    except ValueError as error:
        raise ValueError(f"by: {error}") from None


def cost_of_runs(
    runs: Iterable[PodRun],
    nodes: Sequence[Node],
    prices: PriceList,
    window: Window,
    by: str | Sequence[str],
    utilisation: Mapping[tuple[str, str], float] | None,
    *,
    cluster_idle: bool = True,
    spans: Mapping[tuple[str, str], Sequence[Span]] | None = None,
) -> CostReport:
    """The report of ``runs`` within ``window``: see the module docstring. ``utilisation``:
    each pod's mean GPU utilisation (0 to 1) by (namespace, pod) over all its held time, a pod
    absent unmeasured; None: the world's utilisation could not be read at all (every pod
    unmeasured). ``spans``, where given, replaces it: each pod's utilisation samples as the
    time they stand for (:func:`gpufleet.economics.coverage.sample_spans`), its held time
    split used / idle / unmeasured by :func:`~gpufleet.economics.coverage.coverage`, which
    adds up over consecutive windows (a pod absent: all its held time unmeasured).
    ``nodes``: the cluster's, taken as present over the whole window, for ``__idle__``
    (``cluster_idle`` False leaves that line out: a caller who sees only some workloads)."""
    keys = parse_by(by)
    notes: list[str] = []
    inside = [r for r in runs if window.overlap_hours(r.start, r.end) > 0]
    unpriced: set[str] = set()
    costed = [_run_cost(r, prices, window, utilisation, spans, unpriced) for r in inside]
    groups: dict[str, CostGroup] = {}
    seen: dict[str, set[str]] = defaultdict(set)
    for item in costed:
        name = group_name(_holding(item.run, 0.0), keys)
        line = groups.get(name, CostGroup(name))
        new_workload = item.run.workload not in seen[name]
        seen[name].add(item.run.workload)
        groups[name] = line.plus(replace(item.cost, workloads=int(new_workload)), name)
    unallocated = groups.pop(UNALLOCATED, None)
    lines = sorted(groups.values(), key=lambda g: (-g.allocated, -g.gpu_hours, g.name))
    if unallocated is not None:
        lines.append(unallocated)
    if cluster_idle:
        idle = _cluster_idle(inside, nodes, prices, window, unpriced, notes)
        if idle is not None and idle.gpu_hours > 0:
            lines.append(idle)
    total = CostGroup("__total__")
    for line in lines:
        total = total.plus(line, "__total__")
    notes.extend(missing_key_notes(keys, [_holding(item.run, 0.0) for item in costed]))
    measured = utilisation is not None or spans is not None
    if not measured:
        notes.append("no utilisation could be read: GPU cost is allocated only (unmeasured)")
    if unpriced:
        notes.append(
            f"no price for GPU model {', '.join(sorted(unpriced))}: its GPU-hours are counted "
            "at no cost (add it to the price list)"
        )
    return CostReport(
        window, tuple(k.text for k in keys), prices.currency, tuple(lines), total,
        tuple(costed), measured, tuple(sorted(unpriced)), tuple(notes),
    )  # fmt: skip


# ----------------------------------------------------------------------------- helpers
def _holding(run: PodRun, utilisation: float) -> Holding:
    return Holding(
        run.name, run.namespace, run.start, run.end, run.gpus, run.gpu_model, run.capacity,
        utilisation, run.cpu, run.memory_gib, run.queue, run.tenant, run.labels,
        run.annotations,
    )  # fmt: skip


def _run_cost(
    run: PodRun,
    prices: PriceList,
    window: Window,
    utilisation: Mapping[tuple[str, str], float] | None,
    spans: Mapping[tuple[str, str], Sequence[Span]] | None,
    unpriced: set[str],
) -> RunCost:
    split = _split(run, window, utilisation, spans)
    measured = split.utilisation
    holding = _holding(run, measured or 0.0)
    priced = True
    try:
        line = allocate([holding], prices, window).workloads[0].cost
    except MissingPriceError:
        if run.gpus <= 0:
            raise
        priced = False
        unpriced.add(run.gpu_model)
        cpu_only = replace(holding, gpus=0.0, gpu_model="")
        line = allocate([cpu_only], prices, window).workloads[0].cost
    hours = run.gpus * window.overlap_hours(run.start, run.end)
    held = split.held_s
    used_f, idle_f, unmeasured_f = (
        (split.used_s / held, split.idle_s / held, split.unmeasured_s / held)
        if held > 0
        else (0.0, 0.0, 0.0)
    )
    if run.gpus <= 0:
        unmeasured_f = 0.0
    cost = CostGroup(
        line.name,
        1,
        hours,
        hours * idle_f if priced else 0.0,
        hours * unmeasured_f if priced else 0.0,
        0.0 if priced else hours,
        line.gpu_cost,
        line.gpu_cost * used_f,
        line.gpu_cost * unmeasured_f,
        line.cpu_cost,
        line.memory_cost,
        line.estimated,
    )
    return RunCost(run, cost, measured if run.gpus > 0 else None, priced)


def _split(
    run: PodRun,
    window: Window,
    utilisation: Mapping[tuple[str, str], float] | None,
    spans: Mapping[tuple[str, str], Sequence[Span]] | None,
) -> Coverage:
    """The run's held time in ``window``, split used / idle / unmeasured."""
    pod = (run.namespace, run.pod)
    if spans is not None:
        return coverage(run.start, run.end, spans.get(pod, ()), window)
    held = 3600 * window.overlap_hours(run.start, run.end)
    mean = None if utilisation is None else utilisation.get(pod)
    if mean is None:
        return Coverage(0.0, 0.0, held)
    return Coverage(held * mean, held * (1 - mean), 0.0)


def _cluster_idle(
    runs: Sequence[PodRun],
    nodes: Sequence[Node],
    prices: PriceList,
    window: Window,
    unpriced: set[str],
    notes: list[str],
) -> CostGroup | None:
    """The GPU time of ``nodes`` (taken as present over the whole window) nobody held; that of
    an unpriced model counted in hours (``unpriced_gpu_hours``), at no cost."""
    offered = []
    unpriced_offered: dict[str, float] = defaultdict(float)
    for node in nodes:
        model = node.gpu_model
        if not node.gpus or model is None:
            continue
        kind = capacity_type(node.labels)
        if not _priced(prices, model, kind):
            unpriced.add(model)
            unpriced_offered[canonical_model(model)] += node.gpu_count * window.hours
            continue
        offered.append(GpuCapacity(node.name, model, float(node.gpu_count), *_span(window), kind))
    held = []
    for r in runs:
        if r.gpus <= 0 or not r.gpu_model:
            continue
        if _priced(prices, r.gpu_model, r.capacity):
            held.append(_holding(r, 0.0))
        else:
            hours = r.gpus * window.overlap_hours(r.start, r.end)
            unpriced_offered[canonical_model(r.gpu_model)] -= hours
    try:
        idle = allocate(held, prices, window, offered).idle
    except ValueError as error:
        notes.append(f"the cluster's idle GPU time is left out: {error}")
        return None
    spare = sum(max(hours, 0.0) for hours in unpriced_offered.values())
    return CostGroup(
        IDLE, 0, idle.gpu_hours + spare, idle.gpu_hours, 0.0, spare, idle.gpu_cost, 0.0, 0.0,
        0.0, 0.0, idle.estimated,
    )  # fmt: skip


def _span(window: Window) -> tuple[float, float]:
    return window.start, window.end


def _priced(prices: PriceList, model: str, kind: CapacityType) -> bool:
    try:
        prices.gpu_rate(model, kind)
    except MissingPriceError:
        return False
    return True
