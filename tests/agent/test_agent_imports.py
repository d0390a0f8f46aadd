"""The node agent's memory budget (issue 13: under 80 MB resident): importing the agent must
not import the official ``kubernetes`` package (~50 MiB by itself) nor ``httpx`` (~9 MiB more
than the standard library's ``http.client``, which the agent's API client uses). A fresh
interpreter, since this one has imported everything the other tests use."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: What ``gpufleet agent`` imports, all together: the command line, the agent and its parts.
AGENT_PROCESS = (
    "gpufleet.cli.main",
    "gpufleet.cli.agent",
    "gpufleet.agent.runner",
    "gpufleet.devices.fake",
    "gpufleet.devices.nvml_source",
    "gpufleet.io.kube.device_plugin_config",
)
#: Packages the agent's process must not load, and why.
TOO_HEAVY = ("kubernetes", "httpx")


def imported_heavy_packages(modules: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """Imports ``modules`` in a fresh interpreter; it exits non-zero naming every package of
    :data:`TOO_HEAVY` it found loaded, with the gpufleet modules loaded (to find the culprit)."""
    check = (
        f"import sys, {', '.join(modules)}; "
        f"heavy = [p for p in {TOO_HEAVY!r} if p in sys.modules]; "
        "sys.exit(f'{heavy} imported by way of ' + repr(sorted("
        "m for m in sys.modules if m.startswith('gpufleet')))[:2000] if heavy else 0)"
    )
    return subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    "module",
    ["gpufleet.agent.runner", "gpufleet.cli.agent", "gpufleet.agent.kube.node_agent"],
)
def test_no_agent_module_imports_a_heavy_client(module: str) -> None:
    done = imported_heavy_packages((module,))
    assert done.returncode == 0, done.stderr


def test_the_agent_process_imports_neither_kubernetes_nor_httpx() -> None:
    done = imported_heavy_packages(AGENT_PROCESS)
    assert done.returncode == 0, done.stderr
