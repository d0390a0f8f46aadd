"""PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch, JSON patch (RFC 6902).

Strategic merge patch is merge patch except that lists at known paths merge element-wise by a
merge key (``status.conditions`` by ``type``, ``spec.containers`` by ``name``,
``metadata.ownerReferences`` by ``uid``, ...), ``metadata.finalizers`` merges as a set, and an
element ``{"<key>": ..., "$patch": "delete"}`` removes that element. Other ``$`` directives are
dropped. The real server refuses strategic merge patch for custom resources (415); so does
:func:`apply_patch`.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.fakes.kube_api.errors import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# Paths (object keys only, list indices skipped) of lists merged by a key.
_MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "ownerReferences"): "uid",
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "ephemeralContainers"): "name",
    ("spec", "volumes"): "name",
    ("spec", "containers", "env"): "name",
    ("spec", "initContainers", "env"): "name",
    ("spec", "containers", "ports"): "containerPort",
    ("spec", "containers", "volumeMounts"): "mountPath",
    ("spec", "initContainers", "volumeMounts"): "mountPath",
    ("spec", "imagePullSecrets"): "name",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}
_SET_LISTS = frozenset({("metadata", "finalizers")})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Merge patch with keyed list merging at the known built-in paths."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        sub = (*path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and sub in _MERGE_KEYS:
            result[key] = _merge_keyed(result.get(key), value, _MERGE_KEYS[sub], sub)
        elif isinstance(value, list) and sub in _SET_LISTS:
            old = [v for v in result.get(key) or [] if v not in value]
            result[key] = old + copy.deepcopy(value)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, sub)
    return result


def _merge_keyed(target: Any, patch: list[Any], merge_key: str, path: tuple[str, ...]) -> Any:
    merged = [copy.deepcopy(x) for x in target] if isinstance(target, list) else []
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise bad_request(f"map: {item!r} does not contain declared merge key: {merge_key}")
        index = next(
            (
                i
                for i, x in enumerate(merged)
                if isinstance(x, dict) and x.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
        elif index is None:
            merged.append(strategic_merge_patch({}, item, path))
        else:
            merged[index] = strategic_merge_patch(merged[index], item, path)
    return merged


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _invalid(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _invalid(message: str) -> ApiError:
    return ApiError(422, message, "Invalid")


def _parent(doc: Any, tokens: list[str]) -> tuple[Any, str]:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise _invalid("missing value")
    return node, tokens[-1]


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    node, last = _parent(doc, tokens)
    if isinstance(node, dict) and last in node:
        return node[last]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node[int(last)]
    raise _invalid("missing value")


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise _invalid("cannot remove the whole document")
    node, last = _parent(doc, tokens)
    if isinstance(node, dict) and last in node:
        return node.pop(last)
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node.pop(int(last))
    raise _invalid("missing value")


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    node, last = _parent(doc, tokens)
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list):
        if last == "-":
            node.append(value)
        elif last.isdigit() and int(last) <= len(node):
            node.insert(int(last), value)
        else:
            raise _invalid("invalid index")
    else:
        raise _invalid("missing value")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy, test; a failed ``test`` is a 422."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid json patch operation: {op!r}")
        kind, tokens = op["op"], _pointer(op["path"])
        if kind == "add":
            doc = _add(doc, tokens, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, tokens)
        elif kind == "replace":
            _get(doc, tokens)
            if not tokens:
                doc = copy.deepcopy(op.get("value"))
            else:
                _remove(doc, tokens)
                doc = _add(doc, tokens, copy.deepcopy(op.get("value")))
        elif kind == "move":
            value = _remove(doc, _pointer(op["from"]))
            doc = _add(doc, tokens, value)
        elif kind == "copy":
            doc = _add(doc, tokens, copy.deepcopy(_get(doc, _pointer(op["from"]))))
        elif kind == "test":
            if _get(doc, tokens) != op.get("value"):
                raise _invalid("testing value failed")
        else:
            raise bad_request(f"unknown json patch operation {kind!r}")
    return doc


def apply_patch(target: dict[str, Any], body: Any, content_type: str, custom: bool) -> Any:
    """Apply a PATCH body of ``content_type`` to a copy of ``target``."""
    media = content_type.split(";")[0].strip().lower()
    if media == MERGE_PATCH:
        return merge_patch(target, body)
    if media == STRATEGIC_MERGE_PATCH:
        if custom:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {JSON_PATCH}, {MERGE_PATCH}, application/apply-patch+yaml",
                "UnsupportedMediaType",
            )
        return strategic_merge_patch(target, body)
    if media == JSON_PATCH:
        return json_patch(target, body)
    raise ApiError(415, f"unsupported patch content type {content_type!r}", "UnsupportedMediaType")
