"""Kubeflow PyTorchJobs, read one object at a time into the gang of pods their operator makes
and the rules it runs them by, and the types every operator's job is read into
(:class:`ReplicaPods`, :data:`OperatorJob`; MPIJobs and KubeRay objects are ``operator_jobs``').

``kubeflow.org/v1`` ``PyTorchJob``: the pods of its Master and Worker replica sets, through the
pod-template code of ``kube.pods``, and its controller's rules (per replica type
``restartPolicy``, ``runPolicy.backoffLimit`` and ``activeDeadlineSeconds``). What the job says
about admission (queue, priority, ...) is read by ``workloads`` from each replica's template.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.io.errors import quoted, shorten
from gpufleet.io.kube.job_rules import optional_whole, restart_policy
from gpufleet.io.kube.pods import pods_from_template
from gpufleet.io.manifests import Context, named_object
from gpufleet.model.jobs import JobKind, JobSpec, Lifetime, ReplicaSet, RestartPolicy, SimFailures
from gpufleet.model.workload import TimedPod

KUBEFLOW_API = "kubeflow.org/v1"
PYTORCH_REPLICA_TYPES = ("Master", "Worker")
KUBEFLOW_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"


@dataclass(frozen=True, slots=True)
class ReplicaPods:
    """The pods of one replica set of an operator's job (a PyTorchJob's Workers, a Ray worker
    group), where its template sits, and the rules its controller applies to them."""

    replica_type: str  # Master, Worker, Launcher, head, a Ray worker group, submitter
    template: Mapping[str, Any]
    template_path: str  # spec.pytorchReplicaSpecs.Worker.template
    pods: tuple[TimedPod, ...]
    restart_policy: RestartPolicy = RestartPolicy.ON_FAILURE
    lifetime: Lifetime = Lifetime.WORK
    driver: bool = True
    #: Annotations that give the failure model instead of the pods' own (a RayJob's, for the
    #: pod that runs its Ray job).
    failures: SimFailures | None = None

    def replica_set(self) -> ReplicaSet:
        failures = self.failures
        if failures is None:
            failures = self.pods[0].failures if self.pods else SimFailures()
        names = tuple(t.pod.name for t in self.pods)
        return ReplicaSet(
            self.replica_type, names, self.restart_policy, failures, self.lifetime, self.driver
        )


@dataclass(frozen=True, slots=True)
class PyTorchJob:
    """An operator's job (a Kubeflow PyTorchJob or MPIJob, a KubeRay RayCluster or RayJob): one
    gang of its replica sets' pods, and its controller's rules."""

    name: str
    namespace: str
    replicas: tuple[ReplicaPods, ...]
    min_available: int | None = None  # spec.runPolicy.schedulingPolicy.minAvailable
    kind: JobKind = JobKind.PYTORCH_JOB
    backoff_limit: int | None = None
    active_deadline: float | None = None
    #: Where min_available came from, for errors.
    min_available_field: str = "spec.runPolicy.schedulingPolicy.minAvailable"

    @property
    def pods(self) -> list[TimedPod]:
        return [pod for replica in self.replicas for pod in replica.pods]

    def job_spec(self) -> JobSpec:
        return JobSpec(
            self.kind,
            self.name,
            tuple(r.replica_set() for r in self.replicas if r.pods),
            backoff_limit=self.backoff_limit,
            active_deadline=self.active_deadline,
        )


OperatorJob = PyTorchJob
TRAINING_RESTART_POLICIES = (
    RestartPolicy.ALWAYS,
    RestartPolicy.ON_FAILURE,
    RestartPolicy.NEVER,
    RestartPolicy.EXIT_CODE,
)


def job_object(
    obj: Mapping[str, Any],
    source: str,
    location: str | None,
    kind: str,
    versions: Sequence[str],
) -> tuple[Context, str, str, Mapping[str, Any], Mapping[str, Any]]:
    """An operator job's context, name, namespace, metadata and spec, its apiVersion checked."""
    context, name, namespace = named_object(obj, source, location, kind, versions)
    metadata = context.mapping(obj.get("metadata"), "metadata")
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    return context, name, namespace, metadata, spec


def replica_specs_of(
    context: Context, spec: Mapping[str, Any], path: str, types: Sequence[str]
) -> Mapping[str, Any]:
    """The mapping at ``path`` (``spec.<field>``) of replica type to its spec, every type one
    of ``types``."""
    replica_specs = context.mapping(spec.get(path.removeprefix("spec.")), path, required=True)
    for replica_type in replica_specs:
        if replica_type not in types:
            raise context.error(
                f"{path}.{shorten(str(replica_type), 100)}",
                f"expected replica type {' or '.join(types)}, got {quoted(replica_type)}",
            )
    return replica_specs


def read_pytorch_job(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> PyTorchJob:
    """A ``kubeflow.org/v1`` PyTorchJob; pods are ``<job>-master-<i>`` and ``<job>-worker-<i>``.
    Each replica type restarts as its ``restartPolicy`` says (default OnFailure); the job
    succeeds when its Master does (without one: when all Workers do)."""
    context, name, namespace, metadata, spec = job_object(
        obj, source, location, "PyTorchJob", (KUBEFLOW_API,)
    )
    specs_path = "spec.pytorchReplicaSpecs"
    replica_specs = replica_specs_of(context, spec, specs_path, PYTORCH_REPLICA_TYPES)
    if not replica_specs:
        raise context.error(specs_path, "required: expected Master and/or Worker, got none")
    has_master = "Master" in replica_specs
    replicas: list[ReplicaPods] = []
    for replica_type in PYTORCH_REPLICA_TYPES:
        if replica_type not in replica_specs:
            continue
        path = f"{specs_path}.{replica_type}"
        replica_spec = context.mapping(replica_specs[replica_type], path, required=True)
        count = context.integer(replica_spec.get("replicas", 1), f"{path}.replicas", 0)
        template = context.mapping(replica_spec.get("template"), f"{path}.template", True)
        role = replica_type.lower()
        labels = {KUBEFLOW_JOB_NAME_LABEL: name, KUBEFLOW_REPLICA_TYPE_LABEL: role}
        names = [f"{name}-{role}-{i}" for i in range(count)]
        pods = pods_from_template(
            context, metadata, template, f"{path}.template", namespace, names, labels
        )
        indexed = tuple(
            dataclasses.replace(
                timed,
                pod=dataclasses.replace(
                    timed.pod, labels={**timed.pod.labels, KUBEFLOW_REPLICA_INDEX_LABEL: str(i)}
                ),
            )
            for i, timed in enumerate(pods)
        )
        policy = restart_policy(
            context,
            replica_spec.get("restartPolicy"),
            f"{path}.restartPolicy",
            TRAINING_RESTART_POLICIES,
        )
        replicas.append(
            ReplicaPods(
                replica_type,
                template,
                f"{path}.template",
                indexed,
                policy or RestartPolicy.ON_FAILURE,
                driver=replica_type == "Master" or not has_master,
            )
        )
    run_policy = context.mapping(spec.get("runPolicy"), "spec.runPolicy")
    min_available, backoff, deadline = run_policy_settings(context, run_policy, "spec.runPolicy")
    return PyTorchJob(
        name,
        namespace,
        tuple(replicas),
        min_available,
        backoff_limit=backoff,
        active_deadline=deadline,
    )


def run_policy_settings(
    context: Context, run_policy: Mapping[str, Any], path: str
) -> tuple[int | None, int | None, float | None]:
    """A Kubeflow runPolicy's schedulingPolicy.minAvailable, backoffLimit (None: no limit)
    and activeDeadlineSeconds."""
    policy_path = f"{path}.schedulingPolicy"
    scheduling = context.mapping(run_policy.get("schedulingPolicy"), policy_path)
    min_available = None
    if scheduling.get("minAvailable") is not None:
        min_available = context.integer(
            scheduling["minAvailable"], f"{policy_path}.minAvailable", 1
        )
    backoff = optional_whole(context, run_policy, "backoffLimit", path)
    deadline = optional_whole(context, run_policy, "activeDeadlineSeconds", path, 1)
    return min_available, backoff, None if deadline is None else float(deadline)


def pytorch_job_pods(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> list[TimedPod]:
    """The pods of a PyTorchJob, master first."""
    return read_pytorch_job(obj, source, location).pods
