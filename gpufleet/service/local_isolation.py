"""Whether ``serve --local`` may start: each tenant's processes hidden from the others', or the
operator said they need not be (``--shared-proc``).

Owns :func:`check_process_hiding`, asked once at start. Where the server runs as root and
switches user for some tenant (``--run-as``), each run's ``/proc`` shows only its own uid's
processes (:mod:`gpufleet.backends.local.proc_hiding`); that needs ``CAP_SYS_ADMIN``, which an
unprivileged container lacks. A server that cannot hide them refuses to start, naming what the
kernel refused and the two ways out, rather than run tenants that see each other's processes
when nobody chose it; with ``--shared-proc`` it starts and says, once, that they will. Where
no user is switched (the server is not root, or only ``--allow-root``'s root runs), there is
nothing to hide from: each process sees what its user sees.

Owns :func:`check_resource_limits` too, asked once at start: which cgroup hierarchy each run's
cgroup goes in (:mod:`gpufleet.backends.local.cgroups`: CPU quota, memory limit, pids limit and
the devices a run may open: v1's devices controller, or a v2 device program), or, where none
can be written, the warning serve prints once: then nothing holds a run to its CPU, memory or
task limits; on v2 where the kernel refuses a device program, the warning that only the
private ``/dev`` keeps a run from other GPUs' nodes; and
:func:`check_private_dev`: whether each run gets a ``/dev`` of its own GPUs' nodes only.

It starts nothing itself but the probe, and decides nothing per run (the supervisor writes
``hide_processes`` and the cgroup in each run's spec).
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.backends.local.cgroups import Hierarchy, detect
from gpufleet.backends.local.private_dev import probe as probe_private_dev
from gpufleet.backends.local.proc_hiding import probe
from gpufleet.io.errors import InputError
from gpufleet.service.local_users import RUN_AS, TenantUsers

#: A probe: given a tenant's uid and gid, None when processes can be hidden, else why not.
Probe = Callable[[int, int], str | None]

#: How the operator gets out of a refusal.
REMEDY = (
    "run the server where it has CAP_SYS_ADMIN and may mount (as root on the host, or in a "
    "container given --cap-add SYS_ADMIN and a security profile that allows mount), or start "
    "it with --shared-proc to let every tenant see the other tenants' processes"
)


def check_process_hiding(
    users: TenantUsers, shared_proc: bool, probe_hiding: Probe = probe
) -> str | None:
    """None when nothing needs saying; a warning to print at start when ``shared_proc`` leaves
    switched users' processes visible to each other; :class:`InputError` when they should be
    hidden and this machine cannot (see the module docstring)."""
    switched = sorted(users.users.items()) if users.euid == 0 else []
    if not switched:
        return None
    if shared_proc:
        return (
            "--shared-proc: each tenant's processes are visible to the other tenants (ps, "
            "/proc/<pid>/cmdline); they still cannot signal them"
        )
    tenant, (uid, gid) = switched[0]
    refused = probe_hiding(uid, gid)
    if refused is None:
        return None
    raise InputError(
        RUN_AS,
        f"each tenant's processes are hidden from the others (a /proc of their own, "
        f"hidepid=invisible), but this machine refused it (tried as tenant {tenant}'s uid "
        f"{uid}): {refused}; {REMEDY}",
    )


def check_private_dev(
    users: TenantUsers, probe_dev: Callable[[], str | None] = probe_private_dev
) -> tuple[bool, str | None]:
    """Whether each run gets a private ``/dev`` holding only its GPUs' nodes
    (:mod:`gpufleet.backends.local.private_dev`; the server must be root and allowed to
    mount), and the warning to print once at start when it cannot."""
    if users.euid != 0:
        return False, (
            "the server is not root: every run can open every /dev/nvidia* of this machine "
            "(only CUDA_VISIBLE_DEVICES points it at its own)"
        )
    refused = probe_dev()
    if refused is None:
        return True, None
    return False, (
        f"runs get no private /dev ({refused}): every run can open every /dev/nvidia* of this "
        f"machine (only CUDA_VISIBLE_DEVICES, and a v1 devices cgroup where there is one, "
        f"point it at its own)"
    )


def check_resource_limits(
    find: Callable[[], Hierarchy | str] = detect,
) -> tuple[Hierarchy | None, str | None]:
    """The cgroup hierarchy runs go in, and None; or None and the warning to print once at
    start (no cgroup can be written: limits are not enforced)."""
    found = find()
    if isinstance(found, Hierarchy):
        if found.version == 2 and not found.device_program:
            return found, (
                f"runs' cgroups get no device program ({found.device_program_refused}): only the "
                f"private /dev keeps a run from other GPUs' device nodes (run the server as root "
                f"with CAP_BPF, on a kernel with CONFIG_CGROUP_BPF)"
            )
        return found, None
    return None, (
        f"no cgroup can be written here ({found}): runs are not held to their CPU and memory "
        f"limits nor to a pids limit, an OOM is not reported as OOMKilled, and only the private "
        f"/dev keeps a run from other GPUs' device nodes (run the server as root where "
        f"/sys/fs/cgroup is writable)"
    )


__all__ = [
    "REMEDY",
    "Probe",
    "check_private_dev",
    "check_process_hiding",
    "check_resource_limits",
]
