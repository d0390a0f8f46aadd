"""Kubernetes YAML files as model nodes and timed pods: the public face of the manifest readers.

Owns whole-file reading: every document of a (multi-document) YAML or JSON file, ``kind: List``
flattened, each object read by :func:`node_from_object` or :func:`pods_from_object` (or set
aside when its kind has no scheduling meaning: :mod:`gpufleet.io.kinds`), names
checked unique, and all of it returned or nothing (the first problem raises
:class:`~gpufleet.io.errors.InputError` naming the file, ``document N (line L)``, the object and
the field). What a Node or a Pod means lives in ``kube.nodes``, ``kube.pods`` and
``kube.resources``; this module does not talk to a cluster (``backends/kube`` does).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.kinds import Skipped, triage
from gpufleet.io.kube.nodes import MIG_LAYOUT_ANNOTATION, node_from_object
from gpufleet.io.kube.pods import SUPPORTED, WORKLOAD_API_VERSIONS, pods_from_object
from gpufleet.io.kube.schema import check_kube_object
from gpufleet.io.manifests import Manifest, load_manifests
from gpufleet.model import Node
from gpufleet.model.workload import TimedPod

__all__ = [
    "MIG_LAYOUT_ANNOTATION",
    "Manifest",
    "load_manifests",
    "node_from_object",
    "nodes_from_manifests",
    "pods_from_manifests",
    "pods_from_object",
    "read_nodes",
    "read_pods",
]


def read_nodes(path: str | Path, skipped: Skipped | None = None) -> list[Node]:
    """Every Node of a YAML file (``kubectl get nodes -o yaml``, or one Node per document);
    objects of kinds with no scheduling meaning are set aside, counted in ``skipped``."""
    source = str(path)
    mine = Skipped()
    manifests = [
        m
        for m in load_manifests(path)
        if triage(m, source, m.location, ("Node",), "Node objects", mine)
    ]
    nodes = nodes_from_manifests(manifests, source)
    if not nodes:
        found = f"none: {mine.note()}" if mine else "no objects in the file"
        raise InputError(source, f"expected Node objects, found {found}")
    if skipped is not None:
        skipped.counts.update(mine.counts)
    return nodes


def nodes_from_manifests(manifests: Iterable[Manifest], source: str) -> list[Node]:
    """Nodes of already-loaded manifests, with names checked unique."""
    nodes: list[Node] = []
    first_seen: dict[str, str] = {}
    for manifest in manifests:
        check_kube_object(manifest, source, manifest.location)
        node = node_from_object(manifest, source, manifest.location)
        if node.name in first_seen:
            raise InputError(
                source,
                f"node {quoted(node.name)} appears twice (first in {first_seen[node.name]})",
                f"{manifest.location}, Node {node.name}",
                "metadata.name",
            )
        first_seen[node.name] = manifest.location
        nodes.append(node)
    return nodes


def read_pods(path: str | Path, skipped: Skipped | None = None) -> list[TimedPod]:
    """Every pod of a YAML file of Pods, Jobs, Deployments, StatefulSets and ReplicaSets, in
    file order; objects of kinds with no scheduling meaning are set aside, counted in
    ``skipped``."""
    source = str(path)
    mine = Skipped()
    expected = f"{SUPPORTED} objects"
    manifests = [
        m
        for m in load_manifests(path)
        if triage(m, source, m.location, WORKLOAD_API_VERSIONS, expected, mine)
    ]
    if not manifests:
        found = f"none: {mine.note()}" if mine else "no objects in the file"
        raise InputError(source, f"expected {expected}, found {found}")
    if skipped is not None:
        skipped.counts.update(mine.counts)
    return pods_from_manifests(manifests, source)


def pods_from_manifests(manifests: Iterable[Manifest], source: str) -> list[TimedPod]:
    """Pods of already-loaded manifests, with ``namespace/name`` checked unique."""
    pods: list[TimedPod] = []
    first_seen: dict[str, str] = {}
    for manifest in manifests:
        check_kube_object(manifest, source, manifest.location)
        for timed in pods_from_object(manifest, source, manifest.location):
            key = timed.pod.key
            if key in first_seen:
                raise InputError(
                    source,
                    f"pod {key} appears twice (first from {first_seen[key]})",
                    manifest.location,
                    "metadata.name",
                )
            first_seen[key] = manifest.location
            pods.append(timed)
    return pods
