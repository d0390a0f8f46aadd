"""HTTP plumbing: a ``ThreadingHTTPServer`` on 127.0.0.1 speaking HTTP/1.1 with keep-alive.

Plain answers carry ``Content-Length``; watches answer 200 with chunked transfer encoding, one
JSON event per line, each flushed as it comes. A watch thread waits on its own queue, never
under the store lock, and notices a client that went away while it idles. The server also
keeps the request log (with who sent each request: :mod:`.authz`, and each query) and the
injected faults, checked before a request is routed: a status to answer with, or a freeze (a
request is read and logged, then held unanswered until the thaw, and carried out then, as a
paused server does); then the writes of impersonated users are authorized. Every open
connection can be dropped at once, without ending its stream (a connection lost).
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.kube_api import endpoints, errors
from tests.fakes.kube_api.access import AccessLog, identity_of
from tests.fakes.kube_api.authz import Authorizer, Caller
from tests.fakes.kube_api.routes import resolve
from tests.fakes.kube_api.store import Store

_IDLE_POLL_SECONDS = 0.5


@dataclass
class Fault:
    """Answer matching requests with ``status`` (0: close the connection, no answer). With
    ``commit`` the request is carried out first (an answer lost, a write the API server timed
    out that committed); with ``hold`` the answer waits until that event is set (a request
    held in the API server). With ``late`` the request is carried out at once (its watch
    events go out) and its own answer, the true one, is sent only once ``hold`` is set."""

    method: str
    pattern: re.Pattern[str]
    status: int
    remaining: int
    commit: bool = False
    hold: threading.Event | None = None
    late: bool = False


class ServerState:
    """What request threads share besides the store: the request log (and who sent each),
    the authorizer, the RBAC questions the requests asked
    (:class:`~tests.fakes.kube_api.access.AccessLog`) and pending faults."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.requests: list[tuple[str, str]] = []
        self.queries: list[dict[str, str]] = []
        self.callers: list[Caller] = []
        #: Cleared while the server is frozen: requests wait for it before they are handled.
        self.answering = threading.Event()
        self.answering.set()
        self.authorizer = Authorizer()
        self.access = AccessLog()
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        #: Notified after each request is logged.
        self.logged = threading.Condition(self._lock)

    def log(self, caller: Caller, query: dict[str, str]) -> None:
        with self._lock:
            self.requests.append((caller.method, caller.path))
            self.queries.append(query)
            self.callers.append(caller)
            self.logged.notify_all()

    def add_fault(
        self,
        method: str,
        pattern: str,
        status: int,
        times: int,
        commit: bool = False,
        hold: threading.Event | None = None,
        late: bool = False,
    ) -> None:
        with self._lock:
            fault = Fault(method.upper(), re.compile(pattern), status, times, commit, hold, late)
            self._faults.append(fault)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def take_fault(self, method: str, path: str) -> Fault | None:
        """The fault to answer this request with, using up one of its ``times``."""
        with self._lock:
            for fault in self._faults:
                if fault.method in ("*", method) and fault.pattern.search(path):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
        return None


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: ServerState, port: int = 0) -> None:
        self.state = state
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle's algorithm and the
        # client's delayed ACK cost ~40 ms a request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log is :attr:`ServerState.requests`."""

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError):  # the client went (after a freeze)
            self.close_connection = True

    def _route(self) -> None:
        state = self.server.state
        split = urlsplit(self.path)
        path = split.path
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        groups = tuple(self.headers.get_all("Impersonate-Group") or ())
        caller = Caller(self.command, path, self.headers.get("Impersonate-User"), groups)
        state.log(caller, query)
        state.answering.wait()
        client = identity_of(self.headers.get("Authorization"))
        state.access.record(client, self.command, path, query)
        fault = state.take_fault(self.command, path)
        if fault is not None and fault.hold is not None and not fault.late:
            fault.hold.wait()  # held in the API server; then carried out or not
        if fault is not None and not fault.commit:
            self._fail(fault)
            return
        try:
            with state.store.lock:
                route = resolve(state.store.registry, path)
            if route is not None:
                state.authorizer.check(caller, route)
            body = json.loads(raw) if raw.strip() else None
            request = endpoints.Request(
                self.command,
                path,
                query,
                body,
                self.headers.get("Content-Type") or "application/json",
            )
            result = endpoints.handle(state.store, request)
        except errors.ApiError as exc:
            self._send_json(exc.code, exc.body())
            return
        except json.JSONDecodeError as exc:
            self._send_json(400, errors.status_body(400, f"invalid JSON body: {exc}"))
            return
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self._send_json(500, errors.status_body(500, f"fake API server error: {exc!r}"))
            return
        if fault is not None and fault.late and fault.hold is not None:
            fault.hold.wait()  # carried out and watched; the true answer comes late
        elif fault is not None:  # carried out; the answer is lost or replaced
            self._fail(fault)
            return
        if isinstance(result, endpoints.Response):
            self._send_json(result.code, result.body)
        else:
            self._stream(result)

    def _fail(self, fault: Fault) -> None:
        if fault.status == 0:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        message = f"injected failure ({fault.status})"
        self._send_json(fault.status, errors.status_body(fault.status, message))

    def _send_json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if code == 429:
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""

    def _stream(self, stream: endpoints.WatchStream) -> None:
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        watcher = stream.watcher
        try:
            if watcher is None:
                self._chunk(json.dumps({"type": "ERROR", "object": stream.error}).encode() + b"\n")
            else:
                deadline = None if stream.timeout is None else time.monotonic() + stream.timeout
                while True:
                    wait = _IDLE_POLL_SECONDS
                    if deadline is not None:
                        wait = min(wait, deadline - time.monotonic())
                        if wait <= 0:
                            break
                    item = watcher.next(wait)
                    if item is None:
                        break
                    if isinstance(item, bool):  # idle: nothing came within ``wait``
                        if self._client_gone():
                            return
                        continue
                    kind, obj = item
                    self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            return  # the client closed the stream
        finally:
            if watcher is not None:
                self.server.state.store.unwatch(watcher)


class HttpServer:
    """Serves :class:`ServerState` on 127.0.0.1 at ``port`` (0: one the OS chooses)."""

    def __init__(self, state: ServerState, port: int = 0) -> None:
        self._server = _HTTPServer(state, port)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-kube-api",
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def drop_connections(self) -> None:
        """Shut every open connection down at once, watches mid-stream included."""
        with self._server.connections_lock:
            for conn in list(self._server.connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self._server.state.answering.set()
        self._server.state.store.close_watches()
        self._server.shutdown()
        self._server.server_close()
        with self._server.connections_lock:
            for conn in list(self._server.connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        self._server.state.access.append_to_env_file()
