"""Nodes grouped by shape into the pools of a ClusterSpec (the writer side of ``cluster_spec``).

Owns :func:`nodes_to_cluster_spec`: nodes of identical shape (CPU, memory, GPU model, count,
memory and MIG layout, extended resources, taints, their own labels, zone) become one pool of
``count`` nodes, in the order shapes first appear, so that a spec shaped like a real cluster
(the Alibaba trace's) can be shipped as count x shape. Labels the spec regenerates (hostname,
GPU Feature Discovery, rack, NVLink domain) are left out, so node names, racks and NVLink domains
are not kept. Nodes the format cannot describe (mixed GPU models, gaps in device indices,
differing MIG layouts) raise :class:`ValueError`. It does not validate or read specs
(``cluster_spec`` does).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gpufleet.io.quantities import format_cpu, format_memory
from gpufleet.model import GFD_LABELS, SHARED_GPU_RESOURCE, GpuSharing, Node, SharingStrategy
from gpufleet.model.node import well_known_labels

API_VERSION = "gpufleet.dev/v1alpha1"
KIND = "ClusterSpec"
#: Labels the spec writes itself for every node; they are not part of a pool's shape.
GENERATED_LABELS = frozenset(
    {
        GFD_LABELS.HOSTNAME,
        GFD_LABELS.PRODUCT,
        GFD_LABELS.MEMORY,
        GFD_LABELS.COUNT,
        GFD_LABELS.MIG_CAPABLE,
        GFD_LABELS.MIG_STRATEGY,
        GFD_LABELS.REPLICAS,
        GFD_LABELS.SHARING_STRATEGY,
        GFD_LABELS.RACK,
        GFD_LABELS.NVLINK_DOMAIN,
        GFD_LABELS.ZONE,
    }
)


def nodes_to_cluster_spec(nodes: Iterable[Node], name: str) -> dict[str, Any]:
    """A ClusterSpec document (a plain dict, ready for ``yaml.safe_dump``) describing ``nodes``."""
    pools: dict[tuple[Any, ...], dict[str, Any]] = {}
    for node in nodes:
        shape, pool = _pool_of(node)
        if shape in pools:
            pools[shape]["count"] += 1
        else:
            pools[shape] = pool
    used: set[str] = set()
    for pool in pools.values():
        base = pool["name"]
        suffix = 1
        while pool["name"] in used:
            suffix += 1
            pool["name"] = f"{base[:54]}-{suffix}"
        used.add(pool["name"])
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {"pools": list(pools.values())},
    }


def _pool_of(node: Node) -> tuple[tuple[Any, ...], dict[str, Any]]:
    pool: dict[str, Any] = {
        "name": "",
        "count": 1,
        "cpu": format_cpu(node.cpu_milli),
        "memory": format_memory(node.memory_mib),
    }
    gpu_shape: tuple[Any, ...] = ()
    if node.gpus:
        models = {(g.model, g.memory_mib) for g in node.gpus}
        if len(models) > 1:
            raise ValueError(
                f"node {node.name}: GPUs of different models or memory {sorted(models)}; a "
                "pool has one GPU model"
            )
        if [g.index for g in node.gpus] != list(range(len(node.gpus))):
            raise ValueError(
                f"node {node.name}: GPU indices {[g.index for g in node.gpus]} are not "
                f"0..{len(node.gpus) - 1}; a pool numbers its GPUs from 0"
            )
        model, memory = models.pop()
        pool["gpu"] = {"model": model, "count": len(node.gpus)}
        if memory:
            pool["gpu"]["memory"] = format_memory(memory)
        partitioned = [g for g in node.gpus if g.partitioned]
        layouts = {tuple(s.profile for s in g.mig_slices) for g in partitioned}
        if len(layouts) > 1:
            raise ValueError(
                f"node {node.name}: partitioned GPUs have different MIG layouts "
                f"{sorted(layouts)}; a pool has one layout for all its partitioned GPUs"
            )
        if partitioned:
            pool["mig"] = {"devices": [g.index for g in partitioned], "layout": [*layouts.pop()]}
        sharing = _sharing_of(node.gpu_sharing)
        pool.update(sharing)
        gpu_shape = (model, memory, len(node.gpus), repr(pool.get("mig")), node.gpu_sharing)
    # The well-known labels a spec writes itself are left out where they have its values.
    written = well_known_labels(node.name, node.labels.get(GFD_LABELS.ZONE))
    labels = {
        k: v
        for k, v in sorted(node.labels.items())
        if k not in GENERATED_LABELS and written.get(k) != v
    }
    if labels:
        pool["labels"] = labels
    if node.taints:
        pool["taints"] = [
            {"key": t.key, "value": t.value, "effect": t.effect.value} for t in node.taints
        ]
    zone = node.labels.get(GFD_LABELS.ZONE)
    if zone is not None:
        pool["topology"] = {"zone": zone}
    if node.unschedulable:
        pool["unschedulable"] = True
    if node.extended:
        pool["extendedResources"] = dict(node.extended)
    pool["name"] = _pool_name(node, pool)
    shape = (
        node.cpu_milli,
        node.memory_mib,
        gpu_shape,
        tuple(labels.items()),
        node.taints,
        zone,
        node.unschedulable,
        node.extended,
    )
    return shape, pool


def _sharing_of(sharing: GpuSharing) -> dict[str, Any]:
    """The pool fields that declare ``sharing`` (none without sharing)."""
    if sharing.strategy is SharingStrategy.NONE:
        return {}
    if sharing.strategy is SharingStrategy.SPLIT:
        return {"hami": {"deviceSplitCount": sharing.replicas}}
    replicated: dict[str, Any] = {
        "resources": [{"name": "nvidia.com/gpu", "replicas": sharing.replicas}]
    }
    if sharing.resource == SHARED_GPU_RESOURCE:
        replicated["renameByDefault"] = True
    if sharing.one_unit_per_pod:
        replicated["failRequestsGreaterThanOne"] = True
    key = "timeSlicing" if sharing.strategy is SharingStrategy.TIME_SLICING else "mps"
    return {"devicePlugin": {"version": "v1", "sharing": {key: replicated}}}


def _pool_name(node: Node, pool: dict[str, Any]) -> str:
    cores = f"{node.cpu_milli // 1000}c" if node.cpu_milli % 1000 == 0 else f"{node.cpu_milli}m"
    memory = str(pool["memory"]).lower()
    if node.gpus:
        head = f"{pool['gpu']['model']}-x{len(node.gpus)}"
        if "mig" in pool:
            head += "-mig"
    else:
        head = "cpu"
    name = re.sub(r"[^a-z0-9]+", "-", f"{head}-{cores}-{memory}".lower()).strip("-")
    return name[:58].rstrip("-") or "pool"
