"""A cgroup v2 (unified) hierarchy for the device program's kernel tests: the one this machine
mounts (``/sys/fs/cgroup`` on a v2 host, ``/sys/fs/cgroup/unified`` on a hybrid one), or, as
root, one mounted for the test session in a temporary directory (a device program filters the
processes of a v2 cgroup in hybrid mode too). Why there is none otherwise."""

from __future__ import annotations

import atexit
import contextlib
import functools
import subprocess
import tempfile
import uuid
from pathlib import Path

from gpufleet.backends.local.device_program import probe


def mounted_cgroup2(mountinfo: str) -> str | None:
    """The first cgroup2 mount point in a ``/proc/self/mountinfo`` text."""
    for line in mountinfo.splitlines():
        before, _, after = line.partition(" - ")
        if after.split(" ", 1)[0] == "cgroup2":
            return before.split()[4]
    return None


@functools.cache
def cgroup2_parent() -> Path | str:
    """A directory of a cgroup v2 hierarchy where this session may make cgroups and attach a
    device program (made here, left empty for the kernel to tidy), or why there is none."""
    root = mounted_cgroup2(Path("/proc/self/mountinfo").read_text())
    if root is None:
        target = tempfile.mkdtemp(prefix="gpufleet-cgroup2-")
        done = subprocess.run(["mount", "-t", "cgroup2", "none", target], capture_output=True,
                              check=False)  # fmt: skip
        if done.returncode != 0:
            return f"no cgroup2 mounted, and mounting one refused: {done.stderr.decode().strip()}"
        root = target
        atexit.register(subprocess.run, ["umount", target], capture_output=True, check=False)
    parent = Path(root) / f"gpufleet-test-{uuid.uuid4().hex[:8]}"
    try:
        parent.mkdir()
    except OSError as error:
        return f"cannot make a cgroup in {root}: {error.strerror}"
    atexit.register(_remove, parent)  # registered after the unmount: runs before it
    refused = probe(str(parent))
    if refused is not None:
        return refused
    return parent


def _remove(parent: Path) -> None:
    with contextlib.suppress(OSError):
        parent.rmdir()
