"""Workloads: pods admitted together (gangs), their keys, the pod groups and topology they
ask for, and workloads with times for simulation and trace replay.

A :class:`Workload` is the unit of admission: one or more pods admitted all or nothing (at
least ``min_member`` of them), in one queue, at one priority. Pods join a gang by the
:data:`POD_GROUP_LABEL` (or scheduler-plugins' label) naming a :class:`PodGroup`. Reading
workloads from files is io's; queues and priority classes are
:mod:`gpufleet.model.queues` and :mod:`gpufleet.model.priorities`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from gpufleet.model.jobs import JobSpec, RestartPolicy, SimFailures
from gpufleet.model.pod import Pod
from gpufleet.model.priorities import PreemptionPolicy

POD_GROUP_LABEL = "gpufleet.dev/pod-group"
COSCHEDULING_POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


@dataclass(frozen=True, slots=True)
class PodGroup:
    """A gang: pods labelled with its name start together once ``min_member`` can."""

    name: str
    namespace: str = "default"
    min_member: int = 1

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class TopologyMode(StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """Keep a gang inside one domain of a topology level (a node label key)."""

    mode: TopologyMode
    level: str  # label key: gpufleet.dev/nvlink-domain, gpufleet.dev/rack, zone...


@dataclass(frozen=True, slots=True)
class Workload:
    """Pods admitted together (a gang of one for a plain pod).

    ``expected_runtime`` (seconds) feeds backfill; ``checkpoint_interval`` (seconds) says how
    much work a preemption loses; ``checkpoint_on_notice``: it also saves its progress when
    told its node is going (a spot interruption's notice); ``preemptible`` False keeps it within
    its queue's nominal quota and safe from eviction.

    ``kind`` is the kind of the object it came from (Job, PyTorchJob...), where that is part of
    its identity: names are unique per kind and namespace, as in Kubernetes, so a workload with
    a kind has the key ``namespace/Kind/name`` (a Job and a PyTorchJob named alike are two
    workloads); without one (a pod the scheduler met on its own, a trace's), ``namespace/name``.
    """

    name: str
    namespace: str
    pods: tuple[Pod, ...]
    queue: str
    priority: int = 0
    priority_class: str | None = None
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    min_member: int = 0  # 0: all pods
    preemptible: bool = True
    expected_runtime: float | None = None
    checkpoint_interval: float | None = None
    topology: TopologyRequest | None = None
    #: May the gang's pods run on GPUs of different models? (Kueue gives a pod set one flavor:
    #: by default a gang runs on one model, so that no pod slows the others down.)
    mixed_gpu_models: bool = False
    labels: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    kind: str = ""
    checkpoint_on_notice: bool = False
    #: A suspended Job's (``spec.suspend: true``): it waits, none of its pods placed, until
    #: resumed (the Job controller creates no pods for it meanwhile).
    suspended: bool = False
    #: ``namespace/name`` or ``namespace/Kind/name``, computed once: the scheduling cycle
    #: reads it often.
    key: str = field(init=False, repr=False, hash=False, compare=False)

    def __post_init__(self) -> None:
        key = workload_key(self.namespace, self.name, self.kind)
        object.__setattr__(self, "key", key)
        if not self.pods:
            raise ValueError(f"workload {self.namespace}/{self.name} has no pods")
        if self.min_member < 0 or self.min_member > len(self.pods):
            raise ValueError(
                f"workload {self.namespace}/{self.name}: minMember {self.min_member} but "
                f"{len(self.pods)} pods"
            )

    def renamed(self, name: str, pods: tuple[Pod, ...]) -> Workload:
        """This workload under another name, with ``pods`` (as many, renamed likewise): a
        lone replica's workload made from its template's. ``dataclasses.replace`` without
        its cost."""
        if len(pods) != len(self.pods):
            raise ValueError(f"workload {self.key} has {len(self.pods)} pods, not {len(pods)}")
        clone = object.__new__(Workload)
        for slot in _WORKLOAD_SLOTS:
            object.__setattr__(clone, slot, getattr(self, slot))
        object.__setattr__(clone, "name", name)
        object.__setattr__(clone, "pods", pods)
        object.__setattr__(clone, "key", workload_key(self.namespace, name, self.kind))
        return clone

    @property
    def gang_size(self) -> int:
        """Pods that must start together."""
        return self.min_member or len(self.pods)

    @property
    def gpu_milli(self) -> int:
        return sum(p.gpu.total_milli for p in self.pods)

    def with_pods(self, pods: tuple[Pod, ...]) -> Workload:
        """The same workload with only ``pods`` (all of which must then start together)."""
        return replace(self, pods=pods, min_member=0)

    def without(self, pod_key: str) -> Workload:
        """The same workload without one of its pods (one that ended while the others run)."""
        pods = tuple(p for p in self.pods if p.key != pod_key)
        return replace(self, pods=pods, min_member=min(self.min_member, len(pods)))

    def extra(self, pod: Pod) -> Workload:
        """A pod beyond minMember as a workload of its own, with this workload's settings."""
        return replace(self, name=pod.name, pods=(pod,), min_member=0, topology=None)


#: Why a workload is held out of its queue: kube-scheduler's pod condition reason for a pod
#: with scheduling gates, and the Job controller's (and Kueue's) for a suspended Job.
SCHEDULING_GATED = "SchedulingGated"
SUSPENDED = "Suspended"


def held_reason(workload: Workload) -> str | None:
    """:data:`SUSPENDED` or :data:`SCHEDULING_GATED` when ``workload`` may not be tried yet (a
    gang waits whole while any of its pods has a gate), else None."""
    if workload.suspended:
        return SUSPENDED
    if any(pod.scheduling_gates for pod in workload.pods):
        return SCHEDULING_GATED
    return None


def held_message(workload: Workload) -> str:
    """What a held workload is told: why, and what would release it."""
    if workload.suspended:
        return f"{workload.key} is suspended (spec.suspend: true): resume it to run it"
    gated = [p for p in workload.pods if p.scheduling_gates]
    shown = ", ".join(f"{p.key} ({', '.join(p.scheduling_gates)})" for p in gated[:3])
    more = f" and {len(gated) - 3} more" if len(gated) > 3 else ""
    return (
        f"scheduling is blocked by the scheduling gates of {shown}{more}: the pods' owner "
        "removes them to let the workload be scheduled"
    )


#: Every field of a Workload, its key included.
_WORKLOAD_SLOTS: tuple[str, ...] = Workload.__slots__


def workload_key(namespace: str, name: str, kind: str = "") -> str:
    """A workload's key: ``namespace/name``, or ``namespace/Kind/name`` when its kind is part
    of its identity (see :class:`Workload`)."""
    return f"{namespace}/{kind}/{name}" if kind else f"{namespace}/{name}"


def split_workload_key(key: str) -> tuple[str, str, str]:
    """(namespace, kind or "", name) of a key :func:`workload_key` made."""
    namespace, _, rest = key.partition("/")
    kind, _, name = rest.rpartition("/")
    return namespace, kind, name


@dataclass(frozen=True, slots=True)
class TimedPod:
    """A pod of a trace or workload file, with its times in seconds (None when unknown), its
    template's restart policy (None: not given) and its simulated failures."""

    pod: Pod
    created: float | None = None
    deleted: float | None = None
    scheduled: float | None = None
    restart_policy: RestartPolicy | None = None
    failures: SimFailures = field(default_factory=SimFailures)

    @property
    def runtime(self) -> float | None:
        """How long it ran: deletion - scheduling, or deletion - creation if never scheduled."""
        if self.deleted is None:
            return None
        start = self.scheduled if self.scheduled is not None else self.created
        if start is None:
            return None
        return max(0.0, self.deleted - start)


@dataclass(frozen=True, slots=True)
class TimedWorkload:
    """A workload of a simulation: when it is submitted, how much work each of its pods has
    (seconds of running; None: it runs until the simulation ends), and what the controllers of
    the objects its pods came from do when a pod ends (a pod no :class:`JobSpec` names is done
    when its work is)."""

    workload: Workload
    created: float = 0.0
    duration: float | None = None
    jobs: tuple[JobSpec, ...] = ()
