"""The figures of a multi-tenant simulation's HTML report (plotly).

Per queue, for the first seed of each policy run through its queues: GPUs in use against the
nominal quota and the fair-share entitlement over time, and the weighted share over time. Over
all runs: queueing delay per queue and per priority class (p50 and p95, median over seeds), and
the pod-level replay plots of :func:`gpufleet.report.html.replay_figures` with each policy's
queues and FIFO baseline side by side. The cost section (:func:`cost_section`): per grouping,
a stacked bar of each group's cost used, idle and unmeasured per run label, and a table per
run label. The page itself is written by :func:`gpufleet.report.html.write_report`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from statistics import median

import plotly.graph_objects as go

from gpufleet.report.html import Section, replay_figures
from gpufleet.report.scenario_cost import CostSummary
from gpufleet.report.scenario_summary import LabelledRun, QueueSummary, Variant

MINUTE = 60.0
_COLORS = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
]


def _color(i: int) -> str:
    return _COLORS[i % len(_COLORS)]


def _first_seed_runs(runs: Sequence[LabelledRun], variant: Variant) -> list[LabelledRun]:
    first: dict[str, LabelledRun] = {}
    for run in runs:
        if run.variant is variant:
            first.setdefault(run.label, run)
    return list(first.values())


def queue_usage_figure(run: LabelledRun, queues: Sequence[str]) -> go.Figure:
    """GPUs in use (solid), entitled (dashed) and nominal (dotted) per queue over time."""
    timeline = run.result.tenancy.timeline
    hours = [t / 3600 for t in timeline.time]
    fig = go.Figure()
    for i, name in enumerate(queues):
        color = _color(i)
        fig.add_trace(
            go.Scatter(
                x=hours,
                y=timeline.used_gpus.get(name, []),
                name=f"{name} in use",
                legendgroup=name,
                line={"color": color, "width": 2},
            )
        )
        fig.add_trace(
            go.Scatter(
                x=hours,
                y=timeline.entitled_gpus.get(name, []),
                name=f"{name} entitled",
                legendgroup=name,
                line={"color": color, "dash": "dash", "width": 1},
            )
        )
        nominal = run.result.tenancy.queues[name].nominal_gpus
        if nominal and hours:
            fig.add_trace(
                go.Scatter(
                    x=[hours[0], hours[-1]],
                    y=[nominal, nominal],
                    name=f"{name} nominal",
                    legendgroup=name,
                    line={"color": color, "dash": "dot", "width": 1},
                )
            )
    fig.update_layout(xaxis_title="hours", yaxis_title="GPUs")
    return fig


def queue_share_figure(run: LabelledRun, queues: Sequence[str]) -> go.Figure:
    timeline = run.result.tenancy.timeline
    hours = [t / 3600 for t in timeline.time]
    fig = go.Figure()
    for i, name in enumerate(queues):
        fig.add_trace(
            go.Scatter(
                x=hours, y=timeline.share.get(name, []), name=name, line={"color": _color(i)}
            )
        )
    fig.update_layout(xaxis_title="hours", yaxis_title="weighted dominant-resource share")
    return fig


def queue_delay_figure(rows: Sequence[QueueSummary]) -> go.Figure:
    """p50 and p95 queueing delay per queue (queues that received workloads), per run label."""
    fig = go.Figure()
    labels = list(dict.fromkeys(r.run for r in rows))
    for i, label in enumerate(labels):
        mine = [r for r in rows if r.run == label and r.workloads]
        names = [r.queue for r in mine]
        for stat, opacity in (("p50", 1.0), ("p95", 0.5)):
            values = [(r.delay_p50 if stat == "p50" else r.delay_p95) / MINUTE for r in mine]
            fig.add_trace(
                go.Bar(
                    x=names,
                    y=values,
                    name=f"{label} {stat}",
                    marker_color=_color(i),
                    opacity=opacity,
                )
            )
    fig.update_layout(barmode="group", yaxis_title="queueing delay (minutes)")
    return fig


def class_delay_figure(runs: Sequence[LabelledRun]) -> go.Figure:
    """p50 and p95 queueing delay per priority class, per run label (median over seeds)."""
    fig = go.Figure()
    labels = list(dict.fromkeys(r.label for r in runs))
    for i, label in enumerate(labels):
        mine = [r.result.tenancy.queueing_delay_by_priority_class for r in runs if r.label == label]
        classes = list(dict.fromkeys(c for m in mine for c in m))
        for stat, opacity in (("p50", 1.0), ("p95", 0.5)):
            values = [median(getattr(m[c], stat) for m in mine if c in m) / MINUTE for c in classes]
            fig.add_trace(
                go.Bar(
                    x=classes,
                    y=values,
                    name=f"{label} {stat}",
                    marker_color=_color(i),
                    opacity=opacity,
                )
            )
    fig.update_layout(barmode="group", yaxis_title="queueing delay (minutes)")
    return fig


def scenario_figures(
    runs: Sequence[LabelledRun], queue_rows: Sequence[QueueSummary]
) -> list[tuple[str, go.Figure]]:
    figures: list[tuple[str, go.Figure]] = []
    for run in _first_seed_runs(runs, Variant.QUEUES):
        names = [r.queue for r in queue_rows if r.run == run.label]
        where = f"{run.label}, seed {run.seed}"
        figures.append(
            (
                f"GPUs per queue: in use, entitled and nominal ({where})",
                queue_usage_figure(run, names),
            )
        )
        figures.append((f"Share per queue ({where})", queue_share_figure(run, names)))
    figures.append(("Queueing delay per queue", queue_delay_figure(queue_rows)))
    figures.append(("Queueing delay per priority class", class_delay_figure(runs)))
    firsts = _first_seed_runs(runs, Variant.QUEUES) + _first_seed_runs(runs, Variant.FIFO)
    replays = [replace(r.result.replay, policy=r.label) for r in firsts]
    suffix = " (queues vs FIFO)" if any(r.variant is Variant.FIFO for r in firsts) else ""
    for heading, fig in replay_figures(replays):
        one_run = heading.startswith("Allocation per GPU model")  # drawn for the first run only
        figures.append((heading if one_run else f"{heading}{suffix}", fig))
    return figures


#: The parts of a cost line drawn stacked, with their colours.
_COST_PARTS = (("used", "#2ca02c"), ("idle", "#ff7f0e"), ("unmeasured", "#9e9e9e"))


def cost_figure(summaries: Sequence[CostSummary]) -> go.Figure:
    """Each group's cost (one grouping), used, idle and unmeasured stacked, per run label."""
    lines = [line for s in summaries for line in s.lines]
    x = [[line.run for line in lines], [line.group for line in lines]]
    fig = go.Figure()
    for part, color in _COST_PARTS:
        fig.add_trace(
            go.Bar(x=x, y=[getattr(line, part) for line in lines], name=part, marker_color=color)
        )
    currency = summaries[0].currency if summaries else ""
    fig.update_layout(barmode="stack", yaxis_title=f"cost ({currency})")
    return fig


def cost_section(summaries: Sequence[CostSummary], prices: str) -> Section | None:
    """The report's "Cost" section (None: no run was costed); ``prices``: where the price
    list came from, said in its note."""
    if not summaries:
        return None
    groupings = list(dict.fromkeys(s.by for s in summaries))
    seeds = max(len(s.seeds) for s in summaries)
    note = (
        f"What the pods held, in {summaries[0].currency} at the prices of {prices}, split as "
        "OpenCost splits GPU cost: allocated = used + idle + unmeasured. Used: the GPU cost "
        "times the pod's mean GPU utilisation (sampled every minute from its usage profile), "
        "plus its CPU and memory requests; idle: the rest of its GPU cost; unmeasured: the GPU "
        "cost of pods never sampled (never read as 0%). __idle__: the GPU time of the nodes "
        "that nobody held, from the first arrival to the last pod's end; __unallocated__: "
        "workloads without a value for the key."
        + (
            f" Each run label shows its median run over {seeds} seeds (by total allocated "
            "cost; results.json has every seed's total)."
            if seeds > 1
            else ""
        )
    )
    figures = [
        (
            f"Cost by {by}: used, idle and unmeasured",
            cost_figure([s for s in summaries if s.by == by]),
        )
        for by in groupings
    ]
    tables = [
        (f"Cost by {s.by} ({s.run}, seed {s.seed})", "; ".join(s.notes), s.rows) for s in summaries
    ]
    return Section("Cost", note, tables, figures)
