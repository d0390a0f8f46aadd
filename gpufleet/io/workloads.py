"""A whole scenario from files: queues, priority classes, quotas, and workloads (gangs) of pods.

Owns :func:`read_scenario`: every object of the files given (any mix of Queue, PriorityClass,
PodGroup, ResourceQuota, Pod, Job, Deployment, StatefulSet, ReplicaSet, PyTorchJob, MPIJob,
RayCluster and RayJob, or an Alibaba pod CSV; kinds with no scheduling meaning set aside:
``kinds``), names checked unique, the queue tree validated, and the pods assembled into
:class:`~gpufleet.model.workload.TimedWorkload` gangs with their controllers' rules
(:class:`~gpufleet.model.jobs.JobSpec`, read by ``job_rules``, ``tenancy`` and
``operator_jobs``):

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
* each pod's work: its ``gpufleet.dev/sim-duration``, else the workload's expected run time.

Everything is read before anything is returned: the first problem raises
:class:`~gpufleet.io.errors.InputError` naming the file, the place, the object and the field.
What one object means lives in ``kube_pods`` and ``tenancy``; this module does not schedule,
check quotas against requests, or enforce ResourceQuotas (it only reads them).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gpufleet.io import alibaba, job_rules, operator_jobs, tenancy
from gpufleet.io.catalog import CATALOG_KINDS, Catalog
from gpufleet.io.errors import InputError
from gpufleet.io.kinds import CLUSTER_KINDS, Skipped, triage
from gpufleet.io.kube_pods import (
    EXPECTED_RUNTIME_ANNOTATION,
    SIM_DURATION_ANNOTATION,
    WORKLOAD_API_VERSIONS,
    pods_from_object,
)
from gpufleet.io.manifests import Context, Manifest, describe, input_files, load_manifests
from gpufleet.io.tenancy import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    MIXED_MODELS_ANNOTATION,
    PREEMPTIBLE_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    OperatorJob,
    Setting,
    WorkloadSettings,
    workload_settings,
)
from gpufleet.model.jobs import JobKind, JobSpec
from gpufleet.model.tenancy import (
    QUEUE_LABEL,
    PodGroup,
    PreemptionPolicy,
    PriorityClass,
    Queue,
    ResourceQuota,
    TopologyRequest,
    Workload,
)
from gpufleet.model.workload import TimedPod, TimedWorkload

T = TypeVar("T")

DEFAULT_QUEUE = "default"
SUPPORTED = (
    "Queue, PriorityClass, PodGroup, ResourceQuota, Pod, Job, Deployment, StatefulSet, "
    "ReplicaSet, PyTorchJob, MPIJob, RayCluster or RayJob objects (or an Alibaba pod-list .csv)"
)
#: Operators' job kinds and their readers.
OPERATOR_JOBS = {
    "PyTorchJob": tenancy.read_pytorch_job,
    "MPIJob": operator_jobs.read_mpi_job,
    "RayCluster": operator_jobs.read_ray_cluster,
    "RayJob": operator_jobs.read_ray_job,
}
#: The kinds a scenario reads (others are set aside or refused: ``kinds``).
SCENARIO_KINDS = frozenset(
    {"Queue", "PriorityClass", "PodGroup", "ResourceQuota", *WORKLOAD_API_VERSIONS, *OPERATOR_JOBS}
)
_NOT_A_SCENARIO = dict.fromkeys(CLUSTER_KINDS, "a cluster, not a scenario")


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything a scenario's files define, checked and assembled."""

    queues: dict[str, Queue]
    priority_classes: dict[str, PriorityClass]
    resource_quotas: list[ResourceQuota]
    workloads: list[TimedWorkload]
    #: The kind of object each workload came from (Pod, Job, PodGroup...), by workload key.
    kinds: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Part:
    """The pods of one object (or one replica set), and what it says about their workload."""

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

    @property
    def gang(self) -> tuple[str, str, str]:
        group = self.settings.group
        if group is not None:
            return ("PodGroup", self.namespace, group.value)
        return (self.kind, self.namespace, self.name)


def read_scenario(
    paths: str | Path | Iterable[str | Path], skipped: Skipped | None = None
) -> Scenario:
    """Queues, priority classes, quotas and workloads of files and directories (all or nothing).
    Objects of kinds with no scheduling meaning (a ConfigMap) are set aside, counted in
    ``skipped``."""
    if isinstance(paths, str | Path):
        paths = [paths]
    files: dict[Path, Path] = {}  # a file named twice (itself and in its directory) is read once
    for path in paths:
        for file in input_files(path):
            files.setdefault(file.resolve(), file)
    builder = _Builder()
    mine = Skipped()
    read = 0
    for file in files.values():
        if file.suffix.lower() == ".csv":
            builder.add_csv(file)
            read += 1
            continue
        manifests = load_manifests(file)
        if not manifests:
            raise InputError(str(file), f"expected {SUPPORTED}, found no objects")
        for manifest in manifests:
            where = manifest.location
            if triage(manifest, str(file), where, SCENARIO_KINDS, SUPPORTED, mine, _NOT_A_SCENARIO):
                builder.add(manifest, str(file))
                read += 1
    if not read and mine:
        raise InputError(
            ", ".join(map(str, files.values())), f"found nothing to read: {mine.note()}"
        )
    if skipped is not None:
        skipped.counts.update(mine.counts)
    return builder.scenario()


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


class _Builder(Catalog):
    """Collects the objects of a scenario, then checks and assembles them (the queues and
    priority classes as a :class:`~gpufleet.io.catalog.Catalog`, strict unless told)."""

    def __init__(self, strict: bool = True) -> None:
        super().__init__(strict)
        self.pod_groups: dict[str, Setting[PodGroup]] = {}
        self.quotas: dict[str, Setting[ResourceQuota]] = {}
        self.parts: list[_Part] = []
        self.pod_origins: dict[str, str] = {}

    # ---------------------------------------------------------------------------- reading
    def add(self, manifest: Manifest, source: str) -> None:
        kind, where = manifest.get("kind"), manifest.location
        if kind in CATALOG_KINDS:
            self.add_catalog_object(manifest, source)
        elif kind == "PodGroup":
            group = tenancy.pod_group_from_object(manifest, source, where)
            context = _context(source, where, f"PodGroup {group.key}")
            _unique(self.pod_groups, group.key, Setting(group, context, None), "PodGroup")
        elif kind == "ResourceQuota":
            quota = tenancy.resource_quota_from_object(manifest, source, where)
            key = f"{quota.namespace}/{quota.name}"
            context = _context(source, where, f"ResourceQuota {key}")
            _unique(self.quotas, key, Setting(quota, context, None), "ResourceQuota")
        elif isinstance(kind, str) and kind in OPERATOR_JOBS:
            job = OPERATOR_JOBS[kind](manifest, source, manifest.location)
            self._add_operator_job(job, manifest, source)
        elif kind in WORKLOAD_API_VERSIONS:
            self._add_workload_object(manifest, source)
        else:
            hint = " (a cluster, not a scenario)" if kind in CLUSTER_KINDS else ""
            raise InputError(
                source, f"expected {SUPPORTED}, got kind {describe(kind)}{hint}", where, "kind"
            )

    def add_csv(self, file: Path) -> None:
        """An Alibaba pod list: a workload of one per pod, running for the pod's trace runtime."""
        for timed in alibaba.read_pods(file):
            pod = timed.pod
            context = Context(str(file), f"pod {pod.key}")
            settings = WorkloadSettings(dict(pod.labels))
            self._add_part(
                _Part(
                    context, "Pod", pod.name, pod.namespace, (timed,), settings, None, timed.runtime
                )
            )

    def _add_workload_object(self, manifest: Manifest, source: str) -> None:
        pods = tuple(pods_from_object(manifest, source, manifest.location))
        # pods_from_object has checked the shape: metadata, spec and the template are mappings.
        kind = str(manifest["kind"])
        metadata: dict[str, Any] = manifest["metadata"]
        name, namespace = str(metadata["name"]), str(metadata.get("namespace") or "default")
        context = _context(source, manifest.location, f"{kind} {namespace}/{name}")
        spec: dict[str, Any] = manifest["spec"]
        if kind == "Pod":
            settings = workload_settings(context, metadata, spec, "spec")
            part = _part(context, kind, name, namespace, pods, settings)
            self._add_part(
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
        part = _part(context, kind, name, namespace, pods, settings)
        if kind == "Job":
            job = job_rules.batch_job(context, name, spec, pods)
            self._add_part(dataclasses.replace(part, job=job))
            return
        for timed in pods:  # a Deployment, StatefulSet or ReplicaSet: a workload per replica
            rules = job_rules.pod_rules(JobKind.POD, timed.pod.name, (timed,))
            self._add_part(dataclasses.replace(part, name=timed.pod.name, pods=(timed,), job=rules))

    def _add_operator_job(self, job: OperatorJob, manifest: Manifest, source: str) -> None:
        """A PyTorchJob, MPIJob, RayCluster or RayJob: one gang of its replica sets' pods."""
        kind = str(job.kind)
        context = _context(source, manifest.location, f"{kind} {job.namespace}/{job.name}")
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
            part = _part(context, kind, job.name, job.namespace, replica.pods, settings)
            self._add_part(dataclasses.replace(part, min_member=min_member, job=rules))

    def _add_part(self, part: _Part) -> None:
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

    # --------------------------------------------------------------------------- assembly
    def scenario(self) -> Scenario:
        self.check_tree()
        queues = self.queue_models()
        gangs: dict[tuple[str, str, str], list[_Part]] = {}
        for part in self.parts:
            gangs.setdefault(part.gang, []).append(part)
        built = [(gang[0], self._workload(gang, parts, queues)) for gang, parts in gangs.items()]
        # Names are unique per kind and namespace, as in Kubernetes: a name that objects of two
        # kinds share (a Job and a PyTorchJob "sweep") makes two workloads, each keyed with
        # its kind (default/Job/sweep); a name only one kind uses keeps its short key.
        shared = Counter(timed.workload.key for _, timed in built)
        workloads: list[TimedWorkload] = []
        kinds: dict[str, str] = {}
        for kind, timed in built:
            if shared[timed.workload.key] > 1:
                workload = dataclasses.replace(timed.workload, kind=kind)
                timed = dataclasses.replace(timed, workload=workload)
            kinds[timed.workload.key] = kind
            workloads.append(timed)
        if any(w.workload.queue == DEFAULT_QUEUE for w in workloads) and not queues:
            queues[DEFAULT_QUEUE] = Queue(DEFAULT_QUEUE)
        return Scenario(
            queues,
            {name: setting.value for name, setting in self.classes.items()},
            [setting.value for setting in self.quotas.values()],
            workloads,
            kinds,
        )

    def _workload(
        self, gang: tuple[str, str, str], parts: list[_Part], queues: Mapping[str, Queue]
    ) -> TimedWorkload:
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
        runtime = _agreed(
            [s.expected_runtime for s in settings], label, f"agree on {EXPECTED_RUNTIME_ANNOTATION}"
        )
        interval = _agreed(
            [s.checkpoint_interval for s in settings],
            label,
            f"agree on {CHECKPOINT_INTERVAL_ANNOTATION}",
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
            preemptible=True if preemptible is None else preemptible.value,
            expected_runtime=None if runtime is None else runtime.value,
            checkpoint_interval=None if interval is None else interval.value,
            topology=None if topology is None else topology.value,
            mixed_gpu_models=mixed is not None and mixed.value,
            labels=settings[0].labels,
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

    def _queue(self, parts: list[_Part], queues: Mapping[str, Queue], label: str) -> str:
        named = _agreed([p.settings.queue for p in parts], label, "name the same queue")
        if named is not None:
            if named.value not in queues:
                raise named.error(f"queue {named.value!r} is not defined ({_listing(queues)})")
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
            return setting.value.value, setting.value.name, setting.value.preemption_policy
        explicit = _agreed([s.priority for s in settings], label, "agree on spec.priority")
        if explicit is not None:
            return explicit.value, None, PreemptionPolicy.PREEMPT_LOWER_PRIORITY
        if self.global_default is not None:
            found = self.global_default.value
            return found.value, found.name, found.preemption_policy
        return 0, None, PreemptionPolicy.PREEMPT_LOWER_PRIORITY


# ---------------------------------------------------------------------------------- helpers
def _context(source: str, location: str | None, what: str) -> Context:
    return Context(source, location).naming(what)


def _part(
    context: Context,
    kind: str,
    name: str,
    namespace: str,
    pods: tuple[TimedPod, ...],
    settings: WorkloadSettings,
) -> _Part:
    """The pods of one object; the work they carry is their longest gpufleet.dev/sim-duration
    (their expected run time counts when no pod of the workload has one: see ``_workload``)."""
    durations = [
        t.deleted - t.created
        for t in pods
        if SIM_DURATION_ANNOTATION in t.pod.annotations
        and t.deleted is not None
        and t.created is not None
    ]
    return _Part(
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
