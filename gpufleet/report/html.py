"""The HTML report of a simulation: a summary table and interactive plots (plotly).

One self-contained file (plotly.js is inlined once), readable offline. Fill-up runs plot
unallocated GPU % and fragmentation against arrived workload per policy (median over seeds with
a min-max band), allocation per GPU model and failures per pod class; replay runs plot GPU
allocation, fragmentation and pending pods over time, and the queueing-delay distribution.
Multi-tenant runs add their own figures and tables (:mod:`gpufleet.report.scenario_html`).
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from gpufleet.backends.sim.results import FillRun, ReplayRun
from gpufleet.report.cells import CellFormat, cell_format

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: Where a pod that did not wait is drawn on the log axis of the delay distribution.
ZERO_DELAY = 0.01

_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]


def _color(i: int) -> str:
    return _COLORS[i % len(_COLORS)]


def _band(
    fig: go.Figure, x: Sequence[float], series: list[list[float]], name: str, color: str
) -> None:
    """Median line with a min-max band over seeds."""
    columns = list(zip(*series, strict=True))
    mid = [median(c) for c in columns]
    fig.add_trace(
        go.Scatter(
            x=[*x, *x[::-1]],
            y=[max(c) for c in columns] + [min(c) for c in columns][::-1],
            fill="toself",
            fillcolor=color,
            opacity=0.15,
            line={"width": 0},
            hoverinfo="skip",
            showlegend=False,
        )
    )
    fig.add_trace(go.Scatter(x=x, y=mid, name=name, line={"color": color, "width": 2}))


def fill_figures(runs: Sequence[FillRun]) -> list[tuple[str, go.Figure]]:
    policies = list(dict.fromkeys(r.policy for r in runs))
    x = [float(i) for i in range(len(runs[0].unallocated_gpu_pct))]
    unalloc = go.Figure()
    frag = go.Figure()
    for i, policy in enumerate(policies):
        mine = [r for r in runs if r.policy == policy]
        _band(unalloc, x, [r.unallocated_gpu_pct for r in mine], policy, _color(i))
        _band(frag, x, [r.fragmentation_pct for r in mine], policy, _color(i))
    # Below full load, unallocated is simply 100 - arrived; the policies differ from about 60%
    # on, so the view starts there (zoom out to see the rest).
    tail = [v for r in runs for v in r.unallocated_gpu_pct[60:]]
    unalloc.update_layout(
        xaxis_title="arrived workload (% of GPU capacity)",
        yaxis_title="unallocated GPU (%)",
        xaxis_range=[60, len(x) - 1],
        yaxis_range=[0, min(40.0, max(tail, default=40.0)) + 1],
    )
    frag.update_layout(
        xaxis_title="arrived workload (% of GPU capacity)",
        yaxis_title="fragmented GPU (% of capacity)",
    )
    models = sorted({m for r in runs for m in r.allocated_pct_by_model})
    by_model = go.Figure()
    classes = sorted({c for r in runs for c in r.classes})
    failures = go.Figure()
    for i, policy in enumerate(policies):
        mine = [r for r in runs if r.policy == policy]
        by_model.add_trace(
            go.Bar(
                name=policy,
                x=models,
                y=[median(r.allocated_pct_by_model[m][100] for r in mine) for m in models],
                marker_color=_color(i),
            )
        )
        rates = []
        for cls in classes:
            failed = sum(r.classes[cls].failed_by_100 for r in mine if cls in r.classes)
            arrived = sum(r.classes[cls].arrived_by_100 for r in mine if cls in r.classes)
            rates.append(100.0 * failed / arrived if arrived else 0.0)
        failures.add_trace(go.Bar(name=policy, x=classes, y=rates, marker_color=_color(i)))
    by_model.update_layout(
        barmode="group", yaxis_title="allocated GPU at 100% arrived (% of the model's GPUs)"
    )
    failures.update_layout(
        barmode="group", yaxis_title="pods that found no place before 100% arrived (%)"
    )
    return [
        ("Unallocated GPU against arrived workload", unalloc),
        ("GPU fragmentation (FGD measure)", frag),
        ("Allocation per GPU model at 100% arrived", by_model),
        ("Failed pods per class", failures),
    ]


def replay_figures(runs: Sequence[ReplayRun]) -> list[tuple[str, go.Figure]]:
    policies = list(dict.fromkeys(r.policy for r in runs))
    alloc = go.Figure()
    frag = go.Figure()
    pending = go.Figure()
    delays = go.Figure()
    for i, policy in enumerate(policies):
        run = next(r for r in runs if r.policy == policy)
        hours = [t / 3600 for t in run.timeline.time]
        color = _color(i)
        alloc.add_trace(
            go.Scatter(x=hours, y=run.timeline.allocated_gpu_pct, name=policy, line_color=color)
        )
        frag.add_trace(
            go.Scatter(x=hours, y=run.timeline.fragmentation_pct, name=policy, line_color=color)
        )
        pending.add_trace(
            go.Scatter(x=hours, y=run.timeline.pending, name=policy, line_color=color)
        )
        n = len(run.delays)
        delays.add_trace(
            go.Scatter(
                x=[max(d, ZERO_DELAY) for d in run.delays],
                y=[100.0 * (k + 1) / n for k in range(n)],
                name=policy,
                line_color=color,
            )
        )
    alloc.update_layout(xaxis_title="hours", yaxis_title="allocated GPU (%)")
    frag.update_layout(xaxis_title="hours", yaxis_title="fragmented GPU (% of capacity)")
    pending.update_layout(xaxis_title="hours", yaxis_title="pending pods")
    delays.update_layout(
        xaxis_title=f"queueing delay (s; no wait is drawn at {ZERO_DELAY} s)",
        yaxis_title="pods (%)",
        xaxis_type="log",
    )
    first = runs[0]
    per_model = go.Figure()
    hours = [t / 3600 for t in first.timeline.time]
    for i, (model, values) in enumerate(sorted(first.timeline.allocated_pct_by_model.items())):
        per_model.add_trace(go.Scatter(x=hours, y=values, name=model, line_color=_color(i)))
    per_model.update_layout(
        xaxis_title="hours", yaxis_title=f"allocated GPU per model (%), {first.policy}"
    )
    return [
        ("GPU allocation over time", alloc),
        ("GPU fragmentation over time", frag),
        ("Pending pods over time", pending),
        ("Queueing delay (cumulative distribution)", delays),
        ("Allocation per GPU model over time", per_model),
    ]


#: Fields the report's tables leave out (the description says them, or they are layout).
HIDDEN_FIELDS = frozenset({"seeds", "depth"})
#: Cells longer than this wrap (explanations), the others stay on one line.
WRAP_OVER = 60


def html_table(rows: Sequence[DataclassInstance]) -> str:
    """Rows of one dataclass as an HTML table, a column per field (dicts one line per key),
    each cell as its field's metadata says (:mod:`gpufleet.report.cells`)."""
    if not rows:
        return ""
    fields = [f for f in dataclasses.fields(rows[0]) if f.name not in HIDDEN_FIELDS]
    head = "".join(f"<th>{html.escape(f.name.replace('_', ' '))}</th>" for f in fields)
    body = ""
    for row in rows:
        cells = []
        for f in fields:
            value = getattr(row, f.name)
            shown = cell_format(f)
            wrap = ""
            if isinstance(value, dict):
                text = "<br>".join(
                    html.escape(f"{k}: {_text(v, shown, row)}") for k, v in value.items()
                )
            elif value is None:
                text = "-"
            else:
                text = html.escape(_text(value, shown, row))
                wrap = ' class="wrap"' if len(text) > WRAP_OVER else ""
            cells.append(f"<td{wrap}>{text}</td>")
        body += "<tr>" + "".join(cells) + "</tr>"
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="scroll">{table}</div>'


def _text(value: object, shown: CellFormat | None, row: object) -> str:
    return str(value) if shown is None or value is None else shown(value, row)


#: A table of the report: heading, a note under it (may be empty), and its rows.
NamedTable = tuple[str, str, Sequence["DataclassInstance"]]


@dataclasses.dataclass(frozen=True, slots=True)
class Section:
    """A section of its own (``<h2>``): a note, its tables and its figures (``<h3>`` each)."""

    heading: str
    note: str = ""
    tables: Sequence[NamedTable] = ()
    figures: Sequence[tuple[str, go.Figure]] = ()


def _section(table: NamedTable, level: int = 2) -> str:
    heading, note, rows = table
    paragraph = f"<p>{html.escape(note)}</p>" if note else ""
    return f"<h{level}>{html.escape(heading)}</h{level}>{paragraph}{html_table(rows)}"


class _Plots:
    """Figures as HTML, plotly.js inlined with the first one drawn."""

    def __init__(self) -> None:
        self.drawn = 0

    def html(self, heading: str, fig: go.Figure, level: int = 2) -> str:
        fig.update_layout(template="plotly_white", height=440, margin={"t": 30})
        plot = fig.to_html(full_html=False, include_plotlyjs=self.drawn == 0)
        self.drawn += 1
        return f"<h{level}>{html.escape(heading)}</h{level}>{plot}"


def _own_section(section: Section, plots: _Plots) -> str:
    parts = [f"<h2>{html.escape(section.heading)}</h2>"]
    if section.note:
        parts.append(f"<p>{html.escape(section.note)}</p>")
    parts += [plots.html(heading, fig, 3) for heading, fig in section.figures]
    parts += [_section(t, 3) for t in section.tables if t[2]]
    return "".join(parts)


def write_report(
    path: Path,
    title: str,
    description: str,
    summaries: Sequence[DataclassInstance],
    figures: Sequence[tuple[str, go.Figure]],
    tables: Sequence[NamedTable] = (),
    appendix: Sequence[NamedTable] = (),
    own_sections: Sequence[Section] = (),
) -> None:
    """Write the report page to ``path``: the summary table, ``tables`` (heading, note, rows),
    the ``own_sections``, the figures, then the ``appendix`` tables."""
    plots = _Plots()
    sections = [_section(t) for t in tables if t[2]]
    sections += [_own_section(s, plots) for s in own_sections]
    sections += [plots.html(heading, fig) for heading, fig in figures]
    sections += [_section(t) for t in appendix if t[2]]
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
td {{ white-space: nowrap; }}
div.scroll {{ overflow-x: auto; }}
td.wrap {{ white-space: normal; text-align: left; min-width: 30em; }}
th {{ background: #f3f3f3; }}
td:first-child, th:first-child {{ text-align: left; }}
</style></head>
<body><h1>{html.escape(title)}</h1><p>{html.escape(description)}</p>
{html_table(summaries)}
{"".join(sections)}
</body></html>
"""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
