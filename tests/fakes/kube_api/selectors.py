"""Label selectors (query strings and ``LabelSelector`` objects) and field selectors.

Label selector strings support ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``,
``k`` and ``!k``. Field selectors support ``=``, ``==`` and ``!=`` on ``metadata.name``,
``metadata.namespace`` and, per resource, the fields the real server indexes (for pods:
``spec.nodeName``, ``spec.schedulerName``, ``status.phase`` and a few more); any other field is
a 400, as on the real server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from tests.fakes.kube_api.errors import bad_request
from tests.fakes.kube_api.resources import ResourceKey

Matcher = Callable[[dict[str, Any]], bool]

_COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_FIELDS: dict[ResourceKey, frozenset[str]] = {
    ("", "pods"): frozenset(
        {
            "spec.nodeName",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.restartPolicy",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    ("", "nodes"): frozenset({"spec.unschedulable"}),
    ("", "events"): frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    ("events.k8s.io", "events"): frozenset(
        {"regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid", "reason"}
    ),
}

_SET_TERM = re.compile(r"^([^\s=!(),]+)\s+(in|notin)\s+\(([^()]*)\)$")
_EQ_TERM = re.compile(r"^([^\s=!(),]+)\s*(==|=|!=)\s*([^\s=!(),]*)$")
_KEY = re.compile(r"^(!?)\s*([^\s=!(),]+)$")


def _split_terms(selector: str) -> list[str]:
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    terms.append("".join(current).strip())
    return [t for t in terms if t]


def _labels(obj: dict[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


def _holds(labels: Mapping[str, str], key: str, op: str, values: frozenset[str]) -> bool:
    if op == "in":
        return labels.get(key) in values
    if op == "notin":
        return labels.get(key) not in values
    if op == "exists":
        return key in labels
    return key not in labels  # "!"


def parse_label_selector(selector: str | None) -> Matcher:
    """A predicate over objects for a ``labelSelector`` query value."""
    requirements: list[tuple[str, str, frozenset[str]]] = []
    for term in _split_terms(selector or ""):
        if m := _SET_TERM.match(term):
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            requirements.append((m.group(1), m.group(2), values))
        elif m := _EQ_TERM.match(term):
            key, op, value = m.groups()
            requirements.append((key, "notin" if op == "!=" else "in", frozenset({value})))
        elif m := _KEY.match(term):
            requirements.append((m.group(2), "!" if m.group(1) else "exists", frozenset()))
        else:
            raise bad_request(f"unable to parse requirement: {term!r}")

    def matches(obj: dict[str, Any]) -> bool:
        labels = _labels(obj)
        return all(_holds(labels, key, op, values) for key, op, values in requirements)

    return matches


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string form of a dotted field, as field selectors compare it (absent → ``""``)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):  # e.g. events' ``source`` is matched on source.component
        return str(value.get("component", ""))
    return str(value)


def parse_field_selector(selector: str | None, key: ResourceKey) -> Matcher:
    """A predicate over objects for a ``fieldSelector`` query value of resource ``key``."""
    allowed = _COMMON_FIELDS | _FIELDS.get(key, frozenset())
    checks: list[tuple[str, bool, str]] = []
    for term in _split_terms(selector or ""):
        m = re.match(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$", term)
        if not m:
            raise bad_request(f"invalid selector: {term!r}; can't understand {term!r}")
        path, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if path not in allowed:
            raise bad_request(f'field label not supported: "{path}"')
        checks.append((path, op == "!=", value))
    return lambda obj: all((field_value(obj, p) == v) != neg for p, neg, v in checks)


def match_label_selector_object(selector: dict[str, Any] | None, obj: dict[str, Any]) -> bool:
    """Whether a ``metav1.LabelSelector`` (matchLabels / matchExpressions) selects ``obj``.

    ``None`` selects nothing and ``{}`` selects everything, as for policy/v1 PDBs.
    """
    if selector is None:
        return False
    labels = _labels(obj)
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
