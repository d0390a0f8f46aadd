"""A real uvicorn server of an app, on a free loopback port in a thread of the test process,
under the settings ``gpufleet serve`` uses (:func:`~gpufleet.api.http_server.server_config`):
for tests that need real sockets (slow clients, TLS) but not a server process."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

from gpufleet.api.http_server import HttpLimits, TlsFiles, server_config

START_TIMEOUT_S = 20.0


@contextmanager
def threaded_server(
    app: ASGIApp, limits: HttpLimits | None = None, tls: TlsFiles | None = None
) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its address (``http(s)://127.0.0.1:PORT``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = server_config(app, "127.0.0.1", port, limits or HttpLimits(), tls, "warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the threaded server did not start")
            time.sleep(0.02)
        yield f"{'http' if tls is None else 'https'}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        sock.close()
