"""Shared fixtures: small trace-format files, a local HTTP server, the real trace when present."""

from __future__ import annotations

import functools
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.io.traces import find_alibaba_trace

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
