"""``gpufleet apply -f``: create or replace Queues and PriorityClasses on a running control plane.

An admin's change of the cluster's policy without curl or a restart of ``serve --scenario``:
each object of the files (YAML or JSON; several documents, or a ``List``) goes to ``PUT
/api/v1/queues`` or ``/api/v1/priorityclasses``, in order, and the server checks it against
the rest (a queue under a missing parent, a cycle...) before anything changes. Workloads are
submitted (``gpufleet submit -f``), not applied. Says ``queue/NAME created`` or
``configured`` (it existed), as kubectl does. Errors and exit codes as the other remote
commands (:mod:`gpufleet.cli.remote`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from gpufleet.cli.client import ApiClient
from gpufleet.cli.manifest_files import expand_paths, read_manifest
from gpufleet.cli.output import console, fail
from gpufleet.cli.remote import ServerOption, TokenOption, connect, remote_errors

#: The kinds apply takes, and what each is called on the command line.
APPLIED = {"Queue": "queue", "PriorityClass": "priorityclass"}


def objects_of(name: str, data: bytes) -> list[dict[str, Any]]:
    """Every object of a file's bytes (``List`` items flattened); an error names the file and
    the document at fault."""
    # The manifest reader only where files are read (YAML; JSON is YAML too).
    from gpufleet.io.errors import InputError
    from gpufleet.io.manifests import decode_text, parse_manifests

    try:
        manifests = parse_manifests(decode_text(data, name), name, untrusted=True)
    except InputError as error:
        raise fail(escape(str(error))) from None
    found: list[dict[str, Any]] = []
    for manifest in manifests:
        items = manifest.get("items") if manifest.get("kind") == "List" else [manifest]
        for item in items or []:
            kind = item.get("kind") if isinstance(item, dict) else None
            if kind not in APPLIED:
                hint = " (submit workloads with gpufleet submit -f)" if kind else ""
                raise fail(
                    escape(
                        f"{name}, {manifest.location}: apply takes Queue and PriorityClass "
                        f"objects, got {kind or 'no kind'}{hint}"
                    )
                )
            found.append(dict(item))
    return found


def _existing(client: ApiClient, kind: str) -> set[str]:
    if kind == "Queue":
        return {q.name for q in client.list_queues()}
    return {c.name for c in client.list_priority_classes()}


@remote_errors
def apply(
    filename: Annotated[
        list[str],
        typer.Option(
            "--filename",
            "-f",
            help="YAML or JSON of Queues and PriorityClasses: a file, a directory, or - for "
            "stdin (repeatable)",
        ),
    ],
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Create or replace Queues and PriorityClasses (admin). Example: gpufleet apply -f q.yaml"""
    objects = [
        obj
        for name, data, _ in (read_manifest(path) for path in expand_paths(filename))
        for obj in objects_of(name, data)
    ]
    with connect(server, token) as client:
        existing = {kind: _existing(client, kind) for kind in {o["kind"] for o in objects}}
        for obj in objects:
            kind = obj["kind"]
            if kind == "Queue":
                applied = client.put_queue(obj).name
            else:
                applied = client.put_priority_class(obj).name
            verdict = "configured" if applied in existing[kind] else "created"
            existing[kind].add(applied)
            console.print(f"{APPLIED[kind]}/{applied} {verdict}", markup=False)
