"""How ``gpufleet serve`` runs its app under uvicorn: the limits that keep one client from
holding the server (a request head's deadline, the keep-alive idle timeout, the connection
cap) and TLS.

uvicorn (0.54) has a keep-alive timeout, a concurrency limit and a cap on a request head's size
(h11's 16 KiB), but no deadline for the request head itself: its keep-alive timer starts only
once a response is sent, so a connection that sends a partial head byte by byte is held for
ever (Slowloris; issue 26 item 8: about 1,000 such connections made the server unreachable).
Hypercorn and Granian have such a deadline, but swapping the server (and its TLS, signal and
socket handling) for one timer is more change than the timer itself, so
:class:`HeadDeadlineProtocol` adds it to uvicorn's own h11 protocol: armed when a connection
opens and when the first byte of a later request on it arrives, cleared once h11 has a whole
head, and on expiry it answers ``408 Request Timeout`` and closes the connection. It touches
only what uvicorn's own keep-alive timer touches (``conn``, ``transport``, ``loop``). The cap
is uvicorn's ``limit_concurrency``: beyond it a request is answered ``503``; slow connections
count toward it until their deadline closes them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import resource
from pathlib import Path
from typing import ClassVar

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

#: Seconds a client has to send a whole request head (request line and headers).
DEFAULT_HEADER_TIMEOUT = 10.0
#: Seconds an idle kept-alive connection stays open between requests.
DEFAULT_KEEP_ALIVE = 5
#: Open connections (and requests in progress) beyond which a request is answered 503.
DEFAULT_MAX_CONNECTIONS = 1000
#: Seconds the server waits for requests in progress when it is told to stop.
GRACEFUL_SHUTDOWN_S = 5
#: Open files the server needs beside its connections (database, logs, GPUs' devices...).
SPARE_FILES = 256

_TIMEOUT_BODY = b"request head not received in time\n"
REQUEST_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\n"
    b"content-length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n\r\n" + _TIMEOUT_BODY
)


@dataclasses.dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one client may hold of the server (``serve --header-timeout``, ``--keep-alive``,
    ``--max-connections``)."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    keep_alive: int = DEFAULT_KEEP_ALIVE
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def problems(self) -> list[str]:
        """What is wrong with these limits, in the flags' words (empty: nothing)."""
        found = []
        if not self.header_timeout > 0:
            found.append(f"--header-timeout must be above 0 seconds, got {self.header_timeout:g}")
        if self.keep_alive < 1:
            found.append(f"--keep-alive must be 1 second or more, got {self.keep_alive}")
        if self.max_connections < 1:
            found.append(f"--max-connections must be 1 or more, got {self.max_connections}")
        return found


@dataclasses.dataclass(frozen=True, slots=True)
class TlsFiles:
    """The server's certificate chain and private key, PEM (``serve --tls-cert/--tls-key``);
    ``key`` None: the key is in the certificate file."""

    cert: Path
    key: Path | None = None


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head (see the module
    docstring); :func:`head_deadline_protocol` makes one with its number of seconds."""

    header_timeout: ClassVar[float] = DEFAULT_HEADER_TIMEOUT
    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        if self._head_deadline is None and self.conn.their_state is h11.IDLE:
            self._arm_head_deadline()  # a later request on a kept-alive connection begins
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._clear_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._head_deadline = self.loop.call_later(self.header_timeout, self._head_overdue)

    def _clear_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_overdue(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.write(REQUEST_TIMEOUT_RESPONSE)
            self.transport.close()


def head_deadline_protocol(header_timeout: float) -> type[HeadDeadlineProtocol]:
    """:class:`HeadDeadlineProtocol` with a deadline of ``header_timeout`` seconds."""

    class Timed(HeadDeadlineProtocol):
        pass

    Timed.header_timeout = header_timeout
    return Timed


def server_config(
    app: ASGIApp,
    host: str,
    port: int,
    limits: HttpLimits,
    tls: TlsFiles | None = None,
    log_level: str = "info",
) -> uvicorn.Config:
    """uvicorn's settings for ``app`` on ``host:port`` under ``limits`` (over TLS with
    ``tls``)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=head_deadline_protocol(limits.header_timeout),
        log_level=log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        timeout_keep_alive=limits.keep_alive,
        limit_concurrency=limits.max_connections,
        ssl_certfile=None if tls is None else str(tls.cert),
        ssl_keyfile=None if tls is None or tls.key is None else str(tls.key),
    )


def raise_open_file_limit(max_connections: int) -> str | None:
    """Raise this process's soft limit on open files to hold ``max_connections`` connections
    and :data:`SPARE_FILES` more (else the server stops accepting before its cap, the
    outage the cap is there to prevent); a warning if the hard limit is too low for it."""
    needed = max_connections + SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    reachable = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if reachable > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (reachable, hard))
    if reachable < needed:
        return (
            f"this process may open only {reachable} files (ulimit -n), too few for "
            f"--max-connections {max_connections}: lower it to {reachable - SPARE_FILES} or "
            "raise the limit"
        )
    return None
