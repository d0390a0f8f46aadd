"""Each run sees in ``/proc`` only its own user's processes: systemd's ``ProtectProc=invisible``,
done by a run's shim for its child, as root, before the child switches user.

Owns:

* :func:`hide_other_processes`: the calling process enters a mount namespace of its own
  (``unshare(CLONE_NEWNS)``), makes every mount in it a slave of the host's (``mount
  --make-rslave /``: the mounts made here never reach the host, while the host's later mounts,
  a dataset disk or a network share, still reach the run; systemd does the same) and mounts a
  procfs of its own on ``/proc`` with ``hidepid=invisible`` (Linux 5.8 and later: each procfs
  mount has its own options). A process of another uid is then absent from that ``/proc``
  (``ps``, ``/proc/<pid>/cmdline``, even its directory), for the caller's children and all
  they start; a process of the same uid stays visible (a gang's other workers, the tenant's
  other runs). Where ``invisible`` is refused (a kernel before 5.8) it mounts nothing: there
  every procfs mount of a PID namespace shares one set of options, so a ``hidepid=2`` mount
  would hide processes on the whole machine (or, on some kernels, be ignored). The host's own
  ``/proc`` mounted ``hidepid=2`` is then taken as the hiding; without it, it is an error,
  never silent.
* :func:`probe`: the same in a short-lived process of its own (the caller's mounts are left
  alone), then a check that a process running as a given uid there cannot see its root
  parent: whether this machine can hide processes at all (it cannot without
  ``CAP_SYS_ADMIN``, e.g. in an unprivileged container). ``serve --local`` asks once at start.

Standard library only, and at import only :mod:`os` and :mod:`errno`: the shim imports it at
each start of a run that switches user; :mod:`ctypes` (``mount``, and ``unshare`` where
:func:`os.unshare`, Python 3.12, is missing) is loaded only when processes are hidden. It
decides nothing about when to hide (the supervisor writes it in the run's spec) and signals
nothing: signals across uids already fail (``EPERM``).
"""

from __future__ import annotations

import errno
import os

CLONE_NEWNS = 0x00020000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REC = 0x4000
MS_SLAVE = 0x80000
#: What a probe exits with when the mount worked but the other process stayed visible.
_STILL_VISIBLE = 3


class ProcessHidingError(Exception):
    """Processes could not be hidden; the message says which step failed and why."""


def hide_other_processes() -> str:
    """See the module docstring; returns the ``hidepid`` value in effect (``invisible``, or
    ``2``: the host's). Raises :class:`ProcessHidingError` (the caller's mount namespace may
    then be its own already: it must start nothing that should have been hidden)."""
    import ctypes  # here, not at import: a run that hides nothing does not pay for it

    libc = ctypes.CDLL(None, use_errno=True)
    unshare = getattr(os, "unshare", None)
    try:
        if unshare is not None:
            unshare(CLONE_NEWNS)
        elif libc.unshare(ctypes.c_int(CLONE_NEWNS)) != 0:
            raise _os_error(ctypes.get_errno())
    except OSError as error:
        step = "unshare(CLONE_NEWNS), a mount namespace"
        raise ProcessHidingError(_failed(step, error)) from None
    mount = libc.mount
    mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_char_p,
    ]
    if mount(None, b"/", None, MS_REC | MS_SLAVE, None) != 0:
        raise ProcessHidingError(_failed("mount --make-rslave /", _os_error(ctypes.get_errno())))
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    if mount(b"proc", b"/proc", b"proc", flags, b"hidepid=invisible") == 0:
        return "invisible"
    refused = _os_error(ctypes.get_errno())
    if refused.errno != errno.EINVAL:
        step = "mount -t proc -o hidepid=invisible proc /proc"
        raise ProcessHidingError(_failed(step, refused))
    # A kernel before 5.8: every procfs of a PID namespace shares one set of options, so a
    # mount with hidepid=2 would hide processes on the whole machine, not for this run alone.
    if _proc_mounted_hiding():
        return "2"  # the host's /proc hides them already
    raise ProcessHidingError(
        "cannot hide other users' processes: this kernel (before Linux 5.8) refused "
        "hidepid=invisible, and its hidepid=2 would hold for every /proc of the machine: "
        "mount the host's /proc with hidepid=2 (mount -o remount,hidepid=2 /proc) to hide "
        "them from every user"
    )


def _os_error(number: int) -> OSError:
    return OSError(number, os.strerror(number))


def _failed(step: str, error: OSError) -> str:
    name = errno.errorcode.get(error.errno or 0, str(error.errno))
    return f"cannot hide other users' processes: {step}: {error.strerror} ({name})"


def _proc_mounted_hiding() -> bool:
    """Whether the procfs on ``/proc`` hides processes (its options in mountinfo)."""
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        return proc_hides(mounts.read())


def proc_hides(mountinfo: str) -> bool:
    """Whether, by ``mountinfo`` (``/proc/self/mountinfo``'s text), the procfs in use on
    ``/proc`` (the last one mounted there) hides other users' processes."""
    options = ""
    for line in mountinfo.splitlines():
        fields, _, filesystem = line.partition(" - ")
        mount_point = fields.split()[4] if len(fields.split()) > 4 else ""
        if mount_point == "/proc" and filesystem.startswith("proc "):
            options = filesystem.split()[2] if len(filesystem.split()) > 2 else ""
    return any(o in ("hidepid=2", "hidepid=invisible") for o in options.split(","))


def probe(uid: int, gid: int, python: str | None = None, timeout_s: float = 30.0) -> str | None:
    """Whether processes can be hidden here (see the module docstring), tried as ``uid``/``gid``
    (a tenant's): None when they can, else why not. Runs as root."""
    import subprocess
    import sys
    from pathlib import Path

    package_root = str(Path(__file__).resolve().parents[3])
    boot = (
        "import sys; sys.path.append(sys.argv.pop(1)); "
        "from gpufleet.backends.local.proc_hiding import probe_main; "
        "sys.exit(probe_main(int(sys.argv[1]), int(sys.argv[2])))"
    )
    try:
        done = subprocess.run(
            [python or sys.executable, "-I", "-S", "-c", boot, package_root, str(uid), str(gid)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"cannot run the check of process hiding: {error}"
    if done.returncode == 0:
        return None
    said = done.stderr.decode(errors="replace").strip().splitlines()
    return said[-1] if said else f"the check of process hiding exited with {done.returncode}"


def probe_main(uid: int, gid: int) -> int:
    """The probe's process (:func:`probe`): hide, then look for itself as ``uid``/``gid``."""
    import sys

    try:
        hide_other_processes()
    except ProcessHidingError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    me = os.getpid()
    child = os.fork()
    if child == 0:  # pragma: no cover - the forked child (its exit status is the answer)
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            hidden = not os.path.exists(f"/proc/{me}") and os.path.exists("/proc/self/stat")
            os._exit(0 if hidden else _STILL_VISIBLE)
        except OSError as error:
            sys.stderr.write(f"cannot check process hiding as uid {uid}: {error}\n")
            sys.stderr.flush()
            os._exit(1)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == _STILL_VISIBLE:
        sys.stderr.write(
            f"cannot hide other users' processes: /proc was mounted hiding them, yet a process "
            f"of uid {uid} still saw one of root\n"
        )
    return code


__all__ = ["ProcessHidingError", "hide_other_processes", "probe", "probe_main", "proc_hides"]
