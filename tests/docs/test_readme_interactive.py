"""The README's block of ``gpufleet run -it``, ``attach`` and ``run -f --detach`` (section
"One box", **Interactive work**), run as written, in order, against a real uvicorn server of a
``serve --local`` plane (fake GPUs, real processes): each command prints the backticked parts
of its comment. The terminal commands run on a pseudo-terminal of their own (a subprocess);
Ctrl-C on ``run -f`` is pressed from its follow loop (in-process)."""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli import local_runs
from gpufleet.cli.main import app
from gpufleet.testing.local_service import TENANT, LocalHarness
from tests.backends.local.conftest import eight_gpus, no_process_left, state_root
from tests.cli.test_local_runs import press_ctrl_c
from tests.cli.test_run_interactive import Terminal, served

__all__ = ["eight_gpus", "no_process_left", "served", "state_root"]

README = Path(__file__).resolve().parents[2] / "README.md"
FIRST = "gpufleet run -it --gpus 1 --name shell -- bash"
#: What the README's train.py stands for: up at once, done two seconds later.
TRAIN = "import time; print('up', flush=True); time.sleep(2); print('done', flush=True)\n"


def block() -> list[tuple[list[str], list[str]]]:
    """The block's commands (words, ``gpufleet`` dropped) and their comments' backticked
    parts."""
    text = README.read_text()
    start = text.index("```sh\n" + FIRST)
    body = text[start + len("```sh\n") : text.index("```", start + 6)]
    steps = []
    for line in body.splitlines():
        command, _, comment = line.partition("  #")
        steps.append((shlex.split(command)[1:], re.findall(r"`([^`]+)`", comment)))
    return steps


def test_the_readme_shows_run_it_attach_and_detach() -> None:
    assert [words[:2] for words, _ in block()] == [
        ["run", "-it"], ["attach", "shell"], ["run", "-f"], ["logs", "-f"]
    ]  # fmt: skip


def test_the_readmes_interactive_commands_do_what_it_says(
    served: tuple[LocalHarness, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    harness, url = served
    token = harness.tokens[TENANT]
    (run_it, shown_run), (attach, shown_attach), (detach, shown_detach), (logs, _) = block()

    shell = Terminal(url, token, *run_it)
    shell.read_until(shown_run[0].encode())  # accepted: 1 GPU(s)
    shell.type(b"X=kept; echo s''et\n")
    shell.read_until(b"\nset")
    shell.process.kill()  # the connection lost: the shell goes on
    shell.exit_code()

    again = Terminal(url, token, *attach)
    again.read_until(b"\nset")  # replayed
    again.type(b'echo "got-$X"; ' + shown_attach[0].encode() + b"\n")  # exit 3
    again.read_until(b"got-kept")
    assert again.exit_code() == 3

    harness.machine.tenant_root(TENANT).joinpath("train.py").write_text(TRAIN)
    monkeypatch.setattr(local_runs, "pause", press_ctrl_c(harness, "train", 1))
    monkeypatch.setattr(local_runs, "FOLLOW_EVERY_S", 0.05)
    env = {"GPUFLEET_SERVER": url, "GPUFLEET_TOKEN": token}
    result = CliRunner().invoke(app, detach, env=env)
    assert result.exit_code == 0, result.output
    assert shown_detach[0] in result.stdout
    monkeypatch.setattr(local_runs, "pause", time.sleep)
    result = CliRunner().invoke(app, logs, env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-2:] == ["up", "done"]
