"""The server ``serve`` runs, on loopback with real sockets: slow clients (Slowloris: a request
head sent a byte at a time) are cut off at the head's deadline while others are answered, idle
kept-alive connections are closed, and beyond the connection cap requests get 503 (issue 26,
item 8: about 1,000 half-open connections made the server unreachable)."""

from __future__ import annotations

import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from gpufleet.api.http_server import HttpLimits
from gpufleet.testing.threaded_server import threaded_server

HEAD_START = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: "
SLOW_CLIENTS = 200
HEADER_TIMEOUT = 1.0
#: How late past its deadline a slow connection may be closed on a busy test machine.
SLACK_S = 2.5


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/")
    def root() -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    return app


@contextmanager
def serving(limits: HttpLimits) -> Iterator[str]:
    with threaded_server(_app(), limits) as url:
        yield url


@dataclass
class SlowClient:
    """A connection sending a request head one byte at a time, never finishing it."""

    sock: socket.socket
    opened: float
    closed: float | None = None
    answer: bytearray = field(default_factory=bytearray)


def _open_slow(port: int, count: int) -> list[SlowClient]:
    clients = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.setblocking(False)
        clients.append(SlowClient(sock, time.monotonic()))
    return clients


def _trickle(clients: list[SlowClient], seconds: float, byte_every: float = 0.25) -> None:
    """For ``seconds``: each open client sends its head's next byte every ``byte_every``
    seconds; a client whose connection the server closed records when."""
    selector = selectors.DefaultSelector()
    for number, client in enumerate(clients):
        selector.register(client.sock, selectors.EVENT_READ, number)
    sent = 0
    end = time.monotonic() + seconds
    next_byte = time.monotonic()
    while time.monotonic() < end and any(c.closed is None for c in clients):
        if time.monotonic() >= next_byte:
            piece = (HEAD_START + b"x" * 10_000)[sent : sent + 1]
            sent += 1
            for client in clients:
                if client.closed is None:
                    try:
                        client.sock.send(piece)
                    except OSError:
                        client.closed = time.monotonic()
            next_byte += byte_every
        for key, _ in selector.select(timeout=0.05):
            client = clients[key.data]
            try:
                data = client.sock.recv(4096)
            except OSError:
                data = b""
            client.answer += data
            if not data and client.closed is None:
                client.closed = time.monotonic()
                selector.unregister(client.sock)
    selector.close()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_slow_clients_are_cut_off_at_the_head_deadline_while_others_are_answered() -> None:
    limits = HttpLimits(header_timeout=HEADER_TIMEOUT, keep_alive=5, max_connections=1000)
    with serving(limits) as url:
        clients = _open_slow(_port(url), SLOW_CLIENTS)
        answered: list[float] = []

        def normal_client() -> None:
            time.sleep(0.3)
            started = time.monotonic()
            response = httpx.get(f"{url}/", timeout=5)
            assert response.status_code == 200
            answered.append(time.monotonic() - started)

        other = threading.Thread(target=normal_client)
        other.start()
        try:
            _trickle(clients, HEADER_TIMEOUT + SLACK_S + 1)
        finally:
            other.join(10)
            for client in clients:
                client.sock.close()
        assert answered, "a normal client was not answered"
        assert answered[0] < 2.0, "a normal client was not answered in time"
        open_still = [c for c in clients if c.closed is None]
        assert not open_still, f"{len(open_still)} slow connections still open"
        late = max(c.closed - c.opened for c in clients if c.closed is not None)
        early = min(c.closed - c.opened for c in clients if c.closed is not None)
        assert early >= HEADER_TIMEOUT * 0.9
        assert late <= HEADER_TIMEOUT + SLACK_S
        assert all(c.answer.startswith(b"HTTP/1.1 408 ") for c in clients)


def test_a_complete_head_is_not_cut_off_and_later_requests_get_their_own_deadline() -> None:
    limits = HttpLimits(header_timeout=HEADER_TIMEOUT, keep_alive=10, max_connections=10)
    with serving(limits) as url, httpx.Client(timeout=5) as client:
        assert client.get(f"{url}/").status_code == 200
        time.sleep(HEADER_TIMEOUT * 1.5)  # idle on the kept-alive connection: no head begun
        assert client.get(f"{url}/").status_code == 200
        # the next request on a kept-alive connection, begun and never finished
        sock = socket.create_connection(("127.0.0.1", _port(url)), timeout=5)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = b""
        while not first.endswith(b"ok\n"):
            first += sock.recv(4096)
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 12")
        started = time.monotonic()
        sock.settimeout(HEADER_TIMEOUT + SLACK_S)
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - started <= HEADER_TIMEOUT + SLACK_S
        sock.close()


def test_idle_kept_alive_connections_are_closed() -> None:
    limits = HttpLimits(header_timeout=10, keep_alive=1, max_connections=10)
    with serving(limits) as url:
        sock = socket.create_connection(("127.0.0.1", _port(url)), timeout=5)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = b""
        while not answer.endswith(b"ok\n"):
            answer += sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200 ")
        started = time.monotonic()
        sock.settimeout(1 + SLACK_S)
        assert sock.recv(4096) == b"", "the server closes an idle connection"
        assert time.monotonic() - started <= 1 + SLACK_S
        sock.close()


def test_beyond_the_connection_cap_requests_get_503_until_slow_ones_are_cut_off() -> None:
    limits = HttpLimits(header_timeout=HEADER_TIMEOUT, keep_alive=5, max_connections=20)
    with serving(limits) as url:
        port = _port(url)
        held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(25)]
        try:
            for sock in held:
                sock.sendall(b"GET / HTT")
            time.sleep(0.2)
            assert httpx.get(f"{url}/", timeout=5).status_code == 503
            time.sleep(HEADER_TIMEOUT + SLACK_S)
            assert httpx.get(f"{url}/", timeout=5).status_code == 200
        finally:
            for sock in held:
                sock.close()


@pytest.mark.parametrize(
    ("limits", "problem"),
    [
        (HttpLimits(header_timeout=0), "--header-timeout must be above 0"),
        (HttpLimits(keep_alive=0), "--keep-alive must be 1 second or more"),
        (HttpLimits(max_connections=0), "--max-connections must be 1 or more"),
    ],
    ids=["header-timeout", "keep-alive", "max-connections"],
)
def test_limits_out_of_range_are_named(limits: HttpLimits, problem: str) -> None:
    assert any(problem in p for p in limits.problems())
    assert HttpLimits().problems() == []


OPEN_FILES = """
import resource, sys
from gpufleet.api.http_server import raise_open_file_limit
soft, hard = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
warning = raise_open_file_limit(1000)
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], warning is not None)
"""


@pytest.mark.parametrize(
    ("soft", "hard", "after", "warned"),
    [(512, 4096, 1256, False), (512, 900, 900, True), (2048, 4096, 2048, False)],
    ids=["raised", "hard-limit-too-low", "already-enough"],
)
def test_the_open_file_limit_fits_the_connection_cap(
    soft: int, hard: int, after: int, warned: bool
) -> None:
    # in a child process: the limit is the process's own
    run = subprocess.run(
        [sys.executable, "-c", OPEN_FILES, str(soft), str(hard)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert run.stdout.split() == [str(after), str(warned)]
