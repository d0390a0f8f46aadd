"""What the pods of a multi-tenant simulation cost: the rows of its cost section.

Owns :class:`CostRow` (one line of a cost report: a group's GPU-hours and what they cost,
split allocated / used / idle / unmeasured, as ``gpufleet cost`` shows them) and
:class:`CostSummary` (per run label and grouping: the lines and the total), the plain rows that
the terminal, the HTML report and ``results.json`` of ``gpufleet simulate --scenario`` show.

With several seeds a label's summary is its *median run*: the seed whose total allocated cost
is the median (the lower middle one of an even count), with every line of that run, so that
each line still reads ``allocated = used + idle + unmeasured`` and the lines add up to the
total, which medians taken column by column would not; every seed's total is kept beside it.
Money is rounded to a micro-unit, hours to a thousandth of a second. It prices nothing: the
reports come from :mod:`gpufleet.backends.sim.costs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.economics import CostGroup
from gpufleet.report.cells import HOURS, MONEY, PERCENT
from gpufleet.report.scenario_summary import LabelledRun

#: The name of a report's total line.
TOTAL = "__total__"


@dataclass(slots=True)
class CostRow:
    """One line: a group (``__unallocated__``: workloads without a value for the key;
    ``__idle__``: the GPU time nobody held; ``__total__``) of one run. ``gpu_util_pct``: the
    measured pods' used over allocated GPU cost (None: none measured)."""

    run: str
    seed: int
    group: str
    workloads: int
    gpu_hours: float = field(metadata=HOURS)
    allocated: float = field(metadata=MONEY)
    used: float = field(metadata=MONEY)
    idle: float = field(metadata=MONEY)
    unmeasured: float = field(metadata=MONEY)
    gpu_util_pct: float | None = field(metadata=PERCENT)
    #: GPU-hours held but not used (measured pods), nobody measured, of an unpriced model.
    idle_gpu_hours: float = field(metadata=HOURS)
    unmeasured_gpu_hours: float = field(metadata=HOURS)
    unpriced_gpu_hours: float = field(metadata=HOURS)
    gpu: float = field(metadata=MONEY)
    cpu: float = field(metadata=MONEY)
    memory: float = field(metadata=MONEY)
    #: Some price in it was estimated from an on-demand price.
    estimated: bool = False


@dataclass(slots=True)
class CostSummary:
    """The cost of one run label grouped ``by`` (keys joined by commas): the lines of its
    median run (``seed``), then ``total``; ``allocated_by_seed``: every seed's total."""

    run: str
    by: str
    seeds: list[int]
    seed: int
    currency: str
    lines: list[CostRow]
    total: CostRow
    allocated_by_seed: dict[int, float]
    #: Whether utilisation was sampled (False: every GPU pod is unmeasured).
    measured: bool = True
    unpriced_models: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[CostRow]:
        """The lines, then the total."""
        return [*self.lines, self.total]


def cost_row(run: str, seed: int, group: CostGroup) -> CostRow:
    """One line of a report as a row (a micro-unit of money: sums read cleanly)."""
    util = group.utilisation
    return CostRow(
        run=run,
        seed=seed,
        group=group.name,
        workloads=group.workloads,
        gpu_hours=_r(group.gpu_hours),
        allocated=_r(group.allocated),
        used=_r(group.used),
        idle=_r(max(group.idle, 0.0)),
        unmeasured=_r(group.gpu_unmeasured_cost),
        gpu_util_pct=None if util is None else round(util * 100, 2),
        idle_gpu_hours=_r(group.idle_gpu_hours),
        unmeasured_gpu_hours=_r(group.unmeasured_gpu_hours),
        unpriced_gpu_hours=_r(group.unpriced_gpu_hours),
        gpu=_r(group.gpu_cost),
        cpu=_r(group.cpu_cost),
        memory=_r(group.memory_cost),
        estimated=group.estimated,
    )


def median_run(runs: Sequence[LabelledRun]) -> LabelledRun:
    """The run whose total allocated cost is the median: the lower middle one of an even
    count, ties (to a micro-unit) by seed."""
    ranked = sorted(runs, key=lambda r: (_r(r.result.cost[0].total.allocated), r.seed))
    return ranked[(len(ranked) - 1) // 2]


def summarize_cost(runs: Sequence[LabelledRun]) -> list[CostSummary]:
    """Per run label and grouping (in the order asked), the lines of the label's median
    run."""
    out: list[CostSummary] = []
    for label in dict.fromkeys(r.label for r in runs):
        mine = [r for r in runs if r.label == label and r.result.cost]
        if not mine:
            continue
        chosen = median_run(mine)  # one run for every grouping: its tables agree
        for index, report in enumerate(chosen.result.cost):
            out.append(
                CostSummary(
                    run=label,
                    by=",".join(report.by),
                    seeds=[r.seed for r in mine],
                    seed=chosen.seed,
                    currency=report.currency,
                    lines=[cost_row(label, chosen.seed, g) for g in report.groups],
                    total=cost_row(label, chosen.seed, report.total),
                    allocated_by_seed={
                        r.seed: _r(r.result.cost[index].total.allocated) for r in mine
                    },
                    measured=report.measured,
                    unpriced_models=list(report.unpriced_models),
                    notes=list(report.notes),
                )
            )
    return out


def _r(value: float) -> float:
    return round(value, 6)
