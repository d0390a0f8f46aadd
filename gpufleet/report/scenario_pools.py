"""What a multi-tenant simulation's node pools did: the summary rows and their section.

Owns :class:`PoolRow` (one pool of one run, or their total: how it is bought, its node, its
price, its nodes at the start, at most at once and at the end, the nodes asked for, removed as
unneeded and lost to node faults, node-hours, GPU-hours and cost) and :class:`PoolSummary`
(per run label: its pools' rows and the total, with one line for the terminal), the plain rows
that the terminal, the HTML report and ``results.json`` of ``gpufleet simulate --scenario``
show, and :func:`pools_section` (those rows, the first actions in words, what no pool could
hold, and a figure of each pool's nodes over time). With several seeds a label's summary is
its *median run*: the seed whose pools cost the median (the lower middle one of an even
count), with every number of that run, so that the pools add up to the total; every seed's
cost is kept beside it. Runs without pools have no rows. It decides nothing: the numbers come
from :class:`~gpufleet.backends.sim.results.PoolReport`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import plotly.graph_objects as go

from gpufleet.backends.sim.results import PoolReport
from gpufleet.report.cells import HOURS, MONEY
from gpufleet.report.html import NamedTable, Section
from gpufleet.report.scenario_summary import LabelledRun

HOUR = 3600.0
#: The name of the total row.
TOTAL = "__total__"


@dataclass(slots=True)
class PoolRow:
    """One pool of one run (``pool`` :data:`TOTAL`: all of them; its node fields empty)."""

    run: str
    seed: int
    pool: str
    capacity_type: str
    #: ``8 x NVIDIA-H100-80GB-HBM3`` (``CPU`` for a pool without GPUs).
    node: str
    price_per_node_hour: float | None = field(metadata=MONEY)
    nodes_at_start: int
    nodes_peak: int
    nodes_at_end: int
    added: int
    removed: int
    lost: int
    node_hours: float = field(metadata=HOURS)
    gpu_hours: float = field(metadata=HOURS)
    cost: float = field(metadata=MONEY)


@dataclass(slots=True)
class ActionRow:
    """One thing the pools' autoscaler did in a run, in words."""

    run: str
    seed: int
    action: str


@dataclass(slots=True)
class NeverRow:
    """A workload no pool could ever hold in a run, and why."""

    run: str
    seed: int
    workload: str
    why: str


@dataclass(slots=True)
class PoolSummary:
    """The pools of one run label: the rows of its median run (``seed``), the total last;
    ``cost_by_seed``: every seed's cost of the pools; money in ``currency``."""

    run: str
    seeds: list[int]
    seed: int
    currency: str
    rows: list[PoolRow]
    scale_ups: int
    cost_by_seed: dict[int, float] = field(default_factory=dict)

    @property
    def total(self) -> PoolRow:
        return self.rows[-1]

    @property
    def line(self) -> str:
        """``3 pools, 14 nodes added, 9 removed, 2 lost; 212.40 node-hours, 1,234.56 USD (the
        bill)``."""
        total = self.total
        pools = len(self.rows) - 1
        return (
            f"{pools} pool{'s' if pools != 1 else ''}, {total.added} node(s) added, "
            f"{total.removed} removed, {total.lost} lost; {total.node_hours:,.2f} node-hours, "
            f"{total.gpu_hours:,.2f} GPU-hours, {total.cost:,.2f} {self.currency}".rstrip()
            + " (the bill)"
        )


def _median_run(runs: Sequence[tuple[LabelledRun, PoolReport]]) -> int:
    ranked = sorted(range(len(runs)), key=lambda i: (runs[i][1].cost, runs[i][0].seed))
    return ranked[(len(ranked) - 1) // 2]


def pool_rows(run: LabelledRun, report: PoolReport) -> list[PoolRow]:
    """A row per pool of one run, then their total."""
    rows = [
        PoolRow(
            run=run.label,
            seed=run.seed,
            pool=usage.pool,
            capacity_type=usage.capacity_type,
            node=f"{usage.gpus_per_node} x {usage.gpu_model}" if usage.gpu_model else "CPU",
            price_per_node_hour=usage.hourly_price,
            nodes_at_start=usage.nodes_at_start,
            nodes_peak=usage.nodes_peak,
            nodes_at_end=usage.nodes_at_end,
            added=usage.added,
            removed=usage.removed,
            lost=usage.lost,
            node_hours=usage.node_hours,
            gpu_hours=usage.gpu_hours,
            cost=usage.cost,
        )
        for usage in report.pools
    ]
    rows.append(
        PoolRow(
            run=run.label,
            seed=run.seed,
            pool=TOTAL,
            capacity_type="",
            node="",
            price_per_node_hour=None,
            nodes_at_start=sum(r.nodes_at_start for r in rows),
            # Pools peak at different times: the most at once is read off the timeline.
            nodes_peak=max((sum(counts) for _, counts in report.timeline), default=0),
            nodes_at_end=sum(r.nodes_at_end for r in rows),
            added=sum(r.added for r in rows),
            removed=report.nodes_removed,
            lost=sum(r.lost for r in rows),
            node_hours=report.node_hours,
            gpu_hours=report.gpu_hours,
            cost=report.cost,
        )
    )
    return rows


def summarize_pools(runs: Sequence[LabelledRun], currency: str = "") -> list[PoolSummary]:
    """A summary per run label whose runs had node pools (``currency``: the price list's)."""
    summaries: list[PoolSummary] = []
    for label in dict.fromkeys(r.label for r in runs):
        mine = [(r, r.result.pools) for r in runs if r.label == label and r.result.pools]
        if not mine:
            continue
        chosen, report = mine[_median_run(mine)]
        summaries.append(
            PoolSummary(
                run=label,
                seeds=[r.seed for r, _ in mine],
                seed=chosen.seed,
                currency=currency,
                rows=pool_rows(chosen, report),
                scale_ups=report.scale_ups,
                cost_by_seed={r.seed: p.cost for r, p in mine},
            )
        )
    return summaries


def pools_figure(report: PoolReport) -> go.Figure:
    """Each pool's nodes (joined, not yet gone) over the run (hours), as steps."""
    fig = go.Figure()
    if report.timeline:
        hours = [t / HOUR for t, _ in report.timeline]
        for i, usage in enumerate(report.pools):
            counts = [c[i] for _, c in report.timeline]
            fig.add_trace(
                go.Scatter(x=hours, y=counts, name=usage.pool, mode="lines",
                           line={"shape": "hv"})
            )  # fmt: skip
    fig.update_yaxes(title_text="nodes", rangemode="tozero")
    fig.update_xaxes(title_text="hours")
    return fig


def _first_run(summary: PoolSummary, runs: Sequence[LabelledRun]) -> tuple[LabelledRun, PoolReport]:
    run = next(r for r in runs if r.label == summary.run and r.seed == summary.seed)
    assert run.result.pools is not None
    return run, run.result.pools


def pools_section(summaries: Sequence[PoolSummary], runs: Sequence[LabelledRun]) -> Section | None:
    """The report's "Node pools" section (None: no run had pools)."""
    if not summaries:
        return None
    seeds = max(len(s.seeds) for s in summaries)
    note = (
        "The scenario's NodePools, grown and shrunk as Cluster Autoscaler does: every 10 s of "
        "simulated time the autoscaler asks nodes for the workloads the scheduler parked for "
        "capacity (not those waiting on quota, a budget or a back-off), choosing the cheapest "
        "pool that fits them all (gangs whole); a node joins after its pool's provisioning "
        "delay, and one unneeded for 10 minutes is drained (its workloads evicted whole and "
        "placed again) and removed; each pool keeps its minimum. Nodes are billed at their "
        "pool's price from their asking to their leaving (removed, lost, or the run's end). A "
        "pool node lost to a spot interruption or a node failure is not brought back by the "
        "fault: its pool adds another if the work needs one. Peak: the most nodes at once. "
        f"Money in {summaries[0].currency or 'the price list currency'}; the cost section "
        "prices what the pods held, this one the nodes."
        + (
            f" Each run label shows its median run over {seeds} seeds (by the pools' cost; "
            "results.json has every seed's)."
            if seeds > 1
            else ""
        )
    )
    tables: list[NamedTable] = []
    figures: list[tuple[str, go.Figure]] = []
    for summary in summaries:
        run, report = _first_run(summary, runs)
        where = f"{summary.run}, seed {summary.seed}"
        tables.append((f"Pools ({where})", "", summary.rows))
        actions = [ActionRow(run.label, run.seed, a) for a in report.actions]
        if actions:
            tables.append(
                (f"What the autoscaler did ({where})", "The first actions, in words.", actions)
            )
        never = [NeverRow(run.label, run.seed, w, why) for w, why in report.never]
        if never:
            tables.append(
                (
                    f"What no pool could hold ({where})",
                    "Workloads the autoscaler added no node for, since no pool could ever hold "
                    "them, and why.",
                    never,
                )
            )
        figures.append((f"Nodes per pool ({where})", pools_figure(report)))
    return Section("Node pools", note, tables, figures)
