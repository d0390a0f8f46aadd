"""Who may use what: queues with quotas, priority classes, pod groups, and workloads (gangs).

Quotas are kept per *resource key*, in the model's integer units:

* ``cpu`` (milli-CPU), ``memory`` (MiB), ``nvidia.com/gpu`` (milli-GPU, so shares count in
  part), and ``nvidia.com/gpu.<model>`` (milli-GPU on nodes of that GPU model, e.g.
  ``nvidia.com/gpu.H100``: a quota on H100 separate from the quota on T4).

A :class:`Workload` is the unit of admission: one or more pods admitted all or nothing (at
least ``min_member`` of them), in one queue, at one priority.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from gpufleet.model.gpu import MILLI_PER_GPU
from gpufleet.model.pod import Pod

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"
GPU_MODEL_PREFIX = "nvidia.com/gpu."

QUEUE_LABEL = "gpufleet.dev/queue"
POD_GROUP_LABEL = "gpufleet.dev/pod-group"
COSCHEDULING_POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def gpu_model_key(model: str) -> str:
    """The quota key of GPUs of one model (``nvidia.com/gpu.H100``)."""
    return f"{GPU_MODEL_PREFIX}{model}"


def quantity(resource: str, amount: int) -> int | str:
    """A model amount as Kubernetes writes it: GPUs as counts (``0.5`` for half of one), CPU as
    cores or ``2500m``, memory in ``Mi``."""
    if resource == GPU or resource.startswith(GPU_MODEL_PREFIX):
        whole, rest = divmod(amount, MILLI_PER_GPU)
        return whole if not rest else f"{amount / MILLI_PER_GPU:g}"
    if resource == CPU:
        return f"{amount}m" if amount % 1000 else amount // 1000
    if resource == MEMORY:
        return f"{amount}Mi"
    return amount


#: Resource key -> amount (model units). Keys a quota does not name are not limited by it.
Resources = Mapping[str, int]


class WithinQueuePolicy(StrEnum):
    """Kueue's ``preemption.withinClusterQueue``: whom a workload whose request fits its queue's
    nominal quota may evict in its own queue."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimPolicy(StrEnum):
    """Kueue's ``preemption.reclaimWithinCohort``: whom a workload may evict in other queues of
    the tree that use more than their nominal quota."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohortPolicy(StrEnum):
    """Kueue's ``preemption.borrowWithinCohort.policy``: may a workload evict in other queues
    while it borrows (only workloads of lower priority)."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


@dataclass(frozen=True, slots=True)
class QueuePreemption:
    """A queue's preemption policies, as Kueue's ClusterQueue ``spec.preemption`` has them.

    The defaults are gpufleet's, not Kueue's API defaults (``Never`` for both): a queue tree is
    a cohort by construction, and a queue's nominal quota is only a guarantee if it can be
    reclaimed."""

    within_queue: WithinQueuePolicy = WithinQueuePolicy.LOWER_PRIORITY
    reclaim_within_cohort: ReclaimPolicy = ReclaimPolicy.ANY
    borrow_within_cohort: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    #: With ``borrow_within_cohort`` LowerPriority: only victims of at most this priority.
    max_priority_threshold: int | None = None


class QueueingStrategy(StrEnum):
    """Kueue's ``queueingStrategy``: does a queue's first workload block the ones behind it?"""

    #: By priority, then arrival; a workload that cannot start lets the next ones try.
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    #: By priority, then arrival; nothing behind the first workload starts before it.
    STRICT_FIFO = "StrictFIFO"


class FungibilityPolicy(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    """Kueue's ``flavorFungibility`` over a queue's ordered GPU models: whether a workload that
    could start on a model only by borrowing (or by preempting) tries the next model first.
    Kueue's defaults: borrowing stops the search, preempting tries the next model."""

    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR


@dataclass(frozen=True, slots=True)
class Queue:
    """A node of the queue tree (org > team > project).

    ``nominal`` is what the queue is guaranteed; the subtree of a parent shares the parent's
    nominal among its children, who may borrow what siblings leave unused (at most
    ``borrowing_limit`` beyond their nominal) and lend at most ``lending_limit`` of their own
    unused nominal. A missing limit means "no limit". ``weight`` divides the surplus (weighted
    dominant-resource share). ``namespaces`` names the namespaces this queue is the default for.
    ``gpu_models``, when given, is the order in which its workloads try GPU models (Kueue's
    flavor order), with ``fungibility`` saying when to try the next one.
    """

    name: str
    parent: str | None = None
    nominal: Resources = field(default_factory=dict, hash=False, compare=False)
    borrowing_limit: Resources = field(default_factory=dict, hash=False, compare=False)
    lending_limit: Resources = field(default_factory=dict, hash=False, compare=False)
    weight: float = 1.0
    namespaces: tuple[str, ...] = ()
    preemption: QueuePreemption = QueuePreemption()
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    gpu_models: tuple[str, ...] = ()
    fungibility: FlavorFungibility = FlavorFungibility()


class PreemptionPolicy(StrEnum):
    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """Kubernetes ``scheduling.k8s.io/v1`` PriorityClass."""

    name: str
    value: int
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    global_default: bool = False


@dataclass(frozen=True, slots=True)
class PodGroup:
    """A gang: pods labelled with its name start together once ``min_member`` can."""

    name: str
    namespace: str = "default"
    min_member: int = 1

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """A Kubernetes ResourceQuota's hard caps for one namespace (model units, by key)."""

    name: str
    namespace: str
    hard: Resources = field(default_factory=dict, hash=False, compare=False)


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
    much work a preemption loses; ``preemptible`` False keeps it within its queue's nominal quota
    and safe from eviction.

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


class QueueTreeError(ValueError):
    """An invalid queue tree; ``queue`` names the queue at fault."""

    def __init__(self, queue: str, message: str) -> None:
        self.queue = queue
        super().__init__(f"queue {queue!r}: {message}")


def validate_queue_tree(queues: Mapping[str, Queue]) -> None:
    """Raise :class:`QueueTreeError` for a missing parent, a cycle of parents, a negative
    amount, a weight that is not positive, or children whose nominal quotas add up to more
    than their parent's (for a resource the parent names). Queues are looked at in name order,
    so the queue blamed does not depend on the order they were given in."""
    ordered = [queues[name] for name in sorted(queues)]
    for queue in ordered:
        if queue.parent is not None and queue.parent not in queues:
            raise QueueTreeError(queue.name, f"parent {queue.parent!r} is not defined")
        if queue.weight <= 0:
            raise QueueTreeError(queue.name, f"weight must be positive, got {queue.weight}")
        for what, amounts in (
            ("quota", queue.nominal),
            ("borrowingLimit", queue.borrowing_limit),
            ("lendingLimit", queue.lending_limit),
        ):
            for key, amount in amounts.items():
                if amount < 0:
                    raise QueueTreeError(
                        queue.name, f"{what} of {key} is negative ({quantity(key, amount)})"
                    )
    for queue in ordered:
        seen = [queue.name]
        parent = queue.parent
        while parent is not None:
            if parent in seen:
                cycle = " -> ".join([*seen[seen.index(parent) :], parent])
                raise QueueTreeError(queue.name, f"parents form a cycle: {cycle}")
            seen.append(parent)
            parent = queues[parent].parent
    children: dict[str, list[Queue]] = {}
    for queue in ordered:
        if queue.parent is not None:
            children.setdefault(queue.parent, []).append(queue)
    for parent_name, kids in sorted(children.items()):
        for key, cap in queues[parent_name].nominal.items():
            total = sum(kid.nominal.get(key, 0) for kid in kids)
            if total > cap:
                raise QueueTreeError(
                    parent_name,
                    f"children's {key} quotas add up to {quantity(key, total)}, more than its "
                    f"own {quantity(key, cap)} ({', '.join(k.name for k in kids)})",
                )
