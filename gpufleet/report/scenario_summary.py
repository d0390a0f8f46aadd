"""Summaries of multi-tenant runs: per queue, per run, and gpufleet's queues against FIFO.

Owns the plain rows that the terminal tables, the HTML report and ``results.json`` show: one
:class:`QueueSummary` per run label (policy and variant) and queue, one :class:`RunSummary` per
run label, and :class:`Comparison` rows of each policy's queues against its FIFO baseline. With
several seeds, every number is the median over the seeds (partial gangs and bind violations:
the worst or the sum, so a single bad seed shows). It computes nothing about scheduling: the
numbers come from :class:`~gpufleet.backends.sim.results.TenancyRun`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from statistics import median

from gpufleet.backends.sim.results import PendingReport, QueueStats, TenancyRun
from gpufleet.model.times import format_duration
from gpufleet.report.cells import CELL, DURATION, INSTANT, CellFormat

#: What the recorder calls workloads without a priority class.
NO_CLASS = "(none)"


class Variant(StrEnum):
    """How a scenario runs: through its queues (gpufleet's admission) or the FIFO baseline."""

    QUEUES = "queues"
    FIFO = "fifo"


@dataclass(frozen=True, slots=True)
class LabelledRun:
    """One run: placement policy, seed, variant, and what it measured."""

    policy: str
    seed: int
    variant: Variant
    result: TenancyRun

    @property
    def label(self) -> str:
        return run_label(self.policy, self.variant)


def run_label(policy: str, variant: Variant) -> str:
    return f"{policy}/{variant}"


@dataclass(slots=True)
class QueueSummary:
    """One queue of one run label (times in seconds, GPU amounts in GPUs)."""

    run: str
    queue: str
    #: 0 for a root queue, 1 for its children...
    depth: int
    seeds: list[int]
    nominal_gpus: float
    workloads: int
    admitted: int
    completed: int
    delay_p50: float = field(metadata=DURATION)
    delay_p95: float = field(metadata=DURATION)
    delay_max: float = field(metadata=DURATION)
    jct_p50: float = field(metadata=DURATION)
    gpu_hours_used: float
    gpu_hours_entitled: float
    preemptions: int
    gpu_hours_lost: float
    longest_short_of_nominal: float = field(metadata=DURATION)
    #: Workloads whose job failed, failed attempts of pods, containers restarted in place.
    failed: int = 0
    pod_failures: int = 0
    restarts: int = 0


@dataclass(slots=True)
class RunSummary:
    """One run label over its seeds (times in seconds)."""

    run: str
    seeds: list[int]
    allocation_busy_pct: float
    pod_delay_p50: float = field(metadata=DURATION)
    pod_delay_p95: float = field(metadata=DURATION)
    #: p95 workload queueing delay per priority class ("(none)": workloads without one).
    delay_p95_by_priority_class: dict[str, float] = field(metadata=DURATION)
    #: The highest priority class that had workloads, and its p95 delay (None: none of its
    #: workloads started).
    high_priority_class: str | None
    high_priority_p95: float | None = field(metadata=DURATION)
    workloads: int
    completed: int
    waiting_at_end: int
    partial_gangs: int
    preemptions: int
    gpu_hours_lost: float
    median_seconds: float = field(metadata=DURATION)
    bind_violations: int = 0
    #: Workloads whose job failed, failed attempts of pods, containers restarted in place.
    failed: int = 0
    pod_failures: int = 0
    restarts: int = 0


class Unit(StrEnum):
    PERCENT = "percent"
    SECONDS = "seconds"
    COUNT = "count"
    GPU_HOURS = "gpu-hours"

    def text(self, value: float) -> str:
        """A value in this unit for people: '81.3%', '39m09s', '1,204.5', '12'."""
        if self is Unit.PERCENT:
            return f"{value:.1f}%"
        if self is Unit.SECONDS:
            return format_duration(value)
        if self is Unit.GPU_HOURS:
            return f"{value:,.1f}"
        return f"{value:,.0f}"


#: A Comparison's values read in the row's unit.
BY_UNIT: Mapping[str, CellFormat] = {CELL: lambda value, row: row.unit.text(value)}


@dataclass(slots=True)
class Comparison:
    """One metric of a policy: with gpufleet's queues and with the FIFO baseline (None: no
    value, e.g. the delay of a class none of whose workloads started)."""

    policy: str
    metric: str
    unit: Unit
    queues: float | None = field(metadata=BY_UNIT)
    fifo: float | None = field(metadata=BY_UNIT)
    #: True when a lower value is better (delays), False when higher is (allocation).
    lower_is_better: bool = True


@dataclass(frozen=True, slots=True)
class QueueTree:
    """Queue parents (None: a root), in the order the scenario defines them."""

    parents: Mapping[str, str | None] = field(default_factory=dict)

    def ordered(self, names: Sequence[str]) -> list[tuple[str, int]]:
        """``names`` depth first (children under their parent), with their depth."""
        known = [n for n in names if n in self.parents]
        children: dict[str | None, list[str]] = {}
        for name in known:
            parent = self.parents[name]
            children.setdefault(parent if parent in known else None, []).append(name)
        out: list[tuple[str, int]] = []

        def visit(parent: str | None, depth: int) -> None:
            for name in children.get(parent, []):
                out.append((name, depth))
                visit(name, depth + 1)

        visit(None, 0)
        return out + [(n, 0) for n in names if n not in self.parents]


def _shown(stats: Sequence[QueueStats]) -> bool:
    """A queue worth a row: it has a quota, workloads, or GPU use (not an unused implicit one)."""
    return any(s.nominal_gpus or s.workloads or s.gpu_hours_used for s in stats)


def _labels(runs: Sequence[LabelledRun]) -> list[str]:
    return list(dict.fromkeys(r.label for r in runs))


def summarize_queues(runs: Sequence[LabelledRun], tree: QueueTree) -> list[QueueSummary]:
    rows: list[QueueSummary] = []
    for label in _labels(runs):
        mine = [r for r in runs if r.label == label]
        names = list(dict.fromkeys(q for r in mine for q in r.result.tenancy.queues))
        for name, depth in tree.ordered(names):
            stats = [r.result.tenancy.queues[name] for r in mine if name in r.result.tenancy.queues]
            if not _shown(stats):
                continue
            rows.append(
                QueueSummary(
                    run=label,
                    queue=name,
                    depth=depth,
                    seeds=[r.seed for r in mine],
                    nominal_gpus=stats[0].nominal_gpus,
                    workloads=_int_median(s.workloads for s in stats),
                    admitted=_int_median(s.admitted for s in stats),
                    completed=_int_median(s.completed for s in stats),
                    delay_p50=_median(s.queueing_delay.p50 for s in stats),
                    delay_p95=_median(s.queueing_delay.p95 for s in stats),
                    delay_max=_median(s.queueing_delay.max for s in stats),
                    jct_p50=_median(s.completion_time.p50 for s in stats),
                    gpu_hours_used=_median(s.gpu_hours_used for s in stats),
                    gpu_hours_entitled=_median(s.gpu_hours_entitled for s in stats),
                    preemptions=_int_median(s.preemptions for s in stats),
                    gpu_hours_lost=_median(s.gpu_hours_lost for s in stats),
                    longest_short_of_nominal=_median(s.longest_short_of_nominal for s in stats),
                    failed=_int_median(s.failed for s in stats),
                    pod_failures=_int_median(s.pod_failures for s in stats),
                    restarts=_int_median(s.restarts for s in stats),
                )
            )
    return rows


def high_priority_class(classes: Sequence[str], values: Mapping[str, int]) -> str | None:
    """The class of highest value among ``classes`` (unknown names rank lowest; None when no
    workload names a class)."""
    named = [c for c in classes if c != NO_CLASS]
    if not named:
        return None
    return max(named, key=lambda c: (values.get(c, -(2**63)), c))


def summarize_runs(
    runs: Sequence[LabelledRun],
    priority_values: Mapping[str, int],
    scenario_classes: Sequence[str] = (),
) -> list[RunSummary]:
    """``scenario_classes``: the priority classes the scenario's workloads use, so that the
    highest one is reported even when a run admitted none of its workloads."""
    rows = []
    for label in _labels(runs):
        mine = [r for r in runs if r.label == label]
        results = [r.result for r in mine]
        classes = list(
            dict.fromkeys(c for t in results for c in t.tenancy.queueing_delay_by_priority_class)
        )
        by_class = {
            c: _median(
                t.tenancy.queueing_delay_by_priority_class[c].p95
                for t in results
                if c in t.tenancy.queueing_delay_by_priority_class
            )
            for c in classes
        }
        high = high_priority_class(
            list(dict.fromkeys([*scenario_classes, *classes])), priority_values
        )
        rows.append(
            RunSummary(
                run=label,
                seeds=[r.seed for r in mine],
                allocation_busy_pct=_median(t.allocation_busy_pct for t in results),
                pod_delay_p50=_median(t.replay.queueing_delay.p50 for t in results),
                pod_delay_p95=_median(t.replay.queueing_delay.p95 for t in results),
                delay_p95_by_priority_class=by_class,
                high_priority_class=high,
                high_priority_p95=by_class.get(high) if high is not None else None,
                workloads=_int_median(_total(t, "workloads") for t in results),
                completed=_int_median(_total(t, "completed") for t in results),
                waiting_at_end=_int_median(len(t.waiting_at_end) for t in results),
                partial_gangs=max(t.tenancy.partial_gangs for t in results),
                preemptions=_int_median(t.tenancy.preemptions for t in results),
                gpu_hours_lost=_median(t.tenancy.gpu_hours_lost for t in results),
                median_seconds=_median(t.replay.seconds for t in results),
                bind_violations=sum(t.replay.bind_violations for t in results),
                failed=_int_median(_total(t, "failed") for t in results),
                pod_failures=_int_median(_total(t, "pod_failures") for t in results),
                restarts=_int_median(_total(t, "restarts") for t in results),
            )
        )
    return rows


def _total(run: TenancyRun, what: str) -> int:
    """Workloads (or completed ones) over all queues: each counts only in its own queue."""
    return sum(int(getattr(q, what)) for q in run.tenancy.queues.values())


#: Metrics compared with FIFO besides each priority class's p95 delay: name, unit, value,
#: and whether lower is better.
_COMPARED: tuple[tuple[str, Unit, Callable[[RunSummary], float], bool], ...] = (
    ("cluster GPU allocation (busy window)", Unit.PERCENT, lambda r: r.allocation_busy_pct, False),
    ("pod delay p50", Unit.SECONDS, lambda r: r.pod_delay_p50, True),
    ("pod delay p95", Unit.SECONDS, lambda r: r.pod_delay_p95, True),
    ("workloads completed", Unit.COUNT, lambda r: r.completed, False),
    ("waiting at the end", Unit.COUNT, lambda r: r.waiting_at_end, True),
    ("preemptions", Unit.COUNT, lambda r: r.preemptions, True),
    ("GPU-hours lost", Unit.GPU_HOURS, lambda r: r.gpu_hours_lost, True),
)


def compare_with_fifo(rows: Sequence[RunSummary], policies: Sequence[str]) -> list[Comparison]:
    """For each policy run both ways: the metrics side by side."""
    by_label = {r.run: r for r in rows}
    out: list[Comparison] = []
    for policy in policies:
        ours = by_label.get(run_label(policy, Variant.QUEUES))
        fifo = by_label.get(run_label(policy, Variant.FIFO))
        if ours is None or fifo is None:
            continue
        compared = [
            Comparison(policy, metric, unit, value(ours), value(fifo), lower)
            for metric, unit, value, lower in _COMPARED
        ]
        out += compared[:1]  # allocation, then each priority class's delay, then the others
        classes = dict.fromkeys(
            [*ours.delay_p95_by_priority_class, *fifo.delay_p95_by_priority_class]
        )
        out += [
            Comparison(
                policy,
                f"{name} p95 delay",
                Unit.SECONDS,
                ours.delay_p95_by_priority_class.get(name),
                fifo.delay_p95_by_priority_class.get(name),
            )
            for name in classes
        ]
        out += compared[1:]
    return out


@dataclass(slots=True)
class ExplainRow:
    """A waiting workload at a moment of one run (``at`` None: the end of the run)."""

    run: str
    seed: int
    at: float | None = field(metadata=INSTANT)
    workload: str
    queue: str
    position: int
    waiting_for: str
    message: str
    estimated_start: float | None = field(metadata=INSTANT)


@dataclass(slots=True)
class JobRow:
    """How one job of a run fared: its state (Succeeded, Failed, Running, Pending), why,
    completions done of those to do, failed pods (not restarted in place), containers
    restarted in place, and new clusters made for a RayJob."""

    run: str
    seed: int
    workload: str
    kind: str
    queue: str
    state: str
    reason: str
    completions: str
    failed_pods: int
    restarts: int
    retries: int


def job_rows(run: LabelledRun) -> list[JobRow]:
    return [
        JobRow(
            run.label, run.seed, j.workload, j.kind, j.queue, j.state, j.reason,
            f"{j.completed}/{j.completions}", j.failed_pods, j.restarts, j.retries,
        )
        for j in run.result.jobs
    ]  # fmt: skip


def explain_rows(run: LabelledRun, at_end: bool) -> list[ExplainRow]:
    reports: list[PendingReport] = run.result.waiting_at_end if at_end else run.result.waiting_at
    at = None if at_end else run.result.explained_at
    return [
        ExplainRow(
            run.label,
            run.seed,
            at,
            p.workload,
            p.queue,
            p.position,
            p.waiting_for,
            p.message,
            p.estimated_start,
        )
        for p in reports
    ]


def _median(values: Iterable[float]) -> float:
    items = [float(v) for v in values]
    return round(median(items), 3) if items else 0.0


def _int_median(values: Iterable[float]) -> int:
    return round(_median(values))
