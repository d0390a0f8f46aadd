"""``gpufleet cost``: what the workloads of a running control plane cost, per group.

``gpufleet cost --by team --window 7d`` asks ``GET /api/v1/cost`` and shows one row per group
(namespace, queue, tenant, workload, ``label:KEY``, ``annotation:KEY`` or a bare label key such
as ``team``; several joined by commas) with the three splits: allocated, used, idle (and the
GPU cost nobody measured, never counted as used or idle). ``-o wide`` adds the GPU, CPU and
memory parts and the idle GPU-hours; ``json`` and ``yaml`` print the API's object; ``csv`` one
header line and a row per group, for spreadsheets. Errors and exit codes as the other remote
commands (:mod:`gpufleet.cli.remote`); a bad window or ``by`` is refused here before asking.
"""

from __future__ import annotations

import csv
import io
import sys
from enum import StrEnum
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from gpufleet.api.schemas import API_PREFIX, CostLine, CostReport
from gpufleet.cli.client import ApiClient, UnexpectedResponseError
from gpufleet.cli.output import console, fail, warn
from gpufleet.cli.remote import ServerOption, TokenOption, connect, remote_errors
from gpufleet.cli.remote_render import Clock, Output, dump
from gpufleet.cli.tables import show
from gpufleet.economics.reports import parse_by
from gpufleet.service.cost_window import parse_window


class CostOutput(StrEnum):
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"
    CSV = "csv"


#: The columns of ``-o csv``, in order: the API's CostLine fields.
CSV_FIELDS = (
    "name", "workloads", "gpu_hours", "idle_gpu_hours", "unmeasured_gpu_hours",
    "unpriced_gpu_hours", "allocated", "used", "idle", "unmeasured", "gpu", "cpu", "memory",
    "utilisation", "estimated",
)  # fmt: skip


def fetch_cost(client: ApiClient, by: str, window: str) -> CostReport:
    """``GET /api/v1/cost`` as its schema."""
    response = client.request("GET", f"{API_PREFIX}/cost", params={"by": by, "window": window})
    try:
        return CostReport.model_validate_json(response.content)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top)"
        raise UnexpectedResponseError(
            f"unexpected answer from GET {API_PREFIX}/cost: not a CostReport ({where}: "
            f"{first['msg']}); is this a gpufleet server of the same version?"
        ) from None


def money(value: float) -> str:
    return f"{value:,.2f}"


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def cost_table(report: CostReport, wide: bool = False) -> Table:
    """One row per group, and the total."""
    table = Table(box=None, pad_edge=False, show_edge=False)
    group = ",".join(report.by).upper()
    table.add_column(group, no_wrap=True)
    heads = ["WORKLOADS", "GPU-HOURS", "ALLOCATED", "USED", "IDLE", "UNMEASURED", "GPU UTIL"]
    if wide:
        heads += ["IDLE GPU-HOURS", "GPU", "CPU", "MEMORY", "UNPRICED GPU-HOURS"]
    for head in heads:
        table.add_column(head, justify="right", no_wrap=True)
    for line in [*report.lines, report.total]:
        table.add_row(*_cells(line, wide))
    return table


def _cells(line: CostLine, wide: bool) -> list[str]:
    name = "TOTAL" if line.name == "__total__" else line.name
    cells = [
        name + (" *" if line.estimated else ""),
        str(line.workloads) if line.name != "__idle__" else "–",
        f"{line.gpu_hours:,.1f}",
        money(line.allocated),
        money(line.used),
        money(line.idle),
        money(line.unmeasured),
        percent(line.utilisation),
    ]
    if wide:
        cells += [
            f"{line.idle_gpu_hours:,.1f}",
            money(line.gpu),
            money(line.cpu),
            money(line.memory),
            f"{line.unpriced_gpu_hours:,.1f}",
        ]
    return cells


def cost_csv(report: CostReport) -> str:
    """A header line and one row per group, then the total (``__total__``)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for line in [*report.lines, report.total]:
        data = line.model_dump(mode="json")
        writer.writerow(["" if data[f] is None else data[f] for f in CSV_FIELDS])
    return out.getvalue()


@remote_errors
def cost(
    by: Annotated[
        str,
        typer.Option(
            "--by",
            help="namespace, queue, tenant, workload, label:KEY, annotation:KEY or a label key "
            "such as team (several: comma-separated)",
        ),
    ] = "namespace",
    window: Annotated[
        str, typer.Option("--window", help="how far back: 7d, 24h, 90m, 1d12h")
    ] = "7d",
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="wide, json, yaml or csv"),
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """What the workloads cost per group: allocated, used, idle. Example: gpufleet cost --by
    team --window 7d"""
    chosen = _output(output)
    try:
        parse_window(window)
        parse_by(by)
    except ValueError as error:
        raise fail(escape(str(error))) from None
    with connect(server, token) as client:
        report = fetch_cost(client, by, window)
        clock = Clock.of(client.cluster()) if chosen in (None, CostOutput.WIDE) else None
    if chosen is CostOutput.CSV:
        sys.stdout.write(cost_csv(report))
        for note in report.notes:  # on stderr: the CSV stays a table
            warn(escape(note))
    elif chosen in (CostOutput.JSON, CostOutput.YAML):
        sys.stdout.write(dump(report, Output(chosen.value)))
    else:
        show(cost_table(report, wide=chosen is CostOutput.WIDE))
        assert clock is not None
        console.print(
            f"{report.currency}, the {report.window} to {clock.at(report.end)}; unmeasured: "
            "GPU cost of held time no utilisation sample stands for"
            + ("; * estimated price" if report.total.estimated else ""),
            markup=False,
        )
        for note in report.notes:
            warn(escape(note))


def _output(text: str | None) -> CostOutput | None:
    if text is None:
        return None
    try:
        return CostOutput(text.lower())
    except ValueError:
        choices = ", ".join(o.value for o in CostOutput)
        raise fail(f"-o/--output: expected one of {choices}, got {text!r}") from None
