"""The HTTP endpoint of a scheduler process: ``/metrics`` with ``/healthz`` and ``/readyz``.

Owns :class:`HealthServer`, which serves a registry's exposition (``/metrics``), whether the
loop has turned recently (``/healthz``) and whether the caches are synced (``/readyz``). The
standard library's server is enough for three GET routes; FastAPI would add a dependency and
an event loop to a process that has neither (``gpufleet serve`` serves ``/metrics`` from its
own app).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gpufleet.metrics.scheduler import SchedulerMetrics


class HealthServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0 picks one)."""

    def __init__(
        self,
        metrics: SchedulerMetrics,
        healthy: Callable[[], bool],
        ready: Callable[[], bool],
        port: int,
        host: str = "0.0.0.0",
        sock: socket.socket | None = None,
    ) -> None:
        """``sock``: a socket already bound (the command line binds it first, to tell a busy
        port before it starts anything); else ``host:port`` is bound here."""
        routes: dict[str, Callable[[], tuple[int, bytes, str]]] = {
            "/metrics": lambda: (200, metrics.exposition(), CONTENT_TYPE_LATEST),
            "/healthz": lambda: _check(healthy()),
            "/readyz": lambda: _check(ready()),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                status, body, kind = route() if route else (404, b"not found\n", "text/plain")
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # probes every few seconds would drown the log

        self.server = ThreadingHTTPServer((host, port), Handler, bind_and_activate=sock is None)
        if sock is not None:
            self.server.socket.close()
            self.server.socket = sock
            self.server.server_address = sock.getsockname()
            self.server.server_activate()
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _check(ok: bool) -> tuple[int, bytes, str]:
    return (200, b"ok\n", "text/plain") if ok else (503, b"not ok\n", "text/plain")
