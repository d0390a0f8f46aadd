"""The ``gpufleet`` command line.

Each command's module is imported when the command runs, not when ``gpufleet`` starts: the
commands together import the simulator, the API server, the Kubernetes client and the
scheduling core (about a second), and ``gpufleet scheduler`` must be listing its cluster well
within that (it imports the core while the API server lists). ``--help`` loads them all.
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any

import typer
import typer.main

import gpufleet
from gpufleet.cli.output import console
from gpufleet.cli.usage_errors import OneLineErrors

#: Every command, in the order ``--help`` lists them, and where it is defined: a function
#: (one command) or a Typer app (a group of them).
COMMANDS: dict[str, str] = {
    "simulate": "gpufleet.cli.simulate:simulate",
    "place": "gpufleet.cli.place:place",
    "demo": "gpufleet.cli.demo:demo",
    "scheduler": "gpufleet.cli.scheduler:scheduler",
    "serve": "gpufleet.cli.serve:serve",
    "agent": "gpufleet.cli.agent:agent",
    "admin": "gpufleet.cli.admin:admin",
    "submit": "gpufleet.cli.remote:submit",
    "apply": "gpufleet.cli.apply:apply",
    "run": "gpufleet.cli.local_runs:run",
    "logs": "gpufleet.cli.local_runs:logs",
    "attach": "gpufleet.cli.local_runs:attach",
    "get": "gpufleet.cli.remote:get",
    "describe": "gpufleet.cli.remote:describe",
    "explain": "gpufleet.cli.remote:explain",
    "delete": "gpufleet.cli.remote:delete",
    "ungate": "gpufleet.cli.remote:ungate",
    "suspend": "gpufleet.cli.remote:suspend",
    "resume": "gpufleet.cli.remote:resume",
    "top": "gpufleet.cli.remote:top",
    "whoami": "gpufleet.cli.remote:whoami",
    "login": "gpufleet.cli.remote:login",
    "bench": "gpufleet.cli.bench:app",
    "traces": "gpufleet.cli.traces:app",
    "alerts": "gpufleet.cli.alerts:app",
    "cost": "gpufleet.cli.cost:cost",
    "policies": "gpufleet.cli.main:policies",
    "version": "gpufleet.cli.main:version",
}


# Typed Any: a click command is click's own class or the copy of click that Typer vendors,
# depending on Typer's version (see cli/usage_errors).
def load_command(name: str) -> Any:
    """The click command ``name`` of :data:`COMMANDS`, its module imported now."""
    module, attribute = COMMANDS[name].split(":")
    target = getattr(importlib.import_module(module), attribute)
    command: Any
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        single = typer.Typer()
        single.command(name=name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return command


class LazyCommands(OneLineErrors):
    """``gpufleet``'s command group: the commands of :data:`COMMANDS`, each loaded when
    named (and all of them for ``--help``)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.commands[cmd_name] = load_command(cmd_name)
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    cls=LazyCommands,
    help="gpufleet: a GPU-aware scheduler for AI workloads.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _print_version(wanted: bool) -> None:
    if wanted:
        console.print(gpufleet.__version__)
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


def policies() -> None:
    """List the placement policies."""
    from gpufleet.scheduling.policies import POLICY_DESCRIPTIONS

    for name, text in POLICY_DESCRIPTIONS.items():
        console.print(f"[bold]{name:<15}[/] {text}")


def version() -> None:
    """Print the version."""
    console.print(gpufleet.__version__)
