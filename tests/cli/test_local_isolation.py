"""``serve --local --shared-proc``: each tenant's processes visible to the others, said at start;
without it, a server that switches users hides them or, where the kernel cannot, does not
start (the rule itself: tests/service/test_local_isolation.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.backends.local.proc_hiding import probe
from gpufleet.cli.main import app
from gpufleet.service.local_plane import LocalControlPlane

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
FAKE_GPUS = REPO / "examples" / "agent" / "fake-gpus.yaml"
NOBODY = 65534


def serve_local(tmp_path: Path, *more: str) -> list[str]:
    state = str(tmp_path / "state")
    return ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", "--local",
            "--fake-gpus", str(FAKE_GPUS), "--state-dir", state, *more]  # fmt: skip


def test_shared_proc_is_for_local(tmp_path: Path) -> None:
    result = runner.invoke(app, ["serve", "--db", str(tmp_path / "g.db"), "--shared-proc"])
    assert result.exit_code == 2
    assert "--shared-proc are for --local" in " ".join(result.output.split())


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_shared_proc_as_root_warns_at_start_and_leaves_processes_visible(
    tmp_path: Path, served: list[LocalControlPlane]
) -> None:
    result = runner.invoke(app, serve_local(tmp_path, "--run-as", f"ml={NOBODY}", "--shared-proc"))
    assert result.exit_code == 0, result.output
    assert "--shared-proc: each tenant's processes are visible" in " ".join(result.output.split())
    (plane,) = served
    assert plane.machine.supervisor.shared_proc


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_as_root_with_run_as_it_hides_processes_or_refuses_to_start(
    tmp_path: Path, served: list[LocalControlPlane]
) -> None:
    result = runner.invoke(app, serve_local(tmp_path, "--run-as", f"ml={NOBODY}"))
    text = " ".join(result.output.split())
    refused = probe(NOBODY, NOBODY)
    if refused is None:
        assert result.exit_code == 0, result.output
        assert "--shared-proc" not in text
        (plane,) = served
        assert not plane.machine.supervisor.shared_proc
    else:
        assert result.exit_code == 2
        assert "this machine refused it" in text
        assert "--shared-proc" in text
        assert served == []


def test_no_user_switch_needs_no_hiding(tmp_path: Path, served: list[LocalControlPlane]) -> None:
    """Not root: every tenant runs as the server's user; as root: --allow-root's root runs."""
    more = ["--allow-root"] if os.geteuid() == 0 else []
    result = runner.invoke(app, serve_local(tmp_path, *more))
    assert result.exit_code == 0, result.output
    assert "--shared-proc" not in " ".join(result.output.split())
    assert len(served) == 1
