"""A webhook receiver on loopback for tests: a real HTTP server that records every POST (path,
headers, JSON body) and answers with scripted statuses (then 200)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True, slots=True)
class Received:
    path: str
    content_type: str
    body: Any


class WebhookReceiver:
    """``with WebhookReceiver() as receiver:`` serves on ``receiver.url`` until the block ends."""

    def __init__(self, statuses: Iterable[int] = ()) -> None:
        self.received: list[Received] = []
        self.attempts = 0
        self._statuses = list(statuses)
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                with owner._lock:
                    owner.attempts += 1
                    status = owner._statuses.pop(0) if owner._statuses else 200
                    if status == 200:
                        owner.received.append(
                            Received(
                                self.path, self.headers.get("Content-Type", ""), json.loads(raw)
                            )
                        )
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wait_for(self, done: Callable[[list[Received]], bool], timeout_s: float = 10.0) -> bool:
        """Poll until ``done(received)`` holds (True) or the deadline passes (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if done(list(self.received)):
                    return True
            time.sleep(0.01)
        with self._lock:
            return done(list(self.received))
