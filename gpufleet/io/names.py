"""Kubernetes' rules for names, label keys and label values: the one place gpufleet checks them.

The rules are apimachinery's (``k8s.io/apimachinery/pkg/util/validation``):

* a DNS-1123 *subdomain* (most object names: Pod, Deployment, Node, PriorityClass...): at most
  253 characters, lowercase letters, digits, ``-`` and ``.``, starting and ending with a letter
  or digit;
* a DNS-1123 *label* (namespaces): at most 63 characters, lowercase letters, digits and ``-``,
  starting and ending with a letter or digit;
* a *label value*: empty, or at most 63 letters (either case), digits, ``-``, ``_`` and ``.``,
  starting and ending with a letter or digit;
* a *port name* (an IANA service name): at most 15 lowercase letters, digits and ``-``, at
  least one letter, not starting or ending with ``-`` and without ``--``;
* a *label key* (a qualified name): an optional DNS-1123 subdomain prefix and ``/``, then a name
  of at most 63 characters of the label-value alphabet, starting and ending alphanumeric.

A name that also becomes a label value (a Job's, in its pods' ``job-name`` label; a Queue's, in
``gpufleet.dev/queue``; a PyTorchJob's, a PodGroup's...) must be both: a subdomain of at most 63
characters (:data:`LABEL_VALUE_NAMES`). Each check returns what is wrong (``None`` when
nothing is), worded for an error that goes on ``; got 'x'``; callers say where. The checks are
cached: the same keys and values come back on every pod. Nothing here reads files.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum

from gpufleet.io.errors import quoted

SUBDOMAIN_MAX = 253
LABEL_MAX = 63
#: A label value's, and the name part of a label key's, most characters.
LABEL_VALUE_MAX = 63

_LABEL_FORMAT = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(_LABEL_FORMAT)
DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL_FORMAT}(?:\.{_LABEL_FORMAT})*")
QUALIFIED_NAME = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


@dataclass(frozen=True, slots=True)
class _Rule:
    """How a rule reads in an error: its name, and what it allows."""

    name: str
    allows: str

    @property
    def text(self) -> str:
        return f"{self.name} ({self.allows})"


_SUBDOMAIN = _Rule(
    "a DNS-1123 subdomain",
    "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
)
_LABEL = _Rule(
    "a DNS-1123 label",
    "lowercase letters, digits and '-', starting and ending with a letter or digit",
)
_QUALIFIED_ALLOWS = "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
_QUALIFIED = _Rule("a qualified name", _QUALIFIED_ALLOWS)
_LABEL_VALUE = _Rule("a label value", f"{_QUALIFIED_ALLOWS}; or empty")
_SUBDOMAIN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")
_LABEL_CHARS = _SUBDOMAIN_CHARS - {"."}
_QUALIFIED_CHARS = _SUBDOMAIN_CHARS | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ_")


class NameRule(StrEnum):
    """Which rule an object's name follows."""

    SUBDOMAIN = "subdomain"
    LABEL = "label"
    #: A subdomain that is also used as a label value: at most 63 characters.
    LABEL_VALUE_SUBDOMAIN = "label-value subdomain"


#: Kinds whose name becomes a label value, and that label (why the name is limited to 63).
LABEL_VALUE_NAMES = {
    "Job": "job-name",
    "PyTorchJob": "training.kubeflow.org/job-name",
    "MPIJob": "training.kubeflow.org/job-name",
    "RayCluster": "ray.io/cluster",
    "RayJob": "ray.io/cluster",
    "PodGroup": "gpufleet.dev/pod-group",
    "Queue": "gpufleet.dev/queue",
}


def rule_of(kind: str) -> NameRule:
    """The rule ``metadata.name`` of a ``kind`` follows (namespaces: :data:`NameRule.LABEL`)."""
    if kind == "Namespace":
        return NameRule.LABEL
    if kind in LABEL_VALUE_NAMES:
        return NameRule.LABEL_VALUE_SUBDOMAIN
    return NameRule.SUBDOMAIN


@functools.lru_cache(maxsize=8192)
def name_problem(
    name: str, rule: NameRule = NameRule.SUBDOMAIN, kind: str | None = None
) -> str | None:
    """What is wrong with ``name`` under ``rule`` (``kind`` says why a label-value name is
    short), or None."""
    if rule is NameRule.LABEL:
        return _problem(name, DNS1123_LABEL, LABEL_MAX, _LABEL, _LABEL_CHARS)
    problem = _problem(name, DNS1123_SUBDOMAIN, SUBDOMAIN_MAX, _SUBDOMAIN, _SUBDOMAIN_CHARS)
    if problem is None and rule is NameRule.LABEL_VALUE_SUBDOMAIN and len(name) > LABEL_VALUE_MAX:
        label = LABEL_VALUE_NAMES.get(kind or "")
        why = f"it is the value of the label {label}" if label else "it is used as a label value"
        return (
            f"must be at most {LABEL_VALUE_MAX} characters ({why}, and label values are "
            f"limited to {LABEL_VALUE_MAX}; it has {len(name)})"
        )
    return problem


@functools.lru_cache(maxsize=8192)
def label_key_problem(key: str) -> str | None:
    """What is wrong with a label key (``[prefix/]name``), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "must not start with '/': the prefix before '/' may not be empty"
        problem = _problem(prefix, DNS1123_SUBDOMAIN, SUBDOMAIN_MAX, _SUBDOMAIN, _SUBDOMAIN_CHARS)
        if problem is not None:
            return f"prefix {quoted(prefix)} (before '/') {problem}"
    problem = _problem(name, QUALIFIED_NAME, LABEL_VALUE_MAX, _QUALIFIED, _QUALIFIED_CHARS)
    if problem is not None:
        return f"name part {quoted(name)} {problem}" if slash else problem
    return None


@functools.lru_cache(maxsize=8192)
def label_value_problem(value: str) -> str | None:
    """What is wrong with a label value (empty is allowed), or None."""
    if value == "":
        return None
    return _problem(value, QUALIFIED_NAME, LABEL_VALUE_MAX, _LABEL_VALUE, _QUALIFIED_CHARS)


#: An IANA service name's (a port name's) most characters.
PORT_NAME_MAX = 15
_PORT_NAME = re.compile(r"[a-z0-9](?:-?[a-z0-9])*")
_PORT_RULE = (
    "an IANA service name (at most 15 lowercase letters, digits and '-', with at least one "
    "letter, not starting or ending with '-', and no '--')"
)


@functools.lru_cache(maxsize=1024)
def port_name_problem(name: str) -> str | None:
    """What is wrong with a port name (an IANA service name, as Kubernetes checks it), or None."""
    if not name:
        return f"must not be empty: it must be {_PORT_RULE}"
    if len(name) > PORT_NAME_MAX:
        return f"must be at most {PORT_NAME_MAX} characters (it has {len(name):,}): {_PORT_RULE}"
    if not _PORT_NAME.fullmatch(name) or not any(c.isalpha() for c in name):
        wrong = next((c for c in name if c not in _LABEL_CHARS), None)
        detail = "" if wrong is None else f": {quoted(wrong)} is not allowed"
        return f"must be {_PORT_RULE}{detail}"
    return None


def _problem(
    text: str, pattern: re.Pattern[str], limit: int, rule: _Rule, allowed: frozenset[str]
) -> str | None:
    if not text:
        return f"must not be empty: it must be {rule.text}"
    if len(text) > limit:
        return f"must be {rule.name} of at most {limit} characters (it has {len(text):,})"
    if pattern.fullmatch(text):
        return None
    wrong = next((c for c in text if c not in allowed), None)
    detail = "" if wrong is None else f": {quoted(wrong)} is not allowed"
    return f"must be {rule.text}{detail}"
