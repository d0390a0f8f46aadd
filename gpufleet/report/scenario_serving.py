"""What a multi-tenant simulation's inference services met: summary rows and their section.

Owns :class:`ServingSummary` (per run label and service, the median over its seeds: minutes
meeting the latency objective, the p50 and p95 of the minutes' p95 latency, the queue, the
replicas, GPU-hours and how often the count changed), the rows that the terminal,
``results.json`` and the HTML report show, and :func:`serving_section` (those rows, why the
replica count changed in the first seed's run, and per service a figure of its replicas,
requests and latency over time). Runs without services have no rows. It decides nothing: the
numbers come from :class:`~gpufleet.backends.sim.inference.ServingReport`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpufleet.backends.sim.inference import ServingReport
from gpufleet.report.html import NamedTable, Section
from gpufleet.report.scenario_summary import LabelledRun

HOUR = 3600.0


@dataclass(slots=True)
class ScaleChangeRow:
    """One change of a service's replica count in the first seed's run, and why."""

    run: str
    service: str
    change: str


@dataclass(slots=True)
class ServingSummary:
    """One service of one run label: the median over its seeds (``seeds``)."""

    run: str
    service: str
    scaled_by: str
    seeds: list[int]
    slo_p95_s: float
    minutes_met_pct: float
    #: The p50 and p95 of the minutes' p95 latency (None: unbounded, no replica served).
    latency_p50_s: float | None
    latency_p95_s: float | None
    queue_p95: float
    replicas_min: int
    replicas_mean: float
    replicas_max: int
    scale_changes: int
    gpu_hours: float

    @property
    def line(self) -> str:
        """One line for people."""
        p95 = "unbounded" if self.latency_p95_s is None else f"{self.latency_p95_s:.2f}s"
        return (
            f"{self.service} ({self.scaled_by}): objective p95 <= {self.slo_p95_s:g}s met in "
            f"{self.minutes_met_pct:.1f}% of minutes (minutes' p95 at p95: {p95}); replicas "
            f"{self.replicas_min}-{self.replicas_max} (mean {self.replicas_mean:.1f}), "
            f"{self.gpu_hours:,.1f} GPU-h, {self.scale_changes} change(s)"
        )


def _median_or_none(values: Sequence[float | None]) -> float | None:
    """The median, None when any is None (an unbounded minute outranks every number)."""
    if any(v is None for v in values):
        return None
    return float(median(v for v in values if v is not None))


def summarize_serving(runs: Sequence[LabelledRun]) -> list[ServingSummary]:
    """A row per run label and service, for the run labels whose runs served some."""
    rows: list[ServingSummary] = []
    for label in dict.fromkeys(r.label for r in runs):
        mine = [r for r in runs if r.label == label and r.result.serving]
        services = list(dict.fromkeys(s.workload for r in mine for s in r.result.serving))
        for service in services:
            reports = [s for r in mine for s in r.result.serving if s.workload == service]
            first = reports[0]
            rows.append(
                ServingSummary(
                    run=label,
                    service=service,
                    scaled_by=first.scaled_by,
                    seeds=[r.seed for r in mine],
                    slo_p95_s=first.slo_p95_s,
                    minutes_met_pct=round(median(s.minutes_met_pct for s in reports), 2),
                    latency_p50_s=_median_or_none([s.latency_p50_s for s in reports]),
                    latency_p95_s=_median_or_none([s.latency_p95_s for s in reports]),
                    queue_p95=round(median(s.queue_p95 for s in reports), 2),
                    replicas_min=round(median(s.replicas_min for s in reports)),
                    replicas_mean=round(median(s.replicas_mean for s in reports), 2),
                    replicas_max=round(median(s.replicas_max for s in reports)),
                    scale_changes=round(median(s.scale_changes for s in reports)),
                    gpu_hours=round(median(s.gpu_hours for s in reports), 3),
                )
            )
    return rows


def serving_figure(report: ServingReport) -> go.Figure:
    """Replicas placed and ready, requests per second, and the minutes' p95 latency against
    the objective, over the run (hours)."""
    rows = report.timeline
    hours = [t / HOUR for t, *_ in rows]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, specs=[[{"secondary_y": True}], [{}]])
    fig.add_trace(go.Scatter(x=hours, y=[r[1] for r in rows], name="replicas placed",
                             line={"shape": "hv"}), row=1, col=1)  # fmt: skip
    fig.add_trace(go.Scatter(x=hours, y=[r[2] for r in rows], name="replicas ready",
                             line={"shape": "hv", "dash": "dot"}), row=1, col=1)  # fmt: skip
    fig.add_trace(
        go.Scatter(x=hours, y=[r[3] for r in rows], name="requests/s", opacity=0.5),
        row=1, col=1, secondary_y=True,
    )  # fmt: skip
    latency = [r[4] for r in rows]
    fig.add_trace(go.Scatter(x=hours, y=latency, name="p95 latency (s)", mode="lines"),
                  row=2, col=1)  # fmt: skip
    fig.add_hline(y=report.slo_p95_s, line_dash="dash", annotation_text="objective", row=2, col=1)
    fig.update_yaxes(title_text="replicas", row=1, col=1, secondary_y=False)
    fig.update_yaxes(title_text="requests/s", row=1, col=1, secondary_y=True)
    fig.update_yaxes(title_text="p95 latency (s)", type="log", row=2, col=1)
    fig.update_xaxes(title_text="hours", row=2, col=1)
    return fig


def serving_section(
    summaries: Sequence[ServingSummary], runs: Sequence[LabelledRun]
) -> Section | None:
    """The report's "Inference services" section (None: no run served any)."""
    if not summaries:
        return None
    first = next(r for r in runs if r.result.serving)
    note = (
        "Each service's requests, served by its ready replicas (placed, and started at least "
        "its model-load time ago), every 15 s of simulated time: below capacity as an M/M/n "
        "queue of the replicas' slots, above it as a growing backlog. A minute meets the "
        "objective when its worst step's p95 latency is within it (a minute without requests "
        "meets it; one with requests and no replica serving does not). Replicas an "
        "autoscaler adds are workloads like any other: queued, admitted under quota, placed, "
        "then loading. Median over seeds; the changes and figures are the first seed's "
        f"({first.label}, seed {first.seed})."
    )
    changes = [
        ScaleChangeRow(first.label, report.workload, change)
        for report in first.result.serving
        for change in report.changes
    ]
    tables: list[NamedTable] = [("Services", "", list(summaries))]
    if changes:
        tables.append(("Why the replica counts changed", "The first changes.", changes))
    figures = [
        (f"{report.workload} ({first.label}, seed {first.seed})", serving_figure(report))
        for report in first.result.serving
    ]
    return Section("Inference services", note, tables, figures)
