"""``gpufleet simulate --scenario``: multi-tenant replays through queues, quotas, priorities,
gangs and preemption, optionally against the FIFO baseline, with explanations of who waits.

Owns the command's flow (scenario, runs with progress bars, terminal tables, report and JSON).
The scenario comes from :mod:`gpufleet.cli.scenarios`, the runs from
:mod:`gpufleet.cli.scenario_pool`, the numbers from :mod:`gpufleet.report.scenario_summary`
(the cost's from :mod:`gpufleet.report.scenario_cost`, the node pools' from
:mod:`gpufleet.report.scenario_pools`), the terminal tables from
:mod:`gpufleet.cli.scenario_terminal` (the cost's, and its options, from
:mod:`gpufleet.cli.scenario_cost`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.backends.sim.scenarios import TenantScenario
from gpufleet.cli.inputs import (
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
from gpufleet.cli.scenario_cost import announce, cost_options, print_cost
from gpufleet.cli.scenario_pool import ScenarioTask, Shared, run_scenario_tasks
from gpufleet.cli.scenario_terminal import (
    print_budgets,
    print_comparison,
    print_explain,
    print_jobs,
    print_queue_table,
    print_run_line,
)
from gpufleet.cli.scenarios import ScenarioOptions, Scenarios, load_scenarios
from gpufleet.control.profiles import load_profile
from gpufleet.model.times import simulated_time
from gpufleet.report.html import NamedTable, write_report
from gpufleet.report.scenario_cost import CostSummary, summarize_cost
from gpufleet.report.scenario_html import cost_section, scenario_figures
from gpufleet.report.scenario_idle import IdleSummary, idle_action_rows, summarize_idle
from gpufleet.report.scenario_interruptions import (
    InterruptionSummary,
    node_fault_rows,
    summarize_interruptions,
)
from gpufleet.report.scenario_pools import PoolSummary, pools_section, summarize_pools
from gpufleet.report.scenario_serving import ServingSummary, serving_section, summarize_serving
from gpufleet.report.scenario_summary import (
    NO_CLASS,
    Comparison,
    LabelledRun,
    QueueSummary,
    QueueTree,
    RunSummary,
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
    prices: Path | None = None
    cost_by: list[str] | None = None


@friendly_errors
def simulate_scenarios(args: ScenarioArgs) -> None:
    policies = check_policies(args.policy or DEFAULT_POLICIES)
    seeds = parse_seeds(args.seeds)
    if args.explain_limit < 0:
        raise fail("--explain-limit must be 0 or more")
    explain_at = _explain_time(args.explain_at)
    # Read before the scenarios (which may take a while): a bad profile, price list or
    # --cost-by is told at once.
    profile = DEFAULT_PROFILE if args.profile is None else load_profile(args.profile)
    costing = cost_options(args.prices, args.cost_by)
    scenarios = load_scenarios(args.scenario, seeds, args.options, costing.prices)
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
    if first.node_pools is not None:
        models += [p.gpu_model for p in first.node_pools.pools if p.gpu_model is not None]
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
    node_faults = first.scenario.node_faults
    if node_faults:
        described = "; ".join(f"{f.label} on {f.selection.describe()}" for f in node_faults)
        console.print(f"faults:   {described} (random times drawn per seed)")
    cost = costing.settings(first.scenario.workloads)
    announce(costing, cost)
    shared = Shared(scenarios.by_seed, config, explain_at, profile, args.idle_dry_run, cost)
    runs = _run_with_progress(shared, tasks, args.workers)

    summaries = summarize(
        runs,
        scenarios.by_seed[seeds[0]].scenario,
        policies,
        args.idle_dry_run,
        costing.prices.currency,
    )
    print_queue_table(summaries.queues, len(seeds))
    for row in summaries.runs:
        print_run_line(row)
    for idle in summaries.idle:
        console.print(f"[bold]{idle.run} idle policies[/]: {idle.line}")
    for lost in summaries.interruptions:
        console.print(f"[bold]{lost.run} interruptions[/]: {escape(lost.line)}")
    for note in dict.fromkeys(n for lost in summaries.interruptions for n in lost.notes):
        warn(escape(f"spot savings: {note}"))
    for pools in summaries.pools:
        console.print(f"[bold]{pools.run} node pools[/]: {escape(pools.line)}")
    print_cost(summaries.cost)
    for serving in summaries.serving:
        console.print(f"[bold]{serving.run} served[/] {escape(serving.line)}")
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
    _write_report(
        directory, scenarios, args.seeds, policies, explain_at, runs, summaries, costing.source
    )
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
            "prices": {
                "source": costing.source,
                "name": costing.prices.name,
                "currency": costing.prices.currency,
            },
            "cost_by": [",".join(g) for g in cost.groupings],
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
    #: What the pods cost, per run label and grouping.
    cost: list[CostSummary] = field(default_factory=list)
    #: What the inference services' requests met, per run label and service.
    serving: list[ServingSummary] = field(default_factory=list)
    #: What spot interruptions, node failures and GPU faults did, per run label that had them.
    interruptions: list[InterruptionSummary] = field(default_factory=list)
    #: What the node pools did and cost, per run label that had them.
    pools: list[PoolSummary] = field(default_factory=list)


def summarize(
    runs: Sequence[LabelledRun],
    scenario: TenantScenario,
    policies: Sequence[str],
    idle_dry_run: bool = False,
    currency: str = "",
) -> Summaries:
    """The numbers of every table (``currency``: the price list's, for the pools' cost)."""
    tree = QueueTree({name: q.parent for name, q in scenario.queues.items()})
    values = {name: c.value for name, c in scenario.priority_classes.items()}
    used = sorted({t.workload.priority_class or NO_CLASS for t in scenario.workloads})
    run_rows = summarize_runs(runs, values, used)
    return Summaries(
        run_rows,
        summarize_queues(runs, tree),
        compare_with_fifo(run_rows, policies),
        summarize_idle(runs, idle_dry_run),
        summarize_cost(runs),
        summarize_serving(runs),
        summarize_interruptions(runs),
        summarize_pools(runs, currency),
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


# ------------------------------------------------------------------------------ files


def _write_report(
    directory: Path,
    scenarios: Scenarios,
    seeds: str,
    policies: list[str],
    explain_at: float | None,
    runs: list[LabelledRun],
    summaries: Summaries,
    prices: str,
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
        if run.result.interruptions is not None and run.result.interruptions.events:
            appendix.append(
                (
                    f"Nodes lost and GPU faults ({run.label}, seed {run.seed})",
                    "Each notice, node gone (with the pods it took and the GPU-hours of work "
                    "they and their gangs lost since their last checkpoints), node back, and "
                    "GPU fault that crashed pods. results.json has every row.",
                    node_fault_rows(run)[:HTML_EXPLAIN_ROWS],
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
            (
                "Spot interruptions and node failures",
                "The median run over seeds (by GPU-hours lost): spot nodes reclaimed after "
                "their notice, nodes failed, GPU faults that crashed pods; pods lost, their "
                "gangs' other pods taken down with them, workloads made to start again, jobs "
                "failed; the GPU-hours of work lost since the last checkpoints. Spot: GPU-hours "
                "of spot nodes up, what they saved against on-demand prices (gross), the lost "
                "work at on-demand prices, and the net saving (GPUs only).",
                summaries.interruptions,
            ),
        ],
        appendix=appendix,
        own_sections=[
            s
            for s in [
                cost_section(summaries.cost, prices),
                pools_section(summaries.pools, runs),
                serving_section(summaries.serving, runs),
            ]
            if s is not None
        ],
    )
