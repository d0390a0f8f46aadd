"""The files of ``submit -f`` and ``apply -f``: paths and directories expanded (as kubectl
``-f DIR``), each read within the manifest size limit, and ``submit -n``'s namespace put on
the objects that name none (one naming another is refused, as kubectl does).

Standard library and rich only at import: the manifest reader (YAML) is imported where a file
is read, so that a command that reads none starts without it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from gpufleet.cli.client import JSON_TYPE, YAML_TYPE
from gpufleet.cli.output import fail


def read_manifest(path: str) -> tuple[str, bytes, str]:
    """(what to call it, bytes, content type) of a -f argument; a file over the manifest size
    limit is refused before it is read, stdin after the limit and one byte."""
    from gpufleet.io.errors import InputError
    from gpufleet.io.manifests import read_limited

    try:
        if path == "-":
            name = "stdin"
            data = read_limited(typer.get_binary_stream("stdin"), name)
        else:
            name = path
            with Path(path).open("rb") as handle:
                data = read_limited(handle, name, os.fstat(handle.fileno()).st_size)
    except InputError as error:
        raise fail(escape(str(error))) from None
    except FileNotFoundError:
        raise fail(f"{path}: no such file") from None
    except IsADirectoryError:
        raise fail(f"{path}: is a directory (give its files)") from None
    except OSError as error:
        raise fail(f"{path}: cannot read ({error.strerror})") from None
    if not data.strip():
        raise fail(f"{name}: empty, nothing to submit")
    suffix = Path(path).suffix.lower()
    if suffix == ".json" or (suffix not in (".yaml", ".yml") and data.lstrip()[:1] in b"{["):
        return name, data, JSON_TYPE
    return name, data, YAML_TYPE


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Directories -> their *.yaml, *.yml and *.json files, sorted (as kubectl -f DIR)."""
    files: list[str] = []
    for path in paths:
        if path != "-" and Path(path).is_dir():
            found = sorted(
                p for p in Path(path).iterdir() if p.suffix.lower() in (".yaml", ".yml", ".json")
            )
            if not found:
                raise fail(f"{path}: no .yaml, .yml or .json files")
            files += [str(p) for p in found]
        else:
            files.append(path)
    return files


def in_namespace(name: str, data: bytes, namespace: str) -> bytes:
    """The objects of a file (``List`` items flattened) as one JSON list, each in
    ``namespace``: set where an object names none, refused where it names another."""
    from gpufleet.io.errors import InputError
    from gpufleet.io.manifests import decode_text, parse_manifests

    try:
        manifests = parse_manifests(decode_text(data, name), name, untrusted=True)
    except InputError as error:
        raise fail(escape(str(error))) from None
    objects: list[Any] = []
    for manifest in manifests:
        items = manifest.get("items") if manifest.get("kind") == "List" else [manifest]
        for item in items or []:
            metadata = item.get("metadata") if isinstance(item, dict) else None
            if isinstance(metadata, dict):
                named = metadata.get("namespace")
                if named and named != namespace:
                    raise fail(
                        escape(
                            f"{name}, {manifest.location}: the object's namespace {named!r} "
                            f"is not the one given with -n ({namespace!r}); pass -n {named} "
                            "or leave -n out"
                        )
                    )
                item = {**item, "metadata": {**metadata, "namespace": namespace}}
            objects.append(item)  # anything malformed: the server says what is wrong
    return json.dumps(objects).encode()
