"""A whole scenario from files: queues, priority classes, quotas, and workloads (gangs) of pods.

Owns :func:`read_scenario`: every object of the files given (any mix of Queue, PriorityClass,
PodGroup, ResourceQuota, Pod, Job, Deployment, StatefulSet, ReplicaSet, PyTorchJob, MPIJob,
RayCluster and RayJob, or an Alibaba pod CSV; kinds with no scheduling meaning set aside:
``kinds``), names checked unique, the queue tree validated, and the pods assembled into
:class:`~gpufleet.model.workload.TimedWorkload` gangs with their controllers' rules
(:class:`~gpufleet.model.jobs.JobSpec`, read by ``job_rules``, ``pytorch_jobs``
and ``operator_jobs``):

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
* ``NodePool`` objects, read by :mod:`gpufleet.io.fleet.nodepools` (each name once; a pool without
  a price of its own priced from the price list given, else the one gpufleet ships).

Everything is read before anything is returned: the first problem raises
:class:`~gpufleet.io.errors.InputError` naming the file, the place, the object and the field.
What one object means lives in ``kube.pods``, ``queues``, ``pytorch_jobs``, ``operator_jobs`` and
``workload_settings``, the assembly in ``assembly`` (which the control plane and the live
cluster use too); this module does not schedule, check quotas against requests, or enforce
ResourceQuotas (it only reads them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from gpufleet.economics.prices import PriceList
from gpufleet.io.assembly import (
    DEFAULT_QUEUE,
    OPERATOR_JOBS,
    SUPPORTED,
    Scenario,
    ScenarioBuilder,
)
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.faults import GPU_FAULT
from gpufleet.io.fleet.idle_policies import KIND as IDLE_POLICY
from gpufleet.io.fleet.node_faults import NODE_FAULT_KINDS
from gpufleet.io.fleet.nodepools import KIND as NODE_POOL
from gpufleet.io.fleet.nodepools import NodePoolSet
from gpufleet.io.fleet.serving import INFERENCE_LOAD
from gpufleet.io.fleet.sim_telemetry import SIMULATED_TELEMETRY
from gpufleet.io.kinds import CLUSTER_KINDS, Skipped, triage
from gpufleet.io.kube.autoscaling import AUTOSCALER_KINDS, AutoscalingReader
from gpufleet.io.kube.pods import WORKLOAD_API_VERSIONS
from gpufleet.io.manifests import input_files, load_objects
from gpufleet.model.workload import TimedPod, TimedWorkload, Workload

#: The kinds a scenario reads (others are set aside or refused: ``kinds``).
SCENARIO_KINDS = frozenset(
    {
        "Queue",
        "PriorityClass",
        "PodGroup",
        "ResourceQuota",
        GPU_FAULT,
        *NODE_FAULT_KINDS,
        SIMULATED_TELEMETRY,
        IDLE_POLICY,
        INFERENCE_LOAD,
        *AUTOSCALER_KINDS,
        *WORKLOAD_API_VERSIONS,
        *OPERATOR_JOBS,
        NODE_POOL,
    }
)
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
