"""Each run in a cgroup of its own: its CPU quota, memory limit (an OOM kill reported as
``OOMKilled``, as the kubelet does), pids limit and, where the devices controller is there,
the only character devices it may open.

Owns:

* :func:`detect`: which cgroup hierarchy this server may write, asked once at start: cgroup v2
  (the unified hierarchy, ``cpu``, ``memory`` and ``pids`` enabled for gpufleet's cgroups) or
  v1 (one mount per controller, ``cpu``, ``memory`` and ``pids`` at least; ``devices`` used
  where mounted), tried by making and removing a cgroup; on v2, whether a device program
  (:mod:`.device_program`) can be attached, tried the same way; a :class:`Hierarchy` (JSON in
  each run's spec), or why none can be written.
* :class:`RunCgroup`: the shim's, for one run: made under ``<server's cgroup>/gpufleet/<run>``
  (under the server's own cgroup, so that the limits of the container or unit it runs in still
  hold) with the limits written (v2 ``cpu.max``, ``memory.max``, ``memory.swap.max``,
  ``pids.max`` and the device program of the run's allow list, attached before any process is
  in it and detached when it is removed; v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``,
  ``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``, ``pids.max``,
  ``devices.deny``/``devices.allow``); the
  shim moves itself in just before it starts the child and out just after (the child is born
  inside, so nothing it starts is ever outside, and the shim itself is never limited nor
  OOM-killed); at the end it kills what is left in it, reads whether the kernel OOM-killed in
  it (v2 ``memory.events``, v1 ``memory.oom_control``'s ``oom_kill``) and removes it.

Why no library: the kernel's interface is a few files to write; the Python cgroup packages
(``cgroupspy``, ``libcgroup`` bindings) cover v1 or v2, not both, and pull in more than the
shim, which starts in tens of milliseconds on the standard library, can import. The v2 device
program itself (BPF) is :mod:`.device_program`'s. Standard library only, and only :mod:`os` at
import.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from gpufleet.backends.local.device_program import AttachedProgram

#: Where the cgroup filesystems are mounted.
CGROUP_ROOT = "/sys/fs/cgroup"
#: The cgroup under the server's own that holds every run's.
PARENT = "gpufleet"
#: The controllers a run's limits need.
NEEDED = ("cpu", "memory", "pids")
#: The CFS period (the kernel's and the kubelet's default), microseconds.
PERIOD_US = 100_000
#: The smallest quota the kernel takes, microseconds.
MIN_QUOTA_US = 1_000
#: The pids limit of a run when nothing else is said (the kubelet's podPidsLimit is unset by
#: default; a run of its own process tree gets this many tasks).
DEFAULT_PIDS = 4096
#: What a run whose cgroup OOM-killed is reported with (the kubelet's reason).
OOM_KILLED = "OOMKilled"
#: Character devices every run may open (runc's default allow list): null, zero, full,
#: random, urandom, tty, ptmx, and the pseudo-terminals.
BASE_DEVICES = ("c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
                "c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm")  # fmt: skip


class Limits:
    """What a run may take: CPU in millicores, memory in bytes, tasks (None: no limit)."""

    __slots__ = ("cpu_milli", "memory_bytes", "pids")

    def __init__(self, cpu_milli: int | None, memory_bytes: int | None, pids: int | None) -> None:
        self.cpu_milli = cpu_milli
        self.memory_bytes = memory_bytes
        self.pids = pids

    def to_json(self) -> dict[str, int | None]:
        return {"cpu_milli": self.cpu_milli, "memory_bytes": self.memory_bytes, "pids": self.pids}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Limits:
        def number(name: str) -> int | None:
            value = data.get(name)
            return None if value is None else int(value)

        return cls(number("cpu_milli"), number("memory_bytes"), number("pids"))

    def quota_us(self) -> int | None:
        """The CFS quota per :data:`PERIOD_US` (None: unlimited)."""
        if self.cpu_milli is None:
            return None
        return max(MIN_QUOTA_US, self.cpu_milli * PERIOD_US // 1000)


class Hierarchy:
    """A writable cgroup hierarchy: ``version`` 1 or 2, and the directory under which runs'
    cgroups go, per controller (v2: one, under the key ``""``); on v2, whether runs get a
    device program (``device_program``), and why not (``device_program_refused``, said once
    at start; not kept in a run's spec)."""

    __slots__ = ("device_program", "device_program_refused", "parents", "version")

    def __init__(
        self,
        version: int,
        parents: dict[str, str],
        device_program: bool = False,
        device_program_refused: str | None = None,
    ) -> None:
        self.version = version
        self.parents = parents
        self.device_program = device_program
        self.device_program_refused = device_program_refused

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "parents": dict(self.parents),
            "device_program": self.device_program,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Hierarchy:
        parents = {str(k): str(v) for k, v in data["parents"].items()}
        return cls(int(data["version"]), parents, bool(data.get("device_program", False)))

    def describe(self) -> str:
        controllers = ", ".join(sorted(c for c in self.parents if c)) or "cpu, memory, pids"
        program = ", a device program" if self.device_program else ""
        return f"cgroup v{self.version} ({controllers}{program})"

    def remove(self) -> None:
        """Remove gpufleet's parent cgroups (each only when empty: no run's is left)."""
        for parent in self.parents.values():
            try:
                os.rmdir(parent)
            except OSError:
                continue

    @property
    def devices(self) -> bool:
        """Whether runs' devices are limited through the cgroup (v1's devices controller, or a
        v2 device program)."""
        return "devices" in self.parents or self.device_program


def own_paths(text: str) -> dict[str, str]:
    """This process's cgroup per controller, from ``/proc/self/cgroup``'s ``text`` (v2's under
    ``""``; a v1 line of several controllers, ``cpu,cpuacct``, gives each)."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths[""] = parts[2]
        for name in parts[1].split(","):
            if name:
                paths[name] = parts[2]
    return paths


def _read(path: str) -> str:
    with open(path, encoding="ascii") as handle:
        return handle.read()


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def _join(mount: str, path: str, *more: str) -> str:
    return os.path.join(mount, path.lstrip("/"), *more)


def _try_parent(parent: str) -> str | None:
    """Make ``parent`` (kept if it exists) and a probe cgroup in it; None when both work."""
    try:
        os.makedirs(parent, exist_ok=True)
        probe = os.path.join(parent, f".probe-{os.getpid()}")
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as error:
        return f"cannot make a cgroup in {parent}: {error.strerror}"
    return None


def detect(
    root: str = CGROUP_ROOT,
    proc_cgroup: str = "/proc/self/cgroup",
    parent: str = PARENT,
    probe_program: Callable[[str], str | None] | None = None,
) -> Hierarchy | str:
    """The hierarchy runs' cgroups go in (see the module docstring), under ``parent`` in the
    server's own cgroup, or why there is none. ``probe_program``: whether a device program
    can be attached under a v2 parent (None when it can, else why not; default
    :func:`.device_program.probe`)."""
    try:
        own = own_paths(_read(proc_cgroup))
    except OSError as error:
        return f"cannot read {proc_cgroup}: {error.strerror}"
    why: list[str] = []
    v2 = _detect_v2(root, own.get("", "/"), parent)
    if isinstance(v2, Hierarchy):
        from gpufleet.backends.local.device_program import probe

        refused = (probe_program or probe)(v2.parents[""])
        v2.device_program, v2.device_program_refused = refused is None, refused
        return v2
    why.append(v2)
    v1 = _detect_v1(root, own, parent)
    if isinstance(v1, Hierarchy):
        return v1
    why.append(v1)
    return "; ".join(why)


def _detect_v2(root: str, own: str, name: str) -> Hierarchy | str:
    if not os.path.exists(os.path.join(root, "cgroup.controllers")):
        return f"{root} is not a cgroup v2 (unified) hierarchy"
    base = _join(root, own)
    parent = os.path.join(base, name)
    try:
        available = _read(os.path.join(base, "cgroup.controllers")).split()
        missing = [c for c in NEEDED if c not in available]
        if missing:
            return f"cgroup v2: {', '.join(missing)} not available in {base}"
        enabled = _read(os.path.join(base, "cgroup.subtree_control")).split()
        if any(c not in enabled for c in NEEDED):
            _write(os.path.join(base, "cgroup.subtree_control"), " ".join(f"+{c}" for c in NEEDED))
        refused = _try_parent(parent)
        if refused is not None:
            return f"cgroup v2: {refused}"
        _write(os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in NEEDED))
    except OSError as error:
        return f"cgroup v2: cannot delegate {', '.join(NEEDED)} under {base}: {error.strerror}"
    return Hierarchy(2, {"": parent})


def _detect_v1(root: str, own: dict[str, str], name: str) -> Hierarchy | str:
    parents: dict[str, str] = {}
    for controller in (*NEEDED, "devices"):
        mount = os.path.join(root, controller)
        if not os.path.exists(os.path.join(mount, "cgroup.procs")) or controller not in own:
            if controller == "devices":
                continue
            return f"cgroup v1: no {controller} hierarchy mounted at {mount}"
        parent = _join(mount, own[controller], name)
        refused = _try_parent(parent)
        if refused is not None:
            if controller == "devices":
                continue
            return f"cgroup v1: {refused}"
        parents[controller] = parent
    return Hierarchy(1, parents)


class RunCgroup:
    """One run's cgroup (see the module docstring)."""

    def __init__(self, hierarchy: Hierarchy, run_id: str) -> None:
        self.hierarchy = hierarchy
        self.paths = {c: os.path.join(p, run_id) for c, p in hierarchy.parents.items()}
        self._origin: dict[str, str] = {}
        self._program: AttachedProgram | None = None

    def _file(self, controller: str, name: str) -> str:
        key = "" if self.hierarchy.version == 2 else controller
        return os.path.join(self.paths[key], name)

    def create(self, limits: Limits, devices: list[str] | None = None) -> None:
        """Make the cgroup and write ``limits`` and (v1, when the devices controller is there;
        v2, when the hierarchy has a device program) ``devices``: the ``devices.allow`` lines
        of the run's own device nodes, laid over :data:`BASE_DEVICES`, every other device
        denied; None: devices are not limited. Raises :class:`OSError` (a
        :class:`.device_program.DeviceProgramError` among them)."""
        for path in self.paths.values():
            os.makedirs(path, exist_ok=True)
        quota = limits.quota_us()
        if self.hierarchy.version == 2:
            if quota is not None:
                _write(self._file("cpu", "cpu.max"), f"{quota} {PERIOD_US}")
            if limits.memory_bytes is not None:
                _write(self._file("memory", "memory.max"), str(limits.memory_bytes))
                swap = self._file("memory", "memory.swap.max")
                if os.path.exists(swap):
                    _write(swap, "0")
            if limits.pids is not None:
                _write(self._file("pids", "pids.max"), str(limits.pids))
            if devices is not None and self.hierarchy.device_program:
                from gpufleet.backends.local.device_program import attach

                self._program = attach(self.paths[""], [*BASE_DEVICES, *devices])
            return
        if quota is not None:
            _write(self._file("cpu", "cpu.cfs_period_us"), str(PERIOD_US))
            _write(self._file("cpu", "cpu.cfs_quota_us"), str(quota))
        if limits.memory_bytes is not None:
            _write(self._file("memory", "memory.limit_in_bytes"), str(limits.memory_bytes))
            swap = self._file("memory", "memory.memsw.limit_in_bytes")
            if os.path.exists(swap):  # the same: no swap beyond the memory limit
                _write(swap, str(limits.memory_bytes))
        if limits.pids is not None:
            _write(self._file("pids", "pids.max"), str(limits.pids))
        if devices is not None and "devices" in self.paths:
            _write(self._file("devices", "devices.deny"), "a")
            for rule in (*BASE_DEVICES, *devices):
                _write(self._file("devices", "devices.allow"), rule)

    def enter(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the caller) in; :meth:`leave` moves it back to the server's own
        cgroup, the parent of gpufleet's, where every shim starts."""
        for controller, path in self.paths.items():
            self._origin[controller] = os.path.dirname(os.path.dirname(path))
            _write(os.path.join(path, "cgroup.procs"), str(pid))

    def leave(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the caller) back where :meth:`enter` found it: the parent of
        gpufleet's cgroup, the server's own (the shim is started in it)."""
        for controller in self.paths:
            origin = self._origin.get(controller)
            if origin is not None:
                _write(os.path.join(origin, "cgroup.procs"), str(pid))

    def pids(self) -> list[int]:
        """The processes in it now."""
        found: set[int] = set()
        for path in self.paths.values():
            try:
                found.update(int(p) for p in _read(os.path.join(path, "cgroup.procs")).split())
            except OSError:
                continue
        return sorted(found)

    def kill_all(self, attempts: int = 50) -> None:
        """SIGKILL whatever is left in it (a process that left its group too), until empty."""
        import contextlib
        import signal
        import time

        for _ in range(attempts):
            left = self.pids()
            if not left:
                return
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed a process in it."""
        if "memory" not in self.paths and "" not in self.paths:
            return False
        name = "memory.events" if self.hierarchy.version == 2 else "memory.oom_control"
        try:
            text = _read(self._file("memory", name))
        except OSError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        return False

    def remove(self, attempts: int = 100) -> None:
        """Remove it (after :meth:`kill_all`; a cgroup empties a moment after its last
        process is reaped)."""
        import time

        for path in self.paths.values():
            for _ in range(attempts):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


__all__ = [
    "BASE_DEVICES",
    "DEFAULT_PIDS",
    "OOM_KILLED",
    "PERIOD_US",
    "Hierarchy",
    "Limits",
    "RunCgroup",
    "detect",
    "own_paths",
]
