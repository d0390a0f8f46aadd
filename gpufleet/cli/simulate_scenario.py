"""``gpufleet simulate --scenario``: multi-tenant replays through queues, quotas, priorities,
gangs and preemption, optionally against the FIFO baseline, with explanations of who waits.

Owns the command's flow (scenario, runs with progress bars, terminal tables, report and JSON)
and its terminal output. The scenario comes from :mod:`gpufleet.cli.scenarios`, the runs from
:mod:`gpufleet.cli.scenario_pool`, the numbers from :mod:`gpufleet.report.scenario_summary`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpufleet.backends.sim.scenarios import TenantScenario
from gpufleet.cli.common import (
    EXIT_FAILED,
    check_policies,
    console,
    ensure_dir,
    fail,
    friendly_errors,
    parse_duration,
    parse_seeds,
    warn,
)
from gpufleet.cli.scenario_pool import ScenarioTask, Shared, run_scenario_tasks
from gpufleet.cli.scenarios import ScenarioOptions, Scenarios, load_scenarios
from gpufleet.cli.tables import show
from gpufleet.control.profiles import load_profile
from gpufleet.model.times import format_duration, simulated_time
from gpufleet.report.html import NamedTable, write_report
from gpufleet.report.scenario_html import scenario_figures
from gpufleet.report.scenario_idle import IdleSummary, idle_action_rows, summarize_idle
from gpufleet.report.scenario_summary import (
    NO_CLASS,
    Comparison,
    ExplainRow,
    LabelledRun,
    QueueSummary,
    QueueTree,
    RunSummary,
    Unit,
    Variant,
    compare_with_fifo,
    explain_rows,
    job_rows,
    summarize_queues,
    summarize_runs,
)
from gpufleet.report.summary import write_json
from gpufleet.scheduling.admission import AdmissionConfig, model_quota_warnings
from gpufleet.scheduling.profile import DEFAULT_PROFILE

DEFAULT_POLICIES = ["default"]
#: Explanation rows per table in the HTML report (results.json has them all).
HTML_EXPLAIN_ROWS = 500
END = "end"


class Baseline(StrEnum):
    FIFO = "fifo"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class ScenarioArgs:
    """The command line of a ``--scenario`` run, parsed by typer, not yet checked."""

    scenario: list[str]
    options: ScenarioOptions
    policy: list[str] | None
    seeds: str
    out: Path | None
    workers: int
    baseline: Baseline
    explain_at: str | None
    explain_limit: int
    backfill: bool
    profile: Path | None = None
    idle_dry_run: bool = False


@friendly_errors
def simulate_scenarios(args: ScenarioArgs) -> None:
    policies = check_policies(args.policy or DEFAULT_POLICIES)
    seeds = parse_seeds(args.seeds)
    if args.explain_limit < 0:
        raise fail("--explain-limit must be 0 or more")
    explain_at = _explain_time(args.explain_at)
    # Read before the scenarios (which may take a while): a bad profile is told at once.
    profile = DEFAULT_PROFILE if args.profile is None else load_profile(args.profile)
    scenarios = load_scenarios(args.scenario, seeds, args.options)
    variants = [Variant.QUEUES] + ([Variant.FIFO] if args.baseline is Baseline.FIFO else [])
    tasks = [ScenarioTask(p, s, v) for p in policies for s in seeds for v in variants]
    console.print(f"cluster:  {scenarios.cluster_label}")
    console.print(f"scenario: {scenarios.description}")
    console.print(
        f"replay with queues; policies {', '.join(policies)}, seeds {args.seeds}"
        + (", with the FIFO baseline" if args.baseline is Baseline.FIFO else "")
        + f", {args.workers} worker(s)"
    )
    first = scenarios.by_seed[seeds[0]]
    models = [n.gpu_model for n in first.nodes if n.gpu_model is not None]
    for message in model_quota_warnings(first.scenario.queues, models):
        warn(message)
    config = AdmissionConfig(backfill=args.backfill)
    if args.profile is not None:
        console.print(f"profile:  {profile.name} ({args.profile})")
    idle_policies = first.idle_policies
    if idle_policies:
        names = ", ".join(p.name for p in idle_policies)
        mode = " (dry run: report only)" if args.idle_dry_run else ""
        console.print(f"idle:     IdlePolicy {names}{mode}; not in the FIFO baseline")
    elif args.idle_dry_run:
        warn("--idle-dry-run: the scenario has no IdlePolicy, so there is nothing to report")
    shared = Shared(scenarios.by_seed, config, explain_at, profile, args.idle_dry_run)
    runs = _run_with_progress(shared, tasks, args.workers)

    summaries = summarize(runs, scenarios.by_seed[seeds[0]].scenario, policies, args.idle_dry_run)
    print_queue_table(summaries.queues, len(seeds))
    for row in summaries.runs:
        print_run_line(row)
    for idle in summaries.idle:
        console.print(f"[bold]{idle.run} idle policies[/]: {idle.line}")
    print_comparison(summaries.comparison)
    for run in runs:
        if run.variant is Variant.QUEUES and run.seed == seeds[0]:
            print_budgets(run)
    for run in runs:
        if run.variant is Variant.QUEUES and run.seed == seeds[0] and run.result.jobs:
            print_jobs(run, args.explain_limit)
    if args.explain_at is not None:
        for run in runs:
            if run.variant is Variant.QUEUES:
                if explain_at is not None:
                    print_explain(run, at_end=False, limit=args.explain_limit)
                print_explain(run, at_end=True, limit=args.explain_limit)

    directory = ensure_dir(
        args.out or Path("gpufleet-results") / dt.datetime.now().strftime("tenancy-%Y%m%d-%H%M%S")
    )
    _write_report(directory, scenarios, args.seeds, policies, explain_at, runs, summaries)
    write_json(
        directory / "results.json",
        {
            "mode": "tenancy",
            "scenario": scenarios.name,
            "description": scenarios.description,
            "cluster": scenarios.cluster_label,
            "policies": policies,
            "seeds": seeds,
            "baseline": str(args.baseline),
            "admission": config,
            "explain_at": explain_at,
            "summary": summaries,
            "runs": runs,
        },
    )
    partial = sum(r.partial_gangs for r in summaries.runs)
    violations = sum(r.bind_violations for r in summaries.runs)
    if partial:
        raise fail(f"{partial} gangs held only part of their pods (must be 0)", EXIT_FAILED)
    if violations:
        raise fail(f"{violations} binds were refused by the simulated cluster", EXIT_FAILED)
    console.print(f"report:  {directory / 'report.html'}")
    console.print(f"results: {directory / 'results.json'}")


@dataclass(slots=True)
class Summaries:
    runs: list[RunSummary]
    queues: list[QueueSummary]
    comparison: list[Comparison]
    #: What the IdlePolicies did, per run label that had them.
    idle: list[IdleSummary] = field(default_factory=list)


def summarize(
    runs: Sequence[LabelledRun],
    scenario: TenantScenario,
    policies: Sequence[str],
    idle_dry_run: bool = False,
) -> Summaries:
    tree = QueueTree({name: q.parent for name, q in scenario.queues.items()})
    values = {name: c.value for name, c in scenario.priority_classes.items()}
    used = sorted({t.workload.priority_class or NO_CLASS for t in scenario.workloads})
    run_rows = summarize_runs(runs, values, used)
    return Summaries(
        run_rows,
        summarize_queues(runs, tree),
        compare_with_fifo(run_rows, policies),
        summarize_idle(runs, idle_dry_run),
    )


def _explain_time(text: str | None) -> float | None:
    if text is None or text.strip().lower() == END:
        return None
    return parse_duration(text)


def _run_with_progress(
    shared: Shared, tasks: list[ScenarioTask], workers: int
) -> list[LabelledRun]:
    columns = (
        TextColumn("{task.description:<26}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("pods arrived"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bars = [
            progress.add_task(
                f"{t.policy}/{t.variant} seed {t.seed}", total=shared.by_seed[t.seed].pods
            )
            for t in tasks
        ]

        def update(index: int, done: int, total: int) -> None:
            progress.update(bars[index], completed=done, total=total)

        results = run_scenario_tasks(shared, tasks, workers, update)
        for bar in bars:
            progress.update(bar, completed=progress.tasks[bar].total)
    return results


# ------------------------------------------------------------------------------ terminal


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


# ------------------------------------------------------------------------------ files


def _write_report(
    directory: Path,
    scenarios: Scenarios,
    seeds: str,
    policies: list[str],
    explain_at: float | None,
    runs: list[LabelledRun],
    summaries: Summaries,
) -> None:
    firsts: dict[str, LabelledRun] = {}
    for run in runs:
        if run.variant is Variant.QUEUES:
            firsts.setdefault(run.label, run)
    appendix: list[NamedTable] = []
    for run in firsts.values():
        if explain_at is not None:
            appendix.append(
                (
                    f"Waiting at {simulated_time(explain_at)} ({run.label}, seed {run.seed})",
                    "Times are simulated (t=: since the start); results.json has every row.",
                    explain_rows(run, at_end=False)[:HTML_EXPLAIN_ROWS],
                )
            )
        appendix.append(
            (
                f"Waiting at the end ({run.label}, seed {run.seed})",
                "Times are simulated (t=: since the start); results.json has every row.",
                explain_rows(run, at_end=True)[:HTML_EXPLAIN_ROWS],
            )
        )
        if run.result.idle is not None and run.result.idle.decisions:
            appendix.append(
                (
                    f"Idle-policy actions ({run.label}, seed {run.seed})",
                    "Each step an IdlePolicy took (in a dry run: would have taken), with the "
                    "numbers that triggered it. results.json has every row.",
                    idle_action_rows(run)[:HTML_EXPLAIN_ROWS],
                )
            )
        if run.result.jobs:
            appendix.append(
                (
                    f"Jobs ({run.label}, seed {run.seed})",
                    "Completions: a Job's, else its Master's, Launcher's or Ray job's. Failed: "
                    "pods that failed and were not restarted in place. results.json has every "
                    "row.",
                    job_rows(run)[:HTML_EXPLAIN_ROWS],
                )
            )
    write_report(
        directory / "report.html",
        f"gpufleet multi-tenant simulation: {scenarios.name}",
        f"{scenarios.description}. Cluster: {scenarios.cluster_label}. Policies "
        f"{', '.join(policies)}; seeds {seeds}.",
        summaries.runs,
        scenario_figures(runs, summaries.queues),
        tables=[
            (
                "Per queue",
                "Median over seeds. GPU amounts in GPUs; GPU-hours used and "
                "entitled count a parent queue's whole subtree.",
                summaries.queues,
            ),
            ("gpufleet queues vs FIFO baseline", "", summaries.comparison),
            (
                "Idle GPU reclaim",
                "What the scenario's IdlePolicies did (median over seeds): GPU-hours the "
                "stopped workloads would still have held, actions by kind, workloads stopped "
                "(stopped: the first seed's). The FIFO baseline runs without them.",
                summaries.idle,
            ),
        ],
        appendix=appendix,
    )
