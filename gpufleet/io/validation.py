"""Pydantic validation errors as :class:`~gpufleet.io.errors.InputError`.

Owns the translation of the first problem of a :class:`pydantic.ValidationError` into our one
error type: the field path in the file's own spelling (``spec.pools[0].mig.layout``, aliases
kept), the object it concerns (``ClusterSpec example, pool h100``), and a message saying what was
expected and what was found (an unknown field says which was meant, or lists the allowed
ones). It does not define formats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gpufleet.io.errors import InputError
from gpufleet.io.fields import unknown_field
from gpufleet.io.manifests import describe


def validation_error(
    error: ValidationError,
    data: Mapping[str, Any],
    source: str,
    location: str | None,
    model: type[BaseModel],
) -> InputError:
    """One InputError for the first problem of ``error`` (with a count of the others)."""
    details = error.errors()
    first = details[0]
    message = _message(first, model)
    if len(details) > 1:
        more = len(details) - 1
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return InputError(
        source, message, _where(data, first["loc"], location), _path(first["loc"]) or None
    )


#: Fields that are maps: their keys are written ``labels[team]``.
_MAP_FIELDS = frozenset({"labels", "extendedResources"})


def _path(loc: Sequence[int | str]) -> str:
    path = ""
    previous: int | str | None = None
    for part in loc:
        if part == "[key]":  # pydantic's mark of an error in a map's key, not its value
            continue
        keyed = previous in _MAP_FIELDS
        if keyed or isinstance(part, int) or "/" in part or "." in part or not part:
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
        previous = part
    return path


def _where(data: Mapping[str, Any], loc: Sequence[int | str], location: str | None) -> str | None:
    parts = [] if location is None else [location]
    kind = data.get("kind")
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if isinstance(kind, str):
        parts.append(f"{kind} {name}" if isinstance(name, str) else kind)
    if len(loc) >= 3 and loc[0] == "spec" and isinstance(loc[2], int):
        spec = data.get("spec")
        items = spec.get(loc[1]) if isinstance(spec, dict) else None
        if isinstance(items, list) and loc[2] < len(items) and isinstance(items[loc[2]], dict):
            item_name = items[loc[2]].get("name")
            if isinstance(item_name, str):
                parts.append(f"{str(loc[1]).removesuffix('s')} {item_name}")
    return ", ".join(parts) or None


def _message(detail: ErrorDetails, model: type[BaseModel]) -> str:
    kind = detail["type"]
    if kind == "missing":
        return "required, but missing"
    if kind == "extra_forbidden":
        parent = _model_at(model, detail["loc"][:-1])
        if parent is None:
            return "unknown field"
        return unknown_field(str(detail["loc"][-1]), _names(parent))
    if kind == "value_error":
        return detail["msg"].removeprefix("Value error, ")
    return f"{detail['msg']}, got {describe(detail['input'])}"


def _names(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def _model_at(model: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    current = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = next((f for n, f in current.model_fields.items() if (f.alias or n) == part), None)
        found = None if field is None else _find_model(field.annotation)
        if found is None:
            return None
        current = found
    return current


def _find_model(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _find_model(arg)
        if found is not None:
            return found
    return None
