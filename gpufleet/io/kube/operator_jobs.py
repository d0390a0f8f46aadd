"""Kubeflow MPIJobs and KubeRay RayClusters and RayJobs, read one object at a time into the
gang of pods their operator makes and the rules it runs them by.

* ``kubeflow.org/v2beta1`` (or ``v1``) ``MPIJob``: a Launcher (``<job>-launcher``) and
  ``replicas`` Workers (``<job>-worker-<i>``), one gang whose minMember is
  ``runPolicy.schedulingPolicy.minAvailable``, else all of them (the MPI operator's
  workers + 1: the launcher counts, with or without ``runLauncherAsWorker``, and Kueue admits
  both pod sets together). The launcher runs the job (its run time is the job's) and is
  retried as the operator's launcher Job is (``runPolicy.backoffLimit``, default 6;
  ``restartPolicy`` default OnFailure); workers (``restartPolicy`` default Never) run until the
  launcher ends.
* ``ray.io/v1`` ``RayCluster``: a head (``<name>-head``) and each worker group's pods
  (``<name>-<group>-worker-<i>``): ``replicas`` held within ``minReplicas``..``maxReplicas``,
  times ``numOfHosts``, none for a suspended group. One gang of all of them (Kueue's pod sets;
  Volcano's and scheduler-plugins' minMember), or of the head and ``minReplicas`` x
  ``numOfHosts`` per group when ``enableInTreeAutoscaling`` is on (Volcano's rule).
* ``ray.io/v1`` ``RayJob``: the cluster of ``rayClusterSpec`` plus, in ``K8sJobMode`` (the
  default), a submitter pod (``<name>-submitter``, ``submitterPodTemplate`` or KubeRay's
  default of 500m CPU and 200Mi) that Kueue counts in the workload; it is not in minMember,
  as KubeRay's Volcano integration leaves it out (it starts once the cluster is up). In
  ``SidecarMode`` the head carries the submitter container's requests. The Ray job's run time
  and failures (the RayJob's own ``gpufleet.dev/`` annotations) are the submitter's (the
  head's without one); ``backoffLimit`` (default 0) retries it on a new cluster;
  ``shutdownAfterJobFinishes`` decides whether the cluster ends with it.

Labels are the operators' (``training.kubeflow.org/...``, ``ray.io/cluster``,
``ray.io/node-type``, ``ray.io/group``). What the objects say about admission (queue, priority,
...) is read by ``workloads`` from each replica's template, as for a PyTorchJob.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.io.errors import quoted
from gpufleet.io.kube.job_rules import (
    SIM_EXIT_CODE_ANNOTATION,
    SIM_FAIL_AFTER_ANNOTATION,
    SIM_FAILURES_ANNOTATION,
    optional_whole,
    restart_policy,
    sim_failures,
)
from gpufleet.io.kube.pods import pods_from_template
from gpufleet.io.kube.pytorch_jobs import (
    KUBEFLOW_JOB_NAME_LABEL,
    KUBEFLOW_REPLICA_INDEX_LABEL,
    KUBEFLOW_REPLICA_TYPE_LABEL,
    TRAINING_RESTART_POLICIES,
    OperatorJob,
    ReplicaPods,
    job_object,
    replica_specs_of,
    run_policy_settings,
)
from gpufleet.io.kube.resources import Annotations
from gpufleet.io.manifests import Context, describe
from gpufleet.model.jobs import DEFAULT_BACKOFF_LIMIT, JobKind, Lifetime, RestartPolicy
from gpufleet.model.workload import TimedPod

MPI_API_VERSIONS = ("kubeflow.org/v2beta1", "kubeflow.org/v1")
RAY_API_VERSION = "ray.io/v1"
MPI_REPLICA_TYPES = ("Launcher", "Worker")
KUBEFLOW_JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
RAY_GROUP_LABEL = "ray.io/group"
RAY_HEAD_GROUP = "headgroup"
SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")
#: KubeRay's submitter container (a submitter pod's, or the head's sidecar in SidecarMode).
SUBMITTER_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "500m", "memory": "200Mi"},
    "limits": {"cpu": "1", "memory": "1Gi"},
}
_FAILURE_ANNOTATIONS = (
    SIM_FAILURES_ANNOTATION,
    SIM_FAIL_AFTER_ANNOTATION,
    SIM_EXIT_CODE_ANNOTATION,
)
_MAX_REPLICAS = 2**31 - 1


# ------------------------------------------------------------------------------------ MPIJob
def read_mpi_job(obj: Mapping[str, Any], source: str, location: str | None = None) -> OperatorJob:
    """An MPIJob; see the module docstring."""
    context, name, namespace, metadata, spec = job_object(
        obj, source, location, "MPIJob", MPI_API_VERSIONS
    )
    specs_path = "spec.mpiReplicaSpecs"
    replica_specs = replica_specs_of(context, spec, specs_path, MPI_REPLICA_TYPES)
    if "Launcher" not in replica_specs:
        raise context.error(f"{specs_path}.Launcher", "required: an MPIJob needs a Launcher")
    run_launcher_as_worker = _flag(context, spec, "runLauncherAsWorker", "spec")
    replicas: list[ReplicaPods] = []
    for replica_type in MPI_REPLICA_TYPES:
        if replica_type not in replica_specs:
            continue
        path = f"{specs_path}.{replica_type}"
        replica_spec = context.mapping(replica_specs[replica_type], path, required=True)
        launcher = replica_type == "Launcher"
        count = context.integer(
            replica_spec.get("replicas", 1 if launcher else 0), f"{path}.replicas", 0
        )
        if launcher and count != 1:
            raise context.error(f"{path}.replicas", f"an MPIJob has one Launcher, got {count}")
        template = context.mapping(replica_spec.get("template"), f"{path}.template", True)
        role = replica_type.lower()
        labels = {
            KUBEFLOW_JOB_NAME_LABEL: name,
            KUBEFLOW_REPLICA_TYPE_LABEL: role,
            KUBEFLOW_JOB_ROLE_LABEL: role,
        }
        names = [f"{name}-launcher"] if launcher else [f"{name}-worker-{i}" for i in range(count)]
        pods = pods_from_template(
            context, metadata, template, f"{path}.template", namespace, names, labels
        )
        # With the launcher as a worker, the operator numbers workers from 1.
        first = 1 if run_launcher_as_worker and not launcher else 0
        indexed = tuple(
            _with_labels(t, {KUBEFLOW_REPLICA_INDEX_LABEL: str(first + i)})
            for i, t in enumerate(pods)
        )
        policy = restart_policy(
            context, replica_spec.get("restartPolicy"), f"{path}.restartPolicy",
            TRAINING_RESTART_POLICIES,
        )  # fmt: skip
        default = RestartPolicy.ON_FAILURE if launcher else RestartPolicy.NEVER
        replicas.append(
            ReplicaPods(
                replica_type,
                template,
                f"{path}.template",
                indexed,
                policy or default,
                lifetime=Lifetime.WORK if launcher else Lifetime.JOB,
                driver=launcher,
            )
        )
    run_policy = context.mapping(spec.get("runPolicy"), "spec.runPolicy")
    min_available, backoff, deadline = run_policy_settings(context, run_policy, "spec.runPolicy")
    return OperatorJob(
        name,
        namespace,
        tuple(replicas),
        min_available,
        kind=JobKind.MPI_JOB,
        # The launcher is a batch/v1 Job: its backoffLimit defaults as a Job's does.
        backoff_limit=DEFAULT_BACKOFF_LIMIT if backoff is None else backoff,
        active_deadline=deadline,
    )


def _with_labels(timed: TimedPod, labels: Mapping[str, str]) -> TimedPod:
    pod = dataclasses.replace(timed.pod, labels={**timed.pod.labels, **labels})
    return dataclasses.replace(timed, pod=pod)


# -------------------------------------------------------------------------------- Ray
def read_ray_cluster(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> OperatorJob:
    """A RayCluster; see the module docstring."""
    context, name, namespace, metadata, spec = job_object(
        obj, source, location, "RayCluster", (RAY_API_VERSION,)
    )
    replicas, min_member = _ray_cluster(context, name, namespace, metadata, spec, "spec", None)
    return OperatorJob(
        name,
        namespace,
        tuple(replicas),
        min_member,
        kind=JobKind.RAY_CLUSTER,
        min_available_field="spec.enableInTreeAutoscaling",
    )


def read_ray_job(obj: Mapping[str, Any], source: str, location: str | None = None) -> OperatorJob:
    """A RayJob; see the module docstring."""
    context, name, namespace, metadata, spec = job_object(
        obj, source, location, "RayJob", (RAY_API_VERSION,)
    )
    if spec.get("clusterSelector"):
        raise context.error(
            "spec.clusterSelector",
            "not supported: a RayJob on an existing cluster (give spec.rayClusterSpec)",
        )
    cluster = context.mapping(spec.get("rayClusterSpec"), "spec.rayClusterSpec", required=True)
    mode = spec.get("submissionMode", "K8sJobMode")
    if mode not in SUBMISSION_MODES:
        raise context.error(
            "spec.submissionMode",
            f"expected one of {', '.join(SUBMISSION_MODES)}, got {describe(mode)}",
        )
    shutdown = _flag(context, spec, "shutdownAfterJobFinishes", "spec")
    backoff = optional_whole(context, spec, "backoffLimit", "spec")
    deadline = optional_whole(context, spec, "activeDeadlineSeconds", "spec", 1)
    # The RayJob's own failure annotations are its Ray job's: the driver's, no other pod's.
    owner_annotations = context.string_map(metadata.get("annotations"), "metadata.annotations")
    job_failures = sim_failures(
        context,
        Annotations(
            {k: v for k, v in owner_annotations.items() if k in _FAILURE_ANNOTATIONS},
            {k: f"metadata.annotations[{k}]" for k in owner_annotations},
        ),
    )
    cluster_owner = {
        **metadata,
        "annotations": {
            k: v for k, v in owner_annotations.items() if k not in _FAILURE_ANNOTATIONS
        },
    }
    rest = Lifetime.JOB if shutdown else Lifetime.FOREVER
    sidecar = mode == "SidecarMode"
    replicas, min_member = _ray_cluster(
        context, name, namespace, cluster_owner, cluster, "spec.rayClusterSpec", sidecar
    )
    driver = "submitter" if mode == "K8sJobMode" else "head"
    if mode == "K8sJobMode":
        template, path = _submitter_template(context, spec, cluster)
        pods = pods_from_template(
            context, metadata, template, path, namespace, [f"{name}-submitter"],
            {RAY_CLUSTER_LABEL: name},
        )  # fmt: skip
        replicas.append(ReplicaPods("submitter", template, path, tuple(pods), RestartPolicy.NEVER))
        if min_member is None:
            min_member = sum(len(r.pods) for r in replicas[:-1])
    replicas = [
        dataclasses.replace(
            r,
            lifetime=Lifetime.WORK if r.replica_type == driver else rest,
            driver=r.replica_type == driver,
            failures=job_failures if r.replica_type == driver else r.failures,
        )
        for r in replicas
    ]
    return OperatorJob(
        name,
        namespace,
        tuple(replicas),
        min_member,
        kind=JobKind.RAY_JOB,
        backoff_limit=0 if backoff is None else backoff,
        active_deadline=None if deadline is None else float(deadline),
        min_available_field="spec.rayClusterSpec",
    )


def _submitter_template(
    context: Context, spec: Mapping[str, Any], cluster: Mapping[str, Any]
) -> tuple[Mapping[str, Any], str]:
    given = spec.get("submitterPodTemplate")
    if given is not None:
        return context.mapping(given, "spec.submitterPodTemplate"), "spec.submitterPodTemplate"
    return (
        {"spec": {"restartPolicy": "Never", "containers": [_submitter_container()]}},
        "spec.submitterPodTemplate (KubeRay's default)",
    )


def _submitter_container() -> dict[str, Any]:
    return {
        "name": "ray-job-submitter",
        "resources": {k: dict(v) for k, v in SUBMITTER_RESOURCES.items()},
    }


def _flag(context: Context, spec: Mapping[str, Any], key: str, path: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise context.error(f"{path}.{key}", f"expected true or false, got {describe(value)}")
    return value


def _ray_cluster(
    context: Context,
    name: str,
    namespace: str,
    owner: Mapping[str, Any],
    spec: Mapping[str, Any],
    path: str,
    sidecar: bool | None,
) -> tuple[list[ReplicaPods], int | None]:
    """The head and worker groups of a RayCluster spec (``path``), and the gang's minMember
    (None: all pods)."""
    head_path = f"{path}.headGroupSpec"
    head = context.mapping(spec.get("headGroupSpec"), head_path, required=True)
    head_template = dict(context.mapping(head.get("template"), f"{head_path}.template", True))
    if sidecar:
        spec_path = f"{head_path}.template.spec"
        head_spec = dict(context.mapping(head_template.get("spec"), spec_path))
        containers = list(context.sequence(head_spec.get("containers"), f"{spec_path}.containers"))
        head_spec["containers"] = [*containers, _submitter_container()]
        head_template["spec"] = head_spec
    cluster_labels = {RAY_CLUSTER_LABEL: name}
    replicas = [
        _ray_group(
            context, owner, head_template, f"{head_path}.template", namespace, [f"{name}-head"],
            {**cluster_labels, RAY_NODE_TYPE_LABEL: "head", RAY_GROUP_LABEL: RAY_HEAD_GROUP},
            "head",
        )
    ]  # fmt: skip
    autoscaling = _flag(context, spec, "enableInTreeAutoscaling", path)
    groups_path = f"{path}.workerGroupSpecs"
    seen: set[str] = set()
    minimum = 1
    for g, item in enumerate(context.sequence(spec.get("workerGroupSpecs"), groups_path)):
        where = f"{groups_path}[{g}]"
        group = context.mapping(item, where)
        group_name = context.text(group.get("groupName"), f"{where}.groupName")
        if group_name in seen or group_name in ("head", "submitter"):
            raise context.error(
                f"{where}.groupName",
                f"group name {quoted(group_name)} is taken (each group needs its own name; 'head' "
                "and 'submitter' are reserved)",
            )
        seen.add(group_name)
        desired, least = _group_size(context, group, where)
        template = context.mapping(group.get("template"), f"{where}.template", True)
        names = [f"{name}-{group_name}-worker-{i}" for i in range(desired)]
        labels = {**cluster_labels, RAY_NODE_TYPE_LABEL: "worker", RAY_GROUP_LABEL: group_name}
        replicas.append(
            _ray_group(
                context, owner, template, f"{where}.template", namespace, names, labels, group_name
            )
        )
        minimum += least
    min_member = minimum if autoscaling else None
    if min_member is not None and min_member > sum(len(r.pods) for r in replicas):
        min_member = None
    return replicas, min_member


def _group_size(context: Context, group: Mapping[str, Any], where: str) -> tuple[int, int]:
    """(pods KubeRay makes for a worker group, pods of it an autoscaled gang needs)."""
    replicas = optional_whole(context, group, "replicas", where)
    least = optional_whole(context, group, "minReplicas", where) or 0
    most = optional_whole(context, group, "maxReplicas", where)
    most = _MAX_REPLICAS if most is None else most
    if least > most:
        raise context.error(
            f"{where}.minReplicas", f"expected at most maxReplicas ({most}), got {least}"
        )
    hosts = optional_whole(context, group, "numOfHosts", where, 1) or 1
    if _flag(context, group, "suspend", where):
        return 0, 0
    wanted = min(max(replicas or 0, least), most)
    return wanted * hosts, least * hosts


def _ray_group(
    context: Context,
    owner: Mapping[str, Any],
    template: Mapping[str, Any],
    template_path: str,
    namespace: str,
    names: Sequence[str],
    labels: Mapping[str, str],
    role: str,
) -> ReplicaPods:
    pods = pods_from_template(context, owner, template, template_path, namespace, names, labels)
    spec = template.get("spec") or {}
    policy = restart_policy(
        context, spec.get("restartPolicy"), f"{template_path}.spec.restartPolicy"
    )
    return ReplicaPods(role, template, template_path, tuple(pods), policy or RestartPolicy.ALWAYS)
