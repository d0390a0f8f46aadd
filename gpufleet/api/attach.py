"""``/api/v1/workloads/{namespace}/{name}/attach``: a WebSocket to a run's terminal
(``gpufleet run -it``, ``gpufleet attach``; ``serve --local``).

The route relays between the client and the socket the run's shim serves its terminal on
(:mod:`gpufleet.backends.local.terminal`): binary messages are terminal bytes either way; a
text message from the client is JSON, ``{"resize": [rows, columns]}``; text messages to the
client are JSON too: ``{"exit": {"code": 3, "signal": null, "describe": "exit code 3"}}``
once the run has ended (then the server closes), or ``{"error": "...", "status": 409}`` when
there is nothing to attach to (then it closes with code 4000 + status). A client that leaves
ends nothing: the session runs on in its shim, and ``gpufleet attach`` takes it up again.

Authentication as every route's: ``Authorization: Bearer`` (never ``?token=``: a browser
page cannot set that header, so no other site's page can open a session with a user's
cookie or token), and only the workload's own tenant attaches (the plane's
:meth:`~gpufleet.service.protocol.Plane.attach_point`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from fastapi import FastAPI, WebSocket
from starlette.websockets import WebSocketDisconnect

from gpufleet.api.schemas import API_PREFIX
from gpufleet.backends.local.run_state import read_exit
from gpufleet.backends.local.terminal import DATA, FrameReader, frame, resize_frame
from gpufleet.service.auth import METRICS, ForbiddenError, Principal
from gpufleet.service.capabilities import AttachPoint, no_terminal
from gpufleet.service.plane_book import ConflictError, NotFoundError
from gpufleet.service.protocol import Plane
from gpufleet.service.tokens import TokenRefusedError

#: Seconds the route waits, once the terminal closed, for the run's end to be recorded.
EXIT_WAIT_S = 10.0
#: Seconds the route waits for a run just started to open its terminal.
OPEN_WAIT_S = 10.0
#: Close codes: 4000 + the HTTP status the error would have had.
CLOSE_BASE = 4000


class _RefusedError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def install(app: FastAPI, plane: Plane) -> None:
    """Add the attach route to ``app`` over ``plane``."""

    @app.websocket(f"{API_PREFIX}/workloads/{{namespace}}/{{name}}/attach")
    async def attach(
        websocket: WebSocket, namespace: str, name: str, kind: str | None = None
    ) -> None:
        await websocket.accept()
        try:
            point = await asyncio.to_thread(_attach_point, plane, websocket, namespace, name, kind)
            reader, writer = await _open(point)
        except _RefusedError as refused:
            await websocket.send_text(json.dumps({"error": str(refused), "status": refused.status}))
            await websocket.close(CLOSE_BASE + refused.status, str(refused)[:120])
            return
        ended = await _relay(websocket, reader, writer)
        if ended:
            await websocket.send_text(json.dumps({"exit": await _exit_of(point)}))
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await websocket.close(1000)


def _attach_point(
    plane: Plane, websocket: WebSocket, namespace: str, name: str, kind: str | None
) -> AttachPoint:
    caller = _caller(plane, websocket)
    try:
        with plane.lock:
            key = plane.find(caller, namespace, name, kind).key
        terminals = plane.terminals
        if terminals is None:
            plane.visible(caller, key)
            raise no_terminal(key, plane.backend_name)
        return terminals.attach_point(caller, key)
    except NotFoundError as error:
        raise _RefusedError(404, str(error)) from None
    except ForbiddenError as error:
        raise _RefusedError(403, str(error)) from None
    except ConflictError as error:
        raise _RefusedError(409, str(error)) from None


def _caller(plane: Plane, websocket: WebSocket) -> Principal:
    scheme, _, credentials = websocket.headers.get("authorization", "").partition(" ")
    token = credentials.strip() if scheme.lower() == "bearer" else ""
    if not token:
        raise _RefusedError(401, "authentication required: send Authorization: Bearer <token>")
    try:
        who = plane.authenticate(token)
    except TokenRefusedError as error:
        raise _RefusedError(401, str(error)) from None
    if who.role == METRICS:
        raise _RefusedError(403, "a metrics token reads /metrics only")
    return who


async def _open(point: AttachPoint) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the run's terminal, once its shim has opened it (a run just started
    has not yet)."""
    deadline = asyncio.get_running_loop().time() + OPEN_WAIT_S
    while True:
        try:
            return await asyncio.open_unix_connection(point.socket_path)
        except OSError:
            pass
        if read_exit(point.exit_path) is not None:
            raise _RefusedError(409, f"pod {point.pod}: its run has ended; nothing to attach to")
        if asyncio.get_running_loop().time() > deadline:
            raise _RefusedError(409, f"pod {point.pod}: its run has opened no terminal")
        await asyncio.sleep(0.05)


async def _relay(
    websocket: WebSocket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> bool:
    """Relay until the terminal closes (True: the run has ended) or the client leaves."""
    to_client = asyncio.create_task(_terminal_to_client(websocket, reader))
    from_client = asyncio.create_task(_client_to_terminal(websocket, writer))
    done, pending = await asyncio.wait({to_client, from_client}, return_when="FIRST_COMPLETED")
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return to_client in done and to_client.exception() is None


async def _terminal_to_client(websocket: WebSocket, reader: asyncio.StreamReader) -> None:
    frames = FrameReader()
    while data := await reader.read(65536):
        for kind, payload in frames.feed(data):
            if kind == DATA:
                await websocket.send_bytes(payload)


async def _client_to_terminal(websocket: WebSocket, writer: asyncio.StreamWriter) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("bytes") is not None:
            writer.write(frame(DATA, message["bytes"]))
        elif message.get("text") is not None:
            size = _resize(message["text"])
            if size is not None:
                writer.write(resize_frame(*size))
        await writer.drain()


def _resize(text: str) -> tuple[int, int] | None:
    """(rows, columns) of a ``{"resize": [rows, columns]}`` message (None: not one)."""
    with contextlib.suppress(ValueError, TypeError, AttributeError, IndexError, KeyError):
        given: Any = json.loads(text).get("resize")
        rows, columns = (int(given[0]), int(given[1]))
        return rows, columns
    return None


async def _exit_of(point: AttachPoint) -> dict[str, Any]:
    """The run's recorded end, once its shim has recorded it."""
    deadline = asyncio.get_running_loop().time() + EXIT_WAIT_S
    while (record := read_exit(point.exit_path)) is None:
        if asyncio.get_running_loop().time() > deadline:
            return {"code": None, "signal": None, "describe": "its end is not recorded yet"}
        await asyncio.sleep(0.05)
    return {"code": record.exit_code, "signal": record.signal, "describe": record.describe()}
