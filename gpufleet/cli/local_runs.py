"""``gpufleet run`` and ``gpufleet logs``: one-liners and their output on a ``serve --local``.

``gpufleet run --gpus 2 --queue research -- python train.py --lr 3e-4`` submits a Pod whose
container runs that command (:func:`run_manifest`: the command as written, ``$`` kept literal;
the caller's ``PATH`` and Python environment variables, and each ``--env``; ``--workdir``
inside the tenant's working directory), through the same API and checks as ``gpufleet submit``:
the server says at once if the command does not exist or the GPUs are more than the machine
has. ``--follow`` then prints its output until it ends, and exits 0 if it succeeded, 1 if not.
Ctrl-C while following cancels it (as ``gpufleet delete``), prints so, waits for it to stop
and exits 130; a second Ctrl-C stops the waiting. With ``--detach``, Ctrl-C leaves it running
and prints how to follow it again.

``gpufleet run --array 0-99%4 -- python task.py`` (Slurm's ``sbatch --array``) submits a job
array instead (:func:`array_manifest`): an Indexed Job of as many completions as tasks, run
``%N`` at a time (default: all, as many as the server's GPUs hold), each run seeing its index in
``JOB_COMPLETION_INDEX`` and its task id in ``SLURM_ARRAY_TASK_ID`` (the index plus the
first); a failed task fails alone (``backoffLimitPerIndex: 0``): the others run, and the Job
fails at the end with its failed indexes listed.

``gpufleet run -it -- bash`` (``srun --pty``) runs it on a terminal (the Pod's container says
``stdin: true`` and ``tty: true``; ``TERM`` goes along): once it has its GPUs (``waiting for
GPUs`` meanwhile), this terminal is relayed to it until it ends, and the exit code is its
(:mod:`.terminal_session`); ``gpufleet attach NAME`` takes the session up again.

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
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
import yaml
from rich.markup import escape

from gpufleet.cli import terminal_session
from gpufleet.cli.client import ApiClient
from gpufleet.cli.output import EXIT_FAILED, console, fail
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
from gpufleet.io.names import NameRule, rule_of
from gpufleet.model.queues import QUEUE_LABEL

#: The caller's environment variables a one-liner takes along (its tools and Python).
TAKEN_ENV = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "LANG", "LC_ALL", "TZ")
#: Seconds between two looks at a followed log.
FOLLOW_EVERY_S = 0.5
#: How the follow loop waits between two looks (tests swap it to press Ctrl-C).
pause: Callable[[float], None] = time.sleep
#: The exit code of a run -f stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
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
    terminal: bool = False,
) -> dict[str, Any]:
    """The Pod that runs ``argv`` with ``gpus`` whole GPUs (see the module docstring); ``cpus``
    and ``memory`` (Kubernetes quantities: ``500m``, ``2``; ``100Mi``, ``4Gi``) are its
    container's requests and limits, what its cgroup holds it to on the server; ``terminal``:
    it runs on a terminal (``run -it``)."""
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
    if terminal:
        container["stdin"] = container["tty"] = True
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
    # The Kubernetes readers only for an array: a plain run starts faster without them.
    from gpufleet.io.kube.job_rules import ARRAY_ANNOTATION, parse_array

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


def _parsed_env(items: Sequence[str], terminal: bool = False) -> dict[str, str]:
    taken = (*TAKEN_ENV, "TERM") if terminal else TAKEN_ENV
    env = {name: os.environ[name] for name in taken if name in os.environ}
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
        bool,
        typer.Option("--follow", "-f", help="print its output until it ends (Ctrl-C cancels it)"),
    ] = False,
    detach: Annotated[
        bool,
        typer.Option(help="with --follow: Ctrl-C stops following and leaves it running"),
    ] = False,
    interactive: Annotated[
        bool, typer.Option("--interactive", "-i", help="with -t: relay this terminal to it")
    ] = False,
    terminal: Annotated[
        bool,
        typer.Option("--tty", "-t", help="with -i (-it): run it on a terminal, as srun --pty does"),
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
    if interactive != terminal:
        raise fail("-i and -t go together: -it runs it on a terminal relayed to this one")
    if terminal and (follow or array is not None):
        raise fail("-it is a session of its own: not with --follow or --array")
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
        _parsed_env(env or [], terminal),
        cpus,
        memory,
        terminal,
    )
    if array is not None:
        from gpufleet.io.kube.job_rules import parse_array

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
        if terminal:
            raise typer.Exit(_session(client, accepted.namespace, accepted.name, kind))
        if follow:
            code = _follow_or_cancel(client, accepted.namespace, accepted.name, kind, detach)
            if code:
                raise typer.Exit(code)


@remote_errors
def attach(
    name: Annotated[str, typer.Argument(help="[NAMESPACE/][KIND/]NAME of the workload")],
    namespace: NamespaceOption = None,
    workload_kind: KindOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Attach this terminal to a workload's (gpufleet run -it) again: it waits for its GPUs
    first if it must; the exit code is the run's once it ends. Example: gpufleet attach
    shell-3f9a1c"""
    with connect(server, token) as client:
        namespace_, name_, kind = resolve_workload(client, name, namespace, workload_kind)
        raise typer.Exit(_session(client, namespace_, name_, kind, cancel_on_ctrl_c=False))


def _session(
    client: ApiClient, namespace: str, name: str, kind: str | None, cancel_on_ctrl_c: bool = True
) -> int:
    """Wait for the workload's GPUs, then relay this terminal to its (the exit code). Ctrl-C
    while it waits cancels it (``run -it``) or stops waiting (``attach``)."""
    try:
        state = terminal_session.wait_for_gpus(client, namespace, name, kind, pause)
    except KeyboardInterrupt:
        if not cancel_on_ctrl_c:
            return EXIT_INTERRUPTED
        cancelled = client.delete_workload(namespace, name, kind)
        console.print(
            f"\nCtrl-C: workload/{namespace}/{name} ({cancelled.kind}) "
            f"{cancelled.state.value.lower()}",
            markup=False,
        )
        return EXIT_INTERRUPTED
    if state != "Running":
        console.print(
            f"workload/{namespace}/{name} has ended ({state}): there is no terminal to attach "
            f"to; its output: gpufleet logs {namespace}/{name}",
            markup=False,
        )
        return EXIT_FAILED
    return terminal_session.attach(client, namespace, name, kind)


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


def _follow_or_cancel(client: ApiClient, namespace: str, name: str, kind: str, detach: bool) -> int:
    """Follow the workload (:func:`_follow`) until it ends; on Ctrl-C cancel it and wait for
    it to stop (a second Ctrl-C: no longer), or with ``detach`` leave it running. The exit
    code: 0 it succeeded (or was left running), 1 it failed, 130 cancelled by Ctrl-C."""
    target = f"workload/{namespace}/{name}"
    try:
        return 0 if _follow(client, namespace, name, kind) else EXIT_FAILED
    except KeyboardInterrupt:
        if detach:
            console.print(
                f"\ndetached: {target} goes on; follow it again with: "
                f"gpufleet logs -f {namespace}/{name}",
                markup=False,
            )
            return 0
    cancelled = client.delete_workload(namespace, name, kind)
    console.print(
        f"\nCtrl-C: {target} ({cancelled.kind}) {cancelled.state.value.lower()}; waiting for "
        "it to stop (Ctrl-C again: stop waiting)",
        markup=False,
    )
    try:
        _follow(client, namespace, name, kind, until_stopped=True)
    except KeyboardInterrupt:
        console.print(f"\nstopped waiting: {target} is being stopped", markup=False)
    return EXIT_INTERRUPTED


def _follow(
    client: ApiClient,
    namespace: str,
    name: str,
    kind: str | None,
    pod: str | None = None,
    attempt: int | None = None,
    until_stopped: bool = False,
) -> bool:
    """Print the run's output as it comes, on to the pod's next run unless ``attempt`` pins
    one, until the workload ends (``until_stopped``: and its run has stopped too, as a
    cancelled one does after its grace); whether it succeeded."""
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
        if chunk.finished and not (until_stopped and chunk.running):
            state = client.get_workload(namespace, name, kind).state
            return state.value == "Succeeded"
        pause(FOLLOW_EVERY_S)


def _write(text: str) -> None:
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
