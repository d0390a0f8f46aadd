"""The queue objects of a scenario: Queues, PriorityClasses, PodGroups and ResourceQuotas,
read one object at a time.

Owns the reading of one object (already loaded by ``manifests``) into a model value:

* ``gpufleet.dev/v1alpha1`` ``Queue``: parent, quota / borrowingLimit / lendingLimit maps of
  ``cpu``, ``memory``, ``nvidia.com/gpu``, ``nvidia.com/gpu.<model>`` (GPU counts may be
  fractional: ``0.5`` is 500 milli-GPU) and extended resources such as ``rdma/hca`` (whole
  units), weight, ``namespaces`` (those it is the default for, and admits), Kueue's
  ``namespaceSelector`` (by the ``kubernetes.io/metadata.name`` label only, ``{}`` for every
  namespace: gpufleet reads no Namespace objects), ``priorityClasses`` (the only classes its
  workloads may name) and ``budget`` (``gpuHours`` per ``period``: a calendar
  ``day``, ISO ``week`` or calendar ``month`` in UTC; ``warnAt``, a fraction; ``action`` at
  100%: ``Block``, ``NominalOnly`` or ``Preemptible``);
* ``scheduling.k8s.io/v1`` ``PriorityClass`` (value, preemptionPolicy, globalDefault: top-level
  fields, as in Kubernetes);
* ``PodGroup`` of ``gpufleet.dev/v1alpha1`` or of scheduler-plugins
  (``scheduling.x-k8s.io/v1alpha1``): ``spec.minMember``;
* ``v1`` ``ResourceQuota``: the CPU, memory, GPU and extended resource (``requests.rdma/hca``)
  caps of ``spec.hard`` (other keys ignored).

An unknown field of gpufleet's own objects (a Queue, the gpufleet PodGroup) and of a
PriorityClass's top level is an error with a did-you-mean, or for Kueue's names a hint at where
gpufleet keeps that setting (``fields``).

It does not read what a workload object says about its queue, priority or gang
(``workload_settings`` does), check names across objects, resolve queues or priority classes,
assemble gangs or validate the queue tree: ``workloads`` does all of that for a whole scenario.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from fractions import Fraction
from typing import Any, TypeVar

from gpufleet.io.fields import (
    BORROW_WITHIN_COHORT_FIELDS,
    FLAVOR_FUNGIBILITY_FIELDS,
    KUEUE_PREEMPTION_HINTS,
    KUEUE_RESOURCE_LIMITS,
    KUEUE_SPEC_HINTS,
    POD_GROUP_SPEC_FIELDS,
    PRIORITY_CLASS_FIELDS,
    QUEUE_BUDGET_FIELDS,
    QUEUE_PREEMPTION_FIELDS,
    QUEUE_SPEC_FIELDS,
    check_fields,
    check_object_fields,
    quota_value_hint,
)
from gpufleet.io.kube.affinity import namespace_names
from gpufleet.io.kube.resources import is_extended_resource
from gpufleet.io.manifests import Context, describe, named_object
from gpufleet.io.names import NameRule, rule_of
from gpufleet.io.quantities import parse_count, parse_cpu_milli, parse_memory_mib, parse_quantity
from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.priorities import HIGHEST_USER_PRIORITY, PreemptionPolicy, PriorityClass
from gpufleet.model.queues import (
    DEFAULT_WARN_AT,
    SYSTEM_PRIORITY_PREFIX,
    BorrowWithinCohortPolicy,
    BudgetAction,
    BudgetPeriod,
    FlavorFungibility,
    FungibilityPolicy,
    Queue,
    QueueBudget,
    QueueingStrategy,
    QueuePreemption,
    ReclaimPolicy,
    ResourceQuota,
    WithinQueuePolicy,
)
from gpufleet.model.resources import CPU, GPU, GPU_MODEL_PREFIX, MEMORY
from gpufleet.model.workload import PodGroup

QUEUE_NAME = rule_of("Queue")
GPUFLEET_API = "gpufleet.dev/v1alpha1"
COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
PRIORITY_CLASS_API = "scheduling.k8s.io/v1"
API_VERSIONS: dict[str, tuple[str, ...]] = {
    "Queue": (GPUFLEET_API,),
    "PriorityClass": (PRIORITY_CLASS_API,),
    "PodGroup": (GPUFLEET_API, COSCHEDULING_API),
    "ResourceQuota": ("v1",),
}
QUOTA_RESOURCES = (
    f"{CPU}, {MEMORY}, {GPU}, {GPU_MODEL_PREFIX}<model> or an extended resource such as rdma/hca"
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
    """The object's context, name and namespace, its apiVersion checked for its kind."""
    return named_object(obj, source, location, kind, API_VERSIONS[kind], namespaced)


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
    admitted: frozenset[str] | None = frozenset()
    if spec.get("namespaceSelector") is not None:
        selected = namespace_names(context, spec["namespaceSelector"], "spec.namespaceSelector")
        admitted = None if selected is None else frozenset(selected)
    classes: frozenset[str] | None = None
    if spec.get("priorityClasses") is not None:
        names = context.sequence(spec["priorityClasses"], "spec.priorityClasses")
        classes = frozenset(
            context.name(item, f"spec.priorityClasses[{i}]") for i, item in enumerate(names)
        )
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
        budget=_budget(context, spec.get("budget")),
        admitted_namespaces=admitted,
        priority_classes=classes,
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


def _budget(context: Context, value: object) -> QueueBudget | None:
    """``spec.budget``: GPU-hours per period (periods are calendar ones, in UTC), the fraction
    at which it warns, and what happens at 100%."""
    if value is None:
        return None
    path = "spec.budget"
    spec = context.mapping(value, path)
    check_fields(context, spec, path, QUEUE_BUDGET_FIELDS)
    if "gpuHours" not in spec:
        raise context.error(f"{path}.gpuHours", "required: expected GPU-hours >= 0, got nothing")
    hours = spec["gpuHours"]
    if isinstance(hours, bool) or not isinstance(hours, int | float):
        raise context.error(f"{path}.gpuHours", f"expected GPU-hours >= 0, got {describe(hours)}")
    if not math.isfinite(hours) or hours < 0:
        raise context.error(f"{path}.gpuHours", f"expected GPU-hours >= 0, got {hours}")
    warn_at = spec.get("warnAt", DEFAULT_WARN_AT)
    if isinstance(warn_at, bool) or not isinstance(warn_at, int | float):
        raise context.error(
            f"{path}.warnAt", f"expected a fraction in (0, 1], got {describe(warn_at)}"
        )
    if not 0 < warn_at <= 1:
        raise context.error(f"{path}.warnAt", f"expected a fraction in (0, 1], got {warn_at}")
    return QueueBudget(
        float(hours),
        _choice(
            context, spec.get("period", BudgetPeriod.MONTH.value), BudgetPeriod, f"{path}.period"
        ),
        float(warn_at),
        _choice(
            context, spec.get("action", BudgetAction.BLOCK.value), BudgetAction, f"{path}.action"
        ),
    )


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
    value = context.int32(obj["value"], "value")
    if value > HIGHEST_USER_PRIORITY and not name.startswith(SYSTEM_PRIORITY_PREFIX):
        raise context.error(
            "value",
            f"maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}, "
            f"got {value} (as Kubernetes refuses it)",
        )
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
