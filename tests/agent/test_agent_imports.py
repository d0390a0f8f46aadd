"""The node agent's memory budget (issue 13: under 80 MB resident): importing the agent must
not import the official ``kubernetes`` package (~50 MiB by itself). A fresh interpreter, since
this one has imported everything the other tests use."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module",
    ["gpufleet.agent.runner", "gpufleet.cli.agent", "gpufleet.backends.kube.node_agent"],
)
def test_the_agent_does_not_import_the_kubernetes_client(module: str) -> None:
    check = (
        f"import sys, {module}; "
        "sys.exit('kubernetes imported by way of ' + repr(sorted("
        "m for m in sys.modules if m.startswith('gpufleet')))[:2000] "
        "if 'kubernetes' in sys.modules else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
