"""What a multi-tenant simulation's idle policies did: summary rows and action rows.

Owns :class:`IdleSummary` (per run label, median over its seeds: GPU-hours reclaimed, actions by
kind, workloads stopped, training stopped) and :class:`IdleActionRow` (one decision of one run:
who, what, when, with the numbers that triggered it), the plain rows that the terminal, the
HTML report and ``results.json`` of ``gpufleet simulate --scenario`` show. Runs without idle
policies have no rows. It decides nothing: the numbers come from
:class:`~gpufleet.backends.sim.idle_reclaim.IdleReport`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median

from gpufleet.report.cells import DURATION, INSTANT
from gpufleet.report.scenario_summary import LabelledRun


@dataclass(slots=True)
class IdleSummary:
    """The idle policies of one run label (median over its seeds; ``stopped``: the first
    seed's stopped workloads by name)."""

    run: str
    seeds: list[int]
    dry_run: bool
    gpu_hours_reclaimed: float
    #: Decisions by action (Notify, Checkpoint, Stop...), carried out or, in a dry run, not.
    actions: dict[str, int]
    workloads_stopped: int
    #: Training workloads stopped (a policy must name their kind for that to happen).
    training_stopped: int
    stopped: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        """One line for people: what the policies did."""
        acted = ", ".join(f"{n} {action}" for action, n in self.actions.items()) or "none"
        text = (
            f"{self.gpu_hours_reclaimed:,.1f} GPU-h reclaimed; actions: {acted}; "
            f"{self.workloads_stopped} workload(s) stopped"
        )
        if self.dry_run:
            text = f"dry run, nothing carried out: {text}"
        if self.training_stopped:
            text += f", {self.training_stopped} of them training"
        return text


@dataclass(slots=True)
class IdleActionRow:
    """One step an idle policy took (or, in a dry run, would have taken) in one run."""

    run: str
    seed: int
    at: float = field(metadata=INSTANT)
    workload: str
    action: str
    policy: str
    mean_util_pct: float
    idle_for: float = field(metadata=DURATION)
    gpus: float
    message: str


def summarize_idle(runs: Sequence[LabelledRun], dry_run: bool = False) -> list[IdleSummary]:
    """A row per run label whose runs had idle policies (``dry_run``: they only reported)."""
    rows: list[IdleSummary] = []
    for label in dict.fromkeys(r.label for r in runs):
        mine = [r for r in runs if r.label == label and r.result.idle is not None]
        reports = [r.result.idle for r in mine if r.result.idle is not None]
        if not reports:
            continue
        counts = [report.actions() for report in reports]
        kinds = list(dict.fromkeys(a for count in counts for a in count))
        actions = {a: round(median(count.get(a, 0) for count in counts)) for a in kinds}
        rows.append(
            IdleSummary(
                run=label,
                seeds=[r.seed for r in mine],
                dry_run=dry_run or any(d.dry_run for report in reports for d in report.decisions),
                gpu_hours_reclaimed=round(median(x.gpu_hours_reclaimed for x in reports), 3),
                actions=actions,
                workloads_stopped=round(median(len(x.stopped) for x in reports)),
                training_stopped=max(len(x.stopped_training) for x in reports),
                stopped=list(reports[0].stopped),
            )
        )
    return rows


def idle_action_rows(run: LabelledRun) -> list[IdleActionRow]:
    """The decisions of one run, in the order they were taken."""
    if run.result.idle is None:
        return []
    return [
        IdleActionRow(
            run.label, run.seed, d.at, d.workload, d.action.value, d.policy,
            round(d.mean_util_pct, 2), d.idle_for_s, d.gpus, d.message,
        )
        for d in run.result.idle.decisions
    ]  # fmt: skip
