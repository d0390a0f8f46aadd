"""What a command imports before it runs: each command's module when it runs, and for
``gpufleet scheduler`` not the scheduling core or the Kubernetes client before it has started
listing the cluster (the API server lists while Python imports them)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def imported_after(code: str) -> set[str]:
    script = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "module",
    ["gpufleet.cli.main", "gpufleet.cli.scheduler"],
    ids=["the-command-line", "the-scheduler-command"],
)
def test_a_command_module_imports_neither_the_core_nor_the_kubernetes_client(
    module: str,
) -> None:
    loaded = imported_after(f"import {module}")
    heavy = {
        "numpy",
        "kubernetes",
        "gpufleet.scheduling.core",
        "gpufleet.io.readers",
        "gpufleet.io.assembly",
    }
    assert not heavy & loaded


def test_a_command_is_loaded_when_it_runs() -> None:
    loaded = imported_after(
        "from typer.testing import CliRunner\n"
        "from gpufleet.cli.main import app\n"
        "assert CliRunner().invoke(app, ['policies']).exit_code == 0"
    )
    assert "gpufleet.scheduling.policies" in loaded
    assert "gpufleet.cli.simulate" not in loaded
    assert "gpufleet.cli.serve" not in loaded
