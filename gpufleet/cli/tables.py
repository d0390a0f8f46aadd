"""How the CLI lays out its tables, as kubectl does: no cell is cut and no column squeezed out.

A table's columns are of two kinds. Those made with ``no_wrap=True`` identify a row or hold
short values (a name, a GPU model, a count): they are always shown whole, on one line. The
others hold free text (labels, taints, messages): on a terminal they fold within the width the
identifying columns leave them, at least :data:`FREE_MIN_WIDTH` each; when even that does not
fit, the table is as wide as it needs and the terminal wraps its lines, as it does kubectl's.
Piped (not a terminal), there is no width limit at all: every row on one line, columns
separated by spaces and no blanks at the ends of lines, for grep, awk and cut.

It decides widths only; what the tables hold is their makers' (``remote_render``, ``place``,
``simulate``, ``simulate_scenario``).
"""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table

from gpufleet.cli.output import console

#: A free-text column is never folded narrower than this (unless its text is narrower).
FREE_MIN_WIDTH = 20
#: Wide enough for any table's natural width (measurement only).
_UNLIMITED = 1_000_000


def tables_in(renderable: RenderableType) -> Iterator[Table]:
    """The tables of ``renderable`` (itself, or those of a Group, however nested)."""
    if isinstance(renderable, Table):
        yield renderable
    elif isinstance(renderable, Group):
        for part in renderable.renderables:
            yield from tables_in(part)


def natural_width(out: Console, renderable: RenderableType) -> int:
    """The width ``renderable`` takes with no limit: its longest line."""
    options = out.options.update_width(_UNLIMITED)
    return Measurement.get(out, options, renderable).maximum


def _free_columns(table: Table) -> list[int]:
    return [i for i, column in enumerate(table.columns) if not column.no_wrap]


def fit(out: Console, table: Table, width: int) -> int:
    """Give ``table``'s free-text columns the room the identifying ones leave within ``width``
    (each at least :data:`FREE_MIN_WIDTH`); returns the width the table then needs, which is
    more than ``width`` only when its identifying columns alone do not fit."""
    free = _free_columns(table)
    for i in free:
        table.columns[i].max_width = None
    natural = natural_width(out, table)
    if natural <= width or not free:
        return natural
    own = {i: _column_width(out, table, i) for i in free}
    for i in free:
        table.columns[i].max_width = min(own[i], FREE_MIN_WIDTH)
    needed = natural_width(out, table)
    if needed >= width:
        return needed
    # Share what is left over among the free columns, in proportion to what each would take.
    spare = width - needed
    wants = {i: own[i] - min(own[i], FREE_MIN_WIDTH) for i in free}
    total = sum(wants.values())
    for i in free:
        if total:
            extra = spare * wants[i] // total
            table.columns[i].max_width = min(own[i], FREE_MIN_WIDTH + extra)
    return natural_width(out, table)


def _column_width(out: Console, table: Table, index: int) -> int:
    """The natural width of one column's text (header and cells), without padding."""
    column = table.columns[index]
    options = out.options.update_width(_UNLIMITED)
    cells = [column.header, *column.cells] if table.show_header else list(column.cells)
    return max((Measurement.get(out, options, cell).maximum for cell in cells), default=1)


def show(renderable: RenderableType, out: Console | None = None) -> None:
    """Print ``renderable`` (a table, or a Group holding tables) as the module docstring says,
    on ``out`` (default: the CLI's console)."""
    out = out or console
    tables = list(tables_in(renderable))
    if out.is_terminal:
        width = out.width
        for table in tables:
            width = max(width, fit(out, table, out.width))
        if width == out.width:
            out.print(renderable)
            return
        wide = Console(
            file=out.file,
            width=width,
            force_terminal=True,
            color_system=out.color_system,  # type: ignore[arg-type]
            highlight=False,
        )
        wide.print(renderable)
        return
    for table in tables:
        for i in _free_columns(table):
            table.columns[i].max_width = None
    plain = Console(
        width=max(natural_width(out, renderable), 1), highlight=False, color_system=None
    )
    with plain.capture() as captured:
        plain.print(renderable)
    # no padding at the ends of lines, for grep, awk and diff
    out.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
