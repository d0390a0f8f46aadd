"""Flag and argument errors as one line on stderr, exit code 2, for every command.

Typer draws click's usage errors as a box of four or more lines (usage, a hint, a framed
message). :class:`OneLineErrors` is the command group class of ``gpufleet``: it runs the
command as click's standalone mode would, except that a usage error reads
``gpufleet: no such option: --bogus (see 'gpufleet get --help')``. Help output stays Typer's.
It owns nothing else: errors in input files are the commands' own (``cli/inputs.fail``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

PROGRAM = "gpufleet"


def _click_exceptions() -> ModuleType:
    """The exceptions Typer raises: of the click it vendors (Typer 0.2x), else click's."""
    try:
        return importlib.import_module("typer._click.exceptions")
    except ImportError:
        return importlib.import_module("click.exceptions")


_errors = _click_exceptions()
ClickException: type[Exception] = _errors.ClickException
UsageError: type[Exception] = _errors.UsageError
NoArgsIsHelpError: type[Exception] = _errors.NoArgsIsHelpError


def one_line(error: Exception, command: str = PROGRAM) -> str:
    """``gpufleet: <what is wrong> (see '<command> --help')`` of a click exception; the
    command is the error's own when it knows it (some parser errors do not)."""
    text = str(error.format_message())  # type: ignore[attr-defined]
    message = " ".join(text.split()).rstrip(".")
    if message[:1].isupper() and not message[1:2].isupper():
        message = message[0].lower() + message[1:]
    if not isinstance(error, UsageError):
        return f"{PROGRAM}: {message}"
    ctx: typer.Context | None = getattr(error, "ctx", None)
    if ctx is not None and len(ctx.command_path.split()) > len(command.split()):
        command = ctx.command_path
    return f"{PROGRAM}: {message} (see '{command} --help')"


def _exit(code: int) -> NoReturn:
    sys.stdout.flush()
    sys.exit(code)


class OneLineErrors(TyperGroup):
    """See the module docstring."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except NoArgsIsHelpError as error:
            # The help, as `gpufleet` alone prints it (Typer's rich help is printed already).
            if str(error.format_message()).strip():  # type: ignore[attr-defined]
                error.show()  # type: ignore[attr-defined]
            _exit(getattr(error, "exit_code", 2))
        except ClickException as error:
            typer.echo(one_line(error, self.command_path_of(args)), err=True)
            _exit(getattr(error, "exit_code", 1))
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            _exit(1)
        # Not standalone, click returns what the command returned, or the code it exited with.
        _exit(result if isinstance(result, int) else 0)

    def command_path_of(self, args: Sequence[str] | None) -> str:
        """'gpufleet traces fetch' for ``traces fetch --dir``: the subcommands the arguments
        name, up to the first that is not one."""
        words = [PROGRAM]
        group: TyperGroup = self
        for arg in sys.argv[1:] if args is None else args:
            found = group.commands.get(arg)
            if found is None:
                break
            words.append(arg)
            if not isinstance(found, TyperGroup):
                break
            group = found
        return " ".join(words)
