"""Each run sees in ``/dev`` only its own GPUs' device nodes: a private ``/dev``, built the way
container runtimes build one, done by a run's shim in its mount namespace before the child
starts.

Owns:

* :func:`gpu_nodes`: which device nodes a run placed on some GPUs gets: ``nvidiaN`` of each of
  its GPUs (a MIG slice's parent GPU's; N is the GPU's index, which the NVIDIA driver gives as
  the node's minor number in NVML's order), and ``nvidiactl``, ``nvidia-uvm``,
  ``nvidia-uvm-tools`` where they exist, from a device directory (``/dev``, or the fake GPUs'
  ``device_dir`` in tests); each as (path on the host, name in the run's ``/dev``). A run on
  MIG slices gets, for each, ``nvidia-caps/nvidia-capN`` of its GPU instance's and its compute
  instance's ``access`` capability, N read from the driver's
  ``/proc/driver/nvidia-caps/mig-minors`` (:func:`mig_minors_path`; lines such as
  ``gpu0/gi1/access 12``), and no other capability: not ``config`` (``nvidia-cap1``: create and
  destroy MIG instances) nor ``monitor`` (``nvidia-cap2``: see every instance), which the
  NVIDIA container toolkit too gives only when asked (``NVIDIA_MIG_CONFIG_DEVICES``,
  ``NVIDIA_MIG_MONITOR_DEVICES``).
* :func:`cgroup_rules`: the ``devices.allow`` lines of those nodes (character devices only:
  a fake GPU's plain file has no number to allow), for the v1 devices controller and the v2
  device program alike.
* :func:`make_private_dev`: in the caller's mount namespace (made here, ``unshare`` and
  ``mount --make-rslave /``, unless it has one already, e.g. :mod:`.proc_hiding`'s), a tmpfs
  staged in the run's directory gets the usual nodes bound in from the host's ``/dev``
  (``null``, ``zero``, ``full``, ``random``, ``urandom``, ``tty``, ``pts``), a new tmpfs on
  ``shm``, the links ``fd``, ``stdin``, ``stdout``, ``stderr``, ``ptmx``, and the run's own GPU
  nodes, then is moved onto ``/dev``. Every other ``/dev/nvidia*`` is then absent for the child
  and all it starts.

Why no library: it is the few ``mount`` calls runc's ``rootfs_linux.go`` makes, and the shim
may import only the standard library (:mod:`ctypes` for ``mount``, loaded only when a run
gets a private ``/dev``). It decides nothing about which runs get one (the supervisor writes
it in the run's spec).
"""

from __future__ import annotations

import os

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_SLAVE = 0x80000
CLONE_NEWNS = 0x00020000

#: The character devices every run gets from the host's ``/dev`` (runc's defaults).
BASE_NODES = ("null", "zero", "full", "random", "urandom", "tty")
#: The NVIDIA nodes every run with a GPU gets besides its own ``nvidiaN``.
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
#: The links of a ``/dev`` (what runc makes).
LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
)


class PrivateDevError(Exception):
    """The private ``/dev`` could not be made; the message says which step failed and why."""


#: Where the NVIDIA driver lists the minor number of each MIG capability's node.
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
#: The directory of the capabilities' nodes, in ``/dev``.
CAPS_DIR = "nvidia-caps"


def mig_minors_path(device_dir: str) -> str:
    """The driver's ``mig-minors`` file for the device directory ``device_dir``: the real one
    for ``/dev``, else (the fake GPUs') the ``mig-minors`` file in that directory."""
    if os.path.normpath(device_dir) == "/dev":
        return MIG_MINORS
    return os.path.join(device_dir, "mig-minors")


def parse_mig_minors(text: str) -> dict[str, int]:
    """``gpu0/gi1/access 12`` lines as {capability: minor} (lines that are not, skipped)."""
    minors: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            minors[parts[0]] = int(parts[1])
    return minors


def mig_cap_names(instances: list[tuple[int, int, int]], minors: dict[str, int]) -> list[str]:
    """The names in ``/dev`` of the ``access`` capabilities of the MIG ``instances`` (GPU,
    GPU instance id, compute instance id): each one's GPU instance's and compute instance's,
    in that order, once each; a capability ``minors`` lacks is left out."""
    names: list[str] = []
    for gpu, gi, ci in instances:
        for cap in (f"gpu{gpu}/gi{gi}/access", f"gpu{gpu}/gi{gi}/ci{ci}/access"):
            minor = minors.get(cap)
            name = f"{CAPS_DIR}/nvidia-cap{minor}"
            if minor is not None and name not in names:
                names.append(name)
    return names


def gpu_nodes(
    gpu_indices: list[int],
    device_dir: str = "/dev",
    mig_instances: list[tuple[int, int, int]] | None = None,
) -> list[tuple[str, str]]:
    """(host path, name in the run's ``/dev``) of the nodes of a run on ``gpu_indices`` and
    the MIG ``mig_instances`` (GPU, GPU instance id, compute instance id; their GPUs must be
    among ``gpu_indices``) (see the module docstring); none for a run without GPUs. Only the
    nodes that exist in ``device_dir``."""
    if not gpu_indices:
        return []
    names = [f"nvidia{i}" for i in sorted(set(gpu_indices))]
    names += list(CONTROL_NODES)
    if mig_instances:
        try:
            with open(mig_minors_path(device_dir), encoding="ascii") as handle:
                minors = parse_mig_minors(handle.read())
        except OSError:  # no MIG capabilities in /dev (the driver's /proc interface)
            minors = {}
        names += mig_cap_names(mig_instances, minors)
    names = [n for n in names if os.path.exists(os.path.join(device_dir, n))]
    return [(os.path.join(device_dir, name), name) for name in names]


def cgroup_rules(nodes: list[tuple[str, str]]) -> list[str]:
    """The ``devices.allow`` lines of the character devices among ``nodes``."""
    import stat

    rules: list[str] = []
    for path, _ in nodes:
        try:
            found = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(found.st_mode):
            rules.append(f"c {os.major(found.st_rdev)}:{os.minor(found.st_rdev)} rwm")
    return rules


def probe(timeout_s: float = 30.0) -> str | None:
    """Whether a private ``/dev`` can be made here (in a short-lived process of its own, the
    caller's mounts left alone): None when it can, else why not. Runs as root."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    package_root = str(Path(__file__).resolve().parents[3])
    boot = (
        "import sys; sys.path.append(sys.argv.pop(1)); "
        "from gpufleet.backends.local.private_dev import make_private_dev as make; "
        "make([], sys.argv[1], False)"
    )
    with tempfile.TemporaryDirectory(prefix="gpufleet-dev-probe-") as staging:
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-S", "-c", boot, package_root, staging],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"cannot run the check of a private /dev: {error}"
    if done.returncode == 0:
        return None
    said = done.stderr.decode(errors="replace").strip().splitlines()
    return said[-1] if said else f"the check of a private /dev exited with {done.returncode}"


def make_private_dev(
    nodes: list[tuple[str, str]], staging: str, own_namespace: bool, host_dev: str = "/dev"
) -> None:
    """See the module docstring: ``nodes`` from :func:`gpu_nodes`, ``staging`` an empty
    directory of the run's (where the new ``/dev`` is built), ``own_namespace``: the caller
    is in a mount namespace of its own already. Raises :class:`PrivateDevError`."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    mount = libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong]
    mount.argtypes.append(ctypes.c_char_p)

    def call(step: str, *args: object) -> None:
        encoded = [a.encode() if isinstance(a, str) else a for a in args]
        if mount(*encoded) != 0:
            number = ctypes.get_errno()
            raise PrivateDevError(f"cannot make the run's /dev: {step}: {os.strerror(number)}")

    if not own_namespace:
        if libc.unshare(ctypes.c_int(CLONE_NEWNS)) != 0:
            number = ctypes.get_errno()
            raise PrivateDevError(f"cannot make the run's /dev: unshare: {os.strerror(number)}")
        call("mount --make-rslave /", None, "/", None, MS_REC | MS_SLAVE, None)
    os.makedirs(staging, mode=0o700, exist_ok=True)
    call("mount -t tmpfs", "tmpfs", staging, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=64k")
    sources = [(os.path.join(host_dev, n), n) for n in BASE_NODES] + list(nodes)
    for source, name in sources:
        if not os.path.exists(source):
            continue
        target = os.path.join(staging, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)  # nvidia-caps/nvidia-capN
        with open(target, "w"):
            pass
        call(f"mount --bind {source} /dev/{name}", source, target, None, MS_BIND, None)
    pts = os.path.join(host_dev, "pts")
    if os.path.isdir(pts):
        os.mkdir(os.path.join(staging, "pts"))
        target = os.path.join(staging, "pts")
        call("mount --rbind /dev/pts", pts, target, None, MS_BIND | MS_REC, None)
    shm = os.path.join(staging, "shm")
    os.mkdir(shm)
    call("mount -t tmpfs shm", "shm", shm, "tmpfs", MS_NOSUID, "mode=1777,size=65536k")
    for name, target in LINKS:
        os.symlink(target, os.path.join(staging, name))
    call("mount --move onto /dev", staging, "/dev", None, MS_MOVE, None)


__all__ = [
    "BASE_NODES",
    "CAPS_DIR",
    "CONTROL_NODES",
    "MIG_MINORS",
    "PrivateDevError",
    "cgroup_rules",
    "gpu_nodes",
    "make_private_dev",
    "mig_cap_names",
    "mig_minors_path",
    "parse_mig_minors",
    "probe",
]
