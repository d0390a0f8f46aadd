"""How a field of a report's row reads in the HTML tables, said where the row is defined.

A row dataclass marks the fields that are not plain numbers with field metadata, e.g.
``delay_p50: float = field(metadata=DURATION)``: :func:`gpufleet.report.html.html_table` then
shows ``39m09s`` rather than ``2349.0`` (the one format of :mod:`gpufleet.model.times`), while
``results.json`` keeps the seconds. A dict field is formatted value by value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import Field
from typing import Any

from gpufleet.model.times import format_duration, simulated_time

#: The metadata key: a function of the value and the whole row, giving the cell's text.
CELL = "cell"
CellFormat = Callable[[Any, Any], str]

#: Seconds of simulated time that a span lasted (a delay, a run time).
DURATION: Mapping[str, CellFormat] = {CELL: lambda value, _row: format_duration(value)}
#: An instant of a simulated run (seconds since it started): ``t=39m09s``.
INSTANT: Mapping[str, CellFormat] = {CELL: lambda value, _row: simulated_time(value)}
#: An amount of money, to the cent: ``1,204.50``.
MONEY: Mapping[str, CellFormat] = {CELL: lambda value, _row: f"{value:,.2f}"}
#: Hours (GPU-hours): ``1,204.50``.
HOURS: Mapping[str, CellFormat] = {CELL: lambda value, _row: f"{value:,.2f}"}
#: A percentage: ``81.3%``.
PERCENT: Mapping[str, CellFormat] = {CELL: lambda value, _row: f"{value:.1f}%"}


def cell_format(field: Field[Any]) -> CellFormat | None:
    found: CellFormat | None = field.metadata.get(CELL)
    return found
