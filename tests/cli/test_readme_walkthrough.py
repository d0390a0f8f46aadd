"""The README's walkthrough of ``gpufleet serve`` and the CLI against it, run from the README's
own text, in order, as a new user pastes it (issue 11, item 17): so that it cannot drift.

The shell blocks of the section "`gpufleet serve` (the control plane)" are read line by line:
``export VAR=$(gpufleet ...)`` runs the command and keeps what it prints in ``$VAR``;
``gpufleet serve ... &`` starts a real server (a subprocess, on a free port, its database in a
temporary directory); every other ``gpufleet ...`` line runs the CLI (in-process, over HTTP on
loopback) with ``$VAR`` and the server address substituted, and must exit 0 and print each
backticked part of its comment (spaces aside). A read that expects what the scheduler has not
done yet is asked again for a few seconds.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.testing.server_process import wait_until_ready

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
SECTION = "### `gpufleet serve` (the control plane)"
README_SERVER = "http://127.0.0.1:8080"
#: Commands that only read: asked again while what they should print is not there yet.
READS = frozenset({"get", "describe", "explain", "top", "whoami"})
RETRY_S = 10.0
runner = CliRunner()


@dataclass(frozen=True, slots=True)
class Step:
    line: int  # in README.md
    command: str  # as written, without its comment
    expected: tuple[str, ...]  # the backticked parts of its comment


def walkthrough(text: str) -> list[Step]:
    """The command lines of the shell blocks of the serve section, with what they print."""
    start = text.index(SECTION)
    end = text.find("\n### ", start + len(SECTION))
    section = text[start : end if end > 0 else len(text)]
    first_line = text[:start].count("\n") + 1
    steps: list[Step] = []
    in_shell = False
    for offset, raw in enumerate(section.splitlines()):
        line = raw.strip()
        if line.startswith("```"):
            in_shell = line == "```sh"
            continue
        if not in_shell or not line or line.startswith("#"):
            continue
        command, comment = _split_comment(line)
        expected = tuple(" ".join(part.split()) for part in re.findall(r"`([^`]+)`", comment))
        steps.append(Step(first_line + offset, command, expected))
    return steps


def _split_comment(line: str) -> tuple[str, str]:
    """(command, comment): a comment starts at a ``#`` after a space, as in the shell."""
    match = re.match(r"^(.*?)\s+#(?:\s(.*))?$", line)
    if match is None:
        return line, ""
    return match.group(1).strip(), match.group(2) or ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new user's directory: the default database lands here; the CLI's config too."""
    for name in ("GPUFLEET_SERVER", "GPUFLEET_TOKEN", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFLEET_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_readme_lists_the_walkthrough() -> None:
    commands = [step.command for step in walkthrough(README.read_text())]
    assert any(c.startswith("gpufleet serve") and c.endswith("&") for c in commands)
    for needed in ("explain research/sweep", "delete workload research/sweep", "whoami"):
        assert any(needed in c for c in commands), needed


@pytest.mark.slow  # a real server process and every command of the walkthrough
def test_the_readme_walkthrough_works_as_written(sandbox: Path) -> None:
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    variables: dict[str, str] = {}
    process: subprocess.Popen[bytes] | None = None
    try:
        for step in walkthrough(README.read_text()):
            where = f"README.md:{step.line}: {step.command}"
            assignment = re.fullmatch(r"export (\w+)=\$\((gpufleet .*)\)", step.command)
            if assignment is not None:
                variables[assignment.group(1)] = _run(step, assignment.group(2), variables, server)
                continue
            if step.command.startswith("gpufleet serve") and step.command.endswith("&"):
                args = shlex.split(step.command.removesuffix("&"))[1:]
                process = _serve([*args, "--port", str(port)], sandbox)
                wait_until_ready(server, process, sandbox / "serve.log")
                continue
            assert step.command.startswith("gpufleet "), where
            _run(step, step.command, variables, server)
    finally:
        if process is not None:
            process.terminate()
            process.wait(10)


def _run(step: Step, command: str, variables: dict[str, str], server: str) -> str:
    """Run one README command in-process; its exit code must be 0 and its output must hold
    what the README says it prints. Returns the output."""
    text = command.replace(README_SERVER, server)
    text = re.sub(r"\$(\w+)", lambda m: shlex.quote(variables[m.group(1)]), text)
    args = [
        str(REPO / arg) if arg.startswith("examples/") else arg for arg in shlex.split(text)[1:]
    ]
    deadline = time.monotonic() + (RETRY_S if args[0] in READS else 0.0)
    while True:
        result = runner.invoke(app, args)
        output = " ".join(result.stdout.split())
        missing = [part for part in step.expected if part not in output]
        if result.exit_code == 0 and not missing:
            return result.stdout.strip()
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    assert result.exit_code == 0, f"README.md:{step.line}: {command}: {result.output}"
    raise AssertionError(
        f"README.md:{step.line}: {command}: printed no {missing!r}:\n{result.stdout}"
    )


def _serve(args: list[str], where: Path) -> subprocess.Popen[bytes]:
    log = (where / "serve.log").open("ab")
    executable = Path(sys.executable).parent / "gpufleet"
    return subprocess.Popen(
        [str(executable), *args], cwd=where, stdout=log, stderr=log, env=dict(os.environ)
    )
