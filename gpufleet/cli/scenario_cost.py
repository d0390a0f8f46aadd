"""The cost options of ``gpufleet simulate --scenario`` and its cost table on the terminal.

Owns ``--prices`` (a price list file, read by :func:`gpufleet.io.fleet.prices.read_prices`, the one
``serve --prices`` reads; default: the list gpufleet ships) and ``--cost-by`` (a grouping:
the keys of ``gpufleet cost --by``, several joined by commas; repeatable), checked before the
scenario is read so that a bad file or key is one clear error naming it and nothing runs; the
default groupings (:func:`default_groupings`: queue, namespace, and the seeds' ``team``,
``cost-center`` and ``project`` where the scenario's workloads carry them); and the compact
table of the first grouping (:func:`print_cost`). The numbers are
:mod:`gpufleet.report.scenario_cost`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.backends.sim.costs import CostSettings
from gpufleet.cli.inputs import console, fail, warn
from gpufleet.cli.tables import show
from gpufleet.economics import Holding, PriceList, group_key, parse_by
from gpufleet.economics.aggregation import FIELD_KEYS
from gpufleet.io.fleet.prices import default_prices_path, read_prices
from gpufleet.model.workload import TimedWorkload
from gpufleet.report.scenario_cost import TOTAL, CostRow, CostSummary

#: Groupings every scenario is costed by when ``--cost-by`` is not given.
DEFAULT_GROUPINGS = (("queue",), ("namespace",))
#: Label (or annotation) keys that name who pays, costed by when a workload carries one.
OWNER_KEYS = ("team", "cost-center", "project")

PricesOption = Annotated[
    Path | None,
    typer.Option(
        "--prices",
        help="Price list YAML (kind PriceList, as serve --prices) for the cost section. "
        "Default: gpufleet's, public list prices with dates.",
        show_default=False,
        rich_help_panel="Multi-tenant scenarios",
    ),
]
CostByOption = Annotated[
    list[str] | None,
    typer.Option(
        "--cost-by",
        help="Group the cost by queue, namespace, workload, tenant, label:KEY, annotation:KEY "
        "or a label key such as team (several keys: comma-separated; repeatable, the first "
        "printed). Default: queue, namespace, and team, cost-center, project where workloads "
        "carry them.",
        show_default=False,
        rich_help_panel="Multi-tenant scenarios",
    ),
]


@dataclass(frozen=True, slots=True)
class CostOptions:
    """What ``--prices`` and ``--cost-by`` say, checked: the price list, where it came from,
    the groupings asked (None: the defaults, once the scenario is read)."""

    prices: PriceList
    source: str
    groupings: tuple[tuple[str, ...], ...] | None

    def settings(self, workloads: Sequence[TimedWorkload]) -> CostSettings:
        """The settings of the runs; a warning for a label or annotation key asked that no
        workload carries (all of them would be ``__unallocated__``)."""
        for grouping in self.groupings or ():
            for key in grouping:
                if key == "tenant":
                    warn("--cost-by tenant: simulated workloads have no tenant; all of them "
                         "are __unallocated__")  # fmt: skip
                elif key not in FIELD_KEYS and not _carried(workloads, key):
                    warn(
                        f"--cost-by {escape(key)}: no workload of the scenario carries it (as a "
                        "label or an annotation); all of them are __unallocated__"
                    )
        return CostSettings(self.prices, self.groupings or default_groupings(workloads))


def cost_options(prices: Path | None, cost_by: Sequence[str] | None) -> CostOptions:
    """Read the price list (an InputError naming the file and the field) and check each
    ``--cost-by`` (one line naming the flag and what keys are, exit code 2)."""
    groupings: list[tuple[str, ...]] = []
    for text in cost_by or ():
        try:
            keys = parse_by(text)
        except ValueError as error:
            raise fail(f"--cost-by: {escape(str(error).removeprefix('by: '))}") from None
        grouping = tuple(key.text for key in keys)
        if grouping not in groupings:
            groupings.append(grouping)
    path = prices if prices is not None else default_prices_path()
    source = str(prices) if prices is not None else "gpufleet's default price list"
    return CostOptions(read_prices(path), source, tuple(groupings) or None)


def default_groupings(workloads: Sequence[TimedWorkload]) -> tuple[tuple[str, ...], ...]:
    """Queue, namespace, then each of :data:`OWNER_KEYS` that a workload or one of its pods
    carries as a label or an annotation."""
    owners = tuple((key,) for key in OWNER_KEYS if _carried(workloads, key))
    return DEFAULT_GROUPINGS + owners


def _carried(workloads: Sequence[TimedWorkload], key: str) -> bool:
    """Whether a workload carries grouping key ``key`` (a label or annotation one): it, or
    one of its pods, as the cost report reads it."""
    group = group_key(key)
    return any(
        group.value(Holding(t.workload.name, pod.namespace, 0.0, 0.0,
                            labels={**t.workload.labels, **pod.labels},
                            annotations=pod.annotations))
        for t in workloads
        for pod in t.workload.pods
    )  # fmt: skip


def _money(value: float) -> str:
    return f"{value:,.2f}"


def _row(row: CostRow, label: str) -> list[str]:
    name = "total" if row.group == TOTAL else row.group
    return [
        label,
        escape(name) + (" *" if row.estimated else ""),
        "–" if row.group in ("__idle__", TOTAL) else str(row.workloads),
        f"{row.gpu_hours:,.1f}",
        _money(row.allocated),
        _money(row.used),
        _money(row.idle),
        _money(row.unmeasured),
        "–" if row.gpu_util_pct is None else f"{row.gpu_util_pct:.1f}%",
    ]


def cost_legend(rows: Sequence[CostRow]) -> str:
    """The caption's explanations of the marks the table shows, and only those: ``__idle__``
    where a row is the cluster's idle, ``*`` where a row's price was estimated."""
    legend = ""
    if any(row.group == "__idle__" for row in rows):
        legend += "; __idle__: GPU time nobody held"
    if any(row.estimated for row in rows):
        legend += "; * estimated price"
    return legend


def print_cost(summaries: Sequence[CostSummary]) -> None:
    """The first grouping's lines per run label, and a line naming the others."""
    if not summaries:
        return
    first = summaries[0].by
    shown = [s for s in summaries if s.by == first]
    seeds = max(len(s.seeds) for s in shown)
    others = list(dict.fromkeys(s.by for s in summaries if s.by != first))
    rows = [row for summary in shown for row in summary.rows]
    table = Table(
        title=f"Cost by {first} ({shown[0].currency}"
        + (f"; the median run of {seeds} seeds" if seeds > 1 else "")
        + ")",
        caption="allocated = used + idle + unmeasured; used: GPU cost x measured utilisation, "
        "plus CPU and memory; unmeasured: GPU cost of pods never sampled"
        + cost_legend(rows)
        + (f". Also by {', '.join(others)} in report.html and results.json" if others else ""),
    )
    table.add_column("run", no_wrap=True)
    table.add_column(first, no_wrap=True)
    for head in ("work-loads", "GPU-h", "allocated", "used", "idle", "unmeasured", "GPU util"):
        table.add_column(head, justify="right", no_wrap=True)
    for index, summary in enumerate(shown):
        if index:
            table.add_section()
        for number, row in enumerate(summary.rows):
            label = f"{summary.run} (seed {summary.seed})" if seeds > 1 else summary.run
            table.add_row(*_row(row, label if number == 0 else ""))
    show(table)
    for note in dict.fromkeys(n for s in summaries for n in s.notes):
        warn(escape(f"cost: {note}"))


def announce(options: CostOptions, settings: CostSettings) -> None:
    """Say what prices the cost section uses and how it groups."""
    by = "; ".join(",".join(g) for g in settings.groupings)
    console.print(f"cost:     {options.source} ({options.prices.currency}), by {by}")
