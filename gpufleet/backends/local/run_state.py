"""What a run leaves on disk, and how a process is told apart from a later one with its PID.

Owns the layout of a run's state directory (``<state>/runs/<run id>/``) and the reading and
atomic writing (a temporary file, then ``rename``) of its files, so that a reader sees a whole
file or none, whoever crashes when:

* ``spec.json``: what to run (a :meth:`~gpufleet.model.processes.ProcessSpec.to_json`, plus the
  stop grace, the caller's labels and whether to hide other users' processes from it),
  written by the supervisor before the shim starts;
* ``shim.json`` and ``child.json``: the shim's and its child's :class:`ProcessId` (PID and
  start time), written as each starts;
* ``stop.json``: a stop asked for, with its grace period (read by the shim when told to stop);
* ``exit.json``: how the child ended (:class:`ExitRecord`), written by the shim;
* ``output.log``: the child's stdout and stderr (unless its spec names another log).

Every run directory and file is the server's alone (:data:`PRIVATE_DIR_MODE`,
:data:`PRIVATE_FILE_MODE`): ``spec.json`` holds the command line and the whole environment a
tenant gave (tokens included) and ``output.log`` what the run printed, so no other local user,
and no other tenant's run, may read them. Each is made with its mode from the start
(:func:`make_private_dir`, :func:`open_private`: ``mkdir``/``open`` with the mode, never an
``open`` then ``chmod``), whatever the umask; which mode each path of the state directory has
is :mod:`.state_modes`'s.

A PID alone does not name a process: PIDs are reused. A process is its PID and its start time
(``/proc/<pid>/stat`` field 22, clock ticks since boot), as systemd and procps tell processes
apart; :func:`alive` is true only for that pair, and never for a zombie.

Light: the shim imports this module at each start, so it imports only ``os`` and ``json``
(no :mod:`dataclasses`, :mod:`pathlib` or :mod:`typing`, each milliseconds of every start);
paths are ``str`` or any path-like, and the two records are small hand-written value classes.
"""

from __future__ import annotations

import contextlib
import json
import os

# Type checkers take the name as true (mypy and pyright know it); at run time :mod:`typing`
# is not imported.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

RUNS_DIR = "runs"
SPEC_FILE = "spec.json"
SHIM_FILE = "shim.json"
CHILD_FILE = "child.json"
STOP_FILE = "stop.json"
EXIT_FILE = "exit.json"
LOG_FILE = "output.log"
#: The FIFO every shim writes a byte to as it ends, so that a waiting server wakes at once.
WAKE_FIFO = "wake.fifo"
#: A run's directory and the ``runs`` directory: the server's user only.
PRIVATE_DIR_MODE = 0o700
#: Every file of a run (its spec and environment, its output, its records): the server's only.
PRIVATE_FILE_MODE = 0o600


def make_private_dir(
    path: str | os.PathLike[str],
    mode: int = PRIVATE_DIR_MODE,
    uid: int | None = None,
    gid: int | None = None,
) -> bool:
    """Make the directory ``path`` with ``mode`` (owned by ``uid``/``gid`` when given), never
    looser at any moment: it is made with the owner's bits of ``mode`` only, given its owner,
    then its mode (the umask cannot widen it, and another user never finds it open). False
    when it exists already (left as it is)."""
    try:
        os.mkdir(path, mode & 0o700)
    except FileExistsError:
        return False
    if uid is not None and gid is not None:
        os.chown(path, uid, gid)
    os.chmod(path, mode)
    return True


def open_private(path: str | os.PathLike[str], flags: int, mode: int = PRIVATE_FILE_MODE) -> int:
    """``os.open`` that creates ``path`` with ``mode`` (an existing file keeps its own), does
    not follow a link at ``path``, and is not inherited across ``exec``."""
    return os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


class _Record:
    """An immutable value compared, hashed and shown by its fields (what a frozen dataclass
    gives, without importing :mod:`dataclasses`, which pulls in :mod:`inspect`)."""

    __slots__: tuple[str, ...] = ()
    #: The fields in the constructor's order (compared, hashed and shown in it).
    _fields: tuple[str, ...] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def _set(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Record)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({fields})"


class ProcessId(_Record):
    """One process, for good: its PID and its start time in clock ticks since boot."""

    __slots__ = ("pid", "start_ticks")
    _fields = ("pid", "start_ticks")
    pid: int
    start_ticks: int

    def __init__(self, pid: int, start_ticks: int) -> None:
        self._set(pid=pid, start_ticks=start_ticks)


class ExitRecord(_Record):
    """How a run's process ended: its exit code, or the signal that killed it; ``error``: it
    could not be started at all (then ``exit_code`` is the shell's 126 or 127); ``reason``:
    the kubelet's word for why, when there is one (``OOMKilled``: the kernel killed in the
    run's cgroup for its memory limit)."""

    __slots__ = ("ended_at", "error", "exit_code", "reason", "signal")
    _fields = ("exit_code", "signal", "ended_at", "error", "reason")
    exit_code: int | None
    signal: int | None
    ended_at: float
    error: str
    reason: str

    def __init__(
        self,
        exit_code: int | None,
        signal: int | None,
        ended_at: float,
        error: str = "",
        reason: str = "",
    ) -> None:
        self._set(exit_code=exit_code, signal=signal, ended_at=ended_at, error=error, reason=reason)

    def describe(self) -> str:
        """``exit code 3``, ``killed by signal 9 (SIGKILL)``, ``OOMKilled: killed by ...``
        (a reason first), or why it never started."""
        if self.error:
            return self.error
        if self.signal is not None:
            how = f"killed by signal {self.signal} ({signal_name(self.signal)})"
        else:
            how = f"exit code {self.exit_code}"
        return f"{self.reason}: {how}" if self.reason else how


def signal_name(number: int) -> str:
    import signal  # kept here: the name is wanted only when a message is written

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically: readers see the old file, or the whole new one."""
    directory, name = os.path.split(os.fspath(path))
    temporary = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)  # left by a crash: made anew, with the private mode
    fd = open_private(temporary, os.O_WRONLY | os.O_TRUNC | os.O_EXCL)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def read_json(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON object at ``path``, or None when there is none (or it is not an object)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def write_process(path: str | os.PathLike[str], process: ProcessId) -> None:
    write_json(path, {"pid": process.pid, "start_ticks": process.start_ticks})


def read_process(path: str | os.PathLike[str]) -> ProcessId | None:
    data = read_json(path)
    if data is None:
        return None
    return ProcessId(int(data["pid"]), int(data["start_ticks"]))


def write_exit(path: str | os.PathLike[str], record: ExitRecord) -> None:
    write_json(
        path,
        {
            "exit_code": record.exit_code,
            "signal": record.signal,
            "ended_at": record.ended_at,
            "error": record.error,
            "reason": record.reason,
        },
    )


def read_exit(path: str | os.PathLike[str]) -> ExitRecord | None:
    data = read_json(path)
    if data is None:
        return None
    code, number = data.get("exit_code"), data.get("signal")
    return ExitRecord(
        None if code is None else int(code),
        None if number is None else int(number),
        float(data.get("ended_at", 0.0)),
        str(data.get("error", "")),
        str(data.get("reason", "")),
    )


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3 onwards), or None
    when there is no such process. The name is in parentheses and may hold anything, ``)``
    included, so the split is at the last ``)``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text.rsplit(")", 1)[1].split()


def process_id(pid: int) -> ProcessId | None:
    """``pid`` with its start time now (None when it is gone)."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return ProcessId(pid, int(fields[19]))  # field 22, starttime; fields[0] is field 3


def alive(process: ProcessId) -> bool:
    """Whether that very process runs (its PID is taken by it, not reused, and not a zombie)."""
    fields = _stat_fields(process.pid)
    return fields is not None and fields[0] != "Z" and int(fields[19]) == process.start_ticks
