"""What the core is told about Nodes.

Owns :class:`NodeReconciliation`: a Node read once per resourceVersion (one that does not read
is reported), a changed Node compared with what the core was told of it, device health (the
agent's inventory annotation) told at once as ``DeviceHealthChanged`` and whether and which new
pods may go there (a cordon, its taints: being removed by an autoscaler, not ready, or lifted)
at once as ``NodeSchedulingChanged``, whether pods run there or not, any other change to a node
(allocatable lowered, devices withdrawn, labels) at once too, as the node leaving and joining
again (the core keeps what pods hold there counted across it), and a node added or gone told as
such (the pods bound there then looked at again). (Changes used to wait until no pod ran
there, which a busy node never is: a node whose allocatable dropped from 8 GPUs to 4 kept
taking up to 8.)

Does not tell the core about pods (reconcile_pods).
"""

from __future__ import annotations

from dataclasses import replace

from gpufleet.backends.kube import pods as podinfo
from gpufleet.backends.kube.state import BackendState, resource_version
from gpufleet.io.errors import InputError
from gpufleet.io.kube.annotations import INVENTORY_ANNOTATION, inventory_from_json
from gpufleet.io.kube.nodes import node_from_object
from gpufleet.io.live_objects import SOURCE, live_manifest
from gpufleet.kube_client.api import NODES, PODS, Obj
from gpufleet.kube_client.informer import object_key
from gpufleet.model import Node
from gpufleet.model.events import (
    ClusterEvent,
    DeviceHealthChanged,
    NodeAdded,
    NodeRemoved,
    NodeSchedulingChanged,
)
from gpufleet.model.node import same_but_health, with_gpu_health


class NodeReconciliation:
    """Nodes read and told to the core (see the module docstring)."""

    def __init__(self, state: BackendState) -> None:
        self.state = state

    def parse_node(self, obj: Obj) -> Node | None:
        """``obj`` read as a node, once per resourceVersion (a resync, the poll after it and
        the read-ahead while listing and the control plane's node map all need it); None when it
        does not read (reported)."""
        name, version = object_key(obj), resource_version(obj)
        seen = self.state.node_readings.get(name)
        if seen is not None and version and seen[0] == version:
            return seen[1]
        try:
            node: Node | None = node_from_object(obj, SOURCE, live_manifest(obj).location)
        except InputError as error:
            self.state.report_invalid("Node", obj, str(error))
            node = None
        self.state.node_readings[name] = (version, node)
        return node

    def reconcile_node(self, name: str, out: list[ClusterEvent]) -> None:
        obj = self.state.objects[NODES].get(name)
        node = None if obj is None else self.parse_node(obj)
        known = self.state.nodes.get(name)
        if known is not None and node is not None and _same_node(known, node):
            return
        if (
            known is not None
            and node is not None
            and obj is not None
            and _same_but_in_place(known, node)
        ):
            # Device health and scheduling are applied in place, pods running there or not.
            self._tell_health(name, known, node, obj, out)
            self._tell_scheduling(name, node, out)
            self.state.nodes[name] = node
            return
        if known is not None:
            # Any other change (allocatable, devices, labels), a node deleted, or one that
            # does not read for now (reported): it leaves the core and, if it is there, joins
            # again as it is now. The pods running there stay counted on it all along (the
            # core keeps a node's row while pods hold it and takes them in again on the new
            # shape, beyond what it offers if it shrank), so a change applies at once.
            del self.state.nodes[name]
            out.append(NodeRemoved(name))
        if node is not None:
            self.state.nodes[name] = node
            out.append(NodeAdded(node))
            self.state.dirty_pods.update(
                k for k, o in self.state.objects[PODS].items() if podinfo.node_name(o) == name
            )

    def _tell_health(
        self, name: str, known: Node, node: Node, obj: Obj, out: list[ClusterEvent]
    ) -> None:
        """Tell the core which of the devices it knows on ``name`` are unhealthy now, if that
        changed (the rest of a changed node waits until the node is empty)."""
        indices = {g.index for g in known.gpus}
        unhealthy = tuple(i for i in node.unhealthy_gpus if i in indices)
        if unhealthy == known.unhealthy_gpus:
            return
        self.state.nodes[name] = with_gpu_health(known, unhealthy)
        reasons = tuple((i, why) for i, why in _health_reasons(obj) if i in unhealthy)
        out.append(DeviceHealthChanged(name, unhealthy, reasons))

    def _tell_scheduling(self, name: str, node: Node, out: list[ClusterEvent]) -> None:
        """Tell the core whether and which new pods may go to ``name`` now, if that changed
        (its cordon, its reason, its taints)."""
        known = self.state.nodes[name]
        if (known.unschedulable, known.unschedulable_reason, known.taints) == (
            node.unschedulable,
            node.unschedulable_reason,
            node.taints,
        ):
            return
        self.state.nodes[name] = replace(
            known,
            unschedulable=node.unschedulable,
            unschedulable_reason=node.unschedulable_reason,
            taints=node.taints,
        )
        out.append(
            NodeSchedulingChanged(name, node.unschedulable, node.unschedulable_reason, node.taints)
        )


def _health_reasons(obj: Obj) -> tuple[tuple[int, str], ...]:
    """(device index, why it is unhealthy) from a Node's inventory annotation, as far as it
    reads (the node itself read, so it does)."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(INVENTORY_ANNOTATION)
    if not isinstance(text, str):
        return ()
    try:
        inventory = inventory_from_json(text)
    except ValueError:
        return ()
    return tuple((d.index, d.reason) for d in inventory.devices if not d.healthy and d.reason)


def _same_node(a: Node, b: Node) -> bool:
    return a == b and dict(a.labels) == dict(b.labels)


def _same_but_in_place(a: Node, b: Node) -> bool:
    """Whether ``a`` and ``b`` differ at most in what the core changes in place: which devices
    are healthy, and whether and which new pods may go there (cordon, reason, taints)."""
    return same_but_health(_unscheduled(a), _unscheduled(b))


def _unscheduled(node: Node) -> Node:
    return replace(node, unschedulable=False, unschedulable_reason="", taints=())
