"""The one face for reading files into the model: a cluster, a workload or a whole scenario
from whatever the user points at (files or directories).

Owns the choice of reader by content: ``.csv`` files are the Alibaba trace (node or pod lists),
YAML (or JSON) documents are dispatched by ``kind`` (``ClusterSpec`` and ``Node`` for a cluster;
``Pod``, ``Job``, ``Deployment``, ``StatefulSet`` and ``ReplicaSet`` for a workload; every kind
of a scenario for :func:`read_scenario`; kinds with no scheduling meaning, such as a ConfigMap,
are set aside and counted: ``kinds``), and a directory means all its ``*.yaml`` / ``*.yml``
files in name order. Names must be unique across everything read; the result is all of it or an
:class:`~gpufleet.io.errors.InputError` saying what was expected. The formats themselves live in
``cluster_traces.alibaba``, ``fleet.cluster_spec``, ``kube.nodes`` and ``kube.pods``.

:func:`read_scenario` reads every object of the files given (any mix of Queue, PriorityClass,
PodGroup, ResourceQuota, Pod, Job, Deployment, StatefulSet, ReplicaSet, PyTorchJob, MPIJob,
RayCluster and RayJob, or an Alibaba pod CSV), names checked unique, the queue tree validated,
and the pods assembled into :class:`~gpufleet.model.workload.TimedWorkload` gangs with their
controllers' rules (:class:`~gpufleet.model.jobs.JobSpec`, read by ``kube.job_rules``,
``kube.pytorch_jobs`` and ``kube.operator_jobs``):

* a pod labelled ``gpufleet.dev/pod-group`` (or ``scheduling.x-k8s.io/pod-group``) joins that
  gang of its namespace, whose minMember a PodGroup object gives (else: all its pods);
* a Job is one gang of its pods (``min(parallelism, completions)``), a PyTorchJob, MPIJob,
  RayCluster or RayJob one gang of its replica sets' pods, each replica of a Deployment,
  StatefulSet or ReplicaSet its own workload, and any other pod a workload of one;
* names are unique per kind and namespace: a name two kinds share makes two workloads, each
  keyed ``namespace/Kind/name``;
* the queue comes from the ``gpufleet.dev/queue`` label, else the Queue that lists the namespace,
  else (no Queue objects at all) an implicit ``default`` queue; the priority from the pod's
  priorityClassName, an explicit ``spec.priority``, or the globalDefault class;
* preemptible, expected runtime, checkpoint interval and topology from ``gpufleet.dev/``
  annotations (the object's win over its pod template's); a setting that pods of one gang give
  differently is an error;
* each pod's work: its ``gpufleet.dev/sim-duration``, else the workload's expected run time;
* the autoscaling of Deployments, StatefulSets and ReplicaSets: HorizontalPodAutoscalers, KEDA
  ScaledObjects and ``gpufleet.dev/`` autoscaling annotations, joined to the workloads they
  scale (:mod:`gpufleet.io.kube.autoscaling`);
* ``NodePool`` objects, read by :mod:`gpufleet.io.fleet.nodepools` (each name once; a pool
  without a price of its own priced from the price list given, else the one gpufleet ships).

Everything is read before anything is returned: the first problem raises
:class:`~gpufleet.io.errors.InputError` naming the file, the place, the object and the field.
What one object means lives in ``kube.pods``, ``fleet.queues``, ``kube.pytorch_jobs``,
``kube.operator_jobs`` and ``kube.workload_settings``, the assembly in ``assembly`` (which the
control plane and the live cluster use too); this module does not schedule, check quotas against
requests, or enforce ResourceQuotas (it only reads them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from gpufleet.economics.prices import PriceList
from gpufleet.io.assembly import (
    DEFAULT_QUEUE,
    SCENARIO_READERS,
    SUPPORTED,
    Scenario,
    ScenarioBuilder,
)
from gpufleet.io.cluster_traces import alibaba
from gpufleet.io.errors import InputError, quoted
from gpufleet.io.fleet.cluster_shapes import API_VERSION as CLUSTER_SPEC_API_VERSION
from gpufleet.io.fleet.cluster_shapes import KIND as CLUSTER_SPEC_KIND
from gpufleet.io.fleet.cluster_spec import cluster_spec_from_dict
from gpufleet.io.fleet.nodepools import KIND as NODE_POOL
from gpufleet.io.fleet.nodepools import NodePoolSet
from gpufleet.io.kinds import CLUSTER_KINDS, Skipped, api_group, triage
from gpufleet.io.kube.autoscaling import AUTOSCALER_KINDS, AutoscalingReader
from gpufleet.io.kube.job_rules import paused_job_note
from gpufleet.io.kube.nodes import node_from_object
from gpufleet.io.kube.pods import WORKLOAD_API_VERSIONS, pods_from_object
from gpufleet.io.kube.schema import check_kube_object
from gpufleet.io.manifests import Manifest, input_files, load_objects
from gpufleet.io.scheme import Scheme
from gpufleet.model import Node
from gpufleet.model.workload import TimedPod, TimedWorkload, Workload

_CLUSTER_EXPECTED = "a ClusterSpec or Kubernetes Node objects (or an Alibaba node-list .csv)"
_WORKLOAD_EXPECTED = (
    "Pod, Job, Deployment, StatefulSet or ReplicaSet objects (or an Alibaba pod-list .csv)"
)
_NOT_A_CLUSTER = dict.fromkeys(WORKLOAD_API_VERSIONS, "a workload, not a cluster")
_NOT_A_WORKLOAD = dict.fromkeys(CLUSTER_KINDS, "a cluster, not a workload")

#: Reads one object of a cluster's files: the nodes it describes.
NodeReader = Callable[[Manifest, str, str | None], list[Node]]
#: The reader of each kind a cluster's files hold, by API group and kind.
CLUSTER_READERS: Scheme[NodeReader] = Scheme()
CLUSTER_READERS.add(
    api_group(CLUSTER_SPEC_API_VERSION) or "", CLUSTER_SPEC_KIND, cluster_spec_from_dict
)


@CLUSTER_READERS.register("", "Node")
def _read_node(manifest: Manifest, source: str, where: str | None) -> list[Node]:
    check_kube_object(manifest, source, where)
    return [node_from_object(manifest, source, where)]


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
                    manifest,
                    source,
                    where,
                    CLUSTER_READERS.kinds,
                    _CLUSTER_EXPECTED,
                    mine,
                    _NOT_A_CLUSTER,
                ):
                    continue
                read = CLUSTER_READERS.reader_of(manifest)
                if read is None:  # triage let through the kinds of CLUSTER_READERS only
                    raise AssertionError(f"no reader of {manifest['kind']}")
                found.extend((node, where) for node in read(manifest, source, where))
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


#: The kinds a scenario reads (others are set aside or refused: ``kinds``).
#: The kinds a scenario reads (others are set aside or refused: ``kinds``): those a
#: ScenarioBuilder reads, the autoscalers of its workloads, and NodePools.
SCENARIO_KINDS = frozenset({*SCENARIO_READERS.kinds, *AUTOSCALER_KINDS, NODE_POOL})
#: What a scenario's files may hold, for errors.
SCENARIO_SUPPORTED = SUPPORTED.replace(" or ScaledObject", ", ScaledObject or NodePool")
_NOT_A_SCENARIO = dict.fromkeys(CLUSTER_KINDS, "a cluster, not a scenario")


def read_scenario(
    paths: str | Path | Iterable[str | Path],
    skipped: Skipped | None = None,
    prices: PriceList | None = None,
) -> Scenario:
    """Queues, priority classes, quotas and workloads of files and directories (all or nothing).
    Objects of kinds with no scheduling meaning (a ConfigMap) are set aside, counted in
    ``skipped``. ``prices`` prices the NodePools that give no price of their own (default: the
    list gpufleet ships)."""
    if isinstance(paths, str | Path):
        paths = [paths]
    files: dict[Path, Path] = {}  # a file named twice (itself and in its directory) is read once
    for path in paths:
        for file in input_files(path):
            files.setdefault(file.resolve(), file)
    builder = ScenarioBuilder()
    autoscaling = AutoscalingReader()
    pools = NodePoolSet(prices)
    mine = Skipped()
    read = 0
    for file in files.values():
        if file.suffix.lower() == ".csv":
            builder.add_csv(file)
            read += 1
            continue
        for manifest in load_objects(file, SCENARIO_SUPPORTED):
            where, kind = manifest.location, manifest.get("kind")
            if not triage(
                manifest, str(file), where, SCENARIO_KINDS, SCENARIO_SUPPORTED, mine,
                _NOT_A_SCENARIO,
            ):  # fmt: skip
                continue
            read += 1
            if kind == NODE_POOL:
                pools.add(manifest, str(file), where)
                continue
            if kind not in AUTOSCALER_KINDS:
                builder.add(manifest, str(file))
            autoscaling.add(manifest, str(file))
    if not read and mine:
        raise InputError(
            ", ".join(map(str, files.values())), f"found nothing to read: {mine.note()}"
        )
    if skipped is not None:
        skipped.counts.update(mine.counts)
    return dataclasses.replace(
        builder.scenario(), autoscaling=autoscaling.specs(), node_pools=pools.pools
    )


def workloads_from_pods(pods: Iterable[TimedPod]) -> list[TimedWorkload]:
    """Each pod its own workload in queue ``default``, running for the pod's runtime."""
    return [
        TimedWorkload(
            Workload(t.pod.name, t.pod.namespace, (t.pod,), DEFAULT_QUEUE, priority=t.pod.priority),
            created=t.created or 0.0,
            duration=t.runtime,
        )
        for t in pods
    ]
