"""Read a cluster or a workload from whatever the user points at: a file or a directory.

Owns the choice of reader by content: ``.csv`` files are the Alibaba trace (node or pod lists),
YAML (or JSON) documents are dispatched by ``kind`` (``ClusterSpec`` and ``Node`` for a cluster;
``Pod``, ``Job`` and ``Deployment`` for a workload), and a directory means all its ``*.yaml`` /
``*.yml`` files in name order. Names must be unique across everything read; the result is all of
it or an :class:`~gpufleet.io.errors.InputError` saying what was expected. The formats
themselves live in ``alibaba``, ``cluster_spec`` and ``kubernetes``.
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.io import alibaba
from gpufleet.io.cluster_spec import KIND as CLUSTER_SPEC_KIND
from gpufleet.io.cluster_spec import cluster_spec_from_dict
from gpufleet.io.errors import InputError
from gpufleet.io.kube_nodes import node_from_object
from gpufleet.io.kube_pods import WORKLOAD_API_VERSIONS, pods_from_object
from gpufleet.io.manifests import describe, load_manifests
from gpufleet.model import Node
from gpufleet.model.workload import TimedPod

YAML_SUFFIXES = (".yaml", ".yml")
CLUSTER_KINDS = (CLUSTER_SPEC_KIND, "Node")
_CLUSTER_EXPECTED = "a ClusterSpec or Kubernetes Node objects (or an Alibaba node-list .csv)"
_WORKLOAD_EXPECTED = "Pod, Job or Deployment objects (or an Alibaba pod-list .csv)"


def input_files(path: str | Path) -> list[Path]:
    """``path`` itself, or the ``*.yaml`` / ``*.yml`` files of a directory in name order."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in YAML_SUFFIXES)
        if not files:
            raise InputError(
                str(path), "expected *.yaml or *.yml files in the directory, found none"
            )
        return files
    if not path.exists():
        raise InputError(str(path), "no such file or directory")
    return [path]


def read_cluster(path: str | Path) -> list[Node]:
    """Nodes from a cluster spec, Kubernetes Node YAML, an Alibaba node CSV, or a directory."""
    nodes: list[Node] = []
    origin: dict[str, str] = {}
    for file in input_files(path):
        source = str(file)
        found: list[tuple[Node, str | None]]
        if file.suffix.lower() == ".csv":
            found = [(node, None) for node in alibaba.read_nodes(file, include_cpu_only=True)]
        else:
            found = []
            manifests = load_manifests(file)
            if not manifests:
                raise InputError(source, f"expected {_CLUSTER_EXPECTED}, found no objects")
            for manifest in manifests:
                kind = manifest.get("kind")
                where = manifest.location
                if kind == CLUSTER_SPEC_KIND:
                    found.extend(
                        (node, where)
                        for node in cluster_spec_from_dict(manifest, source, manifest.location)
                    )
                elif kind == "Node":
                    found.append((node_from_object(manifest, source, manifest.location), where))
                else:
                    hint = " (a workload, not a cluster)" if kind in WORKLOAD_API_VERSIONS else ""
                    raise InputError(
                        source,
                        f"expected {_CLUSTER_EXPECTED}, got kind {describe(kind)}{hint}",
                        manifest.location,
                        "kind",
                    )
        for node, place in found:
            if node.name in origin:
                raise InputError(
                    source,
                    f"node {node.name!r} appears twice (first in {origin[node.name]})",
                    place,
                )
            origin[node.name] = source if place is None else f"{source}:{place}"
            nodes.append(node)
    return nodes


def read_workload(path: str | Path) -> list[TimedPod]:
    """Timed pods from Kubernetes workload YAML, an Alibaba pod CSV, or a directory of YAML."""
    pods: list[TimedPod] = []
    origin: dict[str, str] = {}
    for file in input_files(path):
        source = str(file)
        found: list[tuple[TimedPod, str | None]]
        if file.suffix.lower() == ".csv":
            found = [(timed, None) for timed in alibaba.read_pods(file)]
        else:
            found = []
            manifests = load_manifests(file)
            if not manifests:
                raise InputError(source, f"expected {_WORKLOAD_EXPECTED}, found no objects")
            for manifest in manifests:
                kind = manifest.get("kind")
                if kind in CLUSTER_KINDS:
                    raise InputError(
                        source,
                        f"expected {_WORKLOAD_EXPECTED}, got kind {kind} "
                        "(a cluster, not a workload)",
                        manifest.location,
                        "kind",
                    )
                where = manifest.location
                found.extend(
                    (timed, where)
                    for timed in pods_from_object(manifest, source, manifest.location)
                )
        for timed, place in found:
            key = timed.pod.key
            if key in origin:
                raise InputError(source, f"pod {key} appears twice (first in {origin[key]})", place)
            origin[key] = source if place is None else f"{source}:{place}"
            pods.append(timed)
    return pods
