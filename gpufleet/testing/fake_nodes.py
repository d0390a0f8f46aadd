"""Fake GPU nodes on a real API server: Node objects a kubelet would keep, without a kubelet.

Owns the three writes that make a Node object schedulable on a stock kube-apiserver: create it,
write its status (capacity, allocatable, Ready) through the status subresource, and take off the
``node.kubernetes.io/not-ready`` (and ``unreachable``) taints that the TaintNodesByCondition
admission plugin puts on every new Node, as the node lifecycle controller would once the node
is Ready (a bare API server runs no controller-manager, so nobody else does). The end-to-end
suite and the binding benchmark use it; it does not build the objects (see ``kube_objects``).
"""

from __future__ import annotations

import json
from typing import Any

Obj = dict[str, Any]

#: Taints the API server or the node lifecycle controller puts on a node that is not Ready.
CONDITION_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def register_fake_node(core: Any, node: Obj) -> str:
    """Create ``node`` (with its ``status``) through ``core`` (a ``kubernetes.client.
    CoreV1Api``) and leave it Ready and schedulable; returns its name."""
    node = {**node}
    status = node.pop("status")
    name = str(node["metadata"]["name"])
    created = json.loads(core.create_node(node, _preload_content=False).data)
    core.patch_node_status(name, {"status": status})
    taints: list[Obj] = (created.get("spec") or {}).get("taints") or []
    kept = [t for t in taints if t.get("key") not in CONDITION_TAINTS]
    if len(kept) != len(taints):
        # The client sends a list as a JSON patch; its test keeps a concurrent change.
        core.patch_node(
            name,
            [
                {"op": "test", "path": "/spec/taints", "value": taints},
                {"op": "replace", "path": "/spec/taints", "value": kept},
            ],
        )
    return name
