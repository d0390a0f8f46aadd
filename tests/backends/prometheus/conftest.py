"""Fixtures of the Prometheus reader's tests: a loopback fake of the HTTP API (a real
``http.server`` answering what a test sets and recording what it was asked), and a real
Prometheus scraping the node agent's /metrics over fake GPUs, shared by the session."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gpufleet.testing.prometheus import FakeGpuExporter, PrometheusProcess, prometheus_binary


@dataclass
class Asked:
    method: str
    path: str
    #: The form of a POST and the query string of a GET, each name's values.
    params: dict[str, list[str]]
    headers: dict[str, str]

    def one(self, name: str) -> str:
        [value] = self.params[name]
        return value


@dataclass
class Answer:
    status: int = 200
    body: bytes = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    content_type: str = "application/json"


@dataclass
class FakeApi:
    """What the fake answers (``answer``, for every request) and what it was asked."""

    answer: Answer = field(default_factory=Answer)
    asked: list[Asked] = field(default_factory=list)
    url: str = ""

    def answer_json(self, body: Any, status: int = 200) -> None:
        self.answer = Answer(status, json.dumps(body).encode())

    def answer_vector(self, *series: tuple[dict[str, str], str]) -> None:
        result = [{"metric": labels, "value": [1.0, value]} for labels, value in series]
        self.answer_json({"status": "success", "data": {"resultType": "vector", "result": result}})


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._serve(parse_qs(urlsplit(self.path).query))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self._serve(parse_qs(self.rfile.read(length).decode()))

    def _serve(self, params: dict[str, list[str]]) -> None:
        fake = self.server.fake
        fake.asked.append(
            Asked(self.command, urlsplit(self.path).path, params, dict(self.headers.items()))
        )
        answer = fake.answer
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeApi) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    fake = FakeApi()
    server = _Server(fake)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# ------------------------------------------------------------------------- real Prometheus
NODE = "gpu-node-1"
#: Four GPUs with distinct, constant readings: a training pod holds 0 and 1, a notebook 2
#: (nearly idle), nobody 3.
FAKE_GPUS: dict[str, Any] = {
    "node": NODE,
    "driver_version": "550.54.15",
    "devices": [
        {
            "product": "NVIDIA H100 80GB HBM3",
            "utilization": {
                "gpu_util": util,
                "fb_used_mib": used,
                "temperature_c": temp,
                "power_w": power,
            },
        }
        for util, used, temp, power in (
            (91, 72_000, 71, 610),
            (87, 70_000, 69, 590),
            (4, 9_000, 38, 95),
            (0, 0, 31, 69),
        )
    ],
}
HOLDERS = {0: ("team-a", "train-0"), 1: ("team-a", "train-0"), 2: ("team-b", "notebook-0")}
#: kube-state-metrics' series for the pods (what the dashboard's joins and the rules'
#: minRunning read), served beside the agent's.
KUBE_STATE = """\
# TYPE kube_pod_start_time gauge
kube_pod_start_time{namespace="team-a",pod="train-0"} 1700000000
kube_pod_start_time{namespace="team-b",pod="notebook-0"} 1700000600
# TYPE kube_pod_labels gauge
kube_pod_labels{namespace="team-a",pod="train-0",label_team="vision"} 1
kube_pod_labels{namespace="team-b",pod="notebook-0",label_team="research"} 1
# TYPE kube_pod_owner gauge
kube_pod_owner{namespace="team-a",pod="train-0",owner_kind="Job",owner_name="train"} 1
kube_pod_owner{namespace="team-b",pod="notebook-0",owner_kind="StatefulSet",owner_name="nb"} 1
"""


@pytest.fixture(scope="session")
def gpu_exporter() -> Iterator[FakeGpuExporter]:
    exporter = FakeGpuExporter(NODE, FAKE_GPUS, HOLDERS, extra=KUBE_STATE)
    try:
        yield exporter
    finally:
        exporter.close()


@pytest.fixture(scope="session")
def prometheus(
    gpu_exporter: FakeGpuExporter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusProcess]:
    """A real Prometheus scraping ``gpu_exporter`` every second, returned once it holds two
    scrapes of every GPU (so rates and windows have points)."""
    if prometheus_binary() is None:
        pytest.skip("no prometheus binary (Debian's `prometheus` package installs it)")
    directory: Path = tmp_path_factory.mktemp("prometheus")
    with PrometheusProcess(directory, [gpu_exporter.target]) as server:
        server.wait_for(
            "count_over_time(DCGM_FI_DEV_GPU_UTIL[1m]) >= 2",
            lambda result: len(result) == len(FAKE_GPUS["devices"]),
        )
        yield server
