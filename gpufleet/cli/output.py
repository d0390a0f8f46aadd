"""The CLI's console: where output and errors go, exit codes, and listening sockets.

Its own small module (rich and the standard library only) so that the commands that must start
quickly, ``gpufleet scheduler`` and those that talk to a server, can use it without importing
what the other commands read and simulate with; ``cli/inputs`` re-exports all of it.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from gpufleet.io.kinds import Skipped

console = Console(highlight=False, soft_wrap=True)
errors = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    errors.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


def warn(message: str) -> None:
    """One line on stderr that does not stop the command."""
    errors.print(f"[bold yellow]warning:[/] {message}")


def warn_skipped(skipped: Skipped) -> None:
    """Say once what a read set aside (ConfigMaps, Services...), if anything."""
    note = skipped.note()
    if note is not None:
        warn(escape(note))


def note_paused(paused: Iterable[str]) -> None:
    """Say each Job of ``parallelism: 0`` read (valid, runs no pods: not an error), a line
    each on stdout: ``paused: Job ns/x: parallelism 0 runs no pods (...)``."""
    for line in paused:
        console.print(f"paused: {line}", markup=False)


def listen_socket(host: str, port: int, flag: str = "--port") -> socket.socket:
    """A TCP socket bound to ``host:port`` (before anything says it serves there), or one line
    naming the flag to change and exit code 2: 'port 8080 on 127.0.0.1 is in use (pass
    --port)'."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except (socket.gaierror, UnicodeError) as error:
        raise fail(f"cannot listen on {host!r}: {error} (pass --host)") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not past a live listener
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise fail(f"port {port} on {host} is in use (pass {flag})") from None
        raise fail(
            f"cannot listen on port {port} on {host}: {error.strerror} (pass {flag})"
        ) from None
    return sock
