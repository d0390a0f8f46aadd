"""A run's terminal (``tty: true``): its pseudo-terminal, the relay of it over a Unix socket in
the run's directory, and that socket's frames.

For a run whose spec says ``tty`` (a container's Kubernetes ``stdin: true`` and ``tty: true``,
``gpufleet run -it``), the shim (:mod:`.shim`) starts the process on a pseudo-terminal
(:func:`open_terminal`; the process gets the terminal's other end as its stdin, stdout, stderr
and controlling terminal, :func:`take_terminal`, as ``srun --pty`` and ``ssh -t`` give it) and
runs a :class:`TerminalRelay` in a thread of its own beside its usual wait: whatever the
process writes to the terminal is appended to the run's log (``gpufleet logs`` shows it) and
sent to every client attached to :data:`ATTACH_SOCKET` (a client attaching first gets the
terminal's last :data:`REPLAYED` bytes, so that it sees the prompt it came too late for, as
``screen -r`` shows the screen); what a client sends is typed into the
terminal, and a resize sets the terminal's window size (``TIOCSWINSZ``, the process gets
``SIGWINCH``). The socket lives in the run's directory (the server's user's alone, mode 0700)
and is itself mode 0600: only the server connects to it (the API's ``attach``), and since the
shim holds it, not the server, a server restart does not end the session.

Frames (:func:`frame`, :class:`FrameReader`): one byte of kind, four bytes of length (big
endian), the payload. :data:`DATA` carries terminal bytes both ways, :data:`RESIZE` (client to
terminal) two unsigned 16-bit numbers: rows, columns. Standard library only: the shim imports
this module (for a tty run only) and must start in tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import socket
import struct
import termios
import threading

#: The relay's socket, in the run's directory.
ATTACH_SOCKET = "attach.sock"
#: A frame of terminal bytes (either way).
DATA = b"d"
#: A frame that sets the terminal's size: rows and columns (client to terminal).
RESIZE = b"r"
_HEADER = struct.Struct("!cI")
_SIZE = struct.Struct("!HH")
#: The longest frame a reader takes (a client sending more is dropped).
MAX_FRAME = 1 << 20
#: Seconds a client may hold the relay on one send before it is dropped.
SEND_TIMEOUT_S = 5.0
#: The terminal's latest output a client gets as it attaches.
REPLAYED = 4096
#: The longest path a Unix socket may have (sun_path, less its terminating NUL).
MAX_SOCKET_PATH = 107


def frame(kind: bytes, payload: bytes) -> bytes:
    return _HEADER.pack(kind, len(payload)) + payload


def resize_frame(rows: int, columns: int) -> bytes:
    return frame(RESIZE, _SIZE.pack(max(0, min(rows, 0xFFFF)), max(0, min(columns, 0xFFFF))))


def window_size(payload: bytes) -> tuple[int, int]:
    """(rows, columns) of a :data:`RESIZE` frame's payload (ValueError: malformed)."""
    if len(payload) != _SIZE.size:
        raise ValueError(f"a resize holds {_SIZE.size} bytes, got {len(payload)}")
    rows, columns = _SIZE.unpack(payload)
    return int(rows), int(columns)


class FrameReader:
    """Frames out of a byte stream that comes in pieces."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        """The whole frames ``data`` completes, as (kind, payload); ValueError on a frame
        over :data:`MAX_FRAME`."""
        self._buffer += data
        frames = []
        while len(self._buffer) >= _HEADER.size:
            kind, length = _HEADER.unpack_from(self._buffer)
            if length > MAX_FRAME:
                raise ValueError(f"a frame of {length} bytes (at most {MAX_FRAME})")
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            frames.append((bytes(kind), bytes(self._buffer[_HEADER.size : end])))
            del self._buffer[:end]
        return frames


def set_window_size(fd: int, rows: int, columns: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def open_terminal(uid: int | None, gid: int | None) -> tuple[int, int]:
    """A new pseudo-terminal (master, slave), the slave owned by ``uid``/``gid`` when given
    (as sshd gives a login its terminal); both not inherited (the caller hands the slave to
    the process as its standard streams)."""
    master, slave = os.openpty()
    if uid is not None and gid is not None:
        os.fchown(slave, uid, gid)
        os.fchmod(slave, 0o620)
    set_window_size(master, 24, 80)
    return master, slave


def take_terminal() -> None:
    """In the new process, after ``setsid`` (a ``preexec_fn``): make its stdin, the terminal,
    its controlling terminal, so that Ctrl-C and job control work."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class TerminalRelay:
    """The relay of one terminal (see the module docstring); :meth:`start` runs it in a
    thread; :meth:`finish` ends it once the process is gone."""

    def __init__(self, master: int, log: int, path: str) -> None:
        self.master = master
        self.log = log
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Bound and listening under another name first, then renamed: the socket's path
        # exists only once a client may connect (one that saw it and was refused is a race).
        making = path + ".new"
        for stale in (path, making):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)
        old_mask = os.umask(0o177)
        try:
            self.listener.bind(making)
        finally:
            os.umask(old_mask)
        os.chmod(making, 0o600)
        self.listener.listen(8)
        os.rename(making, path)
        self.clients: dict[socket.socket, FrameReader] = {}
        self.recent = b""
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._run, name="terminal-relay", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self, drain_s: float = 2.0) -> None:
        """Let the relay send what the terminal still holds (until it reads as closed, at
        most ``drain_s``), then end it: clients are disconnected and the socket removed."""
        self._thread.join(drain_s)
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        self._thread.join()
        for fd in (self._wake_read, self._wake_write):
            os.close(fd)

    def _run(self) -> None:
        try:
            while self._turn():
                pass
        finally:
            for client in list(self.clients):
                self._drop(client)
            self.listener.close()
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def _turn(self) -> bool:
        """One look at the terminal, the socket and the clients; False once done."""
        watched: list[int | socket.socket] = [
            self.master,
            self.listener,
            self._wake_read,
            *self.clients,
        ]
        readable, _, _ = select.select(watched, [], [])
        if self._wake_read in readable:
            return False
        if self.master in readable:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every end of the terminal's other side is closed
                data = b""
            if not data:
                return False
            _write_all(self.log, data)
            self.recent = (self.recent + data)[-REPLAYED:]
            for client in list(self.clients):
                try:
                    client.sendall(frame(DATA, data))
                except OSError:
                    self._drop(client)
        if self.listener in readable:
            client, _ = self.listener.accept()
            client.settimeout(SEND_TIMEOUT_S)
            try:
                client.sendall(frame(DATA, self.recent))
                self.clients[client] = FrameReader()
            except OSError:
                client.close()
        for client in [c for c in readable if isinstance(c, socket.socket)]:
            if client is not self.listener and client in self.clients:
                self._from_client(client)
        return True

    def _from_client(self, client: socket.socket) -> None:
        try:
            data = client.recv(65536)
            frames = self.clients[client].feed(data) if data else None
        except (OSError, ValueError):
            frames = None
        if frames is None:
            self._drop(client)
            return
        for kind, payload in frames:
            try:
                if kind == DATA:
                    _write_all(self.master, payload)
                elif kind == RESIZE:
                    set_window_size(self.master, *window_size(payload))
            except (OSError, ValueError):
                self._drop(client)
                return

    def _drop(self, client: socket.socket) -> None:
        self.clients.pop(client, None)
        client.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


__all__ = [
    "ATTACH_SOCKET",
    "DATA",
    "MAX_SOCKET_PATH",
    "REPLAYED",
    "RESIZE",
    "FrameReader",
    "TerminalRelay",
    "frame",
    "open_terminal",
    "resize_frame",
    "set_window_size",
    "take_terminal",
    "window_size",
]
