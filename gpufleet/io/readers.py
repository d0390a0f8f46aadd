"""Read a cluster or a workload from whatever the user points at: a file or a directory.

Owns the choice of reader by content: ``.csv`` files are the Alibaba trace (node or pod lists),
YAML (or JSON) documents are dispatched by ``kind`` (``ClusterSpec`` and ``Node`` for a cluster;
``Pod``, ``Job``, ``Deployment``, ``StatefulSet`` and ``ReplicaSet`` for a workload; kinds with
no scheduling meaning, such as a ConfigMap, are set aside and counted: ``kinds``), and a
directory means all its ``*.yaml`` / ``*.yml`` files in name order. Names must be unique across
everything read; the result is all of it or an :class:`~gpufleet.io.errors.InputError` saying
what was expected. The formats themselves live in ``alibaba``, ``cluster_spec`` and
``kubernetes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpufleet.io.cluster_traces import alibaba
from gpufleet.io.errors import InputError, quoted
from gpufleet.io.fleet.cluster_spec import KIND as CLUSTER_SPEC_KIND
from gpufleet.io.fleet.cluster_spec import cluster_spec_from_dict
from gpufleet.io.kinds import CLUSTER_KINDS, Skipped, triage
from gpufleet.io.kube.job_rules import paused_job_note
from gpufleet.io.kube.nodes import node_from_object
from gpufleet.io.kube.pods import WORKLOAD_API_VERSIONS, pods_from_object
from gpufleet.io.kube.schema import check_kube_object
from gpufleet.io.manifests import input_files, load_objects
from gpufleet.model import Node
from gpufleet.model.workload import TimedPod

_CLUSTER_EXPECTED = "a ClusterSpec or Kubernetes Node objects (or an Alibaba node-list .csv)"
_WORKLOAD_EXPECTED = (
    "Pod, Job, Deployment, StatefulSet or ReplicaSet objects (or an Alibaba pod-list .csv)"
)
_NOT_A_CLUSTER = dict.fromkeys(WORKLOAD_API_VERSIONS, "a workload, not a cluster")
_NOT_A_WORKLOAD = dict.fromkeys(CLUSTER_KINDS, "a cluster, not a workload")


def read_cluster(path: str | Path, skipped: Skipped | None = None) -> list[Node]:
    """Nodes from a cluster spec, Kubernetes Node YAML, an Alibaba node CSV, or a directory.
    Objects of kinds with no scheduling meaning (a ConfigMap) are set aside, counted in
    ``skipped`` (see :mod:`gpufleet.io.kinds`)."""
    nodes: list[Node] = []
    origin: dict[str, str] = {}
    mine = Skipped()
    for file in input_files(path):
        source = str(file)
        found: list[tuple[Node, str | None]]
        if file.suffix.lower() == ".csv":
            found = [(node, None) for node in alibaba.read_nodes(file, include_cpu_only=True)]
        else:
            found = []
            for manifest in load_objects(file, _CLUSTER_EXPECTED):
                where = manifest.location
                if not triage(
                    manifest, source, where, CLUSTER_KINDS, _CLUSTER_EXPECTED, mine, _NOT_A_CLUSTER
                ):
                    continue
                if manifest["kind"] == CLUSTER_SPEC_KIND:
                    found.extend(
                        (node, where) for node in cluster_spec_from_dict(manifest, source, where)
                    )
                else:
                    check_kube_object(manifest, source, where)
                    found.append((node_from_object(manifest, source, where), where))
        for node, place in found:
            if node.name in origin:
                raise InputError(
                    source,
                    f"node {quoted(node.name)} appears twice (first in {origin[node.name]})",
                    place,
                )
            origin[node.name] = source if place is None else f"{source}:{place}"
            nodes.append(node)
    _nothing_read(path, nodes, mine, _CLUSTER_EXPECTED)
    _merge(skipped, mine)
    return nodes


def _nothing_read(path: str | Path, found: list[Any], mine: Skipped, expected: str) -> None:
    """An error when everything ``path`` holds was set aside."""
    if not found and mine:
        raise InputError(str(path), f"expected {expected}, found none: {mine.note()}")


def _paused_note(obj: Mapping[str, Any]) -> str | None:
    """:func:`~gpufleet.io.kube.job_rules.paused_job_note` of a Job read already, else None."""
    if obj.get("kind") != "Job":
        return None
    metadata = obj["metadata"]
    namespace = str(metadata.get("namespace") or "default")
    return paused_job_note(namespace, str(metadata["name"]), obj["spec"])


def _merge(into: Skipped | None, mine: Skipped) -> None:
    if into is not None:
        into.counts.update(mine.counts)


def read_workload(
    path: str | Path, skipped: Skipped | None = None, paused: list[str] | None = None
) -> list[TimedPod]:
    """Timed pods from Kubernetes workload YAML, an Alibaba pod CSV, or a directory of YAML.
    Objects of kinds with no scheduling meaning (a ConfigMap) are set aside, counted in
    ``skipped`` (see :mod:`gpufleet.io.kinds`); each Job of ``parallelism: 0`` (valid, no
    pods) is said in ``paused``, a line each."""
    pods: list[TimedPod] = []
    origin: dict[str, str] = {}
    mine = Skipped()
    for file in input_files(path):
        source = str(file)
        found: list[tuple[TimedPod, str | None]]
        if file.suffix.lower() == ".csv":
            found = [(timed, None) for timed in alibaba.read_pods(file)]
        else:
            found = []
            for manifest in load_objects(file, _WORKLOAD_EXPECTED):
                where = manifest.location
                if not triage(
                    manifest,
                    source,
                    where,
                    WORKLOAD_API_VERSIONS,
                    _WORKLOAD_EXPECTED,
                    mine,
                    _NOT_A_WORKLOAD,
                ):
                    continue
                check_kube_object(manifest, source, where)
                found.extend((timed, where) for timed in pods_from_object(manifest, source, where))
                note = _paused_note(manifest)
                if note is not None and paused is not None:
                    paused.append(note)
        for timed, place in found:
            key = timed.pod.key
            if key in origin:
                raise InputError(source, f"pod {key} appears twice (first in {origin[key]})", place)
            origin[key] = source if place is None else f"{source}:{place}"
            pods.append(timed)
    _nothing_read(path, pods, mine, _WORKLOAD_EXPECTED)
    _merge(skipped, mine)
    return pods
