"""Queue objects one at a time (Queue, PriorityClass, PodGroup, ResourceQuota), and their errors
when read as part of a scenario."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from gpufleet.io.errors import InputError
from gpufleet.io.fleet.queues import (
    pod_group_from_object,
    priority_class_from_object,
    queue_from_object,
    resource_quota_from_object,
)
from gpufleet.io.readers import read_scenario
from gpufleet.model.priorities import PreemptionPolicy, PriorityClass
from gpufleet.model.queues import (
    DEFAULT_WARN_AT,
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
from gpufleet.model.resources import CPU, GPU, MEMORY, gpu_model_key
from gpufleet.model.workload import PodGroup
from tests.io.conftest import WriteFile

SOURCE = "scenario.yaml"
WHERE = "document 1 (line 1)"


def parse(text: str) -> dict[str, Any]:
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def queue_yaml(spec: str) -> dict[str, Any]:
    return parse(f"apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {{name: q}}\n{spec}")


# --------------------------------------------------------------------------------------- Queue
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param("", Queue("q"), id="empty"),
        pytest.param("spec: {parent: org}", Queue("q", parent="org"), id="parent"),
        pytest.param(
            "spec: {quota: {cpu: 500m, memory: 1Gi}}",
            Queue("q", nominal={CPU: 500, MEMORY: 1024}),
            id="quota-cpu-memory",
        ),
        pytest.param(
            "spec: {quota: {nvidia.com/gpu: 8}}", Queue("q", nominal={GPU: 8000}), id="quota-gpu"
        ),
        pytest.param(
            'spec: {quota: {nvidia.com/gpu: "0.5"}}',
            Queue("q", nominal={GPU: 500}),
            id="quota-fractional-gpu",
        ),
        pytest.param(
            "spec: {quota: {nvidia.com/gpu.H100: 4, nvidia.com/gpu.A100: 2.5}}",
            Queue("q", nominal={gpu_model_key("H100"): 4000, gpu_model_key("A100"): 2500}),
            id="quota-per-model",
        ),
        pytest.param(
            "spec: {borrowingLimit: {nvidia.com/gpu: 2}, lendingLimit: {cpu: 4}}",
            Queue("q", borrowing_limit={GPU: 2000}, lending_limit={CPU: 4000}),
            id="limits",
        ),
        pytest.param("spec: {weight: 2.5}", Queue("q", weight=2.5), id="weight"),
        pytest.param(
            "spec: {namespaces: [ml, research]}",
            Queue("q", namespaces=("ml", "research")),
            id="namespaces",
        ),
        pytest.param(
            "spec: {namespaceSelector: {}}",
            Queue("q", admitted_namespaces=None),
            id="namespace-selector-every-namespace",
        ),
        pytest.param(
            "spec: {namespaces: [ml], namespaceSelector: {matchExpressions: [{key: "
            "kubernetes.io/metadata.name, operator: In, values: [ml-dev, ml-prod]}]}}",
            Queue("q", namespaces=("ml",), admitted_namespaces=frozenset({"ml-dev", "ml-prod"})),
            id="namespace-selector-by-name",
        ),
        pytest.param(
            "spec: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ml}}}",
            Queue("q", admitted_namespaces=frozenset({"ml"})),
            id="namespace-selector-match-labels",
        ),
        pytest.param(
            "spec: {priorityClasses: [batch, high]}",
            Queue("q", priority_classes=frozenset({"batch", "high"})),
            id="priority-classes",
        ),
        pytest.param(
            "spec: {priorityClasses: []}",
            Queue("q", priority_classes=frozenset()),
            id="priority-classes-none",
        ),
        pytest.param(
            "spec: {preemption: {withinQueue: LowerOrNewerEqualPriority, reclaimWithinCohort: "
            "LowerPriority, borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: "
            "100}}}",
            Queue(
                "q",
                preemption=QueuePreemption(
                    WithinQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY,
                    ReclaimPolicy.LOWER_PRIORITY,
                    BorrowWithinCohortPolicy.LOWER_PRIORITY,
                    100,
                ),
            ),
            id="kueue-preemption",
        ),
        pytest.param(
            "spec: {preemption: {withinClusterQueue: Never}}",
            Queue("q", preemption=QueuePreemption(within_queue=WithinQueuePolicy.NEVER)),
            id="kueue-spelling-within-cluster-queue",
        ),
        pytest.param(
            "spec: {queueingStrategy: StrictFIFO}",
            Queue("q", queueing_strategy=QueueingStrategy.STRICT_FIFO),
            id="strict-fifo",
        ),
        pytest.param(
            "spec: {gpuModels: [H100, A100], flavorFungibility: {whenCanBorrow: TryNextFlavor,"
            " whenCanPreempt: MayStopSearch}}",
            Queue(
                "q",
                gpu_models=("H100", "A100"),
                fungibility=FlavorFungibility(
                    FungibilityPolicy.TRY_NEXT_FLAVOR, FungibilityPolicy.MAY_STOP_SEARCH
                ),
            ),
            id="gpu-models-and-fungibility",
        ),
        pytest.param(
            "spec: {budget: {gpuHours: 100}}",
            Queue("q", budget=QueueBudget(100.0, BudgetPeriod.MONTH, DEFAULT_WARN_AT)),
            id="budget-defaults",
        ),
        pytest.param(
            "spec: {budget: {gpuHours: 0.5, period: week, warnAt: 0.9, action: Preemptible}}",
            Queue("q", budget=QueueBudget(0.5, BudgetPeriod.WEEK, 0.9, BudgetAction.PREEMPTIBLE)),
            id="budget",
        ),
    ],
)
def test_queue(spec: str, expected: Queue) -> None:
    found = queue_from_object(queue_yaml(spec), SOURCE, WHERE)
    assert found == expected
    # nominal and limits do not take part in equality: compare them directly.
    assert dict(found.nominal) == dict(expected.nominal)
    assert dict(found.borrowing_limit) == dict(expected.borrowing_limit)
    assert dict(found.lending_limit) == dict(expected.lending_limit)


# ------------------------------------------------------------------------------- PriorityClass
PC = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: pc}\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param("value: 1000", PriorityClass("pc", 1000), id="value"),
        pytest.param("value: -5", PriorityClass("pc", -5), id="negative-value"),
        pytest.param("value: 1000000000", PriorityClass("pc", 10**9), id="user-maximum"),
        pytest.param(
            "value: 0\npreemptionPolicy: Never",
            PriorityClass("pc", 0, PreemptionPolicy.NEVER),
            id="never",
        ),
        pytest.param(
            "value: 7\npreemptionPolicy: PreemptLowerPriority\nglobalDefault: true",
            PriorityClass("pc", 7, PreemptionPolicy.PREEMPT_LOWER_PRIORITY, True),
            id="global-default",
        ),
    ],
)
def test_priority_class(body: str, expected: PriorityClass) -> None:
    assert priority_class_from_object(parse(PC + body), SOURCE, WHERE) == expected


# --------------------------------------------------------------------- PodGroup, ResourceQuota
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "apiVersion: gpufleet.dev/v1alpha1\nkind: PodGroup\n"
            "metadata: {name: g, namespace: ml}\nspec: {minMember: 3}",
            PodGroup("g", "ml", 3),
            id="gpufleet",
        ),
        pytest.param(
            "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\n"
            "metadata: {name: g}\nspec: {minMember: 2}",
            PodGroup("g", "default", 2),
            id="scheduler-plugins",
        ),
    ],
)
def test_pod_group(text: str, expected: PodGroup) -> None:
    assert pod_group_from_object(parse(text), SOURCE, WHERE) == expected


RQ = "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: rq, namespace: ml}\n"


def test_queue_quota_may_name_extended_resources() -> None:
    spec = "spec: {quota: {rdma/hca: 4, nvidia.com/gpu: 1}, borrowingLimit: {example.com/f: 0}}"
    found = queue_from_object(queue_yaml(spec), SOURCE, WHERE)
    assert found.nominal == {"rdma/hca": 4, GPU: 1000}
    assert found.borrowing_limit == {"example.com/f": 0}


@pytest.mark.parametrize(
    ("hard", "expected"),
    [
        pytest.param(
            "{requests.nvidia.com/gpu: 4, requests.cpu: 8, requests.memory: 1Gi}",
            {GPU: 4000, CPU: 8000, MEMORY: 1024},
            id="requests-keys",
        ),
        pytest.param(
            "{nvidia.com/gpu: 2, cpu: 500m, memory: 512Mi}",
            {GPU: 2000, CPU: 500, MEMORY: 512},
            id="plain-keys",
        ),
        pytest.param(
            "{pods: 10, limits.cpu: 4, requests.storage: 1Ti, count/jobs.batch: 3}",
            {},
            id="other-keys-ignored",
        ),
        pytest.param("{cpu: 4, requests.cpu: 2}", {CPU: 2000}, id="two-keys-smaller-wins"),
        pytest.param(
            "{requests.rdma/hca: 2, rdma/hca: 9, limits.rdma/hca: 9}",
            {"rdma/hca": 2},
            id="extended-resources-by-requests",
        ),
    ],
)
def test_resource_quota(hard: str, expected: dict[str, int]) -> None:
    found = resource_quota_from_object(parse(f"{RQ}spec: {{hard: {hard}}}"), SOURCE, WHERE)
    assert found == ResourceQuota("rq", "ml")
    assert dict(found.hard) == expected


# ----------------------------------------------------------------------------------- bad input
class Bad(NamedTuple):
    read: Callable[[dict[str, Any], str, str], object]
    obj: dict[str, Any]
    location: str  # after the file name: the place and the object
    field: str
    message: str


BAD = {
    "queue-namespace-selector-by-other-labels": Bad(
        queue_from_object,
        queue_yaml("spec: {namespaceSelector: {matchLabels: {team: ml}}}"),
        f"{WHERE}, Queue q",
        "spec.namespaceSelector",
        "not supported: team In (gpufleet does not read Namespace objects",
    ),
    "queue-namespace-selector-misspelt": Bad(
        queue_from_object,
        queue_yaml("spec: {namespaceSelector: {matchLabel: {kubernetes.io/metadata.name: ml}}}"),
        f"{WHERE}, Queue q",
        "spec.namespaceSelector.matchLabel",
        "unknown field",
    ),
    "queue-priority-class-bad-name": Bad(
        queue_from_object,
        queue_yaml("spec: {priorityClasses: [High_Priority]}"),
        f"{WHERE}, Queue q",
        "spec.priorityClasses[0]",
        "got 'High_Priority'",
    ),
    "priority-class-above-int32": Bad(
        priority_class_from_object,
        parse(PC + "value: 100000000000000000000"),
        f"{WHERE}, PriorityClass pc",
        "value",
        "expected a whole number <= 2147483647, got 100000000000000000000",
    ),
    "priority-class-above-user-maximum": Bad(
        priority_class_from_object,
        parse(PC + "value: 1000000001"),
        f"{WHERE}, PriorityClass pc",
        "value",
        "maximum allowed value of a user defined priority is 1000000000",
    ),
    "queue-unknown-resource": Bad(
        queue_from_object,
        queue_yaml("spec: {quota: {nvidia.com/gpus: 1}}"),
        f"{WHERE}, Queue q",
        "spec.quota[nvidia.com/gpus]",
        "unknown resource 'nvidia.com/gpus' (expected cpu, memory, nvidia.com/gpu, "
        "nvidia.com/gpu.<model> or an extended resource such as rdma/hca)",
    ),
    "queue-negative-quota": Bad(
        queue_from_object,
        queue_yaml("spec: {quota: {cpu: -2}}"),
        f"{WHERE}, Queue q",
        "spec.quota[cpu]",
        "CPU must not be negative, got -2",
    ),
    "queue-negative-gpu-limit": Bad(
        queue_from_object,
        queue_yaml("spec: {lendingLimit: {nvidia.com/gpu.T4: -1}}"),
        f"{WHERE}, Queue q",
        "spec.lendingLimit[nvidia.com/gpu.T4]",
        "must not be negative, got -1",
    ),
    "queue-zero-weight": Bad(
        queue_from_object,
        queue_yaml("spec: {weight: 0}"),
        f"{WHERE}, Queue q",
        "spec.weight",
        "expected a positive number, got 0",
    ),
    "queue-wrong-api": Bad(
        queue_from_object,
        {**queue_yaml(""), "apiVersion": "kueue.x-k8s.io/v1beta1"},
        f"{WHERE}, Queue q",
        "apiVersion",
        "expected gpufleet.dev/v1alpha1 for a Queue, got 'kueue.x-k8s.io/v1beta1'",
    ),
    "queue-bad-preemption-policy": Bad(
        queue_from_object,
        queue_yaml("spec: {preemption: {reclaimWithinCohort: Sometimes}}"),
        f"{WHERE}, Queue q",
        "spec.preemption.reclaimWithinCohort",
        "expected Never or LowerPriority or Any, got 'Sometimes'",
    ),
    "queue-borrow-without-reclaim": Bad(
        queue_from_object,
        queue_yaml(
            "spec: {preemption: {reclaimWithinCohort: Never, borrowWithinCohort: "
            "{policy: LowerPriority}}}"
        ),
        f"{WHERE}, Queue q",
        "spec.preemption.borrowWithinCohort.policy",
        "borrowWithinCohort needs reclaimWithinCohort other than Never (as in Kueue)",
    ),
    "queue-bad-queueing-strategy": Bad(
        queue_from_object,
        queue_yaml("spec: {queueingStrategy: FIFO}"),
        f"{WHERE}, Queue q",
        "spec.queueingStrategy",
        "expected BestEffortFIFO or StrictFIFO, got 'FIFO'",
    ),
    "queue-model-twice": Bad(
        queue_from_object,
        queue_yaml("spec: {gpuModels: [H100, A100, H100]}"),
        f"{WHERE}, Queue q",
        "spec.gpuModels[2]",
        "H100 is listed twice",
    ),
    "queue-bad-fungibility": Bad(
        queue_from_object,
        queue_yaml("spec: {flavorFungibility: {whenCanBorrow: Borrow}}"),
        f"{WHERE}, Queue q",
        "spec.flavorFungibility.whenCanBorrow",
        "expected MayStopSearch or TryNextFlavor, got 'Borrow'",
    ),
    "queue-negative-budget": Bad(
        queue_from_object,
        queue_yaml("spec: {budget: {gpuHours: -5}}"),
        f"{WHERE}, Queue q",
        "spec.budget.gpuHours",
        "expected GPU-hours >= 0, got -5",
    ),
    "queue-budget-without-hours": Bad(
        queue_from_object,
        queue_yaml("spec: {budget: {period: day}}"),
        f"{WHERE}, Queue q",
        "spec.budget.gpuHours",
        "required: expected GPU-hours >= 0, got nothing",
    ),
    "queue-budget-hours-not-a-number": Bad(
        queue_from_object,
        queue_yaml("spec: {budget: {gpuHours: lots}}"),
        f"{WHERE}, Queue q",
        "spec.budget.gpuHours",
        "expected GPU-hours >= 0, got",
    ),
    "queue-budget-unknown-period": Bad(
        queue_from_object,
        queue_yaml("spec: {budget: {gpuHours: 5, period: year}}"),
        f"{WHERE}, Queue q",
        "spec.budget.period",
        "expected day or week or month, got 'year'",
    ),
    "queue-budget-unknown-action": Bad(
        queue_from_object,
        queue_yaml("spec: {budget: {gpuHours: 5, action: Stop}}"),
        f"{WHERE}, Queue q",
        "spec.budget.action",
        "expected Block or NominalOnly or Preemptible, got 'Stop'",
    ),
    "queue-budget-warn-above-1": Bad(
        queue_from_object,
        queue_yaml("spec: {budget: {gpuHours: 5, warnAt: 80}}"),
        f"{WHERE}, Queue q",
        "spec.budget.warnAt",
        "expected a fraction in (0, 1], got 80",
    ),
    "queue-budget-unknown-field": Bad(
        queue_from_object,
        queue_yaml("spec: {budget: {gpuHours: 5, limit: 3}}"),
        f"{WHERE}, Queue q",
        "spec.budget.limit",
        "unknown field",
    ),
    "priority-missing-value": Bad(
        priority_class_from_object,
        parse(PC + "description: x"),
        f"{WHERE}, PriorityClass pc",
        "value",
        "required: expected a whole number, got nothing",
    ),
    "priority-bad-policy": Bad(
        priority_class_from_object,
        parse(PC + "value: 1\npreemptionPolicy: Always"),
        f"{WHERE}, PriorityClass pc",
        "preemptionPolicy",
        "expected PreemptLowerPriority or Never, got 'Always'",
    ),
    "priority-global-default-text": Bad(
        priority_class_from_object,
        parse(PC + "value: 1\nglobalDefault: 'yes'"),
        f"{WHERE}, PriorityClass pc",
        "globalDefault",
        "expected true or false, got 'yes'",
    ),
    "pod-group-min-member-zero": Bad(
        pod_group_from_object,
        parse(
            "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: g}\n"
            "spec: {minMember: 0}"
        ),
        f"{WHERE}, PodGroup default/g",
        "spec.minMember",
        "expected a whole number >= 1, got 0",
    ),
    "resource-quota-bad-gpu": Bad(
        resource_quota_from_object,
        parse(f"{RQ}spec: {{hard: {{requests.nvidia.com/gpu: lots}}}}"),
        f"{WHERE}, ResourceQuota ml/rq",
        "spec.hard[requests.nvidia.com/gpu]",
        "not a Kubernetes quantity: 'lots'",
    ),
}

GPUFLEET_GROUP = "apiVersion: gpufleet.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g}\n"
#: Unknown fields of gpufleet's objects: a did-you-mean, or where gpufleet keeps Kueue's.
UNKNOWN_FIELDS = {
    "queue-misspelt": ("spec: {wieght: 3}", "spec.wieght", "did you mean 'weight'?"),
    "queue-misspelt-case": ("spec: {Parent: org}", "spec.Parent", "did you mean 'parent'?"),
    "queue-nothing-close": (
        "spec: {colour: red}",
        "spec.colour",
        "unknown field (expected one of: parent, quota, borrowingLimit,",
    ),
    "queue-spec-field-at-top": ("quota: {cpu: 1}", "quota", "quota belongs under spec"),
    "queue-top-misspelt": ("sepc: {}", "sepc", "did you mean 'spec'?"),
    "kueue-nominal-quota": (
        "spec: {nominalQuota: {nvidia.com/gpu: 3}}",
        "spec.nominalQuota",
        "unknown field; Kueue's nominalQuota is spec.quota here",
    ),
    "kueue-cohort": ("spec: {cohort: org}", "spec.cohort", "Kueue's cohort is spec.parent here"),
    "kueue-resource-groups": (
        "spec: {resourceGroups: []}",
        "spec.resourceGroups",
        "Kueue's resourceGroups are spec.quota here",
    ),
    "kueue-fair-sharing": (
        "spec: {fairSharing: {weight: 2}}",
        "spec.fairSharing",
        "Kueue's fairSharing.weight is spec.weight here",
    ),
    "kueue-stop-policy": ("spec: {stopPolicy: Hold}", "spec.stopPolicy", "no counterpart"),
    "kueue-preemption-at-spec": (
        "spec: {reclaimWithinCohort: Any}",
        "spec.reclaimWithinCohort",
        "a preemption policy: it goes under spec.preemption",
    ),
    "kueue-fungibility-in-preemption": (
        "spec: {preemption: {whenCanBorrow: TryNextFlavor}}",
        "spec.preemption.whenCanBorrow",
        "it goes under spec.flavorFungibility, not preemption",
    ),
    "preemption-misspelt": (
        "spec: {preemption: {reclaimWithinCohorts: Any}}",
        "spec.preemption.reclaimWithinCohorts",
        "did you mean 'reclaimWithinCohort'?",
    ),
    "borrow-within-cohort-misspelt": (
        "spec: {preemption: {borrowWithinCohort: {polcy: LowerPriority}}}",
        "spec.preemption.borrowWithinCohort.polcy",
        "did you mean 'policy'?",
    ),
    "fungibility-misspelt": (
        "spec: {flavorFungibility: {whenCanBorow: TryNextFlavor}}",
        "spec.flavorFungibility.whenCanBorow",
        "did you mean 'whenCanBorrow'?",
    ),
    "kueue-borrowing-limit-in-quota": (
        "spec: {quota: {borrowingLimit: {nvidia.com/gpu: 2}}}",
        "spec.quota[borrowingLimit]",
        "Kueue's per-resource borrowingLimit is spec.borrowingLimit here",
    ),
    "kueue-limits-per-resource": (
        "spec: {quota: {nvidia.com/gpu: {nominalQuota: 8, borrowingLimit: 2}}}",
        "spec.quota[nvidia.com/gpu]",
        "three maps here: spec.quota, spec.borrowingLimit and spec.lendingLimit",
    ),
}
for case_id, (spec, field, message) in UNKNOWN_FIELDS.items():
    BAD[f"unknown-{case_id}"] = Bad(
        queue_from_object, queue_yaml(spec), f"{WHERE}, Queue q", field, message
    )
BAD["unknown-priority-class-field"] = Bad(
    priority_class_from_object,
    parse(PC + "value: 1\npreemtionPolicy: Never"),
    f"{WHERE}, PriorityClass pc",
    "preemtionPolicy",
    "did you mean 'preemptionPolicy'?",
)
BAD["unknown-pod-group-field"] = Bad(
    pod_group_from_object,
    parse(GPUFLEET_GROUP + "spec: {minMember: 2, minMembers: 3}"),
    f"{WHERE}, PodGroup default/g",
    "spec.minMembers",
    "did you mean 'minMember'?",
)


def test_scheduler_plugins_pod_group_fields_are_theirs() -> None:
    """A scheduler-plugins PodGroup's other fields are its own: read, not refused."""
    obj = parse(
        "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: g}\n"
        "spec: {minMember: 2, scheduleTimeoutSeconds: 60, minResources: {cpu: 2}}"
    )
    assert pod_group_from_object(obj, SOURCE, WHERE) == PodGroup("g", "default", 2)


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_objects(case: Bad) -> None:
    check_bad_object(case)


def check_bad_object(case: Bad) -> None:
    """Reading ``case.obj`` fails at the place, object and field the case names."""
    with pytest.raises(InputError) as raised:
        case.read(case.obj, SOURCE, WHERE)
    error = raised.value
    text = str(error)
    assert text.startswith(f"{SOURCE}:{case.location}: {case.field}: "), text
    assert error.field == case.field
    assert case.message in text, text


# -------------------------------------------------- the same objects in a scenario (read_scenario)
Obj = dict[str, Any]


def scenario_text(*objects: Obj) -> str:
    """One JSON line per document, so document N starts on line 2N - 1."""
    return "---\n".join(json.dumps(obj) + "\n" for obj in objects)


def queue(name: str, parent: str | None = None, **spec: Any) -> Obj:
    if parent is not None:
        spec["parent"] = parent
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def priority_class(name: str, value: int, **fields: Any) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **fields,
    }


def pod_group(
    name: str, min_member: int, namespace: str = "default", api: str = "gpufleet.dev/v1alpha1"
) -> Obj:
    return {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member},
    }


class Case(NamedTuple):
    objects: list[Obj]
    location: str  # "document N (line L), Kind name" after the file name
    field: str | None
    message: str


def at(document: int, what: str) -> str:
    return f"document {document} (line {2 * document - 1}), {what}"


def check_bad_scenario(write_file: WriteFile, case: Case) -> None:
    """Reading ``case.objects`` fails, naming the file, the place and object, and the field."""
    path = write_file("scenario.yaml", scenario_text(*case.objects))
    with pytest.raises(InputError) as raised:
        read_scenario(path)
    error = raised.value
    text = str(error)
    assert error.source == str(path)
    assert text.startswith(f"{path}:{case.location}: "), text
    assert error.field == case.field, text
    if case.field is not None:
        assert f": {case.field}: " in text, text
    assert case.message in text, text


SCENARIO_BAD = {
    "children-exceed-parent": Case(
        [
            queue("org", quota={"nvidia.com/gpu": 4}),
            queue("a", "org", quota={"nvidia.com/gpu": 3}),
            queue("b", "org", quota={"nvidia.com/gpu": 2}),
        ],
        at(1, "Queue org"),
        "spec.quota[nvidia.com/gpu]",
        "children's nvidia.com/gpu quotas add up to 5, more than its own 4 (a, b)",
    ),
    "cycle-of-parents": Case(
        [queue("org"), queue("a", "b"), queue("b", "a")],
        at(2, "Queue a"),
        "spec.parent",
        "parents form a cycle: a -> b -> a",
    ),
    "missing-parent": Case(
        [queue("org"), queue("a", "orgg")],
        at(2, "Queue a"),
        "spec.parent",
        "parent 'orgg' is not defined",
    ),
    "unknown-quota-resource": Case(
        [queue("org", quota={"nvidia.com/gpus": 1})],
        at(1, "Queue org"),
        "spec.quota[nvidia.com/gpus]",
        "unknown resource 'nvidia.com/gpus' (expected cpu, memory, nvidia.com/gpu, "
        "nvidia.com/gpu.<model> or an extended resource such as rdma/hca)",
    ),
    "negative-quota": Case(
        [queue("org"), queue("a", "org", borrowingLimit={"memory": "-1Gi"})],
        at(2, "Queue a"),
        "spec.borrowingLimit[memory]",
        "memory must not be negative, got '-1Gi'",
    ),
    "two-global-defaults": Case(
        [
            priority_class("batch", 10, globalDefault=True),
            priority_class("other", 1, globalDefault=True),
        ],
        at(2, "PriorityClass other"),
        "globalDefault",
        "two global default priority classes: 'other' and 'batch' (in ",
    ),
    "duplicate-queue": Case(
        [queue("org"), queue("org")],
        at(2, "Queue org"),
        "metadata.name",
        "Queue 'org' appears twice (first in ",
    ),
    "duplicate-priority-class": Case(
        [priority_class("high", 1000), priority_class("high", 1)],
        at(2, "PriorityClass high"),
        "metadata.name",
        "PriorityClass 'high' appears twice",
    ),
    "duplicate-pod-group": Case(
        [pod_group("g", 1), pod_group("g", 2, api="scheduling.x-k8s.io/v1alpha1")],
        at(2, "PodGroup default/g"),
        "metadata.name",
        "PodGroup 'default/g' appears twice",
    ),
    "namespace-in-two-queues": Case(
        [queue("a", namespaces=["ml"]), queue("b", namespaces=["x", "ml"])],
        at(2, "Queue b"),
        "spec.namespaces[1]",
        "namespace 'ml' already has a default queue: 'a' (in ",
    ),
}


@pytest.mark.parametrize("case", SCENARIO_BAD.values(), ids=SCENARIO_BAD.keys())
def test_bad_admission_objects_in_a_scenario(write_file: WriteFile, case: Case) -> None:
    check_bad_scenario(write_file, case)


def test_the_readmes_queue_with_every_field_reads_as_written() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    start = readme.index(
        "```yaml\napiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: llm}"
    )
    text = readme[start + len("```yaml\n") : readme.index("```", start + 3)]
    queue = queue_from_object(parse(text), "README.md")
    assert queue.parent == "research"
    assert queue.gpu_models == ("H100", "A100")
    assert queue.queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO
    assert queue.preemption == QueuePreemption()
    assert queue.fungibility == FlavorFungibility()
    assert dict(queue.nominal)[gpu_model_key("H100")] == 8000
