"""A scenario's ``SpotInterruption`` and ``NodeFailure`` objects: nodes the simulated cluster
loses.

Owns the reading of::

    apiVersion: gpufleet.dev/v1alpha1
    kind: SpotInterruption
    metadata: {name: spot-reclaims}
    spec:
      # which nodes (default: every node bought as spot, read from its labels as the cost
      # report reads them: gpufleet.dev/capacity-type=spot, karpenter.sh/capacity-type=spot...)
      nodes: [gpu-7]                # by name (then neither of the next two), or
      nodeSelector: {pool: a100}    # labels they all carry (narrowing capacityType)
      capacityType: spot            # spot (the default), on-demand, reserved, or any
      # when (at most one; default: AWS's highest frequency-of-interruption band, >20%)
      at: [1h, 2h30m]               # each time, every chosen node that is up gets notice
      ratePerNodeHour: 0.01         # or at random, per node (deterministic per seed)
      frequency: ">20%"             # or an AWS Spot Instance Advisor band
      notice: 2m                    # warning before the node goes (default 2m, AWS's)
      replaceAfter: 5m              # a new node of the same shape joins (default 5m; never)

    kind: NodeFailure               # a node lost without notice
    spec:
      nodes / nodeSelector / capacityType (default any)
      at / ratePerNodeHour          # default: Llama 3's failure rate
      recoverAfter: 30m             # back that long after (absent or never: for good)

into :class:`~gpufleet.model.node_faults.NodeFault` (the defaults and their sources are
:mod:`gpufleet.model.node_faults`'), an unknown field being an error with a did-you-mean, and
the check of the faults against a cluster (:func:`check_node_faults`: named nodes exist, a
selection chooses at least one node). Errors name the file, the object and the field. It plays
nothing (the simulator does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.economics.runs import capacity_type
from gpufleet.io.errors import InputError, quoted
from gpufleet.io.fields import check_fields, check_object_fields
from gpufleet.io.manifests import Context, describe, named_object
from gpufleet.io.quantities import parse_duration_seconds
from gpufleet.model import Node
from gpufleet.model.node_faults import (
    AWS_SPOT_NOTICE_S,
    DEFAULT_SPOT_FREQUENCY,
    DEFAULT_SPOT_REPLACE_AFTER_S,
    LLAMA3_FAILURES_PER_NODE_HOUR,
    NodeFault,
    NodeFaultKind,
    NodeSelection,
    band_rate,
)

SPOT_INTERRUPTION = str(NodeFaultKind.SPOT_INTERRUPTION)
NODE_FAILURE = str(NodeFaultKind.NODE_FAILURE)
NODE_FAULT_KINDS = (SPOT_INTERRUPTION, NODE_FAILURE)
API_VERSIONS = ("gpufleet.dev/v1alpha1",)
_SELECTION = ("nodes", "nodeSelector", "capacityType")
SPOT_FIELDS = (*_SELECTION, "at", "ratePerNodeHour", "frequency", "notice", "replaceAfter")
FAILURE_FIELDS = (*_SELECTION, "at", "ratePerNodeHour", "recoverAfter")
CAPACITY_TYPES = ("spot", "on-demand", "reserved", "any")
NEVER = "never"
_HINTS = {
    "SpotInterruption": {
        "recoverAfter": "a spot node is replaced: it is replaceAfter",
        "rate": "it is ratePerNodeHour",
        "times": "it is at",
        "selector": "it is nodeSelector",
        "frequencyOfInterruption": "it is frequency",
    },
    "NodeFailure": {
        "replaceAfter": "a failed node recovers: it is recoverAfter",
        "notice": "a node failure gives no notice (a SpotInterruption does)",
        "frequency": "a band of AWS's spot advisor: use ratePerNodeHour for a failure",
        "rate": "it is ratePerNodeHour",
        "times": "it is at",
        "selector": "it is nodeSelector",
    },
}


def node_fault_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> NodeFault:
    """One ``SpotInterruption`` or ``NodeFailure`` object (see the module docstring)."""
    kind = str(obj.get("kind"))
    spot = kind == SPOT_INTERRUPTION
    context, name, _ = named_object(obj, source, location, kind, API_VERSIONS, namespaced=False)
    fields = SPOT_FIELDS if spot else FAILURE_FIELDS
    check_object_fields(context, obj, fields)
    spec = context.mapping(obj.get("spec"), "spec")
    check_fields(context, spec, "spec", fields, _HINTS[kind])
    selection = _selection(context, spec, "spot" if spot else None)
    times, rate = _timing(context, spec, spot)
    notice = 0.0
    if spot:
        notice = AWS_SPOT_NOTICE_S
        if spec.get("notice") is not None:
            notice = context.parse(parse_duration_seconds, spec["notice"], "spec.notice")
    back_key = "replaceAfter" if spot else "recoverAfter"
    default_back = DEFAULT_SPOT_REPLACE_AFTER_S if spot else None
    back = _back_after(context, spec.get(back_key), f"spec.{back_key}", default_back)
    where = f"{source}" + (f":{location}" if location else "") + f", {kind} {name}"
    try:
        return NodeFault(NodeFaultKind(kind), name, selection, times, rate, notice, back, where)
    except ValueError as error:  # what the fields checked above leave: none expected
        raise context.error("spec", str(error)) from None


def _selection(context: Context, spec: Mapping[str, Any], default: str | None) -> NodeSelection:
    names = spec.get("nodes")
    if names is not None:
        for key in ("nodeSelector", "capacityType"):
            if spec.get(key) is not None:
                raise context.error(
                    f"spec.{key}", "give nodes by name or by nodeSelector/capacityType, not both"
                )
        if isinstance(names, str):
            names = [names]
        listed = context.sequence(names, "spec.nodes")
        if not listed:
            raise context.error("spec.nodes", "expected at least one node name, got none")
        chosen = tuple(context.text(item, f"spec.nodes[{i}]") for i, item in enumerate(listed))
        return NodeSelection(names=tuple(dict.fromkeys(chosen)))
    labels = context.labels(spec.get("nodeSelector"), "spec.nodeSelector")
    capacity = default
    if spec.get("capacityType") is not None:
        text = context.text(spec["capacityType"], "spec.capacityType")
        if text not in CAPACITY_TYPES:
            raise context.error(
                "spec.capacityType",
                f"expected one of {', '.join(CAPACITY_TYPES)}, got {quoted(text)}",
            )
        capacity = None if text == "any" else text
    return NodeSelection(labels=labels, capacity_type=capacity)


def _timing(
    context: Context, spec: Mapping[str, Any], spot: bool
) -> tuple[tuple[float, ...], float | None]:
    """(times, rate per node-hour): one of them, the other empty."""
    given = [key for key in ("at", "ratePerNodeHour", "frequency") if spec.get(key) is not None]
    if len(given) > 1:
        raise context.error(
            f"spec.{given[1]}", f"give one of at, ratePerNodeHour or frequency, not {given[0]} too"
        )
    if spec.get("at") is not None:
        value = spec["at"]
        items = value if isinstance(value, list) else [value]
        if not items:
            raise context.error("spec.at", "expected at least one time, got none")
        times = tuple(
            context.parse(parse_duration_seconds, item, f"spec.at[{i}]")
            for i, item in enumerate(items)
        )
        return tuple(sorted(set(times))), None
    if spec.get("ratePerNodeHour") is not None:
        rate = spec["ratePerNodeHour"]
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
            raise context.error(
                "spec.ratePerNodeHour", f"expected a number above 0, got {describe(rate)}"
            )
        if rate == float("inf"):
            raise context.error("spec.ratePerNodeHour", "expected a finite number, got inf")
        return (), float(rate)
    if spec.get("frequency") is not None:
        band = context.text(spec["frequency"], "spec.frequency")
        return (), context.parse(band_rate, band, "spec.frequency")
    if spot:
        return (), band_rate(DEFAULT_SPOT_FREQUENCY)
    return (), LLAMA3_FAILURES_PER_NODE_HOUR


def _back_after(context: Context, value: object, field: str, default: float | None) -> float | None:
    if value is None:
        return default
    if isinstance(value, str) and value.strip().lower() == NEVER:
        return None
    seconds = context.parse(parse_duration_seconds, value, field)
    if seconds <= 0:
        raise context.error(field, f"expected more than 0 s or {NEVER!r}, got {quoted(value)}")
    return seconds


def selected(fault: NodeFault, nodes: Iterable[Node]) -> list[Node]:
    """The nodes of ``nodes`` that ``fault`` chooses."""
    return [node for node in nodes if fault.selection.matches(node, capacity_type)]


def check_node_faults(faults: Iterable[NodeFault], nodes: Iterable[Node]) -> None:
    """Raise :class:`InputError` for the first fault naming a node the cluster lacks, or whose
    selection chooses none of its nodes."""
    cluster = list(nodes)
    names = {node.name for node in cluster}
    for fault in faults:
        where = fault.where or fault.label
        missing = [name for name in fault.selection.names if name not in names]
        if missing:
            raise InputError(where, f"no node {missing[0]!r} in the cluster", None, "spec.nodes")
        if not selected(fault, cluster):
            hint = ""
            if fault.selection.capacity_type == "spot":
                hint = (
                    " (spot nodes carry a label such as gpufleet.dev/capacity-type=spot or "
                    "karpenter.sh/capacity-type=spot; name nodes with spec.nodes, or say "
                    "capacityType: any)"
                )
            raise InputError(
                where,
                f"{fault.selection.describe()}: none in the cluster{hint}",
                None,
                "spec.nodeSelector" if fault.selection.labels else "spec.capacityType",
            )
