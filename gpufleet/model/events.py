"""What backends report: changes to nodes and pods, as every world reports them.

The scheduling core acts on the first eight kinds (a node added or removed, a pod or workload
to schedule, a pod bound, ready, gone, or a bind that failed), on
:class:`DeviceHealthChanged` (a node's agent saw GPUs fail or recover: applied at once, pods
running there or not), on :class:`NodeSchedulingChanged` (a node cordoned, being removed or
back: applied at once too), on :class:`WorkloadDemoted` (an idle policy lowered a running
workload to preemptible) and on :class:`WorkloadDisrupted` (a running workload to evict whole,
its node going away). A world may say more about what
happened to a pod than the core needs: why it is gone (:class:`PodEnd`), a container restarted
or a Job's next completion run in place (:class:`PodRestarted`), a job ended
(:class:`JobEnded`), a node told it will go (:class:`NodeNotice`: a spot interruption's
notice) and a node gone with its pods (:class:`NodeGone`). Those are for the other observers of
a world (the control plane's book of workloads); the core ignores what it does not act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpufleet.model.node import Node, Taint
from gpufleet.model.placement import Placement
from gpufleet.model.pod import Pod
from gpufleet.model.workload import Workload


@dataclass(frozen=True, slots=True)
class NodeAdded:
    node: Node


@dataclass(frozen=True, slots=True)
class NodeRemoved:
    name: str


@dataclass(frozen=True, slots=True)
class NodeNotice:
    """Node ``node`` goes at ``leaves_at`` (``reason``: a spot interruption's notice, or a
    failure at once). The pods running there (``told``) are told to checkpoint; those that
    checkpoint on demand (``checkpointed``) did so now."""

    node: str
    leaves_at: float
    reason: str
    told: tuple[str, ...] = ()
    checkpointed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeGone:
    """Node ``node`` is gone with the pods that ran there (each reported ``PodDeleted`` with
    :attr:`PodEnd.LOST`); ``back_at``: when a node of its name joins again (None: never)."""

    node: str
    reason: str
    back_at: float | None = None


@dataclass(frozen=True, slots=True)
class DeviceHealthChanged:
    """The devices of node ``node`` that are unhealthy now (indices, as the device plugin
    numbers them; empty: all healthy again). Nothing new goes on them; pods already there stay
    counted. ``reasons``: (index, why) for the unhealthy ones, where known (``XID 79: GPU has
    fallen off the bus``)."""

    node: str
    unhealthy: tuple[int, ...]
    reasons: tuple[tuple[int, str], ...] = ()

    def reason(self, index: int) -> str:
        return next((why for i, why in self.reasons if i == index), "")


@dataclass(frozen=True, slots=True)
class NodeSchedulingChanged:
    """Which new pods may go to node ``node`` from now on: none if ``unschedulable`` (why:
    ``reason``, as :attr:`~gpufleet.model.node.Node.unschedulable_reason`), else those that
    tolerate its ``taints`` (all of them, as they are now). Applied at once, pods running
    there or not (they stay)."""

    node: str
    unschedulable: bool
    reason: str = ""
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True, slots=True)
class PodAdded:
    """A pod to schedule (pending)."""

    pod: Pod


@dataclass(frozen=True, slots=True)
class PodBound:
    """A pod runs on ``placement`` though this core did not bind it (or it is restarting).
    ``preemptible`` False: the core must never evict it (it says so: ``gpufleet.dev/
    preemptible: "false"``, or an autoscaler's do-not-disrupt annotation). ``workload``: the
    workload the pod ran as, where the world knows it (a plane taking back what it ran before
    a restart or a rebuild of its core): its queue is kept, and its key when it is this pod's
    alone, instead of the queue a bare pod would be charged to."""

    pod: Pod
    placement: Placement
    preemptible: bool = True
    workload: Workload | None = None


class PodEnd(StrEnum):
    """Why a pod is gone."""

    #: Deleted (cancelled, or dropped by a fill-up run); what a world that knows no more says.
    DELETED = "deleted"
    #: Its work is done.
    SUCCEEDED = "succeeded"
    #: It failed for good, or its job ended without it.
    FAILED = "failed"
    #: Evicted by the scheduler: its workload waits again.
    EVICTED = "evicted"
    #: It failed (or its job's gang is made again) and a new pod follows: it waits again.
    REPLACED = "replaced"
    #: Lost with its node (a spot interruption, a node failure), killed by its GPU's fault,
    #: or taken down with such a pod of its gang: it waits again (unless its job failed).
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class PodDeleted:
    """A pod is gone (finished, deleted or dropped), wherever it was; ``end`` says why and
    ``message`` how, when the world knows; ``ended_at``, when its process ended, where the
    world recorded it (a local run's shim: it may have ended while nobody listened; None: now)."""

    key: str
    end: PodEnd = PodEnd.DELETED
    message: str = ""
    ended_at: float | None = None


@dataclass(frozen=True, slots=True)
class BindFailed:
    """A bind the core asked for did not happen; the pod is pending again."""

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class WorkloadAdded:
    """A workload (one pod or a gang) to admit and place."""

    workload: Workload


@dataclass(frozen=True, slots=True)
class WorkloadReleased:
    """A held workload (gated or suspended, :func:`~gpufleet.model.workload.held_reason`)
    changed: ``workload`` replaces it, with the gates its owner removed or resumed. It joins
    its queue once nothing holds it any more (as a new arrival: kube-scheduler queues a pod
    whose last gate went, Kueue a resumed Job); a workload not held is left as it is."""

    workload: Workload


@dataclass(frozen=True, slots=True)
class WorkloadDemoted:
    """The running workload ``key`` is lowered to preemptible at the lowest priority
    (:data:`~gpufleet.model.priorities.LOWEST_PRIORITY`), for the rest of its life: waiting
    work that may preempt may take its GPUs, and if it is preempted it waits at that priority.
    An idle policy's ``Preemptible`` step says so; ``reason`` says why. ``key`` is the
    workload's, or one of its bound pods' (a world that sees pods, Kubernetes, names a pod). A
    workload that is not running (waiting, finished, unknown) is left as it is."""

    key: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WorkloadDisrupted:
    """Evict the running workload ``key`` whole, now, and let it wait again at its place (as a
    preemption victim does): a node it runs on is going away (being removed by an autoscaler,
    about to be terminated, unreachable). ``key`` is the workload's, or one of its bound pods'
    (a world that sees pods, Kubernetes, names each pod of the gang). ``reason`` is told with
    the evictions. A workload not running (waiting, being evicted, finished) is left as it is.
    It is evicted whatever its priority and preemptibility: the node goes either way."""

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class PodReady:
    """A bound pod is running (its containers started): gangs wait for all their pods."""

    key: str


@dataclass(frozen=True, slots=True)
class PodRestarted:
    """A bound pod runs again where it is: its container failed and restarts after a back-off
    (``completion`` None), or it runs its Job's next completion (that completion's index)."""

    key: str
    message: str
    completion: int | None = None


@dataclass(frozen=True, slots=True)
class JobEnded:
    """The job ``job`` of the pod ``pod_key`` ended: ``outcome`` is Succeeded or Failed."""

    job: str
    pod_key: str
    outcome: str
    reason: str
    message: str


ClusterEvent = (
    NodeAdded
    | NodeRemoved
    | NodeNotice
    | NodeGone
    | DeviceHealthChanged
    | NodeSchedulingChanged
    | PodAdded
    | WorkloadAdded
    | PodBound
    | PodReady
    | PodDeleted
    | BindFailed
    | PodRestarted
    | JobEnded
    | WorkloadDemoted
    | WorkloadDisrupted
    | WorkloadReleased
)
