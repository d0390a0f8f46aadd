"""The client side of a run's terminal (``gpufleet run -it``, ``gpufleet attach``): wait for
the run's GPUs, then relay this terminal to it over the API's WebSocket
(:mod:`gpufleet.api.attach`) until it ends.

While it waits it prints ``waiting for GPUs`` (Ctrl-C then cancels it, as ``run -f`` does).
Once attached, the local terminal is put in raw mode (restored on the way out, whatever
happens): every key goes to the run, Ctrl-C included (it interrupts what runs there, as over
``ssh`` or ``srun --pty``), and the window's size follows this one's (``SIGWINCH``). The exit
code is the run's (128 + the signal that killed it, as a shell reports it). Leaving (the
connection lost) ends nothing there: ``gpufleet attach NAME`` takes it up again.

The WebSocket is websocket-client's (``Authorization: Bearer`` as every call, TLS trusting
what the API client trusts).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import sys
import termios
import threading
import tty
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any
from urllib.parse import quote

import websocket

from gpufleet.api.schemas import API_PREFIX
from gpufleet.cli.client import ApiClient, ServerUnreachableError
from gpufleet.cli.output import EXIT_FAILED, console, errors

#: Seconds between two looks at a workload that waits for its GPUs.
WAIT_EVERY_S = 0.5
#: The exit code of a session left with Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130
#: The exit code of a session that was refused or lost (the run's own is unknown).
EXIT_NO_SESSION = EXIT_FAILED
_WAITING = ("Pending", "Admitted")


def websocket_url(server: str, path: str) -> str:
    """``ws://`` (``wss://``) of the API's ``http://`` (``https://``) address."""
    scheme, _, rest = server.partition("://")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}{path}"


def wait_for_gpus(
    client: ApiClient, namespace: str, name: str, kind: str | None, pause: Callable[[float], None]
) -> str:
    """Wait while the workload waits for its GPUs (saying so once); its state then."""
    told = False
    while True:
        state = client.get_workload(namespace, name, kind).state.value
        if state not in _WAITING:
            return state
        if not told:
            console.print(
                f"waiting for GPUs: workload/{namespace}/{name} is {state} (gpufleet explain "
                f"{namespace}/{name} says why; Ctrl-C cancels it)",
                markup=False,
            )
            told = True
        pause(WAIT_EVERY_S)


def attach(client: ApiClient, namespace: str, name: str, kind: str | None) -> int:
    """Relay this terminal to the workload's (see the module docstring); the exit code."""
    path = f"{API_PREFIX}/workloads/{quote(namespace, safe='')}/{quote(name, safe='')}/attach"
    if kind:
        path += f"?kind={quote(kind, safe='')}"
    context = ssl.create_default_context(cafile=client.ca_file)
    try:
        connection = websocket.create_connection(
            websocket_url(client.server, path),
            header=[f"Authorization: Bearer {client.token}"] if client.token else [],
            sslopt={"context": context},
            suppress_origin=True,
        )
    except (OSError, websocket.WebSocketException) as error:
        raise ServerUnreachableError(
            f"cannot open a terminal session with the gpufleet server at {client.server} "
            f"({error or type(error).__name__})"
        ) from None
    try:
        with _raw_terminal(), _following_window(connection):
            _start_typing(connection)
            return _relay_output(connection)
    except KeyboardInterrupt:  # stdin not a terminal: Ctrl-C reached this process
        errors.print(
            f"\ndetached: workload/{namespace}/{name} goes on; gpufleet attach "
            f"{namespace}/{name} takes it up again",
            markup=False,
        )
        return EXIT_INTERRUPTED
    finally:
        with contextlib.suppress(OSError, websocket.WebSocketException):
            connection.close()


def _relay_output(connection: websocket.WebSocket) -> int:
    """Write what the run's terminal sends until it ends; the exit code."""
    while True:
        try:
            opcode, data = connection.recv_data()
        except (OSError, websocket.WebSocketException):
            errors.print("\r\nthe terminal session was lost (the run goes on)", markup=False)
            return EXIT_NO_SESSION
        if opcode == websocket.ABNF.OPCODE_BINARY:
            _write(data)
        elif opcode == websocket.ABNF.OPCODE_TEXT:
            said: dict[str, Any] = json.loads(data)
            if "error" in said:
                errors.print(str(said["error"]), markup=False)
                return EXIT_NO_SESSION
            if "exit" in said:
                return _exit_code(said["exit"])
        elif opcode == websocket.ABNF.OPCODE_CLOSE:
            return EXIT_NO_SESSION


def _exit_code(end: dict[str, Any]) -> int:
    if end.get("code") is not None:
        return int(end["code"])
    if end.get("signal") is not None:
        return 128 + int(end["signal"])
    return EXIT_NO_SESSION


def _write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(sys.stdout.fileno(), view) :]


def _start_typing(connection: websocket.WebSocket) -> None:
    """Send what is typed (or piped) to the run, from a thread of its own (daemon: it stops
    with the command)."""

    def typing() -> None:
        fd = sys.stdin.fileno()
        with contextlib.suppress(OSError, websocket.WebSocketException):
            while data := os.read(fd, 4096):
                connection.send_binary(data)

    threading.Thread(target=typing, name="terminal-typing", daemon=True).start()


@contextlib.contextmanager
def _raw_terminal() -> Iterator[None]:
    """This terminal in raw mode, restored after (nothing where stdin is not a terminal)."""
    fd = sys.stdin.fileno()
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSADRAIN)  # what was typed ahead goes to the run too
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSAFLUSH, saved)


@contextlib.contextmanager
def _following_window(connection: websocket.WebSocket) -> Iterator[None]:
    """Send this terminal's size now and whenever it changes (nothing where stdout is not a
    terminal)."""
    fd = sys.stdout.fileno()
    if not os.isatty(fd):
        yield
        return

    def send_size(_signum: int = 0, _frame: FrameType | None = None) -> None:
        size = os.get_terminal_size(fd)
        with contextlib.suppress(OSError, websocket.WebSocketException):
            connection.send(json.dumps({"resize": [size.lines, size.columns]}))

    send_size()
    previous = signal.signal(signal.SIGWINCH, send_size)
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, previous)


__all__ = ["WAIT_EVERY_S", "attach", "wait_for_gpus", "websocket_url"]
