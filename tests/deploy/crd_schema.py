"""Checks of CustomResourceDefinitions as the API server makes them, without an API server.

* :func:`structural_errors`: the rules of a structural schema (apiextensions.k8s.io/v1 refuses
  a CRD whose openAPIV3Schema breaks them): a type on every node except int-or-string and
  preserve-unknown-fields nodes, items on arrays, properties and additionalProperties not
  together, no $ref or other non-structural keywords, metadata left to the server.
* :func:`json_schema`: the OpenAPI v3 schema as a JSON Schema that the ``jsonschema`` library
  validates custom objects with, as the server would with strict field validation (an unknown
  field is an error, as ``kubectl apply`` reports it by default).
* :func:`jsonpath_fields` / :func:`resolve`: a printer column's JSONPath split as client-go's
  ``util/jsonpath`` splits it (``\\.`` escapes a dot; ``/`` needs no escape), and looked up
  in the schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCALAR_TYPES = ("string", "integer", "number", "boolean")
TYPES = ("object", "array", *SCALAR_TYPES)
#: Keywords that a structural schema must not use (or that Kubernetes does not support).
FORBIDDEN = frozenset(
    {
        "$ref",
        "$schema",
        "definitions",
        "dependencies",
        "patternProperties",
        "additionalItems",
        "uniqueItems",
        "id",
        "nullable",  # allowed by Kubernetes, but gpufleet's readers do not take null
    }
)
INT_OR_STRING = "x-kubernetes-int-or-string"
PRESERVE_UNKNOWN = "x-kubernetes-preserve-unknown-fields"
#: metadata fields a printer column may name (the server fills them in).
METADATA_FIELDS = {"name": "string", "namespace": "string", "creationTimestamp": "date"}


def structural_errors(schema: Mapping[str, Any], path: str = "") -> list[str]:
    """What keeps ``schema`` (an openAPIV3Schema, at ``path``) from being structural."""
    errors: list[str] = []
    where = path or "<root>"
    for key in FORBIDDEN & schema.keys():
        errors.append(f"{where}: {key} is not allowed in a structural schema")
    typed = schema.get("type")
    if schema.get(INT_OR_STRING) is True:
        if typed is not None:
            errors.append(f"{where}: an int-or-string node must not have a type")
    elif typed is None and schema.get(PRESERVE_UNKNOWN) is not True:
        errors.append(f"{where}: needs a type")
    elif typed is not None and typed not in TYPES:
        errors.append(f"{where}: unknown type {typed!r}")
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    if properties is not None and additional is not None:
        errors.append(f"{where}: properties and additionalProperties are mutually exclusive")
    if (properties is not None or additional is not None) and typed != "object":
        errors.append(f"{where}: properties need type object")
    if typed == "array" and not isinstance(schema.get("items"), Mapping):
        errors.append(f"{where}: an array needs items")
    if "items" in schema and typed != "array":
        errors.append(f"{where}: items need type array")
    if isinstance(additional, bool):
        errors.append(f"{where}: additionalProperties must be a schema, not {additional}")
    for name in schema.get("required", []):
        if properties is None or name not in properties:
            errors.append(f"{where}: required field {name!r} is not a property")
    for value in schema.get("enum", []):
        if typed == "string" and not isinstance(value, str):
            errors.append(f"{where}: enum value {value!r} is not a string")
    if schema.get("x-kubernetes-list-type") == "map":
        item = schema.get("items", {})
        for key in schema.get("x-kubernetes-list-map-keys", []):
            if key not in item.get("required", []) and "default" not in item.get(
                "properties", {}
            ).get(key, {}):
                errors.append(f"{where}: list-map key {key!r} must be required or defaulted")
    for name, child in (properties or {}).items():
        errors.extend(structural_errors(child, f"{path}.{name}"))
    if isinstance(additional, Mapping):
        errors.extend(structural_errors(additional, f"{path}.*"))
    if isinstance(schema.get("items"), Mapping):
        errors.extend(structural_errors(schema["items"], f"{path}[*]"))
    if not path:
        errors.extend(_root_errors(schema))
    return errors


def _root_errors(schema: Mapping[str, Any]) -> list[str]:
    errors: list[str] = []
    if schema.get("type") != "object":
        errors.append("<root>: must be of type object")
    properties = schema.get("properties", {})
    for name in ("apiVersion", "kind"):
        if name in properties and properties[name].get("type") != "string":
            errors.append(f"<root>: {name} must be a string")
    metadata = properties.get("metadata")
    if metadata is not None:
        if metadata.get("type") != "object":
            errors.append("metadata: must be of type object")
        extra = set(metadata.get("properties", {})) - {"name", "generateName"}
        if extra:
            errors.append(f"metadata: only name and generateName may be restricted, not {extra}")
    return errors


def json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The openAPIV3Schema as JSON Schema: int-or-string as anyOf, unknown fields refused."""
    converted: dict[str, Any] = {
        key: value
        for key, value in schema.items()
        if not key.startswith("x-kubernetes-")
        and key not in ("properties", "additionalProperties", "items", "format")
    }
    if schema.get(INT_OR_STRING) is True:
        converted["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in schema:
        converted["properties"] = {
            name: json_schema(child) for name, child in schema["properties"].items()
        }
        if schema.get(PRESERVE_UNKNOWN) is not True:
            converted["additionalProperties"] = False
    if isinstance(schema.get("additionalProperties"), Mapping):
        converted["additionalProperties"] = json_schema(schema["additionalProperties"])
    if isinstance(schema.get("items"), Mapping):
        converted["items"] = json_schema(schema["items"])
    return converted


def jsonpath_fields(path: str) -> list[str]:
    """The field names of a simple JSONPath (``.a.b\\.c/d`` -> ``a``, ``b.c/d``), as client-go
    reads them: a backslash escapes the next character, an unescaped dot separates fields."""
    if not path.startswith("."):
        raise ValueError(f"a printer column path must start with '.', got {path!r}")
    fields: list[str] = []
    current = ""
    escaped = False
    for char in path[1:]:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ".":
            fields.append(current)
            current = ""
        elif char in "[]{}$@, \t\n":
            raise ValueError(f"{path!r}: {char!r} is not part of a simple field path")
        else:
            current += char
    fields.append(current)
    if any(not name for name in fields):
        raise ValueError(f"{path!r}: empty field name")
    return fields


def resolve(schema: Mapping[str, Any], path: str) -> str:
    """The type a printer column's path points at in ``schema`` ('int-or-string' for those);
    ValueError when the path names no field the schema defines."""
    fields = jsonpath_fields(path)
    if fields[0] == "metadata":
        if len(fields) != 2 or fields[1] not in METADATA_FIELDS:
            raise ValueError(f"{path!r}: only metadata.{'/'.join(METADATA_FIELDS)} are known")
        return METADATA_FIELDS[fields[1]]
    node: Mapping[str, Any] = schema
    for i, name in enumerate(fields):
        properties = node.get("properties", {})
        if name in properties:
            node = properties[name]
        elif isinstance(node.get("additionalProperties"), Mapping):
            node = node["additionalProperties"]
        else:
            so_far = ".".join(fields[: i + 1])
            raise ValueError(f"{path!r}: the schema defines no field {so_far!r}")
    if node.get(INT_OR_STRING) is True:
        return "int-or-string"
    return str(node.get("type"))
