"""A real Prometheus for tests, and a node agent's /metrics for it to scrape.

Owns :class:`PrometheusProcess` (Debian's ``prometheus`` started on loopback with a config of
the test's: scrape targets, interval, rule files, Alertmanagers; stopped after, its data in the
test's directory) and :class:`FakeGpuExporter` (the node agent's metrics endpoint,
``MetricsServer`` with ``dcgm_text.render``, over fake NVML and pods the test names: what
``gpufleet agent --fake-gpus`` serves, without the kubelet and API server the whole agent
needs; the fake GPUs' clock moves only when the test moves it). Tests skip when
:func:`prometheus_binary` finds none. Also the starting and stopping of such a server on a free
loopback port (:func:`start_on_free_port`, :func:`stop_process`), which
:mod:`gpufleet.testing.alertmanager` shares. Waiting is polling with a deadline, never a sleep.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

from gpufleet.agent.metrics_server import MetricsServer
from gpufleet.devices.fake import FakeNvml
from gpufleet.devices.fake_spec import parse_fake_spec
from gpufleet.devices.nvml_source import NvmlDeviceSource
from gpufleet.metrics.dcgm_text import render
from gpufleet.model.telemetry import DeviceUser
from gpufleet.telemetry.source import NodeTelemetry

#: Debian's package installs it here; ``PATH`` is looked at first.
DEBIAN_PROMETHEUS = Path("/usr/bin/prometheus")


def prometheus_binary() -> str | None:
    """The ``prometheus`` server to run, or None where there is none."""
    found = shutil.which("prometheus")
    if found:
        return found
    return str(DEBIAN_PROMETHEUS) if DEBIAN_PROMETHEUS.exists() else None


def free_port() -> int:
    """A loopback TCP port free now (for servers that cannot be told to pick one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def go_duration(seconds: float) -> str:
    """``seconds`` as a duration of Prometheus' and Alertmanager's configs, in whole
    milliseconds (at least 1)."""
    return f"{max(round(seconds * 1000), 1)}ms"


#: How many ports :func:`start_on_free_port` tries when another process takes the one it chose.
PORT_TRIES = 3


def start_on_free_port(
    name: str,
    command: Callable[[int], Sequence[str]],
    log: Path,
    ready_path: str = "/-/ready",
    timeout_s: float = 20.0,
) -> tuple[subprocess.Popen[bytes], int]:
    """Starts ``command(port)`` (a server listening on ``127.0.0.1:port``) on a free port,
    its output to ``log``, and returns (the process, the port) once ``GET ready_path``
    answers 200. A port taken between the probe and the server's bind (another test's
    server) is retried on another; RuntimeError with the log's tail if the server exits
    otherwise or is not ready within ``timeout_s``."""
    for _ in range(PORT_TRIES):
        port = free_port()
        with log.open("wb") as out:
            process = subprocess.Popen(list(command(port)), stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}{ready_path}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return process, port
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        else:
            stop_process(process)
            raise RuntimeError(f"{name} not ready within {timeout_s} s; its log:\n{_tail(log)}")
        text = _tail(log)
        if "address already in use" not in text:
            raise RuntimeError(f"{name} exited with {process.returncode}; its log:\n{text}")
    raise RuntimeError(f"{name}: {PORT_TRIES} free ports were taken before it could bind")


def stop_process(process: subprocess.Popen[bytes] | None) -> None:
    """Terminates ``process`` (if it runs) and waits for it; killed after 10 s."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.exists() else "(no log)"


class PrometheusProcess:
    """Prometheus on ``127.0.0.1:<port>`` scraping ``targets`` (``host:port`` of /metrics)
    every ``scrape_interval_s``, with its data and log under ``directory``; with
    ``credentials_file``, each scrape sends ``Authorization: Bearer <the file's token>`` (what
    ``gpufleet serve``'s /metrics asks: an admin's or a metrics token). :meth:`start` returns
    once it answers queries; :meth:`stop` (or ``with``) ends it."""

    def __init__(
        self,
        directory: Path,
        targets: Sequence[str],
        *,
        scrape_interval_s: float = 1.0,
        evaluation_interval_s: float = 1.0,
        rule_files: Sequence[Path] = (),
        alertmanagers: Sequence[str] = (),
        binary: str | None = None,
        credentials_file: Path | None = None,
    ) -> None:
        self.directory = directory
        self.credentials_file = credentials_file
        self.targets = tuple(targets)
        self.scrape_interval_s = scrape_interval_s
        self.evaluation_interval_s = evaluation_interval_s
        self.rule_files = tuple(rule_files)
        self.alertmanagers = tuple(alertmanagers)
        self.binary = binary or prometheus_binary()
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory / "prometheus.log"

    def config(self) -> dict[str, Any]:
        """The prometheus.yml it runs with."""
        interval = go_duration(self.scrape_interval_s)
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": go_duration(self.evaluation_interval_s),
            },
            "scrape_configs": [
                {
                    "job_name": "gpufleet-test",
                    # Keep the exporters' pod and namespace (of the pod holding a GPU), as
                    # dcgm-exporter's ServiceMonitor does.
                    "honor_labels": True,
                    "static_configs": [{"targets": list(self.targets)}],
                }
            ],
        }
        if self.credentials_file is not None:
            scrape = config["scrape_configs"][0]
            scrape["authorization"] = {"credentials_file": str(self.credentials_file)}
        if self.rule_files:
            config["rule_files"] = [str(path) for path in self.rule_files]
        if self.alertmanagers:
            config["alerting"] = {
                "alertmanagers": [{"static_configs": [{"targets": list(self.alertmanagers)}]}]
            }
        return config

    def start(self, timeout_s: float = 20.0) -> PrometheusProcess:
        if self.binary is None:
            raise FileNotFoundError("no prometheus binary (Debian: apt-get install prometheus)")
        binary = self.binary
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False))

        def command(port: int) -> list[str]:
            return [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
            ]

        self._process, self.port = start_on_free_port(
            "prometheus", command, self.log, "/-/ready", timeout_s
        )
        return self

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The raw result list of an instant query now (AssertionError unless success)."""
        answer = httpx.post(f"{self.url}/api/v1/query", data={"query": promql}, timeout=5.0)
        body = answer.json()
        assert body.get("status") == "success", f"{promql!r}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(
        self,
        promql: str,
        done: Callable[[list[dict[str, Any]]], bool] = bool,
        timeout_s: float = 15.0,
    ) -> list[dict[str, Any]]:
        """Polls ``promql`` until ``done(result)`` (default: any series); TimeoutError after
        ``timeout_s`` naming the query and its last result."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(promql)
            if done(result):
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"{promql!r} not done after {timeout_s} s: {result}")
            time.sleep(0.1)

    def stop(self) -> None:
        stop_process(self._process)
        self._process = None

    def __enter__(self) -> PrometheusProcess:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


class FakeGpuExporter:
    """The node agent's ``/metrics`` for node ``node`` over fake NVML (``spec``: the parsed
    YAML of ``--fake-gpus``, read at a clock that stays at ``at_s`` until
    :meth:`advance_to` moves it, so values stay put), with ``holders`` (GPU index ->
    (namespace, pod)) holding devices and allocated whole, and ``extra`` lines of exposition
    text appended (another exporter's series, such as kube-state-metrics')."""

    def __init__(
        self,
        node: str,
        spec: Mapping[str, Any],
        holders: Mapping[int, tuple[str, str]] | None = None,
        extra: str = "",
        at_s: float = 0.0,
    ) -> None:
        self.at_s = at_s
        self.nvml = FakeNvml(parse_fake_spec(dict(spec), "fake-gpus"), clock=lambda: self.at_s)
        self.nvml.nvmlInit()
        self.node = node
        self.source = NvmlDeviceSource(self.nvml)
        uuids = {device.index: device.uuid for device in self.source.inventory().devices}
        self.users = [
            DeviceUser(uuids[gpu], pod, namespace, "main")
            for gpu, (namespace, pod) in sorted((holders or {}).items())
        ]
        self.allocated = {user.uuid: 1.0 for user in self.users}
        self.extra = extra
        self._server = MetricsServer("127.0.0.1", 0, self.text)

    def advance_to(self, at_s: float) -> None:
        """Moves the fake GPUs' clock forward to ``at_s``: the spec's usage points and
        faults due by then apply from the next scrape on, a fault's XID taken by the health
        monitor as the agent's health loop takes it (``DCGM_FI_DEV_XID_ERRORS`` then carries
        it). ValueError for a time before the clock's."""
        if at_s < self.at_s:
            raise ValueError(f"the fake GPUs' clock goes forward: {at_s} is before {self.at_s}")
        self.at_s = at_s
        self.source.wait_health(0)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self._server.port}"

    def text(self) -> str:
        """What a scrape gets now."""
        reading = NodeTelemetry.of_inventory(
            self.node, self.source.inventory(), self.source.samples(), self.users, self.allocated
        )
        return render([reading]) + self.extra

    def close(self) -> None:
        self._server.close()
        self.source.close()
