"""The shim between the server and one run's process: ``main([_, RUN_DIR, WAKE_FIFO])``, started
by the supervisor as ``python -I -S -c ...`` (:func:`.supervisor.shim_command`; ``python -m
gpufleet.backends.local.shim RUN_DIR [WAKE_FIFO]`` works too, only slower).

containerd's idea (containerd-shim): the server does not parent the work directly. The
supervisor starts one shim per run in its own session (``start_new_session``), so it outlives
the server and a restart of it; the shim parents the process, keeps its exit status and leaves
everything the server needs to find the run again in the run's state directory
(:mod:`.run_state`):

1. it records itself (``shim.json``), reads ``spec.json`` and opens the log (stdout and stderr
   both go there, appended, so a resumed run's output follows its earlier output); every file
   it writes is the server's user's alone (mode 0600, :func:`.run_state.open_private`): the
   process writes its output through the descriptor it inherits, and reads none of them;
2. it starts the command with exactly the spec's environment and working directory, in a new
   session and process group of its own, as the spec's uid/gid (with no supplementary groups)
   when given, and records it (``child.json``: PID and start time). When the spec switches
   user and says ``hide_processes`` (the supervisor's default as root), the shim first enters
   a mount namespace of its own whose ``/proc`` shows only that uid's processes
   (:mod:`.proc_hiding`, systemd's ``ProtectProc=invisible``): the child and all it starts see
   neither other tenants' processes nor the shim (root); where the kernel refuses, the run is
   not started (``exit.json``'s error, and the log, say why), never run unhidden. When the
   spec says ``private_dev``, the child's ``/dev`` holds only its own GPUs' nodes
   (:mod:`.private_dev`); when it says ``cgroup``, the child is born in a cgroup of its own
   with its CPU, memory, pids (and devices) limits (:mod:`.cgroups`: the shim steps in just
   before it starts the child and out just after); either refused, the run is not started;
3. when told to stop (SIGTERM), it sends SIGTERM to the process's whole group and, after the
   grace period (``stop.json``'s, else the spec's), SIGKILL: Slurm's and systemd's way
   (``KillWait``, ``TimeoutStopSec``), and Kubernetes' ``terminationGracePeriodSeconds``;
4. when the process ends, whatever is left of its group is killed (as a container's processes
   end with its first), and so is every other process it left behind: the shim is a child
   subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``, as containerd-shim and tini are), so a
   process that left the group and its parent (``setsid``, a double fork) is reparented to the
   shim, not to init, and the shim kills every descendant it finds in ``/proc`` and reaps it
   (:func:`kill_descendants`) before it records the end: the run's GPUs are never handed to
   the next run while a process of it lives. With a cgroup, what is left in it is killed too,
   an OOM kill in it is recorded as the reason ``OOMKilled``, and it is removed. Then the end
   is recorded (``exit.json``: exit code, or the signal); a command that cannot be started at
   all is recorded as the shell would (127: not found, 126: cannot be executed), with why in
   the log; then a byte to ``WAKE_FIFO`` wakes the server.

It checks nothing about who may run what (the supervisor does, before it starts a shim) and
imports only the standard library (and of it nothing that a bare ``subprocess`` does not load
already, but :mod:`json` and :mod:`ctypes`) and :mod:`.run_state` (and :mod:`.proc_hiding`,
:mod:`.private_dev`, :mod:`.cgroups`, :mod:`.terminal` for a run that needs them), so that it
starts in a few tens of milliseconds; the package's ``__init__`` modules on its path import nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from types import FrameType

from gpufleet.backends.local.run_state import (
    CHILD_FILE,
    EXIT_FILE,
    LOG_FILE,
    SHIM_FILE,
    SPEC_FILE,
    STOP_FILE,
    ExitRecord,
    ProcessId,
    open_private,
    process_id,
    read_json,
    write_exit,
    write_process,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from gpufleet.backends.local.cgroups import RunCgroup
    from gpufleet.backends.local.terminal import TerminalRelay

#: The grace period when neither the stop nor the spec says one.
DEFAULT_GRACE_S = 30.0


class _StopRequestedError(Exception):
    """Raised by the SIGTERM handler to cut a wait short."""


class Shim:
    """One run, from start to its recorded end (see the module docstring)."""

    def __init__(self, run_dir: str, wake_fifo: str | None) -> None:
        self.run_dir = run_dir
        self.wake_fifo = wake_fifo
        self.child: subprocess.Popen[bytes] | None = None
        self.stop_asked = False
        self.waiting = False

    # ------------------------------------------------------------------------- signals
    def on_sigterm(self, _signum: int, _frame: FrameType | None) -> None:
        if not self.stop_asked:
            self.stop_asked = True
            self.signal_group(signal.SIGTERM)
        if self.waiting:
            raise _StopRequestedError

    def signal_group(self, number: int) -> None:
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child.pid, number)

    def grace_s(self, spec: dict[str, object]) -> float:
        for source in (read_json(os.path.join(self.run_dir, STOP_FILE)), spec):
            if source is not None and source.get("grace_s") is not None:
                return float(str(source["grace_s"]))
        return DEFAULT_GRACE_S

    # ------------------------------------------------------------------------- the run
    def run(self) -> int:
        become_subreaper()
        me = process_id(os.getpid())
        if me is not None:
            write_process(os.path.join(self.run_dir, SHIM_FILE), me)
        signal.signal(signal.SIGTERM, self.on_sigterm)
        # Caught, not ignored: the shim goes on, and its child starts with the default
        # actions (an ignored signal would stay ignored across exec).
        signal.signal(signal.SIGHUP, _ignore)
        signal.signal(signal.SIGINT, _ignore)
        spec = read_json(os.path.join(self.run_dir, SPEC_FILE))
        if spec is None:
            self.record(ExitRecord(None, None, time.time(), f"no readable {SPEC_FILE}"))
            return 1
        log_path = str(spec.get("log_path") or os.path.join(self.run_dir, LOG_FILE))
        # The server's alone (the run writes it through the descriptor it inherits).
        log = open_private(log_path, os.O_WRONLY | os.O_APPEND)
        try:
            record = self.supervise(spec, log)
        finally:
            os.close(log)
        self.record(record)
        return 0

    def supervise(self, spec: dict[str, object], log: int) -> ExitRecord:
        uid, gid = spec.get("uid"), spec.get("gid")
        hidden = uid is not None and bool(spec.get("hide_processes"))
        if hidden:
            refused = self.hide_other_processes()
            if refused is not None:
                os.write(log, (refused + "\n").encode())
                return ExitRecord(None, None, time.time(), refused)
        nodes = spec.get("private_dev")
        if isinstance(nodes, list):
            refused = self.make_private_dev(nodes, hidden)
            if refused is not None:
                os.write(log, (refused + "\n").encode())
                return ExitRecord(None, None, time.time(), refused)
        cgroup, refused = self.make_cgroup(spec)
        if refused is not None:
            os.write(log, (refused + "\n").encode())
            return ExitRecord(None, None, time.time(), refused)
        relay: TerminalRelay | None = None
        streams = (subprocess.DEVNULL, log, log)
        take_terminal: Callable[[], None] | None = None
        if spec.get("tty"):
            relay, slave, refused = self.make_terminal(
                log,
                None if uid is None else int(str(uid)),
                None if gid is None else int(str(gid)),
            )
            if refused is not None:
                os.write(log, (refused + "\n").encode())
                return ExitRecord(None, None, time.time(), refused)
            from gpufleet.backends.local import terminal

            take_terminal = terminal.take_terminal
            streams = (slave, slave, slave)
        try:
            if cgroup is not None:
                cgroup.enter()  # the child is born in it; the shim leaves at once after
            self.child = subprocess.Popen(
                [str(a) for a in spec["argv"]],  # type: ignore[attr-defined]
                executable=str(spec["executable"]),
                env={str(k): str(v) for k, v in spec["env"].items()},  # type: ignore[attr-defined]
                cwd=str(spec["working_dir"]),
                stdin=streams[0],
                stdout=streams[1],
                stderr=streams[2],
                start_new_session=True,
                user=None if uid is None else int(str(uid)),
                group=None if gid is None else int(str(gid)),
                extra_groups=None if uid is None else [],
                preexec_fn=take_terminal,  # the shim has no other thread yet
            )
        except OSError as error:
            code = 127 if isinstance(error, FileNotFoundError) else 126
            message = f"gpufleet: cannot start {spec.get('executable')}: {error}"
            os.write(log, (message + "\n").encode())
            if cgroup is not None:
                cgroup.leave()
                cgroup.remove()
            if relay is not None:
                os.close(streams[0])
                relay.finish(0.0)
                os.close(relay.master)
            return ExitRecord(code, None, time.time(), message)
        if cgroup is not None:
            cgroup.leave()
        if relay is not None:
            # Only the child holds the terminal's other end: the relay reads it as closed once
            # every process of the run has let go of it.
            os.close(streams[0])
            relay.start()
        child = self.child
        started = process_id(child.pid)
        if started is not None:
            write_process(os.path.join(self.run_dir, CHILD_FILE), started)
        if self.stop_asked:  # told to stop before the child existed
            self.signal_group(signal.SIGTERM)
        returncode = self.wait(child, spec)
        self.signal_group(signal.SIGKILL)  # what the process left behind in its group
        kill_descendants(os.getpid())  # and outside it (setsid, double forks)
        if relay is not None:
            relay.finish()
            os.close(relay.master)
        reason = ""
        if cgroup is not None:
            cgroup.kill_all()  # and what is left in its cgroup
            reason = "OOMKilled" if cgroup.oom_killed() else ""
            cgroup.remove()
        if returncode < 0:
            return ExitRecord(None, -returncode, time.time(), reason=reason)
        return ExitRecord(returncode, None, time.time(), reason=reason)

    def make_terminal(
        self, log: int, uid: int | None, gid: int | None
    ) -> tuple[TerminalRelay | None, int, str | None]:
        """The run's pseudo-terminal and its relay (:mod:`.terminal`): (relay, the terminal's
        end for the child, None), or (None, -1, why) when it cannot be made: the run is not
        started."""
        from gpufleet.backends.local.terminal import (
            ATTACH_SOCKET,
            MAX_SOCKET_PATH,
            TerminalRelay,
            open_terminal,
        )

        path = os.path.join(self.run_dir, ATTACH_SOCKET)
        if len(path.encode()) > MAX_SOCKET_PATH:
            return None, -1, f"gpufleet: not started: its attach socket's path is too long: {path}"
        try:
            master, slave = open_terminal(uid, gid)
        except OSError as error:
            return None, -1, f"gpufleet: not started: cannot open a terminal: {error}"
        try:
            relay = TerminalRelay(master, log, path)
        except OSError as error:
            os.close(master)
            os.close(slave)
            return None, -1, f"gpufleet: not started: cannot make its attach socket: {error}"
        return relay, slave, None

    def make_cgroup(self, spec: dict[str, object]) -> tuple[RunCgroup | None, str | None]:
        """The run's cgroup with its limits written (:mod:`.cgroups`), when its spec has
        one; else (None, None). (None, why) when it cannot be made: the run is not started,
        never run unlimited."""
        given = spec.get("cgroup")
        if not isinstance(given, dict):
            return None, None
        from gpufleet.backends.local.cgroups import Hierarchy, Limits, RunCgroup

        cgroup = RunCgroup(Hierarchy.from_json(given["hierarchy"]), os.path.basename(self.run_dir))
        devices = given.get("devices")
        try:
            cgroup.create(Limits.from_json(given["limits"]), devices)
        except OSError as error:
            cgroup.remove(attempts=1)
            return None, f"gpufleet: not started: cannot make its cgroup: {error}"
        return cgroup, None

    def hide_other_processes(self) -> str | None:
        """Enter a mount namespace whose ``/proc`` shows only the child's uid's processes
        (:mod:`.proc_hiding`); None when done, else why the run is not started."""
        from gpufleet.backends.local.proc_hiding import ProcessHidingError, hide_other_processes

        try:
            hide_other_processes()
        except (ProcessHidingError, OSError) as error:  # OSError: mountinfo unreadable
            return (
                f"gpufleet: not started: {error}; the run would have seen every user's "
                f"processes (serve --local --shared-proc allows that)"
            )
        return None

    def make_private_dev(self, nodes: list[object], own_namespace: bool) -> str | None:
        """Give the child a ``/dev`` holding only its own GPUs' nodes (:mod:`.private_dev`);
        None when done, else why the run is not started."""
        from gpufleet.backends.local.private_dev import PrivateDevError, make_private_dev

        pairs = [(str(n[0]), str(n[1])) for n in nodes if isinstance(n, list) and len(n) == 2]
        staging = os.path.join(self.run_dir, "dev")
        try:
            make_private_dev(pairs, staging, own_namespace)
        except (PrivateDevError, OSError) as error:
            return f"gpufleet: not started: {error}; the run would have seen every GPU's node"
        return None

    def wait(self, child: subprocess.Popen[bytes], spec: dict[str, object]) -> int:
        deadline: float | None = None
        killed = False
        while True:
            if self.stop_asked and deadline is None:
                deadline = time.monotonic() + self.grace_s(spec)
            timeout = None if deadline is None or killed else deadline - time.monotonic()
            try:
                self.waiting = True
                return child.wait(timeout=None if timeout is None else max(0.0, timeout))
            except _StopRequestedError:
                pass
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                killed = True
            finally:
                self.waiting = False
            if child.returncode is not None:
                return child.returncode

    def record(self, record: ExitRecord) -> None:
        write_exit(os.path.join(self.run_dir, EXIT_FILE), record)
        if self.wake_fifo is None:
            return
        try:
            fifo = os.open(self.wake_fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no server listens now (ENXIO): it reads exit.json when it is back
            return
        try:
            with contextlib.suppress(OSError):
                os.write(fifo, b"x")
        finally:
            os.close(fifo)


#: ``prctl``'s option that makes the caller its orphaned descendants' new parent.
PR_SET_CHILD_SUBREAPER = 36
#: How long :func:`kill_descendants` goes on killing and reaping before it gives up.
REAP_LIMIT_S = 10.0


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux 3.4+); False where the kernel refuses."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> set[int]:
    """Every process whose parent chain leads to ``root`` (read from ``/proc``), zombies
    included (they are reaped, not killed)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def kill_descendants(root: int, limit_s: float = REAP_LIMIT_S) -> None:
    """SIGKILL every descendant of ``root`` (this process, a subreaper) and reap it, until
    none is left (their own orphans come to ``root`` as each dies) or ``limit_s`` passes."""
    deadline = time.monotonic() + limit_s
    while True:
        left = descendants(root)
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _reap()
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.005)


def _reap() -> None:
    """Collect every child of this process that has ended (orphans it adopted)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        sys.stderr.write("usage: python -m gpufleet.backends.local.shim RUN_DIR [WAKE_FIFO]\n")
        return 2
    return Shim(argv[1], argv[2] if len(argv) == 3 else None).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))


__all__ = [
    "DEFAULT_GRACE_S",
    "ProcessId",
    "Shim",
    "become_subreaper",
    "descendants",
    "kill_descendants",
    "main",
]


def _ignore(signum: int, frame: object) -> None:
    """A handler that does nothing (see :meth:`Shim.run`)."""
