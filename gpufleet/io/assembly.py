"""The assembly of a scenario's objects into workloads: the one way every path builds them.

Owns :class:`ScenarioBuilder`, which collects the objects of a scenario (Queues and
PriorityClasses as a :class:`~gpufleet.io.fleet.catalog.Catalog`, PodGroups, ResourceQuotas, and
the pods of each workload object as an :class:`ObjectPods`), each read by the reader of its API
group and kind (:data:`SCENARIO_READERS`, a :class:`~gpufleet.io.scheme.Scheme`), then checks and
assembles them into :class:`~gpufleet.model.workload.TimedWorkload` gangs
(:meth:`ScenarioBuilder.scenario`; one gang at a time: :meth:`ScenarioBuilder.assemble`). Files
(``readers.read_scenario``), the control plane's requests (``service.submissions``) and a live
cluster's pods (:mod:`~gpufleet.io.live_objects`) all go through it, so a workload means the same
wherever it comes from. The rules of assembly are listed in :mod:`gpufleet.io.readers`. It reads
no files (its callers do) and decides nothing about scheduling."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gpufleet.io.cluster_traces import alibaba
from gpufleet.io.errors import InputError
from gpufleet.io.fleet import faults, idle_policies, node_faults, queues, serving, sim_telemetry
from gpufleet.io.fleet.catalog import CATALOG_KINDS, Catalog
from gpufleet.io.fleet.faults import gpu_fault_from_object
from gpufleet.io.fleet.idle_policies import check_unique, idle_policy_from_object
from gpufleet.io.fleet.node_faults import node_fault_from_object
from gpufleet.io.fleet.queues import pod_group_from_object, resource_quota_from_object
from gpufleet.io.fleet.serving import INFERENCE_LOAD, TARGET_KINDS, inference_service_from_object
from gpufleet.io.fleet.sim_telemetry import (
    TelemetrySettings,
    merge_settings,
    telemetry_settings_from_object,
)
from gpufleet.io.kinds import CLUSTER_KINDS, api_group
from gpufleet.io.kube import dra, job_rules, operator_jobs, pytorch_jobs
from gpufleet.io.kube.pods import (
    EXPECTED_RUNTIME_ANNOTATION,
    SIM_DURATION_ANNOTATION,
    WORKLOAD_API_VERSIONS,
    pods_from_object,
)
from gpufleet.io.kube.pytorch_jobs import OperatorJob
from gpufleet.io.kube.schema import check_kube_object
from gpufleet.io.kube.workload_settings import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_ON_NOTICE_ANNOTATION,
    MIXED_MODELS_ANNOTATION,
    PREEMPTIBLE_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    Setting,
    WorkloadSettings,
    workload_settings,
)
from gpufleet.io.manifests import Context, Manifest, describe
from gpufleet.io.scheme import Scheme
from gpufleet.model.autoscaling import AutoscalingSpec
from gpufleet.model.dra import DraObjects
from gpufleet.model.faults import GpuFault
from gpufleet.model.idle import IdlePolicy
from gpufleet.model.jobs import JobKind, JobSpec
from gpufleet.model.node_faults import NodeFault
from gpufleet.model.nodepools import NodePool
from gpufleet.model.priorities import PreemptionPolicy, PriorityClass
from gpufleet.model.queues import DEFAULT_QUEUE as MODEL_DEFAULT_QUEUE
from gpufleet.model.queues import (
    KUEUE_QUEUE_LABEL,
    QUEUE_LABEL,
    Queue,
    ResourceQuota,
    implicit_default_queue,
)
from gpufleet.model.serving import InferenceService
from gpufleet.model.workload import (
    PodGroup,
    TimedPod,
    TimedWorkload,
    TopologyRequest,
    Workload,
    split_workload_key,
    workload_key,
)

T = TypeVar("T")

DEFAULT_QUEUE = MODEL_DEFAULT_QUEUE
#: Kinds whose replicas an InferenceLoad may load.
REPLICATED_KINDS = frozenset(TARGET_KINDS)
SUPPORTED = (
    "Queue, PriorityClass, PodGroup, ResourceQuota, Pod, Job, Deployment, StatefulSet, "
    "ReplicaSet, PyTorchJob, MPIJob, RayCluster, RayJob, GpuFault, SpotInterruption, "
    "NodeFailure, SimulatedTelemetry, IdlePolicy, InferenceLoad, DeviceClass, ResourceClaim, "
    "ResourceClaimTemplate, ResourceSlice, HorizontalPodAutoscaler or ScaledObject objects (or "
    "an Alibaba pod-list .csv)"
)
#: Operators' job kinds and their readers.
OPERATOR_JOBS = {
    "PyTorchJob": pytorch_jobs.read_pytorch_job,
    "MPIJob": operator_jobs.read_mpi_job,
    "RayCluster": operator_jobs.read_ray_cluster,
    "RayJob": operator_jobs.read_ray_job,
}


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything a scenario's files define, checked and assembled."""

    queues: dict[str, Queue]
    priority_classes: dict[str, PriorityClass]
    resource_quotas: list[ResourceQuota]
    workloads: list[TimedWorkload]
    #: The kind of object each workload came from (Pod, Job, PodGroup...), by workload key.
    kinds: dict[str, str] = dataclasses.field(default_factory=dict)
    #: XIDs to inject on GPUs of the simulated cluster (``GpuFault`` objects), by time.
    faults: list[GpuFault] = dataclasses.field(default_factory=list)
    #: How the simulated GPUs' telemetry is made (its ``SimulatedTelemetry`` object), if said.
    telemetry: TelemetrySettings | None = None
    #: What to do with idle GPU holders (``IdlePolicy`` objects).
    idle_policies: list[IdlePolicy] = dataclasses.field(default_factory=list)
    #: Nodes the simulated cluster loses (``SpotInterruption`` and ``NodeFailure`` objects).
    node_faults: list[NodeFault] = dataclasses.field(default_factory=list)
    #: How workloads are autoscaled (HorizontalPodAutoscalers, ScaledObjects, annotations).
    autoscaling: list[AutoscalingSpec] = dataclasses.field(default_factory=list)
    #: The requests inference workloads get in a simulation (``InferenceLoad`` objects).
    inference: list[InferenceService] = dataclasses.field(default_factory=list)
    #: Each replica's workload key -> the key of the Deployment, StatefulSet or ReplicaSet
    #: that makes it (``prod/Deployment/chat``); each such object's key -> one replica of it,
    #: as read (what an autoscaler adds more of, even to an object read at 0 replicas).
    replica_owner: dict[str, str] = dataclasses.field(default_factory=dict)
    replica_templates: dict[str, TimedWorkload] = dataclasses.field(default_factory=dict)
    #: Node pools an autoscaler grows and shrinks in a simulation (``NodePool`` objects).
    node_pools: list[NodePool] = dataclasses.field(default_factory=list)
    #: What each Job of parallelism 0 is (it runs no pods, so it has no workload).
    paused_jobs: list[str] = dataclasses.field(default_factory=list)
    #: DeviceClasses, ResourceClaims, ResourceClaimTemplates and ResourceSlices.
    dra: DraObjects = dataclasses.field(default_factory=DraObjects)


@dataclass(frozen=True, slots=True)
class ObjectPods:
    """The pods of one object (or one replica set), and what it says about their workload:
    built by :func:`object_pods`, assembled with the others of its gang."""

    context: Context
    kind: str
    name: str  # the workload's name unless the pods join a pod group
    namespace: str
    pods: tuple[TimedPod, ...]
    settings: WorkloadSettings
    min_member: Setting[int] | None = None
    #: The longest gpufleet.dev/sim-duration of its pods (or their trace run time).
    duration: float | None = None
    #: The rules of the object the pods came from (none for pods that end with their work).
    job: JobSpec | None = None
    #: A Job's ``spec.suspend: true``: its workload waits, suspended, until resumed.
    suspended: bool = False

    @property
    def gang(self) -> tuple[str, str, str]:
        group = self.settings.group
        if group is not None:
            return ("PodGroup", self.namespace, group.value)
        return (self.kind, self.namespace, self.name)


class ScenarioBuilder(Catalog):
    """Collects the objects of a scenario, then checks and assembles them (the queues and
    priority classes as a :class:`~gpufleet.io.fleet.catalog.Catalog`, strict unless told): see the
    module docstring."""

    def __init__(self, strict: bool = True) -> None:
        super().__init__(strict)
        self.pod_groups: dict[str, Setting[PodGroup]] = {}
        self.quotas: dict[str, Setting[ResourceQuota]] = {}
        self.parts: list[ObjectPods] = []
        self.pod_origins: dict[str, str] = {}
        self.faults: list[GpuFault] = []
        self.node_faults: list[NodeFault] = []
        self._node_fault_sources: dict[tuple[str, str], str] = {}
        self.telemetry: TelemetrySettings | None = None
        self.idle_policies: list[IdlePolicy] = []
        self._idle_policy_sources: dict[str, str] = {}
        #: InferenceLoad objects, by the workload they load, with where each was read.
        self.inference: dict[str, tuple[InferenceService, Context]] = {}
        #: (kind, namespace, name) of the Deployments, StatefulSets and ReplicaSets read.
        self.replicated: set[tuple[str, str, str]] = set()
        #: (kind, namespace, replica name) -> the key of the object that makes the replica;
        #: each such object's key -> one replica of it, as read.
        self.replica_owner: dict[tuple[str, str, str], str] = {}
        self.templates: dict[str, ObjectPods] = {}
        #: Jobs of parallelism 0: read, valid, and running nothing (no workload), said so.
        self.paused_jobs: list[str] = []
        #: Refuse a pod's own ``spec.priority`` unless it is what its class (or the default)
        #: gives, as the API server's Priority admission plugin does (requests to a control
        #: plane; a scenario file may set priorities directly).
        self.priority_admission = False
        #: DeviceClasses, ResourceClaims, ResourceClaimTemplates and ResourceSlices read.
        self.dra = dra.DraCatalog()

    # ---------------------------------------------------------------------------- reading
    def add(self, manifest: Manifest, source: str) -> None:
        """One object of a scenario, read by the reader of its kind (:data:`SCENARIO_READERS`)."""
        kind, where = manifest.get("kind"), manifest.location
        if self.strict:  # files and requests; not objects a live API server validated
            check_kube_object(manifest, source, where)
        reader = SCENARIO_READERS.reader_of(manifest)
        if reader is None:
            hint = " (a cluster, not a scenario)" if kind in CLUSTER_KINDS else ""
            raise InputError(
                source, f"expected {SUPPORTED}, got kind {describe(kind)}{hint}", where, "kind"
            )
        reader(self, manifest, source)

    def add_pod_group(self, manifest: Manifest, source: str) -> None:
        group = pod_group_from_object(manifest, source, manifest.location)
        context = object_context(source, manifest.location, f"PodGroup {group.key}")
        _unique(self.pod_groups, group.key, Setting(group, context, None), "PodGroup")

    def add_resource_quota(self, manifest: Manifest, source: str) -> None:
        quota = resource_quota_from_object(manifest, source, manifest.location)
        key = f"{quota.namespace}/{quota.name}"
        context = object_context(source, manifest.location, f"ResourceQuota {key}")
        _unique(self.quotas, key, Setting(quota, context, None), "ResourceQuota")

    def add_dra_object(self, manifest: Manifest, source: str) -> None:
        self.dra.add(manifest, source, manifest.location)

    def add_gpu_fault(self, manifest: Manifest, source: str) -> None:
        self.faults.append(gpu_fault_from_object(manifest, source, manifest.location))

    def add_node_fault(self, manifest: Manifest, source: str) -> None:
        fault = node_fault_from_object(manifest, source, manifest.location)
        first = self._node_fault_sources.setdefault((fault.kind, fault.name), fault.where)
        if first != fault.where:
            raise InputError(
                source, f"{fault.label} appears twice (first in {first})", manifest.location,
                "metadata.name",
            )  # fmt: skip
        self.node_faults.append(fault)

    def add_idle_policy(self, manifest: Manifest, source: str) -> None:
        policy = idle_policy_from_object(manifest, source, manifest.location)
        check_unique(self._idle_policy_sources, policy.name, source, manifest.location)
        self.idle_policies.append(policy)

    def add_telemetry(self, manifest: Manifest, source: str) -> None:
        settings = telemetry_settings_from_object(manifest, source, manifest.location)
        self.telemetry = merge_settings(self.telemetry, settings)

    def add_operator_job(self, manifest: Manifest, source: str) -> None:
        job = OPERATOR_JOBS[str(manifest["kind"])](manifest, source, manifest.location)
        self._add_operator_job(job, manifest, source)

    def add_inference(self, manifest: Manifest, source: str) -> None:
        service = inference_service_from_object(manifest, source, manifest.location)
        what = f"{INFERENCE_LOAD} of {service.workload}"
        context = object_context(source, manifest.location, what)
        if service.workload in self.inference:
            raise context.error(
                "spec.target", f"{service.workload} is loaded by another InferenceLoad already"
            )
        self.inference[service.workload] = (service, context)

    def _check_inference_targets(self) -> list[InferenceService]:
        """The InferenceLoads, each naming a Deployment, StatefulSet or ReplicaSet read."""
        for service, context in self.inference.values():
            namespace, kind, name = split_workload_key(service.workload)
            if (kind, namespace, name) not in self.replicated:
                raise context.error(
                    "spec.target", f"no {kind} {namespace}/{name} in the scenario to load"
                )
        return [service for service, _ in self.inference.values()]

    def add_csv(self, file: Path) -> None:
        """An Alibaba pod list: a workload of one per pod, running for the pod's trace runtime."""
        for timed in alibaba.read_pods(file):
            pod = timed.pod
            context = Context(str(file), f"pod {pod.key}")
            settings = WorkloadSettings(dict(pod.labels))
            self._add_pods(
                ObjectPods(
                    context, "Pod", pod.name, pod.namespace, (timed,), settings, None, timed.runtime
                )
            )

    def add_workload_object(self, manifest: Manifest, source: str) -> None:
        pods = tuple(pods_from_object(manifest, source, manifest.location))
        # pods_from_object has checked the shape: metadata, spec and the template are mappings.
        kind = str(manifest["kind"])
        metadata: dict[str, Any] = manifest["metadata"]
        name, namespace = str(metadata["name"]), str(metadata.get("namespace") or "default")
        context = object_context(source, manifest.location, f"{kind} {namespace}/{name}")
        spec: dict[str, Any] = manifest["spec"]
        if kind in REPLICATED_KINDS:
            self.replicated.add((kind, namespace, name))
        if kind == "Pod":
            settings = workload_settings(context, metadata, spec, "spec")
            part = object_pods(context, kind, name, namespace, pods, settings)
            self._add_pods(
                dataclasses.replace(part, job=job_rules.pod_rules(JobKind.POD, name, pods))
            )
            return
        template: dict[str, Any] = spec["template"]
        settings = workload_settings(
            context,
            metadata,
            template["spec"],
            "spec.template.spec",
            template.get("metadata") or {},
        )
        part = object_pods(context, kind, name, namespace, pods, settings)
        if kind == "Job":
            job = job_rules.batch_job(context, name, spec, pods)
            suspended = spec.get("suspend", False)
            if not isinstance(suspended, bool):
                raise context.error(
                    "spec.suspend", f"expected true or false, got {describe(suspended)}"
                )
            paused = job_rules.paused_job_note(namespace, name, spec)
            if paused is not None:
                self.paused_jobs.append(paused)
            self._add_pods(dataclasses.replace(part, job=job, suspended=suspended))
            return
        owner = workload_key(namespace, name, kind)
        for timed in pods:  # a Deployment, StatefulSet or ReplicaSet: a workload per replica
            rules = job_rules.pod_rules(JobKind.POD, timed.pod.name, (timed,))
            self._add_pods(dataclasses.replace(part, name=timed.pod.name, pods=(timed,), job=rules))
            self.replica_owner[(kind, namespace, timed.pod.name)] = owner
        # What one more replica is (an autoscaler may add some; at 0 replicas, the first).
        first = pods[:1] or tuple(
            pods_from_object(_one_replica(manifest), source, manifest.location)
        )
        rules = job_rules.pod_rules(JobKind.POD, first[0].pod.name, first)
        self.templates[owner] = dataclasses.replace(
            part, name=first[0].pod.name, pods=first, job=rules
        )

    def _add_operator_job(self, job: OperatorJob, manifest: Manifest, source: str) -> None:
        """A PyTorchJob, MPIJob, RayCluster or RayJob: one gang of its replica sets' pods."""
        kind = str(job.kind)
        context = object_context(source, manifest.location, f"{kind} {job.namespace}/{job.name}")
        min_member = None
        if job.min_available is not None:
            min_member = Setting(job.min_available, context, job.min_available_field)
        rules = job.job_spec()
        for replica in job.replicas:
            path = replica.template_path
            settings = workload_settings(
                context,
                manifest["metadata"],
                replica.template.get("spec") or {},
                f"{path}.spec",
                replica.template.get("metadata") or {},
                f"{path}.metadata",
            )
            part = object_pods(context, kind, job.name, job.namespace, replica.pods, settings)
            self._add_pods(dataclasses.replace(part, min_member=min_member, job=rules))

    def _add_pods(self, part: ObjectPods) -> None:
        place = f"{part.context.source}:{part.context.location}"
        for timed in part.pods:
            key = timed.pod.key
            if key in self.pod_origins:
                raise part.context.error(
                    "metadata.name", f"pod {key} appears twice (first from {self.pod_origins[key]})"
                )
            self.pod_origins[key] = place
        if part.pods:  # a Job of parallelism 0 has no workload
            self.parts.append(part)

    def fork(self) -> ScenarioBuilder:
        """A strict builder that starts from what this one holds (queues, priority classes,
        pod groups, quotas; not its workloads), for reading more objects against them."""
        builder = ScenarioBuilder()
        builder.queues = dict(self.queues)
        builder.namespace_queues = dict(self.namespace_queues)
        builder.classes = dict(self.classes)
        builder.global_default = self.global_default
        builder.pod_groups = dict(self.pod_groups)
        builder.quotas = dict(self.quotas)
        builder.priority_admission = self.priority_admission
        builder.dra = self.dra.copy()
        return builder

    # --------------------------------------------------------------------------- assembly
    def scenario(self) -> Scenario:
        self.check_tree()
        queues = self.queue_models()
        gangs: dict[tuple[str, str, str], list[ObjectPods]] = {}
        for part in self.parts:
            gangs.setdefault(part.gang, []).append(part)
        built = [(gang[0], self.assemble(gang, parts, queues)) for gang, parts in gangs.items()]
        # Names are unique per kind and namespace, as in Kubernetes: a name that objects of two
        # kinds share (a Job and a PyTorchJob "sweep") makes two workloads, each keyed with
        # its kind (default/Job/sweep); a name only one kind uses keeps its short key.
        shared = Counter(timed.workload.key for _, timed in built)
        workloads: list[TimedWorkload] = []
        kinds: dict[str, str] = {}
        owners: dict[str, str] = {}
        for kind, timed in built:
            if shared[timed.workload.key] > 1:
                workload = dataclasses.replace(timed.workload, kind=kind)
                timed = dataclasses.replace(timed, workload=workload)
            kinds[timed.workload.key] = kind
            workloads.append(timed)
            owner = self.replica_owner.get((kind, timed.workload.namespace, timed.workload.name))
            if owner is not None:
                owners[timed.workload.key] = owner
        templates = {
            owner: self.assemble(part.gang, [part], queues)
            for owner, part in self.templates.items()
        }
        if any(w.workload.queue == DEFAULT_QUEUE for w in workloads) and not queues:
            queues[DEFAULT_QUEUE] = implicit_default_queue()
        if self.strict:  # a live cluster's claims may come after its pods
            for part in self.parts:
                for pod_run in part.pods:
                    self.dra.check_pod_claims(part.context, pod_run.pod, _spec_path(part.kind))
        return Scenario(
            queues,
            {name: setting.value for name, setting in self.classes.items()},
            [setting.value for setting in self.quotas.values()],
            workloads,
            kinds,
            sorted(self.faults, key=lambda f: f.at),
            self.telemetry,
            list(self.idle_policies),
            list(self.node_faults),
            inference=self._check_inference_targets(),
            replica_owner=owners,
            replica_templates=templates,
            paused_jobs=list(self.paused_jobs),
            dra=self.dra.objects(),
        )

    def assemble(
        self, gang: tuple[str, str, str], parts: list[ObjectPods], queues: Mapping[str, Queue]
    ) -> TimedWorkload:
        """The workload of one gang (``(kind, namespace, name)``: its pod group's, else its
        object's) from its ``parts``, resolved against ``queues`` and the priority classes."""
        kind, namespace, name = gang
        label = f"gang {namespace}/{name}"
        timed = [t for part in parts for t in part.pods]
        settings = [part.settings for part in parts]
        queue = self._queue(parts, queues, label)
        priority, class_name, policy = self._priority(settings, label)
        min_member = len(timed)
        group = self.pod_groups.get(f"{namespace}/{name}") if kind == "PodGroup" else None
        if group is not None:
            if group.value.min_member > len(timed):
                raise group.context.error(
                    "spec.minMember",
                    f"expected at most the {len(timed)} pods that name pod group "
                    f"{group.value.key}, got {group.value.min_member}",
                )
            min_member = group.value.min_member
        available = _agreed([p.min_member for p in parts], label, "agree on minAvailable")
        if available is not None:
            if available.value > len(timed):
                raise available.error(
                    f"expected at most the job's {len(timed)} pods, got {available.value}"
                )
            min_member = available.value
        preemptible = _agreed(
            [s.preemptible for s in settings], label, f"agree on {PREEMPTIBLE_ANNOTATION}"
        )
        # The autoscalers' "leave it running" (on any of its pods) is gpufleet's too, unless
        # gpufleet.dev/preemptible says otherwise.
        protected = any(s.protected is not None for s in settings)
        runtime = _agreed(
            [s.expected_runtime for s in settings], label, f"agree on {EXPECTED_RUNTIME_ANNOTATION}"
        )
        interval = _agreed(
            [s.checkpoint_interval for s in settings],
            label,
            f"agree on {CHECKPOINT_INTERVAL_ANNOTATION}",
        )
        on_notice = _agreed(
            [s.checkpoint_on_notice for s in settings],
            label,
            f"agree on {CHECKPOINT_ON_NOTICE_ANNOTATION}",
        )
        topology = _agreed([s.topology for s in settings], label, f"agree on {TOPOLOGY_ANNOTATION}")
        mixed = _agreed(
            [s.mixed_models for s in settings], label, f"agree on {MIXED_MODELS_ANNOTATION}"
        )
        workload = Workload(
            name,
            namespace,
            tuple(dataclasses.replace(t.pod, priority=priority) for t in timed),
            queue,
            priority=priority,
            priority_class=class_name,
            preemption_policy=policy,
            min_member=min_member,
            preemptible=not protected if preemptible is None else preemptible.value,
            expected_runtime=None if runtime is None else runtime.value,
            checkpoint_interval=None if interval is None else interval.value,
            checkpoint_on_notice=on_notice is not None and on_notice.value,
            topology=None if topology is None else topology.value,
            mixed_gpu_models=mixed is not None and mixed.value,
            labels=settings[0].labels,
            suspended=any(part.suspended for part in parts),
        )
        created = min((t.created for t in timed if t.created is not None), default=0.0)
        # Each pod runs for its gpufleet.dev/sim-duration, else its expected run time.
        durations = [part.duration for part in parts if part.duration is not None]
        duration = max(durations, default=None)
        if duration is None and runtime is not None:
            duration = runtime.value
        jobs: dict[int, JobSpec] = {}
        for part in parts:
            if part.job is not None:
                jobs.setdefault(id(part.job), part.job)
        return TimedWorkload(workload, created, duration, tuple(jobs.values()))

    def _queue(self, parts: list[ObjectPods], queues: Mapping[str, Queue], label: str) -> str:
        named = _agreed([p.settings.queue for p in parts], label, "name the same queue")
        if named is not None:
            if named.value not in queues:
                kueue = (named.field or "").endswith(f"[{KUEUE_QUEUE_LABEL}]")
                hint = f"; {KUEUE_QUEUE_LABEL} is read as {QUEUE_LABEL}" if kueue else ""
                raise named.error(
                    f"queue {named.value!r} is not defined ({_listing(queues)}){hint}"
                )
            return named.value
        head = parts[0]
        default = self.namespace_queues.get(head.namespace)
        if default is not None:
            return default.value
        if not queues:
            return DEFAULT_QUEUE
        csv = head.context.location is not None and head.context.location.startswith("pod ")
        raise head.context.error(
            None if csv else f"metadata.labels[{QUEUE_LABEL}]",
            f"no queue: expected the label {QUEUE_LABEL}, or a Queue whose spec.namespaces "
            f"lists {head.namespace!r} ({_listing(queues)})",
        )

    def _priority(
        self, settings: list[WorkloadSettings], label: str
    ) -> tuple[int, str | None, PreemptionPolicy]:
        named = _agreed(
            [s.priority_class for s in settings], label, "name the same priorityClassName"
        )
        if named is not None:
            setting = self.classes.get(named.value)
            if setting is None:
                raise named.error(
                    f"priority class {named.value!r} is not defined ({_listing(self.classes)})"
                )
            self._admit_priority(settings, setting.value.value)
            return setting.value.value, setting.value.name, setting.value.preemption_policy
        if self.priority_admission:
            default = None if self.global_default is None else self.global_default.value
            self._admit_priority(settings, 0 if default is None else default.value)
        explicit = _agreed([s.priority for s in settings], label, "agree on spec.priority")
        if explicit is not None:
            return explicit.value, None, PreemptionPolicy.PREEMPT_LOWER_PRIORITY
        if self.global_default is not None:
            found = self.global_default.value
            return found.value, found.name, found.preemption_policy
        return 0, None, PreemptionPolicy.PREEMPT_LOWER_PRIORITY

    def _admit_priority(self, settings: list[WorkloadSettings], computed: int) -> None:
        """With :attr:`priority_admission`: refuse a ``spec.priority`` other than ``computed``
        (its class's value, the default class's, or 0) with the API server's message."""
        if not self.priority_admission:
            return
        for setting in settings:
            given = setting.priority
            if given is not None and given.value != computed:
                raise given.error(
                    f"the integer value of priority ({given.value}) must not be provided in "
                    f"pod spec; priority admission controller computed {computed} from the "
                    "given PriorityClass name"
                )


# ---------------------------------------------------------------------------------- helpers
#: How a :class:`ScenarioBuilder` adds one object of a scenario.
ScenarioReader = Callable[[ScenarioBuilder, Manifest, str], None]
#: The reader of each kind a scenario holds, by API group and kind: what
#: :meth:`ScenarioBuilder.add` dispatches on. The groups are those of the apiVersions each
#: object's own reader accepts.
SCENARIO_READERS: Scheme[ScenarioReader] = Scheme()
for _versions, _kinds, _reader in (
    (queues.API_VERSIONS["Queue"], CATALOG_KINDS[:1], ScenarioBuilder.add_catalog_object),
    (queues.API_VERSIONS["PriorityClass"], CATALOG_KINDS[1:], ScenarioBuilder.add_catalog_object),
    (queues.API_VERSIONS["PodGroup"], ("PodGroup",), ScenarioBuilder.add_pod_group),
    (queues.API_VERSIONS["ResourceQuota"], ("ResourceQuota",), ScenarioBuilder.add_resource_quota),
    (faults.FAULT_API_VERSIONS, (faults.GPU_FAULT,), ScenarioBuilder.add_gpu_fault),
    (node_faults.API_VERSIONS, node_faults.NODE_FAULT_KINDS, ScenarioBuilder.add_node_fault),
    (idle_policies.API_VERSIONS, (idle_policies.KIND,), ScenarioBuilder.add_idle_policy),
    (serving.API_VERSIONS, (serving.INFERENCE_LOAD,), ScenarioBuilder.add_inference),
    (
        sim_telemetry.TELEMETRY_API_VERSIONS,
        (sim_telemetry.SIMULATED_TELEMETRY,),
        ScenarioBuilder.add_telemetry,
    ),
    ((pytorch_jobs.KUBEFLOW_API,), ("PyTorchJob",), ScenarioBuilder.add_operator_job),
    (operator_jobs.MPI_API_VERSIONS, ("MPIJob",), ScenarioBuilder.add_operator_job),
    ((operator_jobs.RAY_API_VERSION,), ("RayCluster", "RayJob"), ScenarioBuilder.add_operator_job),
    (dra.API_VERSIONS, dra.DRA_KINDS, ScenarioBuilder.add_dra_object),
    *(
        ((version,), (kind,), ScenarioBuilder.add_workload_object)
        for kind, version in WORKLOAD_API_VERSIONS.items()
    ),
):
    for _group in dict.fromkeys(api_group(version) or "" for version in _versions):
        for _kind in _kinds:
            SCENARIO_READERS.add(_group, _kind, _reader)


def object_context(source: str, location: str | None, what: str) -> Context:
    """Where an object is (``source``, ``location``), naming it (``what``) in errors."""
    return Context(source, location).naming(what)


def object_pods(
    context: Context,
    kind: str,
    name: str,
    namespace: str,
    pods: tuple[TimedPod, ...],
    settings: WorkloadSettings,
) -> ObjectPods:
    """The pods of one object; the work they carry is their longest gpufleet.dev/sim-duration
    (their expected run time counts when no pod of the workload has one: see
    :meth:`ScenarioBuilder.assemble`)."""
    durations = [
        t.deleted - t.created
        for t in pods
        if SIM_DURATION_ANNOTATION in t.pod.annotations
        and t.deleted is not None
        and t.created is not None
    ]
    return ObjectPods(
        context, kind, name, namespace, pods, settings, duration=max(durations, default=None)
    )


def _unique(seen: dict[str, Setting[T]], key: str, setting: Setting[T], kind: str) -> None:
    first = seen.setdefault(key, setting)
    if first is not setting:
        raise setting.context.error(
            "metadata.name", f"{kind} {key!r} appears twice (first in {first.where})"
        )


def _listing(defined: Mapping[str, object]) -> str:
    return f"defined: {', '.join(sorted(defined))}" if defined else "none are defined"


def _agreed(settings: Iterable[Setting[T] | None], gang: str, what: str) -> Setting[T] | None:
    """The one value that the pods of a gang give (pods that give none inherit it)."""
    first: Setting[T] | None = None
    for setting in settings:
        if setting is None:
            continue
        if first is None:
            first = setting
        elif setting.value != first.value:
            raise setting.error(
                f"all pods of {gang} must {what}: got {_show(setting.value)} here, but "
                f"{_show(first.value)} in {first.where}"
            )
    return first


def _show(value: object) -> str:
    if isinstance(value, TopologyRequest):
        return f"{value.mode.value} {value.level}"
    return repr(value)


def _spec_path(kind: str) -> str | None:
    """Where an object of ``kind`` keeps its pods' spec, when in one place."""
    if kind == "Pod":
        return "spec"
    return "spec.template.spec" if kind in WORKLOAD_API_VERSIONS else None


def _one_replica(manifest: Manifest) -> dict[str, Any]:
    """``manifest`` (a Deployment, StatefulSet or ReplicaSet) as if it asked for one replica."""
    return {**manifest, "spec": {**manifest["spec"], "replicas": 1}}
