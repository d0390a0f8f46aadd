"""Every command that opens the control plane's database leaves it and its ``-wal``/``-shm``
files readable by their owner only: plain ``serve``, ``serve --local``, ``serve
--kubeconfig`` and ``admin create-token``, whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI
from typer.testing import CliRunner

from gpufleet.cli.main import app
from tests.backends.local.conftest import DGX_EXAMPLE
from tests.fakes.kube_api import FakeApiServer

runner = CliRunner()
SIDES = ("", "-wal", "-shm")


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def modes_while_served(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """``serve`` builds everything, then returns; the modes of its database files while it
    would have served (the side files go when the database is closed)."""
    seen: dict[str, int] = {}

    def run(server: uvicorn.Server, **_: object) -> None:
        application = server.config.app
        assert isinstance(application, FastAPI)
        db = application.state.plane.store.path
        for side in SIDES:
            seen[side] = stat.S_IMODE(os.stat(db + side).st_mode)

    monkeypatch.setattr(uvicorn.Server, "run", run)
    return seen


@pytest.mark.parametrize(
    "world",
    [
        [],
        ["--local", "--fake-gpus", str(DGX_EXAMPLE)],
        ["--kubeconfig", "KUBECONFIG", "--insecure-unsigned-bindings"],
    ],
    ids=["simulated", "local", "kubeconfig"],
)
def test_serve_keeps_the_database_private(
    tmp_path: Path, modes_while_served: dict[str, int], world: list[str]
) -> None:
    with FakeApiServer() as server:
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        args = [kubeconfig if a == "KUBECONFIG" else a for a in world]
        result = runner.invoke(app, ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", *args])
    assert result.exit_code == 0, result.output
    assert modes_while_served == dict.fromkeys(SIDES, 0o600)


def test_create_token_keeps_the_database_private(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    result = runner.invoke(app, ["admin", "create-token", "--tenant", "a", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
