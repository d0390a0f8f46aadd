"""Every README command shown with what it prints is run, and what it prints must hold the
README's text, figure for figure (issue 29 item 21): so that an example cannot drift from the
code, nor the README from the example.

Two forms are read from README.md: a ``sh`` block of one command (continued with ``\\``)
followed at once by a ``text`` block, and a ``console`` block of ``$ command`` lines, each
followed by its output. Commands of ``gpufleet simulate`` and ``gpufleet place`` (which need
nothing but the repository) run in-process, in a temporary directory, at a terminal 200
columns wide; every non-empty line of the README's text, its spaces collapsed, must appear in
what the command printed, its spaces collapsed the same way. ``...`` in a console block stands
for lines left out. Other commands (a server, Kubernetes) are shown with what they print but
are run by their own tests (``tests/cli/test_readme_walkthrough.py`` and others).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
#: Commands this test runs (the others need a server or a cluster).
RUNS = ("gpufleet simulate", "gpufleet place")
ELIDED = "..."


@dataclass(frozen=True, slots=True)
class Shown:
    line: int  # in README.md, of the command
    command: str
    printed: tuple[str, ...]  # the README's lines of what it prints


def blocks(text: str) -> list[tuple[int, str, list[str], int]]:
    """(first line of the body, language, body lines, line after the closing fence)."""
    lines = text.splitlines()
    found = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            language = lines[i][3:].strip()
            end = i + 1
            while not lines[end].startswith("```"):
                end += 1
            found.append((i + 2, language, lines[i + 1 : end], end + 2))
            i = end + 1
        else:
            i += 1
    return found


def shown_outputs(text: str) -> list[Shown]:
    """The README's commands shown with their output, of the commands in :data:`RUNS`."""
    found = blocks(text)
    out: list[Shown] = []
    for (line, language, body, after), following in zip(found, [*found[1:], None], strict=True):
        if language == "sh" and following is not None and following[1] == "text":
            between = text.splitlines()[after - 1 : following[0] - 2]
            command = " ".join(part.strip().removesuffix("\\").strip() for part in body)
            if not any(s.strip() for s in between) and "\n" not in command:
                out.append(Shown(line, command, tuple(following[2])))
        elif language == "console":
            out.extend(_console(line, body))
    return [shown for shown in out if shown.command.startswith(RUNS)]


def _console(first: int, body: list[str]) -> list[Shown]:
    shown: list[Shown] = []
    command: list[str] = []
    printed: list[str] = []
    line = first
    for offset, raw in enumerate([*body, "$ "]):
        if raw.startswith("$ ") or (command and command[-1].endswith("\\")):
            if raw.startswith("$ ") and command:
                joined = " ".join(c.strip().removesuffix("\\").strip() for c in command)
                shown.append(Shown(line, joined.split(" #")[0].strip(), tuple(printed)))
                command, printed = [], []
            if raw.startswith("$ "):
                line = first + offset
                command = [raw[2:]]
            else:
                command.append(raw)
        else:
            printed.append(raw)
    return shown


def squeezed(text: str) -> str:
    return " ".join(text.split())


SHOWN = shown_outputs(README.read_text())


def test_the_readme_shows_the_queueing_and_idle_examples() -> None:
    commands = [shown.command for shown in SHOWN]
    for example in ("examples/tenancy", "examples/idle/notebooks.yaml"):
        assert any(example in command for command in commands), example


@pytest.mark.slow  # each a simulated run
@pytest.mark.parametrize("shown", SHOWN, ids=[f"README.md:{s.line}" for s in SHOWN])
def test_a_readme_command_prints_what_the_readme_shows(
    shown: Shown, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # its results land here
    monkeypatch.setenv("COLUMNS", "200")
    args = [
        str(REPO / arg) if arg.startswith("examples/") else arg
        for arg in shlex.split(shown.command)[1:]
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"README.md:{shown.line}: {shown.command}: {result.output}"
    printed = squeezed(result.output.replace(str(REPO) + "/", ""))
    missing = [
        line
        for line in shown.printed
        if line.strip() and line.strip() != ELIDED and squeezed(line) not in printed
    ]
    assert not missing, (
        f"README.md:{shown.line}: {shown.command}: the README shows lines it no longer prints:\n"
        + "\n".join(missing)
        + f"\n\nit printed:\n{result.output}"
    )
