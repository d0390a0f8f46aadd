"""The admission objects of a scenario: Queues, PriorityClasses, PodGroups, ResourceQuotas, and
Kubeflow PyTorchJobs, read one object at a time.

Owns the reading of one object (already loaded by ``manifests``) into a model value:

* ``gpufleet.dev/v1alpha1`` ``Queue``: parent, quota / borrowingLimit / lendingLimit maps of
  ``cpu``, ``memory``, ``nvidia.com/gpu``, ``nvidia.com/gpu.<model>`` (GPU counts may be
  fractional: ``0.5`` is 500 milli-GPU) and extended resources such as ``rdma/hca`` (whole
  units), weight and default namespaces;
* ``scheduling.k8s.io/v1`` ``PriorityClass`` (value, preemptionPolicy, globalDefault: top-level
  fields, as in Kubernetes);
* ``PodGroup`` of ``gpufleet.dev/v1alpha1`` or of scheduler-plugins
  (``scheduling.x-k8s.io/v1alpha1``): ``spec.minMember``;
* ``v1`` ``ResourceQuota``: the CPU, memory, GPU and extended resource (``requests.rdma/hca``)
  caps of ``spec.hard`` (other keys ignored);
* ``kubeflow.org/v1`` ``PyTorchJob``: the pods of its Master and Worker replica sets, through the
  pod-template code of ``kube_pods``, and its controller's rules (per replica type
  ``restartPolicy``, ``runPolicy.backoffLimit`` and ``activeDeadlineSeconds``);
* what a workload object (or its pod template; the object wins) says about admission: the
  ``gpufleet.dev/queue`` and pod-group labels, ``priorityClassName`` / ``priority``, and the
  ``gpufleet.dev/`` annotations preemptible, expected-runtime, checkpoint-interval, topology and
  topology-level, each kept with the field it came from (:func:`workload_settings`).

An unknown field of gpufleet's own objects (a Queue, the gpufleet PodGroup) and of a
PriorityClass's top level is an error with a did-you-mean, or for Kueue's names a hint at where
gpufleet keeps that setting (``fields``).

It does not check names across objects, resolve queues or priority classes, assemble gangs or
validate the queue tree: ``workloads`` does all of that for a whole scenario.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any, Generic, TypeVar

from gpufleet.io.errors import InputError
from gpufleet.io.fields import (
    BORROW_WITHIN_COHORT_FIELDS,
    FLAVOR_FUNGIBILITY_FIELDS,
    KUEUE_PREEMPTION_HINTS,
    KUEUE_RESOURCE_LIMITS,
    KUEUE_SPEC_HINTS,
    POD_GROUP_SPEC_FIELDS,
    PRIORITY_CLASS_FIELDS,
    QUEUE_PREEMPTION_FIELDS,
    QUEUE_SPEC_FIELDS,
    check_fields,
    check_object_fields,
    quota_value_hint,
)
from gpufleet.io.job_rules import optional_whole, restart_policy
from gpufleet.io.kube_pods import EXPECTED_RUNTIME_ANNOTATION, pods_from_template
from gpufleet.io.kube_resources import is_extended_resource
from gpufleet.io.manifests import Context, describe, object_name
from gpufleet.io.names import NameRule, rule_of
from gpufleet.io.quantities import (
    parse_count,
    parse_cpu_milli,
    parse_duration_seconds,
    parse_memory_mib,
    parse_quantity,
)
from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.jobs import JobKind, JobSpec, Lifetime, ReplicaSet, RestartPolicy, SimFailures
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.priorities import PreemptionPolicy, PriorityClass
from gpufleet.model.queues import (
    QUEUE_LABEL,
    BorrowWithinCohortPolicy,
    FlavorFungibility,
    FungibilityPolicy,
    Queue,
    QueueingStrategy,
    QueuePreemption,
    ReclaimPolicy,
    ResourceQuota,
    WithinQueuePolicy,
)
from gpufleet.model.resources import CPU, GPU, GPU_MODEL_PREFIX, MEMORY
from gpufleet.model.workload import (
    COSCHEDULING_POD_GROUP_LABEL,
    POD_GROUP_LABEL,
    PodGroup,
    TimedPod,
    TopologyMode,
    TopologyRequest,
)

T = TypeVar("T")

QUEUE_NAME = rule_of("Queue")
GPUFLEET_API = "gpufleet.dev/v1alpha1"
COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
PRIORITY_CLASS_API = "scheduling.k8s.io/v1"
KUBEFLOW_API = "kubeflow.org/v1"
API_VERSIONS: dict[str, tuple[str, ...]] = {
    "Queue": (GPUFLEET_API,),
    "PriorityClass": (PRIORITY_CLASS_API,),
    "PodGroup": (GPUFLEET_API, COSCHEDULING_API),
    "ResourceQuota": ("v1",),
    "PyTorchJob": (KUBEFLOW_API,),
}
QUOTA_RESOURCES = (
    f"{CPU}, {MEMORY}, {GPU}, {GPU_MODEL_PREFIX}<model> or an extended resource such as rdma/hca"
)
PYTORCH_REPLICA_TYPES = ("Master", "Worker")
KUBEFLOW_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
PREEMPTIBLE_ANNOTATION = "gpufleet.dev/preemptible"
MIXED_MODELS_ANNOTATION = "gpufleet.dev/mixed-gpu-models"
CHECKPOINT_INTERVAL_ANNOTATION = "gpufleet.dev/checkpoint-interval"
TOPOLOGY_ANNOTATION = "gpufleet.dev/topology"
TOPOLOGY_LEVEL_ANNOTATION = "gpufleet.dev/topology-level"
#: Short names of topology levels; any other level is taken as a node label key.
TOPOLOGY_LEVELS = {
    "nvlink": GFD_LABELS.NVLINK_DOMAIN,
    "rack": GFD_LABELS.RACK,
    "zone": GFD_LABELS.ZONE,
}
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
#: ResourceQuota ``spec.hard`` keys read, and the model key each one caps.
HARD_KEYS = {
    f"requests.{GPU}": GPU,
    GPU: GPU,
    "requests.cpu": CPU,
    "cpu": CPU,
    "requests.memory": MEMORY,
    "memory": MEMORY,
}


def _named(
    obj: Mapping[str, Any], source: str, location: str | None, kind: str, namespaced: bool
) -> tuple[Context, str, str]:
    """The object's context (naming it), name and namespace, with its apiVersion checked."""
    context = Context(source, location)
    name, namespace = object_name(context, obj, kind)
    namespace = namespace or "default"
    context = context.naming(f"{kind} {namespace}/{name}" if namespaced else f"{kind} {name}")
    api_version = obj.get("apiVersion")
    expected = API_VERSIONS[kind]
    if api_version is not None and api_version not in expected:
        raise context.error(
            "apiVersion",
            f"expected {' or '.join(expected)} for a {kind}, got {describe(api_version)}",
        )
    return context, name, namespace


# ------------------------------------------------------------------------------------- Queue
def queue_from_object(obj: Mapping[str, Any], source: str, location: str | None = None) -> Queue:
    """A ``gpufleet.dev/v1alpha1`` Queue (cluster-scoped: its namespace is ignored). An
    unknown field is an error, with a hint (Kueue's names say where gpufleet keeps them)."""
    context, name, _ = _named(obj, source, location, "Queue", namespaced=False)
    check_object_fields(context, obj, QUEUE_SPEC_FIELDS)
    spec = context.mapping(obj.get("spec"), "spec")
    check_fields(context, spec, "spec", QUEUE_SPEC_FIELDS, KUEUE_SPEC_HINTS)
    parent = spec.get("parent")
    weight = spec.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise context.error("spec.weight", f"expected a positive number, got {describe(weight)}")
    if not math.isfinite(weight) or weight <= 0:
        raise context.error("spec.weight", f"expected a positive number, got {weight}")
    namespaces: list[str] = []
    for i, item in enumerate(context.sequence(spec.get("namespaces"), "spec.namespaces")):
        namespaces.append(context.name(item, f"spec.namespaces[{i}]", NameRule.LABEL))
    return Queue(
        name,
        parent=None if parent is None else context.name(parent, "spec.parent", QUEUE_NAME, "Queue"),
        nominal=quota_map(context, spec.get("quota"), "spec.quota"),
        borrowing_limit=quota_map(context, spec.get("borrowingLimit"), "spec.borrowingLimit"),
        lending_limit=quota_map(context, spec.get("lendingLimit"), "spec.lendingLimit"),
        weight=float(weight),
        namespaces=tuple(namespaces),
        preemption=_queue_preemption(context, spec.get("preemption")),
        queueing_strategy=_choice(
            context,
            spec.get("queueingStrategy", QueueingStrategy.BEST_EFFORT_FIFO.value),
            QueueingStrategy,
            "spec.queueingStrategy",
        ),
        gpu_models=_gpu_models(context, spec.get("gpuModels")),
        fungibility=_fungibility(context, spec.get("flavorFungibility")),
    )


E = TypeVar("E", bound=StrEnum)


def _choice(context: Context, value: object, kind: type[E], field: str) -> E:
    """One of an enum's values, as Kueue spells them."""
    allowed = [member.value for member in kind]
    if not isinstance(value, str) or value not in allowed:
        raise context.error(field, f"expected {' or '.join(allowed)}, got {describe(value)}")
    return kind(value)


def _queue_preemption(context: Context, value: object) -> QueuePreemption:
    """``spec.preemption``: Kueue's ClusterQueue preemption policies (``withinQueue``, or
    Kueue's spelling ``withinClusterQueue``; ``reclaimWithinCohort``; ``borrowWithinCohort``
    with ``policy`` and ``maxPriorityThreshold``); gpufleet's defaults where absent."""
    path = "spec.preemption"
    spec = context.mapping(value, path)
    check_fields(context, spec, path, QUEUE_PREEMPTION_FIELDS, KUEUE_PREEMPTION_HINTS)
    default = QueuePreemption()
    if "withinQueue" in spec and "withinClusterQueue" in spec:
        raise context.error(
            f"{path}.withinClusterQueue", "give withinQueue or withinClusterQueue, not both"
        )
    within_key = "withinClusterQueue" if "withinClusterQueue" in spec else "withinQueue"
    within = _choice(
        context,
        spec.get(within_key, default.within_queue.value),
        WithinQueuePolicy,
        f"{path}.{within_key}",
    )
    reclaim = _choice(
        context,
        spec.get("reclaimWithinCohort", default.reclaim_within_cohort.value),
        ReclaimPolicy,
        f"{path}.reclaimWithinCohort",
    )
    borrow_spec = context.mapping(spec.get("borrowWithinCohort"), f"{path}.borrowWithinCohort")
    check_fields(context, borrow_spec, f"{path}.borrowWithinCohort", BORROW_WITHIN_COHORT_FIELDS)
    borrow = _choice(
        context,
        borrow_spec.get("policy", default.borrow_within_cohort.value),
        BorrowWithinCohortPolicy,
        f"{path}.borrowWithinCohort.policy",
    )
    threshold = borrow_spec.get("maxPriorityThreshold")
    if threshold is not None:
        threshold = context.integer(threshold, f"{path}.borrowWithinCohort.maxPriorityThreshold")
    if reclaim is ReclaimPolicy.NEVER and borrow is not BorrowWithinCohortPolicy.NEVER:
        raise context.error(
            f"{path}.borrowWithinCohort.policy",
            "borrowWithinCohort needs reclaimWithinCohort other than Never (as in Kueue)",
        )
    return QueuePreemption(within, reclaim, borrow, threshold)


def _gpu_models(context: Context, value: object) -> tuple[str, ...]:
    """``spec.gpuModels``: the GPU models its workloads try, in order."""
    names: list[str] = []
    for i, item in enumerate(context.sequence(value, "spec.gpuModels")):
        name = context.text(item, f"spec.gpuModels[{i}]").strip()
        if not name:
            raise context.error(f"spec.gpuModels[{i}]", "expected a GPU model name such as H100")
        if name in names:
            raise context.error(f"spec.gpuModels[{i}]", f"{name} is listed twice")
        names.append(name)
    return tuple(names)


def _fungibility(context: Context, value: object) -> FlavorFungibility:
    """``spec.flavorFungibility``: Kueue's whenCanBorrow / whenCanPreempt."""
    path = "spec.flavorFungibility"
    spec = context.mapping(value, path)
    check_fields(context, spec, path, FLAVOR_FUNGIBILITY_FIELDS)
    default = FlavorFungibility()
    return FlavorFungibility(
        _choice(
            context,
            spec.get("whenCanBorrow", default.when_can_borrow.value),
            FungibilityPolicy,
            f"{path}.whenCanBorrow",
        ),
        _choice(
            context,
            spec.get("whenCanPreempt", default.when_can_preempt.value),
            FungibilityPolicy,
            f"{path}.whenCanPreempt",
        ),
    )


def quota_map(context: Context, value: object, path: str) -> dict[str, int]:
    """A map of quota resource name -> quantity, in model units by resource key."""
    amounts: dict[str, int] = {}
    for resource, quantity in context.mapping(value, path).items():
        field = f"{path}[{resource}]"
        kueue = quota_value_hint(quantity)
        if kueue is not None:
            raise context.error(field, f"expected an amount, got a mapping; {kueue}")
        if resource in KUEUE_RESOURCE_LIMITS:
            raise context.error(
                field, f"unknown resource {resource!r}; {KUEUE_RESOURCE_LIMITS[resource]}"
            )
        if resource == CPU:
            amounts[CPU] = context.parse(parse_cpu_milli, quantity, field)
        elif resource == MEMORY:
            amounts[MEMORY] = context.parse(parse_memory_mib, quantity, field)
        elif resource == GPU or (
            resource.startswith(GPU_MODEL_PREFIX) and len(resource) > len(GPU_MODEL_PREFIX)
        ):
            amounts[resource] = gpu_milli(context, quantity, field)
        elif is_extended_resource(resource):
            amounts[resource] = context.parse(parse_count, quantity, field)
        else:
            raise context.error(
                field, f"unknown resource {resource!r} (expected {QUOTA_RESOURCES})"
            )
    return amounts


def gpu_milli(context: Context, value: object, field: str) -> int:
    """A GPU count (``2``, ``0.5``) in milli-GPU, rounded up."""
    amount: Fraction = context.parse(parse_quantity, value, field)
    if amount < 0:
        raise context.error(field, f"must not be negative, got {value!r}")
    return math.ceil(amount * MILLI_PER_GPU)


# ----------------------------------------------------------------------------- PriorityClass
def priority_class_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> PriorityClass:
    """A ``scheduling.k8s.io/v1`` PriorityClass (``value`` etc. are top-level, not in spec)."""
    context, name, _ = _named(obj, source, location, "PriorityClass", namespaced=False)
    check_fields(context, obj, None, PRIORITY_CLASS_FIELDS)
    if "value" not in obj:
        raise context.error("value", "required: expected a whole number, got nothing")
    value = context.integer(obj["value"], "value")
    policy_text = context.text(
        obj.get("preemptionPolicy"),
        "preemptionPolicy",
        PreemptionPolicy.PREEMPT_LOWER_PRIORITY.value,
    )
    policies = [p.value for p in PreemptionPolicy]
    if policy_text not in policies:
        raise context.error(
            "preemptionPolicy", f"expected {' or '.join(policies)}, got {policy_text!r}"
        )
    global_default = obj.get("globalDefault", False)
    if not isinstance(global_default, bool):
        raise context.error(
            "globalDefault", f"expected true or false, got {describe(global_default)}"
        )
    return PriorityClass(name, value, PreemptionPolicy(policy_text), global_default)


# ---------------------------------------------------------------------- PodGroup, ResourceQuota
def pod_group_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> PodGroup:
    """A PodGroup of ``gpufleet.dev/v1alpha1`` or scheduler-plugins: ``spec.minMember`` (the
    fields of gpufleet's own are checked: an unknown one is an error)."""
    context, name, namespace = _named(obj, source, location, "PodGroup", namespaced=True)
    ours = obj.get("apiVersion") in (None, GPUFLEET_API)
    if ours:
        check_object_fields(context, obj, POD_GROUP_SPEC_FIELDS)
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    if ours:
        check_fields(context, spec, "spec", POD_GROUP_SPEC_FIELDS)
    if "minMember" not in spec:
        raise context.error("spec.minMember", "required: expected a whole number >= 1, got nothing")
    return PodGroup(name, namespace, context.integer(spec["minMember"], "spec.minMember", 1))


def resource_quota_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> ResourceQuota:
    """A ``v1`` ResourceQuota's CPU, memory and GPU caps (the smaller where two keys cap one)."""
    context, name, namespace = _named(obj, source, location, "ResourceQuota", namespaced=True)
    spec = context.mapping(obj.get("spec"), "spec")
    hard: dict[str, int] = {}
    for key, quantity in context.mapping(spec.get("hard"), "spec.hard").items():
        resource = HARD_KEYS.get(key)
        named = key.removeprefix("requests.")
        extended = resource is None and key != named and is_extended_resource(named)
        if extended:
            resource = named  # Kubernetes quotas extended resources by requests only
        if resource is None:
            continue
        field = f"spec.hard[{key}]"
        if extended:
            amount = context.parse(parse_count, quantity, field)
        elif resource == CPU:
            amount = context.parse(parse_cpu_milli, quantity, field)
        elif resource == MEMORY:
            amount = context.parse(parse_memory_mib, quantity, field)
        else:
            amount = gpu_milli(context, quantity, field)
        hard[resource] = min(amount, hard.get(resource, amount))
    return ResourceQuota(name, namespace, hard)


# -------------------------------------------------------------------------------- PyTorchJob
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


def read_pytorch_job(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> PyTorchJob:
    """A ``kubeflow.org/v1`` PyTorchJob; pods are ``<job>-master-<i>`` and ``<job>-worker-<i>``.
    Each replica type restarts as its ``restartPolicy`` says (default OnFailure); the job
    succeeds when its Master does (without one: when all Workers do)."""
    context, name, namespace = _named(obj, source, location, "PyTorchJob", namespaced=True)
    metadata = context.mapping(obj.get("metadata"), "metadata")
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    specs_path = "spec.pytorchReplicaSpecs"
    replica_specs = context.mapping(spec.get("pytorchReplicaSpecs"), specs_path, required=True)
    for replica_type in replica_specs:
        if replica_type not in PYTORCH_REPLICA_TYPES:
            raise context.error(
                f"{specs_path}.{replica_type}",
                f"expected replica type Master or Worker, got {replica_type!r}",
            )
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


# ------------------------------------------------------------------ what a workload object says
@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """A value read from an object, with the object and field it came from (for errors)."""

    value: T
    context: Context
    field: str | None

    @property
    def where(self) -> str:
        """``file:document 1 (line 1), Pod ml/x (metadata.labels[...])``, for other errors."""
        place = self.context.source
        if self.context.location is not None:
            place = f"{place}:{self.context.location}"
        return place if self.field is None else f"{place} ({self.field})"

    def error(self, message: str) -> InputError:
        return self.context.error(self.field, message)


@dataclass(frozen=True, slots=True)
class WorkloadSettings:
    """What an object says about the workload its pods join (None: it does not say)."""

    labels: dict[str, str]
    group: Setting[str] | None = None
    queue: Setting[str] | None = None
    priority_class: Setting[str] | None = None
    priority: Setting[int] | None = None
    preemptible: Setting[bool] | None = None
    expected_runtime: Setting[float] | None = None
    checkpoint_interval: Setting[float] | None = None
    topology: Setting[TopologyRequest] | None = None
    mixed_models: Setting[bool] | None = None


def workload_settings(
    context: Context,
    metadata: Mapping[str, Any],
    pod_spec: Mapping[str, Any],
    pod_spec_path: str,
    template_metadata: Mapping[str, Any] | None = None,
    template_metadata_path: str = "spec.template.metadata",
) -> WorkloadSettings:
    """The admission settings of an object (``metadata``) and its pod template, if it has one;
    the object's labels and annotations win over the template's."""
    labels: dict[str, Setting[str]] = {}
    annotations: dict[str, Setting[str]] = {}
    layers = [(metadata, "metadata")]
    if template_metadata is not None:
        layers.insert(0, (template_metadata, template_metadata_path))
    for layer, path in layers:
        for into, what in ((labels, "labels"), (annotations, "annotations")):
            for key, value in context.string_map(layer.get(what), f"{path}.{what}").items():
                into[key] = Setting(value, context, f"{path}.{what}[{key}]")
    group = labels.get(POD_GROUP_LABEL)
    other = labels.get(COSCHEDULING_POD_GROUP_LABEL)
    if group is not None and other is not None and group.value != other.value:
        raise other.error(
            f"names pod group {other.value!r}, but {POD_GROUP_LABEL} names {group.value!r}"
        )
    class_path, priority_path = f"{pod_spec_path}.priorityClassName", f"{pod_spec_path}.priority"
    class_name, priority = pod_spec.get("priorityClassName"), pod_spec.get("priority")
    return WorkloadSettings(
        {key: setting.value for key, setting in labels.items()},
        group=group or other,
        queue=labels.get(QUEUE_LABEL),
        priority_class=None
        if class_name is None
        else Setting(context.name(class_name, class_path), context, class_path),
        priority=None
        if priority is None
        else Setting(context.integer(priority, priority_path), context, priority_path),
        preemptible=_parsed(annotations.get(PREEMPTIBLE_ANNOTATION), _boolean),
        expected_runtime=_parsed(
            annotations.get(EXPECTED_RUNTIME_ANNOTATION), parse_duration_seconds
        ),
        checkpoint_interval=_parsed(
            annotations.get(CHECKPOINT_INTERVAL_ANNOTATION), parse_duration_seconds
        ),
        topology=_topology(
            annotations.get(TOPOLOGY_ANNOTATION), annotations.get(TOPOLOGY_LEVEL_ANNOTATION)
        ),
        mixed_models=_parsed(annotations.get(MIXED_MODELS_ANNOTATION), _boolean),
    )


def _parsed(setting: Setting[str] | None, parser: Callable[[str], T]) -> Setting[T] | None:
    if setting is None:
        return None
    value = setting.context.parse(parser, setting.value, setting.field or "")
    return Setting(value, setting.context, setting.field)


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f'expected "true" or "false", got {text!r}')
    return value == "true"


def _topology(
    mode: Setting[str] | None, level: Setting[str] | None
) -> Setting[TopologyRequest] | None:
    if mode is None:
        if level is not None:
            raise level.error(
                f"a topology level needs {TOPOLOGY_ANNOTATION}: required or preferred"
            )
        return None
    modes = [m.value for m in TopologyMode]
    if mode.value not in modes:
        raise mode.error(f"expected {' or '.join(modes)}, got {mode.value!r}")
    key = TOPOLOGY_LEVELS["nvlink"]
    if level is not None:
        key = TOPOLOGY_LEVELS.get(level.value, level.value)
        if not _LABEL_KEY.match(key):
            raise level.error(
                f"expected {', '.join(TOPOLOGY_LEVELS)} or a node label key, got {level.value!r}"
            )
    return Setting(TopologyRequest(TopologyMode(mode.value), key), mode.context, mode.field)
