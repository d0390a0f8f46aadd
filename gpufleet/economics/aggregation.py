"""Cost lines grouped by whose they are: workload, namespace, queue, tenant, label, annotation.

Owns the grouping keys and the sums. A key is ``workload`` (``namespace/name``),
``namespace``, ``queue``, ``tenant``, ``label:KEY``, ``annotation:KEY``, or a bare ``KEY``
(the seeds' ``team``, ``cost-center``, ``project``): the workload's label of that key, else its
annotation. Several keys group by all of them (``namespace/team`` names the line). A workload
without a value for a key falls in ``__unallocated__``, the cluster's idle stays its own
``__idle__`` line, as OpenCost reports them, so the lines always add up to the total. It does
not price anything (:mod:`gpufleet.economics.allocation` does).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpufleet.economics.allocation import Allocation, CostLine, Holding

#: The group of workloads that have no value for a grouping key (OpenCost's name).
UNALLOCATED = "__unallocated__"
#: The keys that are fields of a holding, not labels or annotations.
FIELD_KEYS = ("workload", "namespace", "queue", "tenant")
_LABEL = "label:"
_ANNOTATION = "annotation:"


@dataclass(frozen=True, slots=True)
class GroupKey:
    """One way of grouping workloads, parsed from its text (see the module docstring)."""

    text: str
    value: Callable[[Holding], str]
    #: The label or annotation key it reads (None: a field of the holding), and where.
    looks_up: str | None = None
    looks_in: str = "label or annotation"


def group_key(text: str) -> GroupKey:
    """The grouping key ``text`` names (ValueError saying what keys are, if it names none)."""
    key = text.strip()
    if not key or key in (_LABEL.rstrip(":"), _ANNOTATION.rstrip(":")):
        raise ValueError(
            f"expected a grouping key: {', '.join(FIELD_KEYS)}, label:KEY, annotation:KEY or a "
            f"label or annotation key such as team; got {text!r}"
        )
    if key == "workload":
        return GroupKey(key, lambda h: f"{h.namespace}/{h.workload}")
    if key == "namespace":
        return GroupKey(key, lambda h: h.namespace)
    if key == "queue":
        return GroupKey(key, lambda h: h.queue)
    if key == "tenant":
        return GroupKey(key, lambda h: h.tenant)
    if key.startswith(_LABEL):
        name = _named(key, _LABEL, text)
        return GroupKey(key, lambda h: h.labels.get(name, ""), name, "label")
    if key.startswith(_ANNOTATION):
        name = _named(key, _ANNOTATION, text)
        return GroupKey(key, lambda h: h.annotations.get(name, ""), name, "annotation")
    return GroupKey(key, lambda h: h.labels.get(key) or h.annotations.get(key, ""), key)


def missing_key_notes(keys: Sequence[GroupKey], holdings: Sequence[Holding]) -> list[str]:
    """A note for each label or annotation key no holding has a value for (every workload
    would read as ``__unallocated__``, silently): it names the keys the holdings do carry
    that are closest to it (a misspelt ``teem``)."""
    if not holdings:
        return []
    notes = []
    for key in keys:
        if key.looks_up is None or any(key.value(h) for h in holdings):
            continue
        carried = sorted({name for h in holdings for name in _carried(h, key.looks_in) if name})
        close = difflib.get_close_matches(key.looks_up, carried, n=3, cutoff=0.6)
        hint = (
            f"; did you mean {' or '.join(map(repr, close))}?"
            if close
            else (f" (they carry: {', '.join(carried[:10])})" if carried else "")
        )
        notes.append(
            f"no workload has the {key.looks_in} {key.looks_up!r}: every one is in "
            f"{UNALLOCATED}{hint}"
        )
    return notes


def _carried(holding: Holding, where: str) -> list[str]:
    """The keys a holding carries where a grouping key looks."""
    labels = [] if where == "annotation" else list(holding.labels)
    return labels + ([] if where == "label" else list(holding.annotations))


def _named(key: str, prefix: str, text: str) -> str:
    name = key.removeprefix(prefix).strip()
    if not name:
        raise ValueError(f"{prefix}KEY needs a key (e.g. {prefix}team), got {text!r}")
    return name


def group_name(holding: Holding, keys: Sequence[GroupKey]) -> str:
    """The line ``holding`` falls in: its values of ``keys`` joined by ``/``, or
    ``__unallocated__`` if it lacks any of them."""
    values = [key.value(holding) for key in keys]
    if not all(values):
        return UNALLOCATED
    return "/".join(values)


def aggregate(allocation: Allocation, by: Sequence[str] | str) -> tuple[CostLine, ...]:
    """The allocation's lines grouped ``by`` one key or several: the groups by allocated cost,
    highest first (then by name), ``__unallocated__`` after them, ``__idle__`` last (where
    the cluster had idle GPUs). They add up to ``allocation.total``."""
    keys = [group_key(text) for text in ([by] if isinstance(by, str) else by)]
    if not keys:
        raise ValueError("aggregate by at least one key")
    groups: dict[str, CostLine] = {}
    for item in allocation.workloads:
        name = group_name(item.holding, keys)
        line = groups.get(name, CostLine(name))
        groups[name] = line.plus(item.cost, name)
    unallocated = groups.pop(UNALLOCATED, None)
    lines = sorted(groups.values(), key=lambda line: (-line.allocated, line.name))
    if unallocated is not None:
        lines.append(unallocated)
    if allocation.idle.gpu_hours > 0:
        lines.append(allocation.idle)
    return tuple(lines)
