"""Usage errors are one line with exit code 2, and busy ports are told before anything starts
(``gpufleet --version``: tests/test_package_version.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        pytest.param(
            ["get", "--bogus"],
            "gpufleet: no such option: --bogus (see 'gpufleet get --help')",
            id="unknown-option",
        ),
        pytest.param(
            ["get"],
            "gpufleet: missing argument 'resource' (see 'gpufleet get --help')",
            id="missing-argument",
        ),
        pytest.param(
            ["simulate", "--seeds"],
            "gpufleet: option '--seeds' requires an argument (see 'gpufleet simulate --help')",
            id="option-without-value",
        ),
        pytest.param(
            ["bogus"], "gpufleet: no such command 'bogus' (see 'gpufleet --help')", id="command"
        ),
        pytest.param(
            ["traces", "fetch", "--dir"],
            "gpufleet: option '--dir' requires an argument (see 'gpufleet traces fetch --help')",
            id="subcommand-of-a-group",
        ),
        pytest.param(
            ["place"],
            "gpufleet: missing option '--cluster' (see 'gpufleet place --help')",
            id="missing-option",
        ),
        pytest.param(
            ["serve", "--port", "eighty"],
            "gpufleet: invalid value for '--port'",
            id="bad-value",
        ),
        pytest.param(
            ["scheduler", "--policy", "tetris"],
            "gpufleet: invalid value for --policy: unknown policy 'tetris'",
            id="bad-parameter-raised-by-a-command",
        ),
        pytest.param(
            ["admin", "create-token", "--role", "admin"],
            "gpufleet: missing option '--tenant' (see 'gpufleet admin create-token --help')",
            id="nested-command",
        ),
    ],
)
def test_usage_errors_are_one_line_on_stderr_with_exit_code_2(args: list[str], line: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    [said] = result.stderr.splitlines()
    assert said.startswith(line), said
    assert said.endswith("--help')")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something already listens on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_serve_on_a_busy_port_says_so_before_anything_else(busy_port: int, tmp_path: Path) -> None:
    db = tmp_path / "z.db"
    result = runner.invoke(app, ["serve", "--port", str(busy_port), "--db", str(db)])
    assert result.exit_code == 2
    assert result.stdout == "", "nothing may say it serves"
    assert result.stderr == f"error: port {busy_port} on 127.0.0.1 is in use (pass --port)\n"
    assert not db.exists(), "nothing is stored when it cannot serve"


def test_scheduler_on_a_busy_metrics_port_says_so(busy_port: int, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    args = ["scheduler", "--kubeconfig", str(kubeconfig), "--metrics-port", str(busy_port)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    expected = f"port {busy_port} on 0.0.0.0 is in use (pass --metrics-port)"
    assert result.stderr == f"error: {expected}\n"
