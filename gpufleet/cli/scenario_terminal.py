"""The terminal output of ``gpufleet simulate --scenario``: its tables and summary lines.

Owns how a multi-tenant run's numbers read on the terminal: the per-queue table, a line per
run label, each queue's GPU-hour budget at the end, gpufleet's queues against the FIFO
baseline, who waits and why (at a moment and at the end), and the jobs. The numbers are
:mod:`gpufleet.report.scenario_summary`'s; the cost table is
:mod:`gpufleet.cli.scenario_cost`'s; the command's flow is
:mod:`gpufleet.cli.simulate_scenario`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from gpufleet.cli.inputs import console
from gpufleet.cli.tables import show
from gpufleet.model.times import format_duration, simulated_time
from gpufleet.report.scenario_summary import (
    Comparison,
    ExplainRow,
    LabelledRun,
    QueueSummary,
    RunSummary,
    Unit,
    explain_rows,
    job_rows,
)


def _duration(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def _gpus(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def print_queue_table(rows: Sequence[QueueSummary], seeds: int) -> None:
    table = Table(
        title="Per queue" + (f" (median over {seeds} seeds)" if seeds > 1 else ""),
        caption="delay: arrival to the whole gang running; JCT: arrival to completion; "
        "GPU-h used/entitled count a parent's whole subtree; short: the longest spell below "
        "nominal quota while a waiting workload would fit in it.",
    )
    table.add_column("run", no_wrap=True)
    table.add_column("queue", no_wrap=True)
    for column in (
        "nominal GPUs",
        "work-loads",
        "delay p50 / p95",
        "JCT p50",
        "GPU-h used / entitled",
        "preempted (GPU-h lost)",
        "short",
    ):
        table.add_column(column, justify="right", no_wrap=True)
    last = None
    for row in rows:
        first = row.run != last
        if first and last is not None:
            table.add_section()
        last = row.run
        started = row.admitted > 0
        table.add_row(
            row.run if first else "",
            "  " * row.depth + row.queue,
            _gpus(row.nominal_gpus),
            str(row.workloads) + (f" ({row.failed} failed)" if row.failed else ""),
            f"{_duration(row.delay_p50)} / {_duration(row.delay_p95)}" if started else "-",
            _duration(row.jct_p50) if row.completed else "-",
            f"{row.gpu_hours_used:,.1f} / {row.gpu_hours_entitled:,.1f}",
            f"{row.preemptions} ({row.gpu_hours_lost:,.1f})",
            _duration(row.longest_short_of_nominal),
        )
    show(table)


def print_run_line(row: RunSummary) -> None:
    gangs = (
        "[green]partial gangs 0[/]"
        if not row.partial_gangs
        else f"[bold red]partial gangs {row.partial_gangs}[/]"
    )
    parts = [
        f"GPU allocation {row.allocation_busy_pct:.1f}% (first to last arrival)",
        gangs,
    ]
    if row.high_priority_class is not None:
        delay = (
            "none started"
            if row.high_priority_p95 is None
            else f"p95 delay {_duration(row.high_priority_p95)}"
        )
        parts.append(f"{row.high_priority_class} (highest priority): {delay}")
    parts.append(f"{row.preemptions} preemptions ({row.gpu_hours_lost:,.1f} GPU-h lost)")
    parts.append(f"{row.completed}/{row.workloads} workloads completed")
    if row.failed or row.pod_failures or row.restarts:
        parts.append(
            f"{row.failed} failed ({row.pod_failures} failed attempts, "
            f"{row.restarts} restarts in place)"
        )
    parts.append(f"{row.waiting_at_end} waiting at the end")
    console.print(f"[bold]{row.run}[/]: " + "; ".join(parts))


def print_budgets(run: LabelledRun) -> None:
    """Each queue's GPU-hour budget at the end of the run (nothing if no queue has one)."""
    for b in run.result.budgets_at_end:
        state = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]"}.get(b.state, "[red]exhausted[/]")
        console.print(
            f"[bold]{run.label}[/] budget of queue {b.queue}: {b.used_gpu_hours:,.1f} of "
            f"{b.gpu_hours:g} GPU-hours per {b.period}, {state} (at 100%: {b.action})"
        )


def _value(unit: Unit, value: float | None) -> str:
    if value is None:
        return "none started" if unit is Unit.SECONDS else "-"
    return unit.text(value)


def print_comparison(rows: Sequence[Comparison]) -> None:
    for policy in dict.fromkeys(r.policy for r in rows):
        console.print(f"[bold]{policy}: gpufleet queues vs FIFO baseline[/]")
        for row in (r for r in rows if r.policy == policy):
            ours, fifo = _value(row.unit, row.queues), _value(row.unit, row.fifo)
            mark = ""
            if row.queues is not None and row.fifo is not None and ours != fifo:
                better = (row.queues < row.fifo) == row.lower_is_better
                mark = " [green](better)[/]" if better else " [red](worse)[/]"
            console.print(f"  {row.metric}: {ours} vs {fifo}{mark}")


def print_explain(run: LabelledRun, at_end: bool, limit: int) -> None:
    rows = sorted(explain_rows(run, at_end), key=lambda r: (r.position, r.queue))
    explained_at = run.result.explained_at
    when = "the end" if at_end or explained_at is None else simulated_time(explained_at)
    title = f"Waiting at {when} ({run.label}, seed {run.seed}): {len(rows)} workloads"
    if not rows:
        at = run.result.explained_at
        ended = run.result.replay.simulated_seconds
        if not at_end and at is not None and at > ended:
            console.print(f"{title} (the run ended at {simulated_time(ended)}, before {when})")
        else:
            console.print(title)
        return
    shown = rows[:limit]
    table = Table(
        title=title,
        caption=(
            f"{len(rows) - len(shown)} more in results.json (--explain-limit)"
            if len(shown) < len(rows)
            else None
        ),
    )
    table.add_column("workload", no_wrap=True)
    table.add_column("queue", no_wrap=True)
    table.add_column("pos", justify="right", no_wrap=True)
    table.add_column("waiting for", no_wrap=True)
    table.add_column("why", overflow="fold")
    table.add_column("est. start", justify="right", no_wrap=True)
    for row in shown:
        table.add_row(
            row.workload,
            row.queue,
            str(row.position),
            row.waiting_for,
            row.message,
            _start(row, at_end),
        )
    show(table)


def print_jobs(run: LabelledRun, limit: int) -> None:
    """The jobs of a run (Jobs, training jobs, Ray clusters and jobs, pods that may fail)."""
    rows = job_rows(run)
    shown = rows[:limit]
    table = Table(
        title=f"Jobs ({run.label}, seed {run.seed})",
        caption=(
            f"{len(rows) - len(shown)} more in results.json (--explain-limit)"
            if len(shown) < len(rows)
            else "completions: a Job's, else its Master's, Launcher's or Ray job's; failed: "
            "pods that failed (not restarted in place)"
        ),
    )
    for column in ("workload", "kind", "queue", "state", "reason"):
        table.add_column(column, no_wrap=column != "reason", overflow="fold")
    for column in ("completions", "failed", "restarts"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in shown:
        state = {"Failed": "[red]Failed[/]", "Succeeded": "[green]Succeeded[/]"}.get(
            row.state, row.state
        )
        table.add_row(
            row.workload, row.kind, row.queue, state, row.reason, row.completions,
            str(row.failed_pods), str(row.restarts),
        )  # fmt: skip
    show(table)


def _start(row: ExplainRow, at_end: bool) -> str:
    if row.estimated_start is None:
        return "-"
    text = simulated_time(row.estimated_start)
    if not at_end and row.at is not None:
        text += f" (in {format_duration(max(0.0, row.estimated_start - row.at))})"
    return text
