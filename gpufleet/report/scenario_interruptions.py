"""What a multi-tenant simulation's spot interruptions, node failures and GPU faults did: the
summary rows and the event rows.

Owns :class:`InterruptionSummary` (per run label: nodes reclaimed, failed and back, GPU faults
that crashed pods, pods lost and taken down with their gangs, restarts, jobs failed, GPU-hours
of work lost, and what spot capacity saved) and :class:`NodeFaultRow` (one notice, node gone or
back, or GPU crash of one run), the plain rows that the terminal, the HTML report and
``results.json`` of ``gpufleet simulate --scenario`` show. With several seeds a label's summary
is its *median run*: the seed whose GPU-hours lost are the median (the lower middle one of an
even count), with every number of that run, so that they agree with each other (net saved =
gross saved - lost work); every seed's GPU-hours lost are kept beside it. Runs without node
faults or GPU faults have no rows. It decides nothing: the numbers come from
:class:`~gpufleet.backends.sim.results.InterruptionReport`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.backends.sim.results import InterruptionReport
from gpufleet.report.cells import HOURS, INSTANT, MONEY
from gpufleet.report.scenario_summary import LabelledRun


@dataclass(slots=True)
class InterruptionSummary:
    """The interruptions of one run label (its median run, ``seed``; see the module
    docstring). Money is ``currency``; None where the run had no spot nodes with prices."""

    run: str
    seeds: list[int]
    seed: int
    spot_interruptions: int
    node_failures: int
    gpu_crashes: int
    nodes_back: int
    pods_lost: int
    pods_taken_down: int
    pods_checkpointed: int
    restarts: int
    jobs_failed: int
    gpu_hours_lost: float = field(metadata=HOURS)
    currency: str = ""
    spot_gpu_hours: float | None = field(default=None, metadata=HOURS)
    saved_gross: float | None = field(default=None, metadata=MONEY)
    lost_work_cost: float | None = field(default=None, metadata=MONEY)
    saved_net: float | None = field(default=None, metadata=MONEY)
    gpu_hours_lost_by_seed: dict[int, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        """One line for people: what the faults did and what spot saved."""
        text = (
            f"{self.spot_interruptions} spot interruption(s), {self.node_failures} node "
            f"failure(s), {self.gpu_crashes} GPU crash(es); {self.pods_lost} pod(s) lost, "
            f"{self.pods_taken_down} taken down with their gangs, {self.restarts} restart(s), "
            f"{self.jobs_failed} job(s) failed; {self.gpu_hours_lost:,.2f} GPU-h of work lost"
        )
        if self.saved_net is not None and self.saved_gross is not None:
            text += (
                f"; spot saved {self.saved_gross:,.2f} {self.currency} gross, "
                f"{self.saved_net:,.2f} net of the lost work"
            )
        return text


@dataclass(slots=True)
class NodeFaultRow:
    """One notice, node gone or back, or GPU crash of one run."""

    run: str
    seed: int
    at: float = field(metadata=INSTANT)
    node: str
    event: str
    fault: str
    pods: int
    gpu_hours_lost: float = field(metadata=HOURS)
    message: str


def _median_run(runs: Sequence[tuple[LabelledRun, InterruptionReport]]) -> int:
    ranked = sorted(range(len(runs)), key=lambda i: (runs[i][1].gpu_hours_lost, runs[i][0].seed))
    return ranked[(len(ranked) - 1) // 2]


def summarize_interruptions(runs: Sequence[LabelledRun]) -> list[InterruptionSummary]:
    """A row per run label whose runs had node faults or GPU faults."""
    rows: list[InterruptionSummary] = []
    for label in dict.fromkeys(r.label for r in runs):
        mine = [
            (r, r.result.interruptions)
            for r in runs
            if r.label == label and r.result.interruptions is not None
        ]
        if not mine:
            continue
        chosen, report = mine[_median_run(mine)]
        savings = report.savings
        rows.append(
            InterruptionSummary(
                run=label,
                seeds=[r.seed for r, _ in mine],
                seed=chosen.seed,
                spot_interruptions=report.spot_interruptions,
                node_failures=report.node_failures,
                gpu_crashes=report.gpu_crashes,
                nodes_back=report.nodes_back,
                pods_lost=report.pods_lost,
                pods_taken_down=report.pods_taken_down,
                pods_checkpointed=report.pods_checkpointed,
                restarts=report.restarts,
                jobs_failed=report.jobs_failed,
                gpu_hours_lost=report.gpu_hours_lost,
                currency=savings.currency if savings else "",
                spot_gpu_hours=savings.spot_gpu_hours if savings else None,
                saved_gross=savings.gross_saved if savings else None,
                lost_work_cost=savings.lost_cost if savings else None,
                saved_net=savings.net_saved if savings else None,
                gpu_hours_lost_by_seed={r.seed: x.gpu_hours_lost for r, x in mine},
                notes=list(savings.notes) if savings else [],
            )
        )
    return rows


def node_fault_rows(run: LabelledRun) -> list[NodeFaultRow]:
    """The events of one run, in time order."""
    report = run.result.interruptions
    if report is None:
        return []
    return [
        NodeFaultRow(
            run.label, run.seed, e.at, e.node, e.event, e.fault, e.pods, e.gpu_hours_lost,
            e.message,
        )
        for e in report.events
    ]  # fmt: skip
