"""The commands that talk to a server import the client only (issue 33 item 4): each runs as a
user runs it (a fresh Python process) against a real ``gpufleet serve``, and what it imported
by the time it exited must hold nothing of the scheduling core, the backends, the Kubernetes
client, numpy or the scenario readers. ``benchmarks/cli_speed.py`` measures what this buys.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import gpufleet
from gpufleet.testing.server_process import wait_until_ready

REPO = Path(__file__).resolve().parents[2]
#: Where the gpufleet under test is (the child processes import the same one).
TREE = Path(gpufleet.__file__).resolve().parent.parent
#: The console script's body, which also writes the modules imported when the command exits.
ENTRY = """
import atexit, os, sys
atexit.register(lambda: open(os.environ["MODULES_OUT"], "w").write("\\n".join(sys.modules)))
from gpufleet.cli.main import app
sys.argv[0] = "gpufleet"
sys.exit(app())
"""
HEAVY = (
    "numpy",
    "pandas",
    "kubernetes",
    "gpufleet.scheduling",
    "gpufleet.backends",
    "gpufleet.io.assembly",
    "gpufleet.io.readers",
)
PODS = REPO / "examples" / "pods"
WORKLOAD = "default/cuda-smoke-test"  # one-gpu.yaml's
DELETED = "dev/notebook-small"  # one of mig.yaml's


@dataclass(frozen=True, slots=True)
class Server:
    url: str
    token: str
    workdir: Path


def _environment(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env["PYTHONPATH"] = str(TREE)
    env["XDG_CONFIG_HOME"] = str(workdir)  # no user config file
    return env


def _gpufleet(args: list[str], workdir: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``gpufleet ARGS`` in a fresh process (from ``workdir``, so that the tree under test
    is imported through PYTHONPATH, not the current directory); its result and modules."""
    modules_out = workdir / "modules.txt"
    modules_out.unlink(missing_ok=True)
    env = {**_environment(workdir), "MODULES_OUT": str(modules_out)}
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, set(modules_out.read_text().split())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``gpufleet serve`` (the simulated cluster) with an admin token and the workloads of
    one-gpu.yaml and mig.yaml (each xdist worker starts its own: the commands below may run
    in any order)."""
    workdir = tmp_path_factory.mktemp("serve")
    created, _ = _gpufleet(
        ["admin", "create-token", "--tenant", "admin", "--role", "admin"], workdir
    )
    assert created.returncode == 0, created.stderr
    url = f"http://127.0.0.1:{_free_port()}"
    log = workdir / "serve.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", ENTRY, "serve", "--port", url.rsplit(":", 1)[1]],
            cwd=workdir,
            env={**_environment(workdir), "MODULES_OUT": str(workdir / "serve-modules.txt")},
            stdout=out,
            stderr=out,
        )
    try:
        wait_until_ready(url, process, log)
        token = created.stdout.strip()
        files = ["-f", str(PODS / "one-gpu.yaml"), "-f", str(PODS / "mig.yaml")]
        submitted, _ = _gpufleet(["submit", *files, "--server", url, "--token", token], workdir)
        assert submitted.returncode == 0, submitted.stderr
        yield Server(url, token, workdir)
    finally:
        process.terminate()
        process.wait(10)


def _loaded_heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


COMMANDS = [
    pytest.param(["submit", "-f", str(PODS / "pytorch-gang-job.yaml")], id="submit-f"),
    pytest.param(
        [
            "submit",
            "--dry-run",
            "-f",
            str(PODS / "gpu-share.yaml"),
            "-f",
            str(PODS / "spread-replicas.yaml"),
        ],
        id="submit-f-two-files",
    ),
    pytest.param(["apply", "-f", str(REPO / "examples/tenancy/priorities.yaml")], id="apply-f"),
    pytest.param(["get", "priorityclasses"], id="get-priorityclasses"),
    pytest.param(["get", "workloads"], id="get-workloads"),
    pytest.param(["get", "workloads", "-o", "yaml"], id="get-workloads-yaml"),
    pytest.param(["get", "queues", "-o", "wide"], id="get-queues-wide"),
    pytest.param(["get", "nodes"], id="get-nodes"),
    pytest.param(["describe", "workload", WORKLOAD], id="describe-workload"),
    pytest.param(["explain", WORKLOAD], id="explain"),
    pytest.param(["top", "nodes"], id="top-nodes"),
    pytest.param(["whoami"], id="whoami"),
    pytest.param(["alerts"], id="alerts"),
    pytest.param(["cost", "--by", "namespace"], id="cost"),
    pytest.param(["delete", "workload", DELETED], id="delete"),
]


@pytest.mark.slow  # a real server and a fresh Python process per command
@pytest.mark.parametrize("args", COMMANDS)
def test_a_remote_command_imports_the_client_only(server: Server, args: list[str]) -> None:
    done, modules = _gpufleet(
        [*args, "--server", server.url, "--token", server.token], server.workdir
    )
    assert done.returncode == 0, done.stderr
    assert "gpufleet.cli.client" in modules  # it did talk to the server
    assert _loaded_heavy(modules) == []


def test_the_check_sees_a_heavy_import(tmp_path: Path) -> None:
    """The same check finds the core where a command does import it (``policies``)."""
    done, modules = _gpufleet(["policies"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "gpufleet.scheduling" in _loaded_heavy(modules)
