"""A scenario's ``GpuFault`` objects: an XID injected on one GPU of the simulated cluster.

Owns the reading of::

    apiVersion: gpufleet.dev/v1alpha1
    kind: GpuFault
    metadata: {name: n1-gpu2}
    spec:
      at: 2m             # simulated time from the first arrival (seconds or a duration)
      node: n1           # a node of the cluster
      gpu: 2             # its GPU index
      xid: 79            # the XID it reports
      recoverAfter: 10m  # healthy again that long after (absent: never)
      crashPods: true    # the pods on it crash (default: unless NVIDIA says the XID leaves
                         # applications running: 63, 64, 92)

into :class:`~gpufleet.model.faults.GpuFault`, an unknown field being an error, and the check
of faults against a cluster's nodes (:func:`check_faults`: the node and its GPU must exist).
Errors name the file, the object and the field. It injects nothing (the simulator does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.io.errors import InputError
from gpufleet.io.fields import check_fields, check_object_fields
from gpufleet.io.manifests import describe, named_object
from gpufleet.io.quantities import parse_duration_seconds
from gpufleet.model import Node
from gpufleet.model.faults import GpuFault

GPU_FAULT = "GpuFault"
FAULT_API_VERSIONS = ("gpufleet.dev/v1alpha1",)
FAULT_SPEC_FIELDS = ("at", "node", "gpu", "xid", "recoverAfter", "crashPods")
_HINTS = {"recover_after": "it is recoverAfter", "recover": "it is recoverAfter"}


def gpu_fault_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> GpuFault:
    """One ``GpuFault`` object (see the module docstring)."""
    context, name, _ = named_object(
        obj, source, location, GPU_FAULT, FAULT_API_VERSIONS, namespaced=False
    )
    check_object_fields(context, obj, FAULT_SPEC_FIELDS)
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    check_fields(context, spec, "spec", FAULT_SPEC_FIELDS, _HINTS)
    for key in ("at", "node", "gpu", "xid"):
        if spec.get(key) is None:
            raise context.error(f"spec.{key}", "required, but missing")
    at = context.parse(parse_duration_seconds, spec["at"], "spec.at")
    recover = spec.get("recoverAfter")
    recover_after = None
    if recover is not None:
        recover_after = context.parse(parse_duration_seconds, recover, "spec.recoverAfter")
        if recover_after <= 0:
            raise context.error("spec.recoverAfter", f"expected more than 0 s, got {recover}")
    crash = spec.get("crashPods")
    if crash is not None and not isinstance(crash, bool):
        raise context.error("spec.crashPods", f"expected true or false, got {describe(crash)}")
    where = f"{source}" + (f":{location}" if location else "") + f", {GPU_FAULT} {name}"
    return GpuFault(
        at,
        context.text(spec["node"], "spec.node"),
        context.integer(spec["gpu"], "spec.gpu", 0),
        context.integer(spec["xid"], "spec.xid", 1),
        recover_after,
        where,
        crash,
    )


def check_faults(faults: Iterable[GpuFault], nodes: Iterable[Node]) -> None:
    """Raise :class:`InputError` for the first fault naming a node or GPU the cluster lacks."""
    by_name = {node.name: node for node in nodes}
    for fault in faults:
        node = by_name.get(fault.node)
        if node is None:
            where = fault.name or GPU_FAULT
            raise InputError(where, f"no node {fault.node!r} in the cluster", None, "spec.node")
        indices = [g.index for g in node.gpus]
        if fault.gpu not in indices:
            listed = ", ".join(map(str, indices)) or "none"
            raise InputError(
                fault.name or GPU_FAULT,
                f"node {fault.node!r} has no GPU {fault.gpu} (its GPUs: {listed})",
                None,
                "spec.gpu",
            )
