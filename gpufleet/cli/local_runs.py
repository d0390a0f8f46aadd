"""``gpufleet run`` and ``gpufleet logs``: one-liners and their output on a ``serve --local``.

``gpufleet run --gpus 2 --queue research -- python train.py --lr 3e-4`` submits a Pod whose
container runs that command (:func:`run_manifest`: the command as written, ``$`` kept literal;
the caller's ``PATH`` and Python environment variables, and each ``--env``; ``--workdir``
inside the tenant's working directory), through the same API and checks as ``gpufleet submit``:
the server says at once if the command does not exist or the GPUs are more than the machine
has. ``--follow`` then prints its output until it ends, and exits 0 if it succeeded, 1 if not.

``gpufleet run --array 0-99%4 -- python task.py`` (Slurm's ``sbatch --array``) submits a job
array instead (:func:`array_manifest`): an Indexed Job of as many completions as tasks, run
``%N`` at a time (default: all, as many as the server's GPUs hold), each run seeing its index in
``JOB_COMPLETION_INDEX`` and its task id in ``SLURM_ARRAY_TASK_ID`` (the index plus the
first); a failed task fails alone (``backoffLimitPerIndex: 0``): the others run, and the Job
fails at the end with its failed indexes listed.

``gpufleet logs NAME [-f]`` prints a run's output (the latest run of the workload's first pod,
unless ``--pod``/``--attempt``), and with ``-f`` follows it, polling, on to the next run when
the workload is preempted and resumes, until the workload ends.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
import time
from collections.abc import Sequence
from typing import Annotated, Any

import typer
import yaml
from rich.markup import escape

from gpufleet.cli.client import ApiClient
from gpufleet.cli.inputs import EXIT_FAILED, console, fail
from gpufleet.cli.remote import (
    KindOption,
    NamespaceOption,
    ServerOption,
    TokenOption,
    checked_name,
    connect,
    remote_errors,
    resolve_workload,
)
from gpufleet.io.job_rules import ARRAY_ANNOTATION, parse_array
from gpufleet.io.names import NameRule, rule_of
from gpufleet.model.queues import QUEUE_LABEL

#: The caller's environment variables a one-liner takes along (its tools and Python).
TAKEN_ENV = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "LANG", "LC_ALL", "TZ")
#: Seconds between two looks at a followed log.
FOLLOW_EVERY_S = 0.5
_NOT_IN_NAME = re.compile(r"[^a-z0-9-]+")


def default_name(argv: Sequence[str]) -> str:
    """``train-3f9a1c`` for ``python train.py``: the script's (else the program's) name and
    a random suffix."""
    words = [os.path.basename(a) for a in argv if not a.startswith("-")]
    script = next((w for w in words[1:] if "." in w), words[0] if words else "run")
    stem = _NOT_IN_NAME.sub("-", script.rsplit(".", 1)[0].lower()).strip("-")[:40] or "run"
    return f"{stem}-{secrets.token_hex(3)}"


def _literal(text: str) -> str:
    """``text`` as a Pod's command keeps it: ``$`` doubled, so ``$(X)`` is not expanded."""
    return text.replace("$", "$$")


def run_manifest(
    argv: Sequence[str],
    gpus: int,
    name: str,
    namespace: str | None = None,
    queue: str | None = None,
    priority_class: str | None = None,
    workdir: str | None = None,
    env: dict[str, str] | None = None,
    cpus: str | None = None,
    memory: str | None = None,
) -> dict[str, Any]:
    """The Pod that runs ``argv`` with ``gpus`` whole GPUs (see the module docstring); ``cpus``
    and ``memory`` (Kubernetes quantities: ``500m``, ``2``; ``100Mi``, ``4Gi``) are its
    container's requests and limits, what its cgroup holds it to on the server."""
    container: dict[str, Any] = {
        "name": "main",
        "command": [_literal(a) for a in argv],
        "env": [{"name": k, "value": _literal(v)} for k, v in sorted((env or {}).items())],
    }
    limits: dict[str, Any] = {}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    sized = {k: v for k, v in (("cpu", cpus), ("memory", memory)) if v is not None}
    limits.update(sized)
    if limits:
        container["resources"] = {"limits": limits}
    if sized:
        container["resources"]["requests"] = dict(sized)
    if workdir:
        container["workingDir"] = workdir
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if queue:
        metadata["labels"] = {QUEUE_LABEL: queue}
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def array_manifest(pod: dict[str, Any], array: str, server_gpus: int | None) -> dict[str, Any]:
    """The job array ``array`` (``FIRST-LAST[%MOST]``, see the module docstring) of the Pod
    ``pod`` (:func:`run_manifest`'s): an Indexed Job. ``server_gpus``: the GPUs the server
    has (None: not known); a task needing GPUs runs at most as many at a time as they hold.
    A ValueError says what is wrong with ``array``."""
    first, count, most = parse_array(array)
    parallelism = min(count, most or count)
    limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
    gpus = int(limits.get("nvidia.com/gpu", 0))
    if gpus and server_gpus is not None:
        parallelism = max(1, min(parallelism, server_gpus // gpus))
    metadata = dict(pod["metadata"])
    metadata["annotations"] = {ARRAY_ANNOTATION: f"{first}-{first + count - 1}"}
    template_metadata = {"labels": dict(metadata["labels"])} if "labels" in metadata else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "completions": count,
            "parallelism": parallelism,
            "completionMode": "Indexed",
            "backoffLimitPerIndex": 0,
            "template": {**({"metadata": template_metadata} if template_metadata else {}),
                         "spec": pod["spec"]},
        },
    }  # fmt: skip


def _parsed_env(items: Sequence[str]) -> dict[str, str]:
    env = {name: os.environ[name] for name in TAKEN_ENV if name in os.environ}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise fail(escape(f"--env {item!r}: expected NAME=VALUE"))
        env[name] = value
    return env


@remote_errors
def run(
    command: Annotated[
        list[str],
        typer.Argument(help="the command and its arguments, after --", show_default=False),
    ],
    gpus: Annotated[int, typer.Option(min=0, help="whole GPUs it needs")] = 0,
    cpus: Annotated[
        str | None, typer.Option(help="CPU it may use (500m, 2): a CFS quota on the server")
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option(help="memory it may use (100Mi, 4Gi): beyond it, it is OOMKilled"),
    ] = None,
    queue: Annotated[str | None, typer.Option(help="queue (default: your own)")] = None,
    name: Annotated[str | None, typer.Option(help="its name (default: from the command)")] = None,
    priority_class: Annotated[
        str | None, typer.Option(help="PriorityClass (urgent, training-batch, best-effort...)")
    ] = None,
    workdir: Annotated[
        str | None,
        typer.Option(help="working directory inside your tenant's (default: that directory)"),
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE for it (repeatable)")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="print its output until it ends")
    ] = False,
    array: Annotated[
        str | None,
        typer.Option(
            help="a job array, as Slurm's --array: FIRST-LAST[%N] (0-99, 0-99%4: N at a time), "
            "an Indexed Job; each task sees JOB_COMPLETION_INDEX and SLURM_ARRAY_TASK_ID"
        ),
    ] = None,
    namespace: NamespaceOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Run a command on the server's GPUs (gpufleet serve --local), as a Pod with its own
    GPUs (with --array, as a job array). Example: gpufleet run --gpus 2 --queue research --
    python train.py --epochs 3"""
    chosen = name or default_name(command)
    checked_name(chosen, "--name")
    checked_name(namespace, "namespace", NameRule.LABEL)
    checked_name(queue, "queue", rule_of("Queue"), "Queue")
    manifest = run_manifest(
        command,
        gpus,
        chosen,
        namespace,
        queue,
        priority_class,
        workdir,
        _parsed_env(env or []),
        cpus,
        memory,
    )
    if array is not None:
        try:
            parse_array(array)
        except ValueError as error:
            raise fail(escape(f"--array: {error}")) from None
    with connect(server, token) as client:
        if array is not None:
            free = sum(node.gpus_allocatable for node in client.list_nodes())
            manifest = array_manifest(manifest, array, free)
        result = client.submit(yaml.safe_dump(manifest, sort_keys=False))
        accepted = result.accepted[0]
        console.print(
            f"workload/{accepted.namespace}/{accepted.name} accepted: {accepted.gpu_request} "
            f"GPU(s), queue {accepted.queue}, {accepted.state.value}",
            markup=False,
        )
        kind = "Job" if array is not None else "Pod"
        if follow and not _follow(client, accepted.namespace, accepted.name, kind):
            raise typer.Exit(EXIT_FAILED)


@remote_errors
def logs(
    name: Annotated[str, typer.Argument(help="[NAMESPACE/][KIND/]NAME of the workload")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing until the workload ends")
    ] = False,
    pod: Annotated[str | None, typer.Option(help="which pod (default: its first)")] = None,
    attempt: Annotated[
        int | None, typer.Option(min=1, help="which run of the pod (default: the latest)")
    ] = None,
    namespace: NamespaceOption = None,
    workload_kind: KindOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Print the output of a workload's run (gpufleet serve --local keeps every run's log)."""
    with connect(server, token) as client:
        namespace_, name_, kind = resolve_workload(client, name, namespace, workload_kind)
        if follow:
            _follow(client, namespace_, name_, kind, pod, attempt)
            return
        offset = 0
        while True:
            chunk = client.logs(namespace_, name_, kind, pod=pod, attempt=attempt, offset=offset)
            _write(chunk.text)
            if chunk.next_offset == offset:
                return
            offset, attempt = chunk.next_offset, chunk.attempt


def _follow(
    client: ApiClient,
    namespace: str,
    name: str,
    kind: str | None,
    pod: str | None = None,
    attempt: int | None = None,
) -> bool:
    """Print the run's output as it comes, on to the pod's next run unless ``attempt`` pins
    one, until the workload ends; whether it succeeded."""
    pinned = attempt is not None
    offset = 0
    while True:
        chunk = client.logs(namespace, name, kind, pod=pod, attempt=attempt, offset=offset)
        _write(chunk.text)
        moved = chunk.next_offset != offset
        offset = chunk.next_offset
        attempt = chunk.attempt or None
        if moved:
            continue
        if not pinned and chunk.attempts > chunk.attempt:
            attempt, offset = chunk.attempt + 1, 0
            console.print(f"--- run {attempt} of pod {chunk.pod} ---", markup=False)
            continue
        if chunk.finished:
            state = client.get_workload(namespace, name, kind).state
            return state.value == "Succeeded"
        time.sleep(FOLLOW_EVERY_S)


def _write(text: str) -> None:
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
