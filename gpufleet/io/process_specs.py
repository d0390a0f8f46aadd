"""A workload's process, read from its Pod manifest (or a command line) for the local machine.

Owns the reading of a pod's first container into a
:class:`~gpufleet.model.processes.ProcessSpec`, as the kubelet would start it but without an
image: ``command`` + ``args`` (``command`` is required: there is no image entrypoint to fall
back on), ``env`` as name/value pairs (``valueFrom`` is refused: no Secrets or ConfigMaps
here), ``$(VAR)`` references in env values, command and args expanded as Kubernetes expands
them (``$$`` is a literal ``$``; an undefined name stays as written), ``workingDir``, and the
pod spec's ``activeDeadlineSeconds`` (a whole number >= 1, as the API server checks it: the
process's time limit; a Job's own is the plane's to add, from the Job as already read). Every
check that can fail is made here, before anything starts, each error naming the file, the
object and the field:

* the command must exist: a bare name is looked up on the process's ``PATH`` (its own env's,
  else the base env's) as the shell does; a path with a ``/`` (relative paths from the working
  directory) must be an executable file;
* the working directory must lie inside the tenant's root (symlinks resolved); a relative one
  is taken from the root, and none means the root itself.

Pods of a Job, Deployment, StatefulSet or ReplicaSet share their template's process
(:func:`process_spec_from_object`). The restart policy: a Pod's ``restartPolicy`` as given
(none given: none, its end is its end: a Pod here is a one-off command, not the kubelet's
``Always`` default); a Deployment's, StatefulSet's or ReplicaSet's ``Always`` (the only value
Kubernetes accepts there); a Job's none (its failures are its ``backoffLimit``'s).
:func:`one_liner` makes the pod and process of ``gpufleet run --gpus N -- CMD ARGS...``.
It reads no resources (``kube_pods`` does) and starts nothing (``gpufleet.backends.local``
does).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.job_rules import restart_policy
from gpufleet.io.kube_pods import REPLICATED_KINDS
from gpufleet.io.manifests import Context, describe, object_name
from gpufleet.io.names import name_problem
from gpufleet.model import GpuRequest, Pod
from gpufleet.model.jobs import RestartPolicy
from gpufleet.model.processes import ProcessSpec

#: The kinds whose process is read: a Pod's spec, or the pod template of the others.
PROCESS_KINDS = ("Pod", "Job", *REPLICATED_KINDS)
#: Where errors about a command line point.
COMMAND_LINE = "command line"
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


def working_directory(context: Context, value: str | None, tenant_root: Path, field: str) -> str:
    """The absolute working directory ``value`` names (the root when None), which must lie
    inside ``tenant_root`` once symlinks are resolved."""
    root = Path(os.path.realpath(tenant_root))
    if value is None or value == "":
        return str(root)
    path = Path(value) if value.startswith("/") else root / value
    resolved = Path(os.path.realpath(path))
    if resolved != root and root not in resolved.parents:
        raise context.error(
            field, f"expected a directory inside the tenant's root {root}, got {quoted(value)}"
        )
    return str(resolved)


def resolve_command(
    context: Context, command: str, env: Mapping[str, str], cwd: str, field: str
) -> str:
    """The absolute path of the executable ``command`` names, as the shell finds it."""
    if not command:
        raise context.error(field, "expected a command, got an empty string")
    if "/" in command:
        path = command if command.startswith("/") else os.path.join(cwd, command)
        if not os.path.isfile(path):
            raise context.error(field, f"command {quoted(command)} does not exist ({path})")
        if not os.access(path, os.X_OK):
            raise context.error(field, f"command {quoted(command)} is not executable ({path})")
        return os.path.abspath(path)
    search = env.get("PATH", "")
    found = shutil.which(command, path=search) if search else None
    if found is None:
        raise context.error(
            field, f"command {quoted(command)} not found on PATH ({quoted(search, 120)})"
        )
    return os.path.abspath(found)


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
    )
    executable = resolve_command(context, command[0], env, cwd, f"{path}.command[0]")
    deadline = pod_spec.get("activeDeadlineSeconds")
    deadline_s = (
        None
        if deadline is None
        else float(context.integer(deadline, f"{spec_path}.activeDeadlineSeconds", 1))
    )
    return ProcessSpec(tuple(command + args), executable, env, cwd, uid, gid, deadline_s=deadline_s)


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


def one_liner(
    argv: Sequence[str],
    gpus: int,
    name: str,
    tenant_root: Path,
    base_env: Mapping[str, str],
    namespace: str = "default",
    working_dir: str | None = None,
    uid: int | None = None,
    gid: int | None = None,
) -> tuple[Pod, ProcessSpec]:
    """The pod and process of ``gpufleet run --gpus N -- CMD ARGS...``: ``gpus`` whole GPUs,
    ``base_env`` as the process's environment (the submitting shell's, typically)."""
    context = Context(COMMAND_LINE)
    if not argv:
        raise context.error("command", "required: expected a command after --")
    if gpus < 0:
        raise context.error("--gpus", f"expected 0 or more GPUs, got {gpus}")
    problem = name_problem(name)
    if problem is not None:
        raise context.error("--name", f"{problem}; got {quoted(name)}")
    cwd = working_directory(context, working_dir, tenant_root, "--workdir")
    env = dict(base_env)
    executable = resolve_command(context, argv[0], env, cwd, "command")
    pod = Pod(name, namespace, gpu=GpuRequest.whole(gpus))
    return pod, ProcessSpec(tuple(argv), executable, env, cwd, uid, gid)


__all__ = [
    "InputError",
    "expand",
    "one_liner",
    "process_spec_from_object",
    "process_spec_from_pod_spec",
    "resolve_command",
    "working_directory",
]
