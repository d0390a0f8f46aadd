"""Runs of local processes that survive the server: start, stop, see them end, find them again.

Owns :class:`Supervisor`, over one state directory (:mod:`.run_state` says what is in it):

* :meth:`~Supervisor.start` checks who the process would run as, writes the run's spec and
  starts its shim (:mod:`.shim`) in a session of its own: the shim, not the server, parents the
  process, so the server may stop and start again while the work goes on. A run id is used
  once: starting one that exists raises, so nothing is ever started twice.
* :meth:`~Supervisor.stop` asks the shim to stop its process: SIGTERM to the process group,
  SIGKILL after the grace period, the shim counting the grace (so it holds across a server
  restart).
* :meth:`~Supervisor.poll` returns the runs that ended since the last poll (:class:`RunEnd`):
  with the exit code or signal the shim recorded, or *lost* when the shim is gone without a
  record (killed): then what is left of the process's group is killed, so that a lost run
  holds no GPU.
* :meth:`~Supervisor.adopt` (after a restart) finds every run of the state directory again:
  running (its shim alive, told apart from a later process of the same PID by its start
  time), ended (its end recorded) or lost (neither); the running ones are watched from then on.
* :meth:`~Supervisor.wait` sleeps until a shim says a run ended (a byte on the state
  directory's FIFO) or the timeout; :meth:`~Supervisor.wake` cuts it short from any thread.

Who may run what: where the server runs as root, a process runs as the uid/gid of its spec and
never as root (unless ``allow_root``, for a machine whose only user is root); where it does
not, a process runs as the server's user and a spec naming another uid is refused. A process
run as another uid sees in ``/proc`` only that uid's processes (its shim mounts a ``/proc`` of
its own, :mod:`.proc_hiding`; a run the kernel will not hide fails, it never runs unhidden)
unless ``shared_proc`` (``serve --local --shared-proc``). With ``private_dev``, a run given its
devices sees in ``/dev`` only those (:mod:`.private_dev`); with ``cgroups``, each run is in a
cgroup of its own with its limits (:mod:`.cgroups`). The supervisor itself stays in the
host's namespace: it finds runs by PID and start time in the host's ``/proc``. It does not
choose devices or environments (:mod:`.devices_env`), nor know about pods (:mod:`.machine`).

Every path it makes in the state directory is the server's user's alone, from the moment it
exists (:mod:`.state_modes`): a run's spec holds its whole environment.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from gpufleet.backends.local.cgroups import DEFAULT_PIDS, Hierarchy, Limits
from gpufleet.backends.local.private_dev import cgroup_rules
from gpufleet.backends.local.run_state import (
    CHILD_FILE,
    EXIT_FILE,
    LOG_FILE,
    RUNS_DIR,
    SHIM_FILE,
    SPEC_FILE,
    STOP_FILE,
    WAKE_FIFO,
    ExitRecord,
    ProcessId,
    alive,
    make_private_dir,
    open_private,
    process_id,
    read_exit,
    read_json,
    read_process,
    write_json,
)
from gpufleet.backends.local.state_modes import prepare_state_dir
from gpufleet.model.processes import ProcessSpec

#: The directory that holds the ``gpufleet`` package (a source tree or site-packages).
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
#: What a shim runs: the package root (argument 1) is appended to ``sys.path`` (appended, so
#: that the standard library wins over anything beside the package), then :func:`.shim.main`.
_SHIM_BOOT = (
    "import sys; sys.path.append(sys.argv.pop(1)); "
    "from gpufleet.backends.local.shim import main; sys.exit(main(sys.argv))"
)
#: Kubernetes' default ``terminationGracePeriodSeconds``.
DEFAULT_GRACE_S = 30.0
_RUN_ID_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def shim_command(python: str, run_dir: Path, wake_fifo: Path) -> list[str]:
    """The command line of a run's shim: ``python -I -S``, isolated (no ``PYTHON*`` variables,
    user site or current directory on the path) and without :mod:`site` (no site-packages, no
    ``.pth`` files such as an editable install's finder: tens of milliseconds of each start,
    issue 16's <= 100 ms from submit to start); the shim needs only the standard library and
    this package (:mod:`.shim`)."""
    return [python, "-I", "-S", "-c", _SHIM_BOOT, _PACKAGE_ROOT, str(run_dir), str(wake_fifo)]


class RunRefusedError(ValueError):
    """A run that must not start (bad id, one that exists, or who it would run as)."""


class RunStatus(StrEnum):
    RUNNING = "running"
    ENDED = "ended"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class RunEnd:
    """A run that ended: ``record`` is what its shim wrote (None: lost, nothing recorded)."""

    run_id: str
    record: ExitRecord | None
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def lost(self) -> bool:
        return self.record is None

    @property
    def succeeded(self) -> bool:
        return self.record is not None and self.record.exit_code == 0 and not self.record.error

    def describe(self) -> str:
        if self.record is None:
            return "lost: its shim is gone and recorded no end"
        return self.record.describe()


@dataclass(frozen=True, slots=True)
class AdoptedRun:
    """A run found in the state directory after a restart."""

    run_id: str
    status: RunStatus
    labels: Mapping[str, str]
    end: RunEnd | None = None
    #: Why a stop was asked for (what :meth:`Supervisor.stop` was told; None: never stopped).
    stop_why: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class RunHandle:
    run_id: str
    run_dir: Path
    log_path: Path
    shim: ProcessId


@dataclass(slots=True)
class _Watched:
    run_dir: Path
    shim: ProcessId
    labels: Mapping[str, str]
    #: Set when this supervisor started the shim: it reaps it.
    popen: subprocess.Popen[bytes] | None = None


class Supervisor:
    """See the module docstring."""

    def __init__(
        self,
        state_dir: Path,
        allow_root: bool = False,
        python: str = sys.executable,
        euid: int | None = None,
        shared_proc: bool = False,
        cgroups: Hierarchy | None = None,
        pids_limit: int | None = DEFAULT_PIDS,
        private_dev: bool = False,
    ) -> None:
        self.state_dir = Path(state_dir)
        #: Where each run's cgroup goes (None: runs are not put in cgroups, nothing limits
        #: them), and the tasks each may have.
        self.cgroups = cgroups
        self.pids_limit = pids_limit
        #: Whether runs given their devices get a private /dev (root, and a kernel that lets
        #: the shim mount: :func:`.private_dev.probe`).
        self.private_dev = private_dev
        self.runs_dir = self.state_dir / RUNS_DIR
        prepare_state_dir(self.state_dir)  # with every path's mode (:mod:`.state_modes`)
        self.allow_root = allow_root
        self.shared_proc = shared_proc
        self.python = python
        self.euid = os.geteuid() if euid is None else euid
        self._watched: dict[str, _Watched] = {}
        fifo = self.state_dir / WAKE_FIFO
        self.wake_fifo = fifo
        # Read and write: opening never blocks, and the FIFO never reads as closed.
        self._fifo = os.open(fifo, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)

    # ----------------------------------------------------------------------------- checks
    def check(self, run_id: str, spec: ProcessSpec) -> None:
        """Raise :class:`RunRefusedError` if ``spec`` may not run as ``run_id``."""
        if not run_id or not set(run_id) <= _RUN_ID_CHARACTERS or run_id.startswith("."):
            raise RunRefusedError(f"run id {run_id!r}: expected letters, digits, '.', '_', '-'")
        if (self.runs_dir / run_id).exists():
            raise RunRefusedError(f"run {run_id} exists already: a run is started once")
        if self.euid == 0:
            if (spec.uid is None or spec.uid == 0) and not self.allow_root:
                raise RunRefusedError(
                    f"run {run_id}: refusing to run a tenant's process as root (give its "
                    f"uid and gid)"
                )
        elif spec.uid is not None and spec.uid != self.euid:
            raise RunRefusedError(
                f"run {run_id}: the server runs as uid {self.euid} and cannot run a process "
                f"as uid {spec.uid} (run the server as root for that)"
            )

    # ----------------------------------------------------------------------------- start
    def start(
        self,
        run_id: str,
        spec: ProcessSpec,
        labels: Mapping[str, str] | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        limits: Limits | None = None,
        devices: list[tuple[str, str]] | None = None,
    ) -> RunHandle:
        """Start ``spec`` as the run ``run_id`` (see the module docstring); ``labels`` are kept
        with the run (the machine keeps its pod there) and come back with its end. Where the
        supervisor has a cgroup hierarchy, the run gets a cgroup with ``limits`` (CPU and
        memory; None: none) and the supervisor's pids limit. ``devices`` (None: the host's
        ``/dev``): the run gets a private ``/dev`` holding only these GPU nodes (host path,
        name; :mod:`.private_dev`) and, with a v1 devices controller, may open no other
        character device; only where the supervisor was made with ``private_dev``."""
        self.check(run_id, spec)
        run_dir = self.runs_dir / run_id
        if not make_private_dir(run_dir):
            raise RunRefusedError(f"run {run_id} exists already: a run is started once")
        log_path = Path(spec.log_path) if spec.log_path else run_dir / LOG_FILE
        uid = None if self.euid != 0 else spec.uid
        gid = None if self.euid != 0 else spec.gid
        write_json(
            run_dir / SPEC_FILE,
            {
                **spec.to_json(),
                "uid": uid,
                "gid": gid,
                "hide_processes": uid is not None and not self.shared_proc,
                "grace_s": grace_s,
                "labels": dict(labels or {}),
                "cgroup": self._cgroup_spec(limits, devices if self.private_dev else None),
                "private_dev": (
                    [list(n) for n in devices] if devices is not None and self.private_dev else None
                ),
            },
        )
        with os.fdopen(open_private(log_path, os.O_WRONLY | os.O_APPEND), "ab") as log:
            popen = subprocess.Popen(
                shim_command(self.python, run_dir, self.wake_fifo),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
            )
        shim = process_id(popen.pid) or ProcessId(popen.pid, -1)
        # The shim records itself too; written here as well so that a server that dies at
        # once still finds it.
        write_json(run_dir / SHIM_FILE, {"pid": shim.pid, "start_ticks": shim.start_ticks})
        self._watched[run_id] = _Watched(run_dir, shim, dict(labels or {}), popen)
        return RunHandle(run_id, run_dir, log_path, shim)

    def _cgroup_spec(
        self, limits: Limits | None, devices: list[tuple[str, str]] | None
    ) -> dict[str, object] | None:
        """What the shim makes the run's cgroup from (None: no cgroup)."""
        if self.cgroups is None:
            return None
        given = limits or Limits(None, None, None)
        pids = given.pids if given.pids is not None else self.pids_limit
        return {
            "hierarchy": self.cgroups.to_json(),
            "limits": Limits(given.cpu_milli, given.memory_bytes, pids).to_json(),
            "devices": None if devices is None else cgroup_rules(devices),
        }

    # ----------------------------------------------------------------------------- stop
    def stop(
        self, run_id: str, grace_s: float = DEFAULT_GRACE_S, why: Mapping[str, str] | None = None
    ) -> bool:
        """Ask the run to stop: SIGTERM to its process group now, SIGKILL after ``grace_s``
        (the shim counts it); ``why`` is kept with the run (:meth:`adopt` gives it back).
        Returns False when the run is not running here."""
        watched = self._watched.get(run_id)
        if watched is None:
            return False
        asked = {"grace_s": grace_s, "at": time.time(), "why": dict(why or {})}
        write_json(watched.run_dir / STOP_FILE, asked)
        if alive(watched.shim):
            with contextlib.suppress(ProcessLookupError):
                os.kill(watched.shim.pid, signal.SIGTERM)
            return True
        self._kill_orphans(watched.run_dir)
        return True

    # ----------------------------------------------------------------------------- ends
    def poll(self) -> list[RunEnd]:
        """The runs that ended since the last poll (each once)."""
        ended: list[RunEnd] = []
        for run_id, watched in list(self._watched.items()):
            end = self._end_of(run_id, watched)
            if end is not None:
                del self._watched[run_id]
                ended.append(end)
        return ended

    def _end_of(self, run_id: str, watched: _Watched) -> RunEnd | None:
        if watched.popen is not None:
            shim_running = watched.popen.poll() is None
        else:
            shim_running = alive(watched.shim)
        record = read_exit(watched.run_dir / EXIT_FILE)
        if record is not None:
            if watched.popen is not None and shim_running:
                # It recorded the end and is exiting: reap it, so that it is not left a zombie.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    watched.popen.wait(timeout=1.0)
            return RunEnd(run_id, record, watched.labels)
        if shim_running:
            return None
        self._kill_orphans(watched.run_dir)
        return RunEnd(run_id, None, watched.labels)

    def _kill_orphans(self, run_dir: Path) -> None:
        """Kill the process group of a run whose shim is gone, if its leader still runs."""
        child = read_process(run_dir / CHILD_FILE)
        if child is not None and alive(child):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)

    # ----------------------------------------------------------------------------- restart
    def adopt(self) -> list[AdoptedRun]:
        """Every run of the state directory (see the module docstring), in id order; the
        running ones are watched by this supervisor from now on. Lost ones are reported here
        and not by a later :meth:`poll`; ended ones too. Each comes with why it was stopped,
        if it was."""
        found: list[AdoptedRun] = []
        for run_dir in sorted(p for p in self.runs_dir.iterdir() if p.is_dir()):
            run_id = run_dir.name
            spec = read_json(run_dir / SPEC_FILE) or {}
            labels = {str(k): str(v) for k, v in dict(spec.get("labels") or {}).items()}
            stop_why = _stop_why(run_dir)
            record = read_exit(run_dir / EXIT_FILE)
            if record is not None:
                end = RunEnd(run_id, record, labels)
                found.append(AdoptedRun(run_id, RunStatus.ENDED, labels, end, stop_why))
                continue
            shim = read_process(run_dir / SHIM_FILE)
            if shim is not None and alive(shim):
                self._watched.setdefault(run_id, _Watched(run_dir, shim, labels))
                found.append(AdoptedRun(run_id, RunStatus.RUNNING, labels, None, stop_why))
                continue
            # The shim may have recorded the end just before it went.
            record = read_exit(run_dir / EXIT_FILE)
            if record is not None:
                end = RunEnd(run_id, record, labels)
                found.append(AdoptedRun(run_id, RunStatus.ENDED, labels, end, stop_why))
                continue
            self._kill_orphans(run_dir)
            lost = RunEnd(run_id, None, labels)
            found.append(AdoptedRun(run_id, RunStatus.LOST, labels, lost, stop_why))
        return found

    # ----------------------------------------------------------------------------- queries
    @property
    def running(self) -> list[str]:
        """The runs watched (started here or adopted) whose end has not been polled."""
        return list(self._watched)

    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / run_id

    def log_path(self, run_id: str) -> Path:
        spec = read_json(self.runs_dir / run_id / SPEC_FILE) or {}
        given = spec.get("log_path")
        return Path(str(given)) if given else self.runs_dir / run_id / LOG_FILE

    def child(self, run_id: str) -> ProcessId | None:
        """The run's process (None before it started)."""
        return read_process(self.runs_dir / run_id / CHILD_FILE)

    # ----------------------------------------------------------------------------- waiting
    def wait(self, timeout_s: float) -> bool:
        """Sleep until a shim reports an end (or :meth:`wake`), at most ``timeout_s``;
        returns whether something woke it."""
        if timeout_s > 0:
            readable, _, _ = select.select([self._fifo], [], [], timeout_s)
        else:
            readable = [self._fifo]
        woken = False
        if readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._fifo, 4096):
                    woken = True
        return woken

    def wake(self) -> None:
        """Cut a :meth:`wait` short (any thread)."""
        with contextlib.suppress(BlockingIOError):
            os.write(self._fifo, b"w")

    def close(self) -> None:
        """Stop watching (the runs go on); reaps the shims it started that have ended, and
        removes gpufleet's parent cgroups when no run's cgroup is left in them (a run that goes
        on keeps them, for the next server to find)."""
        for watched in self._watched.values():
            if watched.popen is not None:
                watched.popen.poll()
        with contextlib.suppress(OSError):
            os.close(self._fifo)
        if self.cgroups is not None:
            self.cgroups.remove()


def _stop_why(run_dir: Path) -> dict[str, str] | None:
    """Why the run was asked to stop (its ``stop.json``), or None when it never was."""
    asked = read_json(run_dir / STOP_FILE)
    if asked is None:
        return None
    return {str(k): str(v) for k, v in dict(asked.get("why") or {}).items()}
