"""``deploy/systemd/gpufleet.service`` runs ``gpufleet serve --local`` so that a restart of the
server leaves the runs going (``KillMode=process``), restarts it when it fails, and passes
only flags that ``serve`` has."""

from __future__ import annotations

import configparser
import itertools
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from gpufleet.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "gpufleet.service"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys keep their case
    parser.read_string(UNIT.read_text())
    return parser


def serve_options() -> set[str]:
    command: Any = typer.main.get_command(app)  # gpufleet's group, its commands loaded when named
    serve = command.get_command(None, "serve")
    assert serve is not None
    return {flag for param in serve.params for flag in getattr(param, "opts", ())}


@pytest.mark.parametrize(
    ("section", "key", "expected"),
    [
        ("Service", "KillMode", "process"),
        ("Service", "Restart", "on-failure"),
        ("Service", "KillSignal", "SIGTERM"),
        ("Service", "Delegate", "yes"),
        ("Service", "StateDirectory", "gpufleet"),
        ("Service", "StateDirectoryMode", "0700"),
        ("Install", "WantedBy", "multi-user.target"),
    ],
    ids=["runs-outlive-the-server", "restarted-on-failure", "graceful-stop", "own-cgroups",
         "state-directory", "state-private", "started-at-boot"],
)  # fmt: skip
def test_the_unit_says(section: str, key: str, expected: str) -> None:
    assert unit()[section][key] == expected


def test_exec_start_runs_serve_local_with_flags_serve_has() -> None:
    words = shlex.split(unit()["Service"]["ExecStart"])
    assert words[0].endswith("/gpufleet")
    assert words[1:3] == ["serve", "--local"]
    flags = {word for word in words if word.startswith("--")}
    assert flags <= serve_options(), flags - serve_options()
    arguments = dict(itertools.pairwise(words))
    state = Path("/var/lib") / unit()["Service"]["StateDirectory"]
    assert Path(arguments["--db"]).parent == state
    assert Path(arguments["--state-dir"]).parent == state
    assert words[-1] == "$GPUFLEET_SERVE_ARGS"  # this box's flags, from the EnvironmentFile


def test_the_readme_points_at_the_unit() -> None:
    assert "deploy/systemd/gpufleet.service" in (ROOT / "README.md").read_text()
