"""The agent's HTTP endpoint: ``/metrics`` in dcgm-exporter's format, and ``/healthz``.

Owns :class:`MetricsServer`, a small threaded HTTP server from the standard library serving
:func:`~gpufleet.metrics.dcgm_text.render` of the agent's telemetry at each scrape (why not
prometheus-client's exposition: see :mod:`gpufleet.metrics.dcgm_text`). ``/healthz`` answers
``ok`` while the agent runs. Nothing else is served; requests are not logged (a scrape every
15 s would fill the log).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpufleet.metrics.dcgm_text import CONTENT_TYPE

log = logging.getLogger(__name__)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body = self.server.render().encode()
            except Exception:
                log.exception("reading the GPUs for /metrics failed")
                self._answer(500, b"reading the GPUs failed; see the agent's log\n")
                return
            self._answer(200, body, CONTENT_TYPE)
        elif path == "/healthz":
            self._answer(200, b"ok\n")
        else:
            self._answer(404, b"not found: the agent serves /metrics and /healthz\n")

    def _answer(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], render: Callable[[], str]) -> None:
        super().__init__(address, _Handler)
        self.render = render


class MetricsServer:
    """Serves ``render()`` at ``/metrics`` on ``host:port`` (port 0: any free one) on a
    thread of its own until :meth:`close`."""

    def __init__(self, host: str, port: int, render: Callable[[], str]) -> None:
        self._server = _Server((host, port), render)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
