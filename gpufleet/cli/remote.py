"""The commands that talk to a running control plane (``gpufleet serve``), with kubectl's habits.

``submit -f``, ``get workloads|queues|nodes``, ``describe workload|node``, ``explain``,
``delete workload``, ``top nodes``, ``whoami`` and ``login``. Each takes ``--server`` and
``--token`` (else the environment or the config file: :mod:`gpufleet.cli.remote_config`).

Workload names: ``NAMESPACE/NAME``, or ``NAME`` with ``-n NAMESPACE``; a kind may come first,
kubectl-style (``job/sweep``, ``research/job/sweep``) or as ``--kind Job``: names are unique
per kind and namespace, so a name that a Job and a PyTorchJob share needs one (the server says
which kinds use it). With no namespace, lists go to the server without one (it shows what the
token may see), and a single workload is looked up in the token's namespace when it has
exactly one, else by name among the visible workloads (two namespaces with the name: an error
asking for ``-n``).

Exit codes: 0 ok; 1 the server failed or refused (unreachable, 401, 403, 404, 409, 5xx);
2 bad input (flags, files, and the server's 400, 413 and 422). Errors are one line on stderr.
Rendering lives in :mod:`gpufleet.cli.remote_render` (functions of schema instances, tested
without a server); HTTP in :mod:`gpufleet.cli.client`.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from enum import StrEnum
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import httpx
import typer
from pydantic import BaseModel
from rich.console import RenderableType
from rich.markup import escape
from rich.text import Text

from gpufleet.api.schemas import (
    WorkloadState,
    WorkloadSummary,
)
from gpufleet.cli.client import (
    JSON_TYPE,
    ApiClient,
    ApiError,
    ServerUnreachableError,
    UnexpectedResponseError,
)
from gpufleet.cli.manifest_files import expand_paths, in_namespace, read_manifest
from gpufleet.cli.output import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    console,
    fail,
    note_paused,
    warn_skipped,
)
from gpufleet.cli.remote_config import (
    ConfigError,
    RemoteConfig,
    config_path,
    normalize_server,
    resolve,
    write_config,
)
from gpufleet.cli.remote_render import (
    Clock,
    Output,
    describe_explanation,
    describe_node,
    describe_queue,
    describe_workload,
    dump,
    field_table,
    nodes_table,
    priority_classes_table,
    queues_table,
    text_or_none,
    top_nodes,
    workloads_table,
)
from gpufleet.cli.tables import show
from gpufleet.io.errors import quoted
from gpufleet.io.names import NameRule, name_problem, rule_of
from gpufleet.service.submission_kinds import SOURCE as SUBMITTED_SOURCE
from gpufleet.service.submission_kinds import WORKLOAD_KINDS

P = ParamSpec("P")
R = TypeVar("R")

#: States a workload does not leave: deleting one in them deletes it (it is not cancelled).
FINISHED_STATES = frozenset(
    {WorkloadState.SUCCEEDED, WorkloadState.CANCELLED, WorkloadState.FAILED}
)
#: Server answers that mean the input was at fault; the rest are the server's refusals.
BAD_INPUT_STATUSES = frozenset({400, 413, 422})


class Resource(StrEnum):
    WORKLOADS = "workloads"
    QUEUES = "queues"
    NODES = "nodes"
    PRIORITY_CLASSES = "priorityclasses"


_RESOURCE_NAMES = {
    **dict.fromkeys(("workloads", "workload", "wl"), Resource.WORKLOADS),
    **dict.fromkeys(("queues", "queue", "q"), Resource.QUEUES),
    **dict.fromkeys(("nodes", "node", "no"), Resource.NODES),
    **dict.fromkeys(("priorityclasses", "priorityclass", "pc"), Resource.PRIORITY_CLASSES),
}

# -- connecting -----------------------------------------------------------------------------

HttpFactory = Callable[[RemoteConfig], httpx.Client]
_http_factory: HttpFactory | None = None


@contextmanager
def use_http(factory: HttpFactory) -> Iterator[None]:
    """Run the commands over HTTP clients from ``factory`` (in-process apps, fake servers)."""
    global _http_factory
    previous, _http_factory = _http_factory, factory
    try:
        yield
    finally:
        _http_factory = previous


def connect(server: str | None, token: str | None, ca_file: str | None = None) -> ApiClient:
    """A client of the server the flags, environment and config file name (trusting the CA
    in ``ca_file`` beyond theirs)."""
    config = resolve(server, token)
    http = _http_factory(config) if _http_factory else None
    return ApiClient(config.server, config.token, http=http, ca_file=ca_file or config.ca_file)


def api_error_message(error: ApiError, token_from: str | None = None) -> str:
    if error.status == 401:
        what = f"the token from {token_from} was refused" if token_from else "no token given"
        return f"{error} — {what}; give one with --token, GPUFLEET_TOKEN or `gpufleet login`"
    return str(error)


def remote_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn client and config failures into one line on stderr and the exit code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ConfigError as error:
            raise fail(escape(str(error)), EXIT_BAD_INPUT) from None
        except ApiError as error:
            token_from = None
            if error.status == 401:
                server, token = kwargs.get("server"), kwargs.get("token")
                with suppress(ConfigError):
                    token_from = resolve(text_or_none(server), text_or_none(token)).token_from
            code = EXIT_BAD_INPUT if error.status in BAD_INPUT_STATUSES else EXIT_FAILED
            raise fail(escape(api_error_message(error, token_from)), code) from None
        except (ServerUnreachableError, UnexpectedResponseError) as error:
            raise fail(escape(str(error)), EXIT_FAILED) from None

    return wrapper


#: The kinds of workloads, by the names the command line takes for them (any case).
WORKLOAD_KIND_NAMES = {kind.lower(): kind for kind in WORKLOAD_KINDS}


def checked_name(
    text: str | None, what: str, rule: NameRule = NameRule.SUBDOMAIN, kind: str | None = None
) -> str | None:
    """A name given on the command line, checked as Kubernetes checks it (a bad one is bad
    input, not a 404 from the server)."""
    if text is None:
        return None
    problem = name_problem(text, rule, kind)
    if problem is not None:
        raise fail(escape(f"{what} {quoted(text)}: {problem}"))
    return text


def _workload_kind(text: str) -> str:
    kind = WORKLOAD_KIND_NAMES.get(text.lower())
    if kind is None:
        expected = ", ".join(WORKLOAD_KINDS)
        raise fail(escape(f"unknown workload kind {quoted(text)} (expected one of {expected})"))
    return kind


def split_workload_name(
    text: str, namespace: str | None, kind: str | None = None
) -> tuple[str | None, str, str | None]:
    """``NAME``, ``NAMESPACE/NAME``, ``KIND/NAME`` or ``NAMESPACE/KIND/NAME`` (with -n and
    --kind) -> (namespace or None, name, kind or None); bad input raises. A first part that is
    a workload kind (job, pytorchjob...) is the kind: give a namespace so named with -n."""
    parts = text.split("/")
    if len(parts) > 3 or not all(parts):
        raise fail(
            escape(
                f"{quoted(text)}: expected NAME, NAMESPACE/NAME, KIND/NAME or NAMESPACE/KIND/NAME"
            )
        )
    found_namespace, found_kind, name = None, None, parts[-1]
    if len(parts) == 3:
        found_namespace, found_kind = parts[0], _workload_kind(parts[1])
    elif len(parts) == 2 and parts[0].lower() in WORKLOAD_KIND_NAMES:
        found_kind = WORKLOAD_KIND_NAMES[parts[0].lower()]
    elif len(parts) == 2:
        found_namespace = parts[0]
    checked_name(namespace, "namespace", NameRule.LABEL)
    checked_name(found_namespace, "namespace", NameRule.LABEL)
    checked_name(name, "workload name")
    if namespace is not None and found_namespace not in (None, namespace):
        raise fail(f"{text!r} names namespace {found_namespace!r}, but -n says {namespace!r}")
    given_kind = None if kind is None else _workload_kind(kind)
    if given_kind is not None and found_kind not in (None, given_kind):
        raise fail(f"{text!r} names kind {found_kind}, but --kind says {given_kind}")
    return found_namespace or namespace, name, found_kind or given_kind


def resolve_workload(
    client: ApiClient, text: str, namespace: str | None, kind: str | None = None
) -> tuple[str, str, str | None]:
    """(namespace, name, kind or None) of a workload named on the command line (see the
    module docstring; the server refuses a name that several kinds use without a kind)."""
    found, name, kind = split_workload_name(text, namespace, kind)
    if found is not None:
        return found, name, kind
    own = client.whoami().namespaces
    if len(own) == 1:
        return own[0], name, kind
    matches = sorted(
        {
            w.namespace
            for w in client.list_workloads()
            if w.name == name and (kind is None or w.kind == kind)
        }
    )
    if len(matches) > 1:
        choices = ", ".join(f"{ns}/{name}" for ns in matches)
        raise fail(f"workload {name!r} is in several namespaces ({choices}); give -n NAMESPACE")
    if not matches:
        raise fail(f"workload {name!r} not found in any namespace you can see", EXIT_FAILED)
    return matches[0], name, kind


def parse_resource(text: str, allowed: Sequence[Resource] = tuple(Resource)) -> Resource:
    resource = _RESOURCE_NAMES.get(text.lower())
    if resource is None or resource not in allowed:
        names = [r.value for r in allowed]
        expected = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
        raise fail(f"unknown resource type {text!r} (expected {expected})")
    return resource


# -- options --------------------------------------------------------------------------------

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="control plane address (else GPUFLEET_SERVER, the config file, http://127.0.0.1:8080)",
        show_default=False,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token", help="API token (else GPUFLEET_TOKEN, the config file)", show_default=False
    ),
]
NamespaceOption = Annotated[
    str | None,
    typer.Option(
        "--namespace", "-n", help="namespace (default: what your token sees)", show_default=False
    ),
]
KindOption = Annotated[
    str | None,
    typer.Option(
        "--kind",
        help="the workload's kind (Job, PyTorchJob...), where several kinds use its name",
        show_default=False,
    ),
]
OutputOption = Annotated[
    Output | None,
    typer.Option("--output", "-o", help="wide: more columns; json or yaml: the API's objects"),
]


# -- commands -------------------------------------------------------------------------------


@remote_errors
def submit(
    filename: Annotated[
        list[str],
        typer.Option(
            "--filename",
            "-f",
            help="YAML or JSON manifests: a file, a directory, or - for stdin (repeatable)",
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option(help="have the server check them, keeping nothing")
    ] = False,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="put the objects that name no namespace in this one (one naming another is "
            "refused); default: your token's",
            show_default=False,
        ),
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Submit workloads (Pod, Job, Deployment, StatefulSet, ReplicaSet, PyTorchJob, MPIJob,
    RayCluster, RayJob, PodGroup) from YAML or JSON.

    Each file goes in one request: its documents are all accepted or none; objects of kinds
    with no scheduling meaning (ConfigMap, Service...) are skipped, and said so once. A Job of
    parallelism 0 is valid and runs no pods: it is said as paused, not an error. Example:
    gpufleet submit -f examples/pods/one-gpu.yaml
    """
    # The readers (YAML and the manifests' checks) only where files are read.
    from gpufleet.io.kinds import Skipped
    from gpufleet.service.request_bodies import nothing_to_submit

    checked_name(namespace, "namespace", NameRule.LABEL)
    manifests = [read_manifest(path) for path in expand_paths(filename)]
    if namespace is not None:
        manifests = [(n, in_namespace(n, data, namespace), JSON_TYPE) for n, data, _ in manifests]
    skipped = Skipped()
    sent = 0
    with connect(server, token) as client:
        for name, data, content_type in manifests:
            set_aside = nothing_to_submit(data, content_type) if len(manifests) > 1 else None
            if set_aside is not None:  # a file of ConfigMaps beside the workloads: not sent
                skipped.counts.update(set_aside.counts)
                continue
            sent += 1
            try:
                result = client.submit(data, content_type, dry_run=dry_run)
            except ApiError as error:
                raise naming_file(error, name) from None
            verdict = "valid (dry run)" if dry_run else "accepted"
            for w in result.accepted:
                console.print(
                    f"workload/{w.namespace}/{w.name} {verdict}: {w.kind}, {w.pods} pod(s), "
                    f"GPU request {w.gpu_request}, queue {w.queue}, {w.state.value}",
                    markup=False,
                )
            note_paused(result.paused)
            skipped.counts.update(result.skipped)
            if not result.accepted and not result.paused:
                console.print(f"{name}: no workloads in it", markup=False)
    if not sent:
        raise fail(escape(f"no workloads in {', '.join(filename)}: {skipped.note()}"))
    warn_skipped(skipped)


def naming_file(error: ApiError, name: str) -> ApiError:
    """The server's refusal of a file's request with the file named where the server, which
    sees only a body, names the request: ``pod.yaml:document 2 (line 9), Pod ml/x: ...``."""
    prefix = f"{SUBMITTED_SOURCE}:"
    if error.status != 422 or not error.body.message.startswith(prefix):
        return error
    body = error.body.model_copy(
        update={"message": name + error.body.message[len(SUBMITTED_SOURCE) :]}
    )
    return ApiError(error.status, body, error.method, error.url)


@remote_errors
def get(
    resource: Annotated[str, typer.Argument(help="workloads, queues, nodes or priorityclasses")],
    name: Annotated[str | None, typer.Argument(help="one of them (NAME or NAMESPACE/NAME)")] = None,
    output: OutputOption = None,
    namespace: NamespaceOption = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="every namespace your token sees")
    ] = False,
    state: Annotated[
        WorkloadState | None,
        typer.Option(help="workloads in this state only", case_sensitive=False),
    ] = None,
    queue: Annotated[str | None, typer.Option(help="workloads of this queue only")] = None,
    workload_kind: KindOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """List workloads, queues, nodes or priorityclasses, or show one. Example: gpufleet get wl"""
    kind = parse_resource(resource)
    if all_namespaces and (namespace or name):
        raise fail("-A/--all-namespaces lists everything; it takes neither -n nor a NAME")
    checked_name(namespace, "namespace", NameRule.LABEL)
    checked_name(queue, "queue", rule_of("Queue"), "Queue")
    if kind is Resource.QUEUES:
        checked_name(name, "queue", rule_of("Queue"), "Queue")
    elif kind is Resource.NODES:
        checked_name(name, "node")
    elif kind is Resource.PRIORITY_CLASSES:
        checked_name(name, "priority class", rule_of("PriorityClass"), "PriorityClass")
    with connect(server, token) as client:
        if kind is Resource.WORKLOADS:
            _get_workloads(
                client, name, output, namespace, all_namespaces, state, queue, workload_kind
            )
        elif kind is Resource.QUEUES:
            queues = [client.get_queue(name)] if name else client.list_queues()
            _show(queues, output, lambda: queues_table(queues, wide=output is Output.WIDE), name)
        elif kind is Resource.NODES:
            nodes = [client.get_node(name)] if name else client.list_nodes()
            _show(nodes, output, lambda: nodes_table(nodes, wide=output is Output.WIDE), name)
        else:
            classes = [c for c in client.list_priority_classes() if name in (None, c.name)]
            if name and not classes:
                raise fail(f"priority class {name!r} not found", EXIT_FAILED)
            _show(classes, output, lambda: priority_classes_table(classes), name)


def _get_workloads(
    client: ApiClient,
    name: str | None,
    output: Output | None,
    namespace: str | None,
    all_namespaces: bool,
    state: WorkloadState | None,
    queue: str | None,
    kind: str | None = None,
) -> None:
    workloads: Sequence[WorkloadSummary]
    if name:
        workloads = [client.get_workload(*resolve_workload(client, name, namespace, kind))]
    else:
        workloads = client.list_workloads(state=state, queue=queue, namespace=namespace)
    if output in (Output.JSON, Output.YAML):
        _show(workloads, output, lambda: Text(""), name)
        return
    clock = Clock.of(client.cluster())
    namespaces = all_namespaces or len({w.namespace for w in workloads}) > 1
    if not workloads:
        where = f" in namespace {namespace}" if namespace else ""
        console.print(f"No workloads found{where}.", markup=False)
        return
    show(workloads_table(workloads, clock, wide=output is Output.WIDE, namespaces=namespaces))


def _show(
    models: Sequence[BaseModel],
    output: Output | None,
    table: Callable[[], RenderableType],
    name: str | None,
) -> None:
    if output in (Output.JSON, Output.YAML):
        assert output is not None
        sys.stdout.write(dump(models[0] if name else models, output))
    else:
        show(table())


@remote_errors
def describe(
    resource: Annotated[str, typer.Argument(help="workload, node or queue")],
    name: Annotated[str, typer.Argument(help="NAME, or [NAMESPACE/][KIND/]NAME for a workload")],
    namespace: NamespaceOption = None,
    workload_kind: KindOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Show one workload in full: placement down to GPU indices per pod, timeline, events (or
    one node, or one queue with its decayed usage when fair sharing over time is on)."""
    kind = parse_resource(resource, (Resource.WORKLOADS, Resource.NODES, Resource.QUEUES))
    with connect(server, token) as client:
        if kind is Resource.NODES:
            show(describe_node(client.get_node(str(checked_name(name, "node")))))
            return
        if kind is Resource.QUEUES:
            queue = str(checked_name(name, "queue", rule_of("Queue"), "Queue"))
            show(describe_queue(client.get_queue(queue)))
            return
        key = resolve_workload(client, name, namespace, workload_kind)
        detail = client.get_workload(*key)
        explanation = client.explain(*key) if detail.state is WorkloadState.PENDING else None
        show(describe_workload(detail, Clock.of(client.cluster()), explanation))


@remote_errors
def explain(
    name: Annotated[str, typer.Argument(help="[NAMESPACE/][KIND/]NAME of a workload")],
    namespace: NamespaceOption = None,
    workload_kind: KindOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Why a workload waits: its place in its queue, what it waits for, an estimated start."""
    with connect(server, token) as client:
        explanation = client.explain(*resolve_workload(client, name, namespace, workload_kind))
        show(describe_explanation(explanation, Clock.of(client.cluster())))


@remote_errors
def delete(
    resource: Annotated[str, typer.Argument(help="workload")],
    names: Annotated[list[str], typer.Argument(help="[NAMESPACE/][KIND/]NAME (one or more)")],
    namespace: NamespaceOption = None,
    workload_kind: KindOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Cancel workloads (pods stop, GPUs freed); delete finished ones. Example: gpufleet delete wl x

    A waiting or running workload is cancelled and stays listed; deleting it again, or deleting
    a finished one, removes it and frees its name."""
    parse_resource(resource, (Resource.WORKLOADS,))
    with connect(server, token) as client:
        for name in names:
            found = resolve_workload(client, name, namespace, workload_kind)
            # The server answers both with the workload as it was left: only what it was before
            # tells a cancel from a delete.
            finished = client.get_workload(*found).state in FINISHED_STATES
            cancelled = client.delete_workload(*found)
            _changed(cancelled, "deleted" if finished else cancelled.state.value.lower())


@remote_errors
def ungate(
    name: Annotated[str, typer.Argument(help="[NAMESPACE/][KIND/]NAME of a workload")],
    gate: Annotated[
        list[str] | None,
        typer.Option("--gate", help="a scheduling gate to remove (repeatable; default: all)"),
    ] = None,
    namespace: NamespaceOption = None,
    workload_kind: KindOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Remove scheduling gates (spec.schedulingGates) from a waiting workload's pods: once none
    is left it joins its queue. Example: gpufleet ungate train --gate example.com/quota"""
    with connect(server, token) as client:
        found = resolve_workload(client, name, namespace, workload_kind)
        changed = client.ungate(*found, gates=gate or ())
        _changed(changed, "ungated")


@remote_errors
def resume(
    name: Annotated[str, typer.Argument(help="[NAMESPACE/][KIND/]NAME of a Job")],
    namespace: NamespaceOption = None,
    workload_kind: KindOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Resume a suspended Job (spec.suspend): it joins its queue. Example: gpufleet resume train"""
    with connect(server, token) as client:
        _changed(
            client.resume(*resolve_workload(client, name, namespace, workload_kind)), "resumed"
        )


@remote_errors
def suspend(
    name: Annotated[str, typer.Argument(help="[NAMESPACE/][KIND/]NAME of a Job")],
    namespace: NamespaceOption = None,
    workload_kind: KindOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Suspend a waiting Job: it leaves its queue until resumed. Example: gpufleet suspend train"""
    with connect(server, token) as client:
        found = resolve_workload(client, name, namespace, workload_kind)
        _changed(client.suspend(*found), "suspended")


def _changed(summary: WorkloadSummary, what: str) -> None:
    console.print(
        f"workload/{summary.namespace}/{summary.name} ({summary.kind}) {what}", markup=False
    )


@remote_errors
def top(
    resource: Annotated[str, typer.Argument(help="nodes")],
    gpus: Annotated[
        bool, typer.Option("--gpus", help="a row per GPU (MIG slices, shares) under each node")
    ] = False,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """GPU allocation, one line per node (--gpus: per GPU too). Example: gpufleet top nodes"""
    parse_resource(resource, (Resource.NODES,))
    with connect(server, token) as client:
        show(top_nodes(client.list_nodes(), devices=gpus))


@remote_errors
def whoami(server: ServerOption = None, token: TokenOption = None) -> None:
    """The tenant, role, queues and namespaces of your token, and the server it was checked at."""
    with connect(server, token) as client:
        me = client.whoami()
        show(
            field_table(
                [
                    ("Server", client.server),
                    ("Tenant", me.tenant),
                    ("Role", me.role.value),
                    ("Queues", ", ".join(me.queues) or "any"),
                    ("Namespaces", ", ".join(me.namespaces) or "any"),
                ]
            )
        )


@remote_errors
def login(
    server: Annotated[str, typer.Option("--server", help="control plane address")],
    token: Annotated[str, typer.Option("--token", help="API token (gpufleet admin create-token)")],
    verify: Annotated[bool, typer.Option(help="check the token with the server first")] = True,
    ca_file: Annotated[
        Path | None,
        typer.Option(
            "--ca-file",
            help="for an https:// server whose certificate no public authority signed: the "
            "PEM file of the CA that did (else GPUFLEET_CA_FILE)",
        ),
    ] = None,
) -> None:
    """Save the server, token and CA file in the config file (mode 0600) for the other
    commands.

    The file is $GPUFLEET_CONFIG, else ~/.config/gpufleet/config.yaml.
    """
    address = normalize_server(server, "--server")
    path = config_path(os.environ)
    ca = None
    if ca_file is not None:
        if not ca_file.is_file():
            raise fail(f"--ca-file {ca_file}: no such file")
        ca = str(ca_file.resolve())
    who = ""
    if verify:
        with connect(address, token, ca) as client:
            me = client.whoami()
        who = f" as {me.tenant} ({me.role.value})"
    write_config(path, address, token, ca)
    console.print(f"logged in to {address}{who}; saved to {path}", markup=False)
