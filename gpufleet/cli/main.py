"""The ``gpufleet`` command line."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet import __version__
from gpufleet.cli import bench, remote, traces
from gpufleet.cli.common import console
from gpufleet.cli.demo import demo
from gpufleet.cli.place import place
from gpufleet.cli.scheduler import scheduler
from gpufleet.cli.serve import admin, serve
from gpufleet.cli.simulate import simulate
from gpufleet.cli.usage_errors import OneLineErrors
from gpufleet.scheduling.policies import POLICY_DESCRIPTIONS

app = typer.Typer(
    cls=OneLineErrors,
    help="gpufleet: a GPU-aware scheduler for AI workloads.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _print_version(wanted: bool) -> None:
    if wanted:
        console.print(__version__)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """gpufleet: a GPU-aware scheduler for AI workloads."""


app.command()(simulate)
app.command()(place)
app.command()(demo)
app.command()(scheduler)
app.command()(serve)
app.add_typer(admin, name="admin")
app.command()(remote.submit)
app.command()(remote.get)
app.command()(remote.describe)
app.command()(remote.explain)
app.command()(remote.delete)
app.command()(remote.top)
app.command()(remote.whoami)
app.command()(remote.login)
app.add_typer(bench.app, name="bench")
app.add_typer(traces.app, name="traces")


@app.command()
def policies() -> None:
    """List the placement policies."""
    for name, text in POLICY_DESCRIPTIONS.items():
        console.print(f"[bold]{name:<15}[/] {text}")


@app.command()
def version() -> None:
    """Print the version."""
    console.print(__version__)
