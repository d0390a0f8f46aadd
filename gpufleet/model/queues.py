"""Queues: the queue tree with its quotas and Kueue's policies, and Kubernetes ResourceQuotas.

A :class:`Queue` is a node of the tree (org > team > project) with a nominal quota per resource
key (:mod:`gpufleet.model.resources`), borrowing and lending limits, a fair-share weight, the
policies Kueue's ClusterQueue has (preemption, queueing strategy, GPU models as flavors) and a
GPU-hour budget per period (:class:`QueueBudget`: its arithmetic is :mod:`gpufleet.economics`),
and who may use it: the namespaces whose workloads it admits and the priority classes they may
name (:meth:`Queue.admits_namespace`, :meth:`Queue.allows_priority_class`).
:func:`validate_queue_tree` checks a whole tree. Workloads name their queue with
:data:`QUEUE_LABEL` (or Kueue's :data:`KUEUE_QUEUE_LABEL`; :func:`queue_named_by`). Reading
Queues from YAML is io's; admitting workloads under them is the scheduling core's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.model.resources import Resources, quantity

QUEUE_LABEL = "gpufleet.dev/queue"
#: Kueue's queue label: read as :data:`QUEUE_LABEL` (gpufleet's own wins), so that a Kueue
#: user's manifests run unchanged.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The labels that name a workload's queue, the one that wins first.
QUEUE_LABELS = (QUEUE_LABEL, KUEUE_QUEUE_LABEL)
#: Priority classes of this prefix are Kubernetes' own (``system-cluster-critical``,
#: ``system-node-critical``): no queue allows them unless it lists them.
SYSTEM_PRIORITY_PREFIX = "system-"
#: The tenant a workload belongs to, on its pods (the server sets it from the token that
#: submitted it): whose usage it is inside its queue, for fair sharing over time.
TENANT_LABEL = "gpufleet.dev/tenant"


def queue_named_by(labels: Mapping[str, str]) -> str | None:
    """The queue ``labels`` name: gpufleet's label, else Kueue's (readers refuse both given and
    different before a pod reaches the core)."""
    named = labels.get(QUEUE_LABEL)
    return labels.get(KUEUE_QUEUE_LABEL) if named is None else named


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


#: The fraction of a budget used at which it warns, unless it says otherwise.
DEFAULT_WARN_AT = 0.8


class BudgetPeriod(StrEnum):
    """How long a budget lasts before it starts again: a calendar day, an ISO week (from
    Monday) or a calendar month, all in UTC."""

    DAY = "day"
    WEEK = "week"
    MONTH = "month"


class BudgetAction(StrEnum):
    """What a queue's budget does to new workloads once all of it is used."""

    #: Nothing new of the queue is admitted until the next period.
    BLOCK = "Block"
    #: Admitted only within the queue's nominal quota (no borrowing).
    NOMINAL_ONLY = "NominalOnly"
    #: Admitted only as preemptible, at the lowest priority: anyone may preempt it.
    PREEMPTIBLE = "Preemptible"


@dataclass(frozen=True, slots=True)
class QueueBudget:
    """``gpu_hours`` GPU-hours per ``period`` for a queue and its subtree: warns once
    ``warn_at`` of it is used, and at 100% applies ``action`` to new workloads."""

    gpu_hours: float
    period: BudgetPeriod = BudgetPeriod.MONTH
    warn_at: float = DEFAULT_WARN_AT
    action: BudgetAction = BudgetAction.BLOCK

    def __post_init__(self) -> None:
        if not 0.0 <= self.gpu_hours < float("inf"):
            raise ValueError(f"a budget is a finite number of GPU-hours >= 0, got {self.gpu_hours}")
        if not 0.0 < self.warn_at <= 1.0:
            raise ValueError(f"warnAt is a fraction above 0 and at most 1, got {self.warn_at}")


@dataclass(frozen=True, slots=True)
class Queue:
    """A node of the queue tree (org > team > project).

    ``nominal`` is what the queue is guaranteed; the subtree of a parent shares the parent's
    nominal among its children, who may borrow what siblings leave unused (at most
    ``borrowing_limit`` beyond their nominal) and lend at most ``lending_limit`` of their own
    unused nominal. A missing limit means "no limit". ``weight`` divides the surplus (weighted
    dominant-resource share). ``namespaces`` names the namespaces this queue is the default for;
    it admits workloads of those and of ``admitted_namespaces`` only (Kueue's
    ``namespaceSelector``; None: of every namespace, an explicit opt-in), and with neither,
    only of the namespace named like the queue or like one of its ancestors (as a tenant may
    use the queue named like it and the queues below). ``priority_classes``, when given, are
    the only priority classes its workloads may name (None: any but Kubernetes' ``system-``
    ones).
    ``gpu_models``, when given, is the order in which its workloads try GPU models (Kueue's
    flavor order), with ``fungibility`` saying when to try the next one. ``budget``: GPU-hours
    per period for the queue and the queues below it (None: no budget).
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
    budget: QueueBudget | None = None
    admitted_namespaces: frozenset[str] | None = frozenset()
    priority_classes: frozenset[str] | None = None

    def admits_namespace(self, namespace: str, ancestors: tuple[str, ...] = ()) -> bool:
        """May a workload of ``namespace`` use this queue? (See the class docstring;
        ``ancestors``: the names of the queues above it.)"""
        admitted = self.admitted_namespaces
        if admitted is None or namespace in admitted or namespace in self.namespaces:
            return True
        if admitted or self.namespaces:
            return False
        return namespace == self.name or namespace in ancestors

    def allows_priority_class(self, name: str) -> bool:
        """May a workload of this queue name the priority class ``name``?"""
        if self.priority_classes is None:
            return not name.startswith(SYSTEM_PRIORITY_PREFIX)
        return name in self.priority_classes

    def refusal(
        self, namespace: str, priority_class: str | None, ancestors: tuple[str, ...] = ()
    ) -> tuple[str, str] | None:
        """Why a workload of ``namespace`` naming ``priority_class`` may not use this queue:
        (reason, message), or None when it may."""
        if not self.admits_namespace(namespace, ancestors):
            return NAMESPACE_NOT_ADMITTED, (
                f"namespace {namespace} is not admitted by queue {self.name} "
                f"(it admits {self.describe_namespaces(ancestors)})"
            )
        if priority_class is not None and not self.allows_priority_class(priority_class):
            allowed = (
                "any class but system-*"
                if self.priority_classes is None
                else ", ".join(sorted(self.priority_classes)) or "none"
            )
            return PRIORITY_CLASS_NOT_ALLOWED, (
                f"priority class {priority_class} is not allowed by queue {self.name} "
                f"(it allows {allowed})"
            )
        return None

    def describe_namespaces(self, ancestors: tuple[str, ...] = ()) -> str:
        """The namespaces it admits, in words."""
        if self.admitted_namespaces is None:
            return "every namespace"
        names = {*self.namespaces, *self.admitted_namespaces} or {self.name, *ancestors}
        return ", ".join(sorted(names))


#: The queue every workload without a queue of its own goes to (no quota unless defined).
DEFAULT_QUEUE = "default"


def implicit_default_queue() -> Queue:
    """The ``default`` queue where none is defined: no quota of its own, and every namespace
    may use it (it is where a workload goes that names no queue and whose namespace no queue
    is the default for). A ``default`` Queue that is defined follows the rules of any other."""
    return Queue(DEFAULT_QUEUE, admitted_namespaces=None)


def queue_ancestors(queues: Mapping[str, Queue], name: str) -> tuple[str, ...]:
    """The names of the queues above ``name``, nearest first (a cycle or a missing parent
    ends the walk: :func:`validate_queue_tree` reports those)."""
    out: list[str] = []
    parent = queues[name].parent
    while parent is not None and parent in queues and parent not in out and parent != name:
        out.append(parent)
        parent = queues[parent].parent
    return tuple(out)


def queue_refusal(
    queues: Mapping[str, Queue], name: str, namespace: str, priority_class: str | None
) -> tuple[str, str] | None:
    """:meth:`Queue.refusal` of the queue ``name`` of ``queues``, its ancestors known."""
    return queues[name].refusal(namespace, priority_class, queue_ancestors(queues, name))


#: Why a workload may not use its queue (what explain says it waits for).
NAMESPACE_NOT_ADMITTED = "namespace"
PRIORITY_CLASS_NOT_ALLOWED = "priority-class"


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """A Kubernetes ResourceQuota's hard caps for one namespace (model units, by key)."""

    name: str
    namespace: str
    hard: Resources = field(default_factory=dict, hash=False, compare=False)


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
