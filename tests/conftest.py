"""Shared fixtures: small trace-format files, a local HTTP server, the real trace when present."""

from __future__ import annotations

import faulthandler
import functools
import http.server
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.io.cluster_traces.datasets import find_alibaba_trace

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def alibaba_trace() -> Path:
    """The Alibaba 2023 trace directory; tests using it skip cleanly when it is absent."""
    found = find_alibaba_trace(REPO_ROOT)
    if found is None:
        pytest.skip(
            "Alibaba 2023 trace not found (`gpufleet traces fetch alibaba-2023` puts it where "
            "it is looked for; `gpufleet traces locate` lists the places)"
        )
    return found


@pytest.fixture(autouse=True)
def _no_informer_outlives_its_test() -> Iterator[None]:
    """A Kubernetes informer left running retries against its stopped fake API server for the
    rest of the session, logging every failure: stop schedulers before their server."""
    yield
    deadline = time.monotonic() + 5.0
    while alive := [t.name for t in threading.enumerate() if t.name.startswith("informer-")]:
        if time.monotonic() > deadline:
            pytest.fail(f"informers outlived the test: {', '.join(sorted(set(alive)))}")
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def _no_observatory_outlives_its_test() -> Iterator[None]:
    """An observatory thread left running saves into a store its test then closes: SQLite
    used while it closes crashed a test worker (SIGSEGV). Stop planes' threads first."""
    yield
    deadline = time.monotonic() + 5.0
    while any(t.name == "gpufleet-observe" for t in threading.enumerate()):
        if time.monotonic() > deadline:
            pytest.fail("an observatory thread (gpufleet-observe) outlived the test")
        time.sleep(0.02)


NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
n-0,64000,262144,4,V100M16
n-1,64000,262144,4,V100M16
n-2,96000,393216,8,G2
n-3,32000,131072,2,T4
c-0,32000,131072,0,
"""


def pods_csv(count: int = 40) -> str:
    rows = [
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time"
    ]
    shapes = [
        (4000, 1, 500, ""),
        (8000, 1, 1000, ""),
        (2000, 1, 250, "T4|G2"),
        (16000, 2, 1000, ""),
        (6000, 0, 0, ""),
        (12000, 4, 1000, "V100M16"),
    ]
    for i in range(count):
        cpu, gpus, milli, spec = shapes[i % len(shapes)]
        rows.append(
            f"pod-{i:03d},{cpu},8192,{gpus},{milli},{spec},LS,Running,"
            f"{i * 10},{i * 10 + 300 + 37 * (i % 5)},{i * 10}"
        )
    return "\n".join(rows) + "\n"


@pytest.fixture
def small_trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    pods = tmp_path / "pods.csv"
    nodes.write_text(NODES_CSV)
    pods.write_text(pods_csv())
    return nodes, pods


def _handler_logging_to(requests: list[str]) -> type[http.server.SimpleHTTPRequestHandler]:
    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:  # the stdlib's name
            requests.append(self.path)
            super().do_GET()

    return QuietHandler


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    """A loopback HTTP server over a fresh directory: (base URL, directory, request log)."""
    root = tmp_path / "served"
    root.mkdir()
    requests: list[str] = []
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0),
        functools.partial(_handler_logging_to(requests), directory=str(root)),
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root, requests
    finally:
        server.shutdown()
        server.server_close()


# ----------------------------------------------------------------------------- crashed workers
#: Where each xdist worker's faulthandler writes (set by the controller, inherited by workers).
FAULTS_DIR_ENV = "GPUFLEET_TEST_FAULTS_DIR"
#: The worker's open faulthandler file (kept open for the worker's life).
_FAULTS_KEY = pytest.StashKey[Any]()


def pytest_configure(config: pytest.Config) -> None:
    """The controller picks a folder for the workers' fatal-error tracebacks: a worker that
    dies (a signal, a crash in C) leaves only "worker crashed" behind, so what it left there
    is printed with that line (:func:`pytest_handlecrashitem`)."""
    if not hasattr(config, "workerinput") and FAULTS_DIR_ENV not in os.environ:
        os.environ[FAULTS_DIR_ENV] = tempfile.mkdtemp(prefix="gpufleet-test-faults-")


def pytest_sessionstart(session: pytest.Session) -> None:
    workerinput = getattr(session.config, "workerinput", None)
    folder = os.environ.get(FAULTS_DIR_ENV)
    if workerinput is None or folder is None:
        return
    path = Path(folder) / f"{workerinput['workerid']}-{os.getpid()}.log"
    handle = path.open("w", encoding="utf-8")  # open for the worker's life: faulthandler's fd
    session.config.stash[_FAULTS_KEY] = handle
    faulthandler.enable(file=handle, all_threads=True)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: object) -> None:
    """Say how the worker died: its exit status, its fatal-error traceback, the kernel's
    lines about killed processes."""
    said = [str(report.longrepr)]
    node = getattr(report, "node", None)
    gateway = getattr(node, "gateway", None)
    popen = getattr(getattr(gateway, "_io", None), "popen", None)
    if popen is not None:
        code = popen.poll()
        if code is not None and code < 0:
            said.append(f"the worker was ended by signal {signal.Signals(-code).name}")
        else:
            said.append(f"the worker's exit status: {code}")
    folder = os.environ.get(FAULTS_DIR_ENV)
    worker = getattr(gateway, "id", "")
    if folder is not None:
        for path in sorted(Path(folder).glob(f"{worker}-*.log")):
            text = path.read_text(encoding="utf-8", errors="replace").strip()
            if text:
                said.append(f"{path.name}:\n{text[-6000:]}")
    try:
        kernel = subprocess.run(
            ["dmesg"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        kernel = ""
    killed = [
        line
        for line in kernel.splitlines()
        if re.search(r"Killed process|segfault|general protection|traps:|oom-kill:", line)
    ]
    if killed:
        said.append("the kernel said:\n" + "\n".join(killed[-10:]))
    report.longrepr = "\n".join(said)
