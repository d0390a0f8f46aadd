"""``gpufleet simulate``: policies x seeds on the simulated cluster, with a report."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpufleet.backends.sim.batch import Scenario, Task, run_many
from gpufleet.backends.sim.cluster import Mode
from gpufleet.backends.sim.results import FillRun, ReplayRun
from gpufleet.backends.sim.workloads import (
    cap_runtimes,
    resample,
    retime_for_load,
    synthetic_workload,
)
from gpufleet.cli.inputs import (
    check_policies,
    console,
    ensure_dir,
    fail,
    friendly_errors,
    parse_duration,
    parse_seeds,
    warn_skipped,
)
from gpufleet.cli.scenario_cost import CostByOption, PricesOption
from gpufleet.cli.scenarios import BUNDLED_CLUSTER, DEFAULT_NODE_FRACTION, ScenarioOptions
from gpufleet.cli.simulate_scenario import Baseline, ScenarioArgs, simulate_scenarios
from gpufleet.cli.tables import show
from gpufleet.io.cluster_traces.alibaba import read_pods
from gpufleet.io.cluster_traces.datasets import PODS_FILE, find_alibaba_trace
from gpufleet.io.cluster_traces.shapes import bundled_path, bundled_shape_table
from gpufleet.io.fleet.cluster_spec import read_cluster_spec
from gpufleet.io.kinds import Skipped
from gpufleet.io.readers import read_cluster, read_workload
from gpufleet.model import Node
from gpufleet.model.times import format_duration
from gpufleet.model.workload import TimedPod
from gpufleet.report.html import fill_figures, replay_figures, write_report
from gpufleet.report.summary import (
    FillSummary,
    ReplaySummary,
    summarize_fill,
    summarize_replay,
    write_json,
)

DEFAULT_WORKERS = max(1, min(os.cpu_count() or 1, 4))


@dataclass(frozen=True, slots=True)
class Loaded:
    nodes: list[Node]
    workload: list[TimedPod]
    cluster_label: str
    workload_label: str


def load_inputs(
    cluster: Path | None, workload: Path | None, synthetic: int, seed: int, timed: bool
) -> Loaded:
    """The cluster and workload to simulate, with the defaults described in ``--help``."""
    skipped = Skipped()
    if cluster is None:
        nodes = read_cluster_spec(bundled_path(BUNDLED_CLUSTER))
        cluster_label = f"bundled Alibaba-like cluster ({len(nodes)} nodes)"
    else:
        nodes = read_cluster(cluster, skipped)
        cluster_label = f"{cluster} ({len(nodes)} nodes)"
    if workload is not None:
        pods = read_workload(workload, skipped)
        workload_label = f"{workload} ({len(pods)} pods)"
    else:
        trace = find_alibaba_trace()
        if trace is not None and not synthetic:
            pods = read_pods(trace / "csv" / PODS_FILE)
            workload_label = f"Alibaba 2023 trace, {trace / 'csv' / PODS_FILE} ({len(pods)} pods)"
        else:
            count = synthetic or 8152
            pods = synthetic_workload(
                bundled_shape_table(), count, seed, arrival_rate=1.0 if timed else None
            )
            workload_label = (
                f"synthetic workload of {count} pods drawn from the bundled Alibaba 2023 "
                "shape table"
            )
    warn_skipped(skipped)
    if not nodes:
        raise fail("the cluster has no nodes")
    if not pods:
        raise fail("the workload has no pods")
    return Loaded(nodes, pods, cluster_label, workload_label)


def run_with_progress(
    scenario: Scenario, tasks: list[Task], workers: int
) -> list[FillRun | ReplayRun]:
    columns = (
        TextColumn("{task.description:<22}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bars = [
            progress.add_task(f"{t.policy} seed {t.seed}", total=len(scenario.workload))
            for t in tasks
        ]

        def update(index: int, done: int, total: int) -> None:
            progress.update(bars[index], completed=done, total=total)

        results = run_many(scenario, tasks, workers, update)
        for bar in bars:
            total = progress.tasks[bar].total
            progress.update(bar, completed=total)
    return results


CLASS_COLUMNS = (
    ("cpu-only", "cpu"),
    ("gpu-share", "share"),
    ("one-gpu", "1-gpu"),
    ("multi-gpu", "multi"),
    ("mig", "mig"),
)


def print_fill_summary(rows: list[FillSummary], impossible: int) -> None:
    present = [
        (c, label) for c, label in CLASS_COLUMNS if any(c in r.failure_rate_by_class for r in rows)
    ]
    table = Table(
        title="Fill-up: unallocated GPU % at 100% arrived (lower is better)",
        caption="frag: fragmented GPU %. "
        + ", ".join(label for _, label in present)
        + ": % of those pods that found no node before 100% arrived.",
    )
    table.add_column("policy", no_wrap=True)
    for column in ("median", "range", "frag", *(label for _, label in present), "s/run"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(
            row.policy,
            f"{row.median_unallocated_at_100:.2f}",
            f"{row.min_unallocated_at_100:.2f}-{row.max_unallocated_at_100:.2f}",
            f"{row.median_fragmentation_at_100:.2f}",
            *(f"{row.failure_rate_by_class.get(c, 0.0):.1f}" for c, _ in present),
            f"{row.median_seconds:.2f}",
        )
    show(table)
    if impossible:
        console.print(
            f"[yellow]note:[/] {impossible} pods can never fit on this cluster "
            "(they ask for more than any node has); they count as failed."
        )


def print_replay_summary(rows: list[ReplaySummary]) -> None:
    table = Table(title="Replay: queueing delay and GPU allocation")
    for column in ("policy", "p50", "p95", "max", "mean alloc %", "never ran", "s/run"):
        table.add_column(column, justify="left" if column == "policy" else "right", no_wrap=True)
    for row in rows:
        table.add_row(
            row.policy,
            format_duration(row.p50_delay),
            format_duration(row.p95_delay),
            format_duration(row.max_delay),
            f"{row.mean_allocated_pct:.1f}",
            str(row.never_ran),
            f"{row.median_seconds:.2f}",
        )
    show(table)


def simulate(
    cluster: Annotated[
        Path | None,
        typer.Option(
            help="Cluster: a cluster-spec YAML, Kubernetes Node YAML or the Alibaba "
            "node CSV. Default: the bundled Alibaba-like cluster."
        ),
    ] = None,
    workload: Annotated[
        Path | None,
        typer.Option(
            help="Workload: Pod, Job, Deployment, StatefulSet or ReplicaSet YAML (file or "
            "directory) or an Alibaba pod CSV. "
            "Default: the Alibaba trace if found, else a synthetic workload."
        ),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            "-p",
            help="Policy (repeatable). Default: fgd and default; with --scenario: default.",
        ),
    ] = None,
    seeds: Annotated[str, typer.Option(help="Seeds, e.g. 42-51 or 42,43.")] = "42",
    mode: Annotated[
        Mode | None,
        typer.Option(help="fill (FGD protocol, the default) or replay (time-based)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Directory for report.html and results.json.")
    ] = None,
    workers: Annotated[int, typer.Option(help="Processes for runs in parallel.")] = DEFAULT_WORKERS,
    inflation: Annotated[
        float | None, typer.Option(help="Fill: arrive until this x GPU capacity. Default: 1.3.")
    ] = None,
    load: Annotated[
        float | None,
        typer.Option(
            help="Replay: re-time arrivals (Poisson, trace order) to this offered GPU "
            "load, e.g. 0.95. Built-in scenarios: their offered GPU load."
        ),
    ] = None,
    max_runtime: Annotated[
        str | None,
        typer.Option(help="Replay and alibaba-multitenant: cap run times, e.g. 2h or 1d."),
    ] = None,
    synthetic: Annotated[
        int, typer.Option(help="Use N pods drawn from the bundled shape table as the workload.")
    ] = 0,
    pods: Annotated[
        int | None,
        typer.Option(
            help="Replay: draw this many pods from the workload (with replacement), "
            "so that a re-timed replay runs long enough to reach a steady state."
        ),
    ] = None,
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            help="Multi-tenant replay through queues, quotas, priorities, gangs and "
            "preemption: YAML files or directories (Queue, PriorityClass, ResourceQuota, "
            "PodGroup, Pod, Job, PyTorchJob, MPIJob, RayJob...; repeatable), or a built-in "
            "scenario: "
            "large-gangs (its own racks of 8-GPU nodes) or alibaba-multitenant (needs the "
            "Alibaba 2023 trace).",
            rich_help_panel="Multi-tenant scenarios",
        ),
    ] = None,
    baseline: Annotated[
        Baseline,
        typer.Option(
            help="Also run the scenario first come first served (one queue, no quota, no "
            "priority, no preemption) to compare.",
            rich_help_panel="Multi-tenant scenarios",
        ),
    ] = Baseline.NONE,
    hours: Annotated[
        float | None,
        typer.Option(
            help="Built-in scenarios: hours of arrivals.", rich_help_panel="Multi-tenant scenarios"
        ),
    ] = None,
    racks: Annotated[
        int | None,
        typer.Option(help="large-gangs: racks.", rich_help_panel="Multi-tenant scenarios"),
    ] = None,
    nodes_per_rack: Annotated[
        int | None,
        typer.Option(
            help="large-gangs: 8-GPU nodes per rack.", rich_help_panel="Multi-tenant scenarios"
        ),
    ] = None,
    node_fraction: Annotated[
        float | None,
        typer.Option(
            help="alibaba-multitenant: the share of the trace's GPU nodes to simulate "
            f"(drawn per seed). Default: {DEFAULT_NODE_FRACTION}.",
            rich_help_panel="Multi-tenant scenarios",
        ),
    ] = None,
    explain_at: Annotated[
        str | None,
        typer.Option(
            help="Print why workloads wait at this simulated time (e.g. 6h) and at the end "
            "('end': only at the end).",
            rich_help_panel="Multi-tenant scenarios",
        ),
    ] = None,
    explain_limit: Annotated[
        int,
        typer.Option(
            help="Rows per explanation table printed (results.json has all).",
            rich_help_panel="Multi-tenant scenarios",
        ),
    ] = 20,
    backfill: Annotated[
        bool,
        typer.Option(
            help="Backfill around capacity reserved for the first blocked workload.",
            rich_help_panel="Multi-tenant scenarios",
        ),
    ] = True,
    idle_dry_run: Annotated[
        bool,
        typer.Option(
            "--idle-dry-run",
            help="Run the scenario's IdlePolicies as a dry run: report what they would do, "
            "act on nothing.",
            rich_help_panel="Multi-tenant scenarios",
        ),
    ] = False,
    profile: Annotated[
        Path | None,
        typer.Option(
            help="Scheduling profile YAML: which plugin at each extension point (README: "
            "Profiles and plugins). Default: the built-in profile.",
            rich_help_panel="Multi-tenant scenarios",
        ),
    ] = None,
    prices: PricesOption = None,
    cost_by: CostByOption = None,
) -> None:
    """Simulate policies on the embedded cluster: fill-up (FGD protocol) or time-based replay;
    with --scenario, a multi-tenant replay through queues, quotas and preemption."""
    if scenario:
        if workload is not None or synthetic or pods is not None:
            raise fail(
                "--workload, --synthetic and --pods do not apply with --scenario (the scenario "
                "gives the workloads)"
            )
        if mode is Mode.FILL:
            raise fail("--scenario runs a time-based replay; --mode fill does not apply")
        if inflation is not None:
            raise fail("--inflation applies to fill-up runs, not to --scenario")
        simulate_scenarios(
            ScenarioArgs(
                prices=prices,
                cost_by=cost_by,
                scenario=scenario,
                options=ScenarioOptions(
                    cluster=cluster,
                    hours=hours,
                    load=load,
                    racks=racks,
                    nodes_per_rack=nodes_per_rack,
                    node_fraction=node_fraction,
                    max_runtime=parse_duration(max_runtime) if max_runtime is not None else None,
                ),
                policy=policy,
                seeds=seeds,
                out=out,
                workers=workers,
                baseline=baseline,
                explain_at=explain_at,
                explain_limit=explain_limit,
                backfill=backfill,
                profile=profile,
                idle_dry_run=idle_dry_run,
            )
        )
        return
    only_with_scenario = {
        "--baseline fifo": baseline is not Baseline.NONE,
        "--hours": hours is not None,
        "--racks": racks is not None,
        "--nodes-per-rack": nodes_per_rack is not None,
        "--node-fraction": node_fraction is not None,
        "--explain-at": explain_at is not None,
        "--no-backfill": not backfill,
        "--profile": profile is not None,
        "--idle-dry-run": idle_dry_run,
        "--prices": prices is not None,
        "--cost-by": bool(cost_by),
    }
    given = [flag for flag, present in only_with_scenario.items() if present]
    if given:
        raise fail(f"{', '.join(given)}: only with --scenario")
    run_simulation(
        cluster,
        workload,
        policy,
        seeds,
        mode or Mode.FILL,
        out,
        workers,
        1.3 if inflation is None else inflation,
        load,
        max_runtime,
        synthetic,
        title=None,
        resample_to=pods,
    )


@friendly_errors
def run_simulation(
    cluster: Path | None,
    workload: Path | None,
    policy: list[str] | None,
    seeds: str,
    mode: Mode,
    out: Path | None,
    workers: int,
    inflation: float,
    load: float | None,
    max_runtime: str | None,
    synthetic: int,
    title: str | None,
    resample_to: int | None = None,
) -> None:
    """A fill-up or replay simulation of ``simulate`` (and ``demo``): each policy on each seed,
    their summaries printed, and the report (HTML and JSON) written to ``out``."""
    policies = check_policies(policy or ["fgd", "default"])
    seed_list = parse_seeds(seeds)
    if inflation <= 0:
        raise fail("--inflation must be positive")
    loaded = load_inputs(cluster, workload, synthetic, seed_list[0], mode is Mode.REPLAY)
    pods = loaded.workload
    changes = []
    if mode is Mode.REPLAY:
        if resample_to is not None:
            if resample_to <= 0:
                raise fail("--pods must be positive")
            pods = resample(pods, resample_to, seed_list[0])
            changes.append(f"resampled to {resample_to} pods")
        if max_runtime is not None:
            pods = cap_runtimes(pods, parse_duration(max_runtime))
            changes.append(f"run times capped at {max_runtime}")
        if load is not None:
            if load <= 0:
                raise fail("--load must be positive")
            capacity = sum(n.gpu_count for n in loaded.nodes) * 1000
            pods = retime_for_load(pods, capacity, load, seed_list[0])
            changes.append(f"arrivals re-timed to an offered GPU load of {load:g}")
    workload_label = "; ".join([loaded.workload_label, *changes])
    console.print(f"cluster:  {loaded.cluster_label}")
    console.print(f"workload: {workload_label}")
    console.print(
        f"mode {mode}, policies {', '.join(policies)}, seeds {seeds}, {workers} worker(s)"
    )
    scenario = Scenario(tuple(loaded.nodes), tuple(pods), mode, None, inflation)
    tasks = [Task(p, s) for p in policies for s in seed_list]
    results = run_with_progress(scenario, tasks, workers)
    directory = ensure_dir(
        out or Path("gpufleet-results") / dt.datetime.now().strftime(f"{mode}-%Y%m%d-%H%M%S")
    )
    description = f"{loaded.cluster_label}; {workload_label}; seeds {seeds}."
    summaries: list[FillSummary] | list[ReplaySummary]
    if mode is Mode.FILL:
        fill_runs = [r for r in results if isinstance(r, FillRun)]
        summaries = summarize_fill(fill_runs)
        print_fill_summary(summaries, max(r.impossible_pods for r in fill_runs))
        figures = fill_figures(fill_runs)
    else:
        replay_runs = [r for r in results if isinstance(r, ReplayRun)]
        summaries = summarize_replay(replay_runs)
        print_replay_summary(summaries)
        figures = replay_figures(replay_runs)
    write_report(
        directory / "report.html",
        title or f"gpufleet {'fill-up' if mode is Mode.FILL else 'replay'} simulation",
        description,
        summaries,
        figures,
    )
    write_json(
        directory / "results.json",
        {
            "mode": str(mode),
            "cluster": loaded.cluster_label,
            "workload": workload_label,
            "policies": policies,
            "seeds": seed_list,
            "summary": summaries,
            "runs": results,
        },
    )
    violations = sum(r.bind_violations for r in results)
    if violations:
        raise fail(f"{violations} binds were refused by the simulated cluster", 1)
    console.print(f"report:  {directory / 'report.html'}")
    console.print(f"results: {directory / 'results.json'}")
