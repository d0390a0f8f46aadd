"""Builders of workload objects whose controllers run their pods (plain dicts, as YAML gives
them): batch/v1 Jobs, Kubeflow PyTorchJobs and MPIJobs, KubeRay RayClusters and RayJobs, with
the ``gpufleet.dev/`` annotations of the simulated failure model and run times."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]

SIM_DURATION = "gpufleet.dev/sim-duration"
SIM_FAILURES = "gpufleet.dev/sim-failures"
SIM_FAIL_AFTER = "gpufleet.dev/sim-fail-after"
SIM_EXIT_CODE = "gpufleet.dev/sim-exit-code"


def sim_notes(
    duration: str | None = "10m",
    failures: int | None = None,
    fail_after: str | None = None,
    exit_code: int | None = None,
    more: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``gpufleet.dev/`` annotations: a run time and a failure model (and ``more``)."""
    notes = dict(more or {})
    for key, value in (
        (SIM_DURATION, duration),
        (SIM_FAILURES, failures),
        (SIM_FAIL_AFTER, fail_after),
        (SIM_EXIT_CODE, exit_code),
    ):
        if value is not None:
            notes[key] = str(value)
    return notes


def pod_template(
    gpus: int = 1,
    cpu: str = "1",
    memory: str = "1Gi",
    restart_policy: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Obj:
    limits: Obj = {"cpu": cpu, "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    spec: Obj = {
        "containers": [{"name": "main", "image": "train:1", "resources": {"limits": limits}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    metadata: Obj = {}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    return {"metadata": metadata, "spec": spec}


def _object(
    api: str,
    kind: str,
    name: str,
    namespace: str | None,
    annotations: Mapping[str, str] | None,
    labels: Mapping[str, str] | None,
    spec: Obj,
) -> Obj:
    metadata: Obj = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": api, "kind": kind, "metadata": metadata, "spec": spec}


def batch_job(
    name: str,
    parallelism: int = 1,
    completions: int | None = None,
    namespace: str | None = None,
    restart_policy: str | None = "Never",
    indexed: bool = False,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    gpus: int = 1,
    **spec: Any,
) -> Obj:
    """A batch/v1 Job (``spec`` adds fields: backoffLimit, activeDeadlineSeconds, ...)."""
    body: Obj = {
        "parallelism": parallelism,
        "template": pod_template(gpus, restart_policy=restart_policy),
        **spec,
    }
    if completions is not None:
        body["completions"] = completions
    if indexed:
        body["completionMode"] = "Indexed"
    return _object("batch/v1", "Job", name, namespace, annotations, labels, body)


def pytorch_job(
    name: str,
    workers: int,
    master: bool = True,
    namespace: str | None = None,
    restart_policy: str | None = None,
    backoff_limit: int | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    gpus: int = 1,
) -> Obj:
    """A PyTorchJob of a Master (unless ``master`` is False) and ``workers`` Workers."""
    replicas: Obj = {}
    for role, count in (("Master", 1 if master else 0), ("Worker", workers)):
        if role == "Master" and not master:
            continue
        replica: Obj = {"replicas": count, "template": pod_template(gpus)}
        if restart_policy is not None:
            replica["restartPolicy"] = restart_policy
        replicas[role] = replica
    body: Obj = {"pytorchReplicaSpecs": replicas}
    if backoff_limit is not None:
        body["runPolicy"] = {"backoffLimit": backoff_limit}
    return _object("kubeflow.org/v1", "PyTorchJob", name, namespace, annotations, labels, body)


def mpi_job(
    name: str,
    workers: int,
    namespace: str | None = None,
    launcher_gpus: int = 0,
    gpus: int = 1,
    launcher_restart_policy: str | None = None,
    worker_restart_policy: str | None = None,
    run_policy: Obj | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    api: str = "kubeflow.org/v2beta1",
) -> Obj:
    """A v2beta1 MPIJob: one Launcher and ``workers`` Workers."""
    launcher: Obj = {"replicas": 1, "template": pod_template(launcher_gpus)}
    worker: Obj = {"replicas": workers, "template": pod_template(gpus)}
    if launcher_restart_policy is not None:
        launcher["restartPolicy"] = launcher_restart_policy
    if worker_restart_policy is not None:
        worker["restartPolicy"] = worker_restart_policy
    body: Obj = {"slotsPerWorker": 1, "mpiReplicaSpecs": {"Launcher": launcher, "Worker": worker}}
    if run_policy is not None:
        body["runPolicy"] = dict(run_policy)
    return _object(api, "MPIJob", name, namespace, annotations, labels, body)


def ray_cluster_spec(
    groups: Mapping[str, int | Obj],
    head_gpus: int = 0,
    gpus: int = 1,
    autoscaling: bool = False,
) -> Obj:
    """A RayCluster spec: a head and worker groups (name -> replicas, or a group's fields)."""
    worker_groups = []
    for group, value in groups.items():
        fields: Obj = {"replicas": value} if isinstance(value, int) else dict(value)
        worker_groups.append({"groupName": group, "template": pod_template(gpus), **fields})
    spec: Obj = {
        "headGroupSpec": {"rayStartParams": {}, "template": pod_template(head_gpus)},
        "workerGroupSpecs": worker_groups,
    }
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
    return spec


def ray_cluster(
    name: str,
    groups: Mapping[str, int | Obj],
    namespace: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    **options: Any,
) -> Obj:
    spec = ray_cluster_spec(groups, **options)
    return _object("ray.io/v1", "RayCluster", name, namespace, annotations, labels, spec)


def ray_job(
    name: str,
    groups: Mapping[str, int | Obj],
    namespace: str | None = None,
    submission_mode: str | None = None,
    shutdown: bool = True,
    backoff_limit: int | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    **options: Any,
) -> Obj:
    body: Obj = {
        "entrypoint": "python train.py",
        "shutdownAfterJobFinishes": shutdown,
        "rayClusterSpec": ray_cluster_spec(groups, **options),
    }
    if submission_mode is not None:
        body["submissionMode"] = submission_mode
    if backoff_limit is not None:
        body["backoffLimit"] = backoff_limit
    return _object("ray.io/v1", "RayJob", name, namespace, annotations, labels, body)


def crd(group: str, kind: str, plural: str, versions: tuple[str, ...]) -> Obj:
    """A minimal CustomResourceDefinition (no schema): enough for the fake API server to serve
    an operator's kind."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": i == 0,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                    "subresources": {"status": {}},
                }
                for i, version in enumerate(versions)
            ],
        },
    }


def operator_crds() -> list[Obj]:
    """The kinds of the Kubeflow training and MPI operators, KubeRay and Volcano's PodGroup."""
    return [
        crd("kubeflow.org", "PyTorchJob", "pytorchjobs", ("v1",)),
        crd("kubeflow.org", "MPIJob", "mpijobs", ("v2beta1", "v1")),
        crd("ray.io", "RayCluster", "rayclusters", ("v1",)),
        crd("ray.io", "RayJob", "rayjobs", ("v1",)),
        crd("scheduling.volcano.sh", "PodGroup", "podgroups", ("v1beta1",)),
    ]


def volcano_pod_group(name: str, min_member: int, namespace: str = "default") -> Obj:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member},
    }
