"""A workload's process, read from its Pod manifest (or a command line) for the local machine.

Owns the reading of a pod's first container into a
:class:`~gpufleet.model.processes.ProcessSpec`, as the kubelet would start it but without an
image: ``command`` + ``args`` (``command`` is required: there is no image entrypoint to fall
back on), ``env`` as name/value pairs (``valueFrom`` is refused: no Secrets or ConfigMaps
here), ``stdin`` and ``tty`` (both true: it runs on a terminal clients attach to), ``$(VAR)``
references in env values, command and args expanded as Kubernetes expands them (``$$`` is a
literal ``$``; an undefined name stays as written), ``workingDir``, and the pod spec's
``activeDeadlineSeconds`` (a whole number >= 1, as the API server checks it: the process's time
limit; a Job's own is the plane's to add, from the Job as already read). Every check that can
fail is made here, before anything starts, each error naming the file, the object and the
field:

* the command must exist: a bare name is looked up on the process's ``PATH`` (its own env's,
  else the base env's) as the shell does; a path with a ``/`` (relative paths from the working
  directory) must be an executable file;
* where the process runs as another user than the server (``uid``), that user must be able to
  run it: every directory on the way to it searchable, the file executable (and readable, for
  a script), by the permission bits, for its uid and primary gid alone (the process starts with
  no supplementary groups; ACLs are not read). The lookup on ``PATH`` skips what the user
  cannot run, as ``execvp`` does. Every path is then looked at as that user would
  (:func:`resolve_as`, links included), never as the server: a file it cannot reach gets the
  error of a missing one, so that a tenant learns nothing of another tenant's private
  directory from an error (issue 30);
* the working directory must lie inside the tenant's root (symlinks resolved, as the user
  would resolve them); a relative one is taken from the root, and none means the root
  itself.

Pods of a Job, Deployment, StatefulSet or ReplicaSet share their template's process
(:func:`process_spec_from_object`). The restart policy: a Pod's ``restartPolicy`` as given
(none given: none, its end is its end: a Pod here is a one-off command, not the kubelet's
``Always`` default); a Deployment's, StatefulSet's or ReplicaSet's ``Always`` (the only value
Kubernetes accepts there); a Job's none (its failures are its ``backoffLimit``'s).
``gpufleet run`` sends such a Pod. Of its resources it reads only the first container's CPU and
memory limits (:func:`container_limits`: what the run's cgroup holds it to; requests are
``kube.pods``'s), and it starts nothing (``gpufleet.backends.local`` does).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.kube.job_rules import restart_policy
from gpufleet.io.kube.pods import REPLICATED_KINDS
from gpufleet.io.manifests import Context, describe, object_name
from gpufleet.io.quantities import parse_quantity
from gpufleet.model.jobs import RestartPolicy
from gpufleet.model.processes import ProcessSpec

#: The kinds whose process is read: a Pod's spec, or the pod template of the others.
PROCESS_KINDS = ("Pod", "Job", *REPLICATED_KINDS)
#: Where errors about a command line point.
COMMAND_LINE = "command line"
#: The links a path may pass through (Linux's MAXSYMLINKS).
_MAX_LINKS = 40
_REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: ``$$`` -> ``$``; a defined ``$(NAME)`` -> its value;
    an undefined one stays as written."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return env.get(name, match.group(0))

    return _REFERENCE.sub(replace, text)


def working_directory(
    context: Context,
    value: str | None,
    tenant_root: Path,
    field: str,
    uid: int | None = None,
    gid: int | None = None,
) -> str:
    """The absolute working directory ``value`` names (the root when None), which must lie
    inside ``tenant_root`` once symlinks are resolved (as the user ``uid`` resolves them, when
    it is another than the server's: one it cannot reach is outside, with the same error)."""
    root = Path(os.path.realpath(tenant_root))
    if value is None or value == "":
        return str(root)
    path = Path(value) if value.startswith("/") else root / value
    user = _other_user(uid, gid)
    seen = os.path.realpath(path) if user is None else resolve_as(str(path), *user)
    resolved = None if seen is None else Path(seen)
    if resolved is None or (resolved != root and root not in resolved.parents):
        raise context.error(
            field, f"expected a directory inside the tenant's root {root}, got {quoted(value)}"
        )
    return str(resolved)


def _other_user(uid: int | None, gid: int | None) -> tuple[int, int] | None:
    """(uid, gid) when the process runs as another user than the server; else None."""
    if uid is None or uid == os.geteuid():
        return None
    return uid, os.getegid() if gid is None else gid


def resolve_as(path: str, uid: int, gid: int, strict: bool = False) -> str | None:
    """The absolute path ``path`` names once its links are followed, as the user ``uid``
    (primary group ``gid``, no others) would follow them: by the permission bits of each
    directory on the way (ACLs are not read), looking into none it may not search. None when
    that user cannot reach it: a directory on the way it may not search, a name that is not a
    directory, a loop of links, or (``strict``) a name that does not exist; the same None for
    each, so that no caller can tell a user what lies behind a directory closed to it. Not
    ``strict``: what follows the first missing name is kept as written (as ``realpath``)."""
    pending = list(reversed(os.path.abspath(path).split("/")))
    resolved = "/"
    links = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        try:
            if not _allows(os.stat(resolved), uid, gid, 0o1):
                return None
            if name == "..":
                resolved = os.path.dirname(resolved)
                continue
            candidate = os.path.join(resolved, name)
            status = os.lstat(candidate)
        except FileNotFoundError:
            if strict:
                return None
            return os.path.normpath(os.path.join(candidate, *reversed(pending)))
        except OSError:
            return None
        if stat.S_ISLNK(status.st_mode):
            links += 1
            if links > _MAX_LINKS:
                return None
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = "/"
            pending.extend(reversed(target.split("/")))
            continue
        if (
            pending
            and not stat.S_ISDIR(status.st_mode)
            and any(p not in ("", ".") for p in pending)
        ):
            return None
        resolved = candidate
    return resolved


def resolve_command(
    context: Context,
    command: str,
    env: Mapping[str, str],
    cwd: str,
    field: str,
    uid: int | None = None,
    gid: int | None = None,
) -> str:
    """The absolute path of the executable ``command`` names, as the shell finds it (and, with
    ``uid``, as that user may run it: see the module docstring)."""
    if not command:
        raise context.error(field, "expected a command, got an empty string")
    user = _other_user(uid, gid)
    if user is not None:
        return _resolve_command_as(context, command, env, cwd, field, user)
    if "/" in command:
        path = command if command.startswith("/") else os.path.join(cwd, command)
        if not os.path.isfile(path):
            raise context.error(field, f"command {quoted(command)} does not exist ({path})")
        if not os.access(path, os.X_OK):
            raise context.error(field, f"command {quoted(command)} is not executable ({path})")
        return os.path.abspath(path)
    search = env.get("PATH", "")
    for directory in search.split(os.pathsep) if search else ():
        found = shutil.which(command, path=directory or ".")
        if found is not None:
            return os.path.abspath(found)
    raise context.error(
        field, f"command {quoted(command)} not found on PATH ({quoted(search, 120)})"
    )


def _resolve_command_as(
    context: Context,
    command: str,
    env: Mapping[str, str],
    cwd: str,
    field: str,
    user: tuple[int, int],
) -> str:
    """:func:`resolve_command` for a process that runs as another user: every path is looked
    at as that user would (:func:`resolve_as`), so that the error says nothing it could not
    see itself. A file it cannot reach reads as a missing one (one message for both: another
    tenant's private files stay unknown to it); one it reaches but may not run says why (it
    may see the modes itself). The lookup on ``PATH`` skips what it cannot reach or run, as
    ``execvp`` does."""
    uid = user[0]
    if "/" in command:
        path = command if command.startswith("/") else os.path.join(cwd, command)
        real = resolve_as(path, *user, strict=True)
        if real is None or not os.path.isfile(real):
            raise context.error(
                field, f"command {quoted(command)}: no file there that uid {uid} can reach ({path})"
            )
        why = cannot_run(real, *user)
        if why is not None:
            raise context.error(field, f"command {quoted(command)}: {why}")
        return os.path.abspath(path)
    search = env.get("PATH", "")
    first_refusal: str | None = None
    for directory in search.split(os.pathsep) if search else ():
        candidate = os.path.join(directory or cwd, command)
        real = resolve_as(candidate, *user, strict=True)
        if real is None or not os.path.isfile(real):
            continue
        why = cannot_run(real, *user)
        if why is None:
            return os.path.abspath(candidate)
        first_refusal = first_refusal or why
    if first_refusal is not None:
        raise context.error(field, f"command {quoted(command)}: {first_refusal}")
    raise context.error(
        field,
        f"command {quoted(command)} not found on PATH as uid {uid} finds it "
        f"({quoted(search, 120)})",
    )


def cannot_run(path: str, uid: int, gid: int) -> str | None:
    """Why the user ``uid`` (primary group ``gid``, no others) cannot execute ``path``, by the
    permission bits of the file and of every directory on the way to it, as given and with
    its links resolved; None when it can."""
    if uid == 0:
        return None
    real = os.path.realpath(path)
    for way in dict.fromkeys((os.path.abspath(path), real)):
        for directory in reversed(Path(way).parents):
            try:
                searchable = _allows(os.stat(directory), uid, gid, 0o1)
            except OSError as error:
                return f"{directory}: {error.strerror}"
            if not searchable:
                return f"uid {uid} cannot reach it: {directory} is not searchable by it"
    status = os.stat(real)
    if not _allows(status, uid, gid, 0o1):
        return f"uid {uid} cannot execute {real} (mode {status.st_mode & 0o7777:o})"
    try:
        with open(real, "rb") as handle:
            script = handle.read(2) == b"#!"
    except OSError:
        script = False
    if script and not _allows(status, uid, gid, 0o4):
        return f"uid {uid} cannot read the script {real} (mode {status.st_mode & 0o7777:o})"
    return None


def _allows(status: os.stat_result, uid: int, gid: int, bit: int) -> bool:
    """Whether the permission bits of ``status`` grant ``bit`` (1: x, 4: r) to the user:
    the owner's bits if it owns the file, else the group's if its group does, else others'."""
    if status.st_uid == uid:
        return bool(status.st_mode >> 6 & bit)
    if status.st_gid == gid:
        return bool(status.st_mode >> 3 & bit)
    return bool(status.st_mode & bit)


def process_spec_from_pod_spec(
    context: Context,
    pod_spec: Mapping[str, Any],
    spec_path: str,
    tenant_root: Path,
    base_env: Mapping[str, str],
    uid: int | None = None,
    gid: int | None = None,
) -> ProcessSpec:
    """The process of a pod spec's first container (see the module docstring)."""
    containers = context.sequence(pod_spec.get("containers"), f"{spec_path}.containers")
    if not containers:
        raise context.error(
            f"{spec_path}.containers", "required: expected a container with a command"
        )
    path = f"{spec_path}.containers[0]"
    container = context.mapping(containers[0], path, required=True)
    env = dict(base_env)
    for i, item in enumerate(context.sequence(container.get("env"), f"{path}.env")):
        where = f"{path}.env[{i}]"
        entry = context.mapping(item, where, required=True)
        name = context.text(entry.get("name"), f"{where}.name")
        if not name:
            raise context.error(f"{where}.name", "expected a variable name, got nothing")
        if "valueFrom" in entry:
            raise context.error(
                f"{where}.valueFrom",
                f"not supported on the local machine (no Secrets or ConfigMaps here): give "
                f"{name}'s value",
            )
        env[name] = expand(context.text(entry.get("value"), f"{where}.value", ""), env)
    command = [
        expand(context.text(part, f"{path}.command[{i}]"), env)
        for i, part in enumerate(context.sequence(container.get("command"), f"{path}.command"))
    ]
    args = [
        expand(context.text(part, f"{path}.args[{i}]"), env)
        for i, part in enumerate(context.sequence(container.get("args"), f"{path}.args"))
    ]
    if not command:
        raise context.error(
            f"{path}.command",
            "required: the local machine runs the container's command (there is no image "
            "entrypoint to fall back on)",
        )
    working_dir_value = container.get("workingDir")
    cwd = working_directory(
        context,
        None
        if working_dir_value is None
        else context.text(working_dir_value, f"{path}.workingDir"),
        tenant_root,
        f"{path}.workingDir",
        uid,
        gid,
    )
    executable = resolve_command(context, command[0], env, cwd, f"{path}.command[0]", uid, gid)
    deadline = pod_spec.get("activeDeadlineSeconds")
    deadline_s = (
        None
        if deadline is None
        else float(context.integer(deadline, f"{spec_path}.activeDeadlineSeconds", 1))
    )
    container_name = container.get("name")
    cpu_limit, memory_limit = container_limits(context, container, path)
    tty = container.get("tty") is True
    if tty and container.get("stdin") is not True:
        raise context.error(
            f"{path}.stdin", "a container with tty: true needs stdin: true (as Kubernetes has it)"
        )
    return ProcessSpec(
        tuple(command + args),
        executable,
        env,
        cwd,
        uid,
        gid,
        deadline_s=deadline_s,
        container="" if container_name is None else context.text(container_name, f"{path}.name"),
        cpu_limit_milli=cpu_limit,
        memory_limit_bytes=memory_limit,
        tty=tty,
    )


def container_limits(
    context: Context, container: Mapping[str, Any], path: str
) -> tuple[int | None, int | None]:
    """The container's ``resources.limits`` of CPU (millicores, at least 1) and memory (bytes):
    what the run's cgroup holds it to (None: no limit, as the kubelet leaves it)."""
    resources = context.mapping(container.get("resources"), f"{path}.resources")
    limits = context.mapping(resources.get("limits"), f"{path}.resources.limits")
    cpu = memory = None
    if "cpu" in limits:
        cores = context.parse(parse_quantity, limits["cpu"], f"{path}.resources.limits[cpu]")
        cpu = max(1, math.ceil(cores * 1000)) if cores > 0 else None
    if "memory" in limits:
        amount = context.parse(parse_quantity, limits["memory"], f"{path}.resources.limits[memory]")
        memory = math.ceil(amount) if amount > 0 else None
    return cpu, memory


def process_spec_from_object(
    obj: Mapping[str, Any],
    source: str,
    tenant_root: Path,
    base_env: Mapping[str, str],
    location: str | None = None,
    uid: int | None = None,
    gid: int | None = None,
) -> ProcessSpec:
    """The process of a Pod, or of each pod of a Job, Deployment, StatefulSet or ReplicaSet;
    errors name ``source``, ``location``, the object and the field."""
    context = Context(source, location)
    kind = obj.get("kind")
    if kind not in PROCESS_KINDS:
        raise context.error(
            "kind", f"expected one of {', '.join(PROCESS_KINDS)}, got {describe(kind)}"
        )
    name, namespace = object_name(context, obj, str(kind))
    context = context.naming(f"{kind} {namespace or 'default'}/{name}")
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    if kind == "Pod":
        process = process_spec_from_pod_spec(context, spec, "spec", tenant_root, base_env, uid, gid)
        policy = restart_policy(context, spec.get("restartPolicy"), "spec.restartPolicy")
        return dataclasses.replace(process, restart_policy=policy)
    template = context.mapping(spec.get("template"), "spec.template", required=True)
    pod_spec = context.mapping(template.get("spec"), "spec.template.spec", required=True)
    process = process_spec_from_pod_spec(
        context, pod_spec, "spec.template.spec", tenant_root, base_env, uid, gid
    )
    if kind in REPLICATED_KINDS:
        field = "spec.template.spec.restartPolicy"
        always = (RestartPolicy.ALWAYS,)
        restart_policy(context, pod_spec.get("restartPolicy"), field, always)
        return dataclasses.replace(process, restart_policy=RestartPolicy.ALWAYS)
    return process


__all__ = [
    "InputError",
    "cannot_run",
    "expand",
    "process_spec_from_object",
    "process_spec_from_pod_spec",
    "resolve_as",
    "resolve_command",
    "working_directory",
]
