"""Who may use a queue: the namespaces it admits and the priority classes it allows, checked
by the core at admission (issue 26, items 3 and 9), so every world that runs the core waits a
refused workload with a reason of its own instead of charging another team's quota."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import Placement
from gpufleet.model.actions import Evict
from gpufleet.model.events import PodBound
from gpufleet.model.queues import (
    KUEUE_QUEUE_LABEL,
    NAMESPACE_NOT_ADMITTED,
    PRIORITY_CLASS_NOT_ALLOWED,
    QUEUE_LABEL,
    Queue,
)
from gpufleet.model.resources import GPU
from gpufleet.testing.builders import make_node, make_pod, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

EVERY = None  # admitted_namespaces: every namespace (the explicit opt-in)


@dataclass(frozen=True)
class Case:
    queue: Queue | None  # None: no queue defined (the implicit default queue)
    namespace: str
    priority_class: str | None = None
    #: None: it runs; else (reason, message) it waits with.
    waits: tuple[str, str] | None = None
    #: Queues above ``queue``, defined too.
    parents: tuple[Queue, ...] = ()


def team(**fields: object) -> Queue:
    return Queue("team-a", nominal={GPU: 2000}, **fields)  # type: ignore[arg-type]


CASES = {
    "own-namespace-by-name": Case(team(), "team-a"),
    "other-namespace-by-name": Case(
        team(),
        "team-b",
        waits=(
            NAMESPACE_NOT_ADMITTED,
            "namespace team-b is not admitted by queue team-a (it admits team-a)",
        ),
    ),
    "listed-namespace": Case(team(namespaces=("ml",)), "ml"),
    "ancestors-namespace": Case(
        Queue("team-a-llm", parent="team-a"), "team-a", parents=(Queue("team-a"),)
    ),
    "other-namespace-under-a-parent": Case(
        Queue("team-a", parent="org"),
        "team-b",
        waits=(NAMESPACE_NOT_ADMITTED, "(it admits org, team-a)"),
        parents=(Queue("org"),),
    ),
    "listing-replaces-the-name": Case(
        team(namespaces=("ml",)),
        "team-a",
        waits=(
            NAMESPACE_NOT_ADMITTED,
            "namespace team-a is not admitted by queue team-a (it admits ml)",
        ),
    ),
    "selected-namespace": Case(team(admitted_namespaces=frozenset({"ml-dev"})), "ml-dev"),
    "selected-and-listed": Case(
        team(namespaces=("ml",), admitted_namespaces=frozenset({"ml-dev"})),
        "research",
        waits=(NAMESPACE_NOT_ADMITTED, "(it admits ml, ml-dev)"),
    ),
    "opt-in-every-namespace": Case(team(admitted_namespaces=EVERY), "anyone"),
    "implicit-default-queue-admits-all": Case(None, "anyone"),
    "defined-default-queue-is-like-any-other": Case(
        Queue("default"),
        "team-b",
        waits=(NAMESPACE_NOT_ADMITTED, "namespace team-b is not admitted by queue default"),
    ),
    "class-allowed": Case(team(priority_classes=frozenset({"batch"})), "team-a", "batch"),
    "class-not-allowed": Case(
        team(priority_classes=frozenset({"batch"})),
        "team-a",
        "high",
        waits=(
            PRIORITY_CLASS_NOT_ALLOWED,
            "priority class high is not allowed by queue team-a (it allows batch)",
        ),
    ),
    "no-class-always-allowed": Case(team(priority_classes=frozenset({"batch"})), "team-a"),
    "any-class-by-default": Case(team(), "team-a", "high"),
    "system-class-refused-by-default": Case(
        team(),
        "team-a",
        "system-cluster-critical",
        waits=(PRIORITY_CLASS_NOT_ALLOWED, "(it allows any class but system-*)"),
    ),
    "system-class-when-listed": Case(
        team(priority_classes=frozenset({"system-node-critical"})),
        "team-a",
        "system-node-critical",
    ),
    "namespace-before-class": Case(
        team(priority_classes=frozenset()),
        "team-b",
        "high",
        waits=(NAMESPACE_NOT_ADMITTED, "namespace team-b is not admitted"),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_queue_admits_only_its_namespaces_and_classes(case: Case) -> None:
    queues = [] if case.queue is None else [*case.parents, case.queue]
    cluster = EchoCluster(make_core([make_node("n", gpus=4)], queues))
    queue = "default" if case.queue is None else case.queue.name
    job = make_workload("job", queue, namespace=case.namespace, priority_class=case.priority_class)
    cluster.submit(job, now=0)
    if case.waits is None:
        assert cluster.running_workloads() == {job.key}
        return
    reason, message = case.waits
    assert cluster.running_workloads() == set()
    assert message in cluster.told[job.pods[0].key]
    (explained,) = cluster.core.explain_pending()
    assert (explained.workload, explained.waiting_for) == (job.key, reason)
    assert message in explained.message
    (waiting,) = cluster.core.view().waiting
    assert waiting.reason == reason


def test_a_pod_of_another_namespace_cannot_use_a_teams_quota_or_preempt_its_work() -> None:
    """The finding: a pod labelled with team-a's queue in a namespace team-a's queue does not
    admit, at a high priority, neither runs nor evicts team-a's work; team-a's own does."""
    queues = [Queue("team-a", nominal={GPU: 2000}), Queue("team-b", nominal={GPU: 2000})]
    cluster = EchoCluster(make_core([make_node("n", gpus=4)], queues))
    theirs = make_workload("train", "team-a", gpus=4, namespace="team-a")
    cluster.submit(theirs, now=0)
    intruder = make_workload("grab", "team-a", gpus=2, priority=1000, namespace="team-b")
    actions = cluster.submit(intruder, now=500)
    assert not [a for a in actions if isinstance(a, Evict)]
    assert cluster.running_workloads() == {theirs.key}
    assert "namespace team-b is not admitted by queue team-a" in cluster.told["team-b/grab"]


def test_a_pod_placed_elsewhere_charges_no_queue_that_does_not_admit_it() -> None:
    """A pod bound by another scheduler, labelled with team-a's queue from team-b: it runs
    (it is a fact) but is charged to the queue its namespace has, not to team-a's quota."""
    queues = [Queue("team-a", nominal={GPU: 2000}), Queue("team-b", namespaces=("team-b",))]
    core = make_core([make_node("n", gpus=4)], queues)
    pod = make_pod("squat", gpus=2, namespace="team-b", labels={QUEUE_LABEL: "team-a"})
    core.handle(PodBound(pod, Placement("n", (0, 1))))
    (running,) = core.view().running
    assert running.queue == "team-b"
    cluster = EchoCluster(core)
    cluster.submit(make_workload("train", "team-a", gpus=2, namespace="team-a"), now=0)
    assert "team-a/train" in cluster.running_workloads()


@pytest.mark.parametrize("label", [QUEUE_LABEL, KUEUE_QUEUE_LABEL], ids=["own", "kueue"])
def test_a_pod_placed_elsewhere_is_charged_to_the_queue_its_label_names(label: str) -> None:
    """A bound pod's queue label, gpufleet's or Kueue's, names the queue it is charged to."""
    queues = [Queue("team-a", admitted_namespaces=None), Queue("team-b", namespaces=("ml",))]
    core = make_core([make_node("n", gpus=4)], queues)
    pod = make_pod("p", gpus=2, namespace="ml", labels={label: "team-a"})
    core.handle(PodBound(pod, Placement("n", (0, 1))))
    (running,) = core.view().running
    assert running.queue == "team-a"


@st.composite
def tenancies(draw: st.DrawFn) -> tuple[list[Queue], list[tuple[str, str, str | None]]]:
    """Queues with random admitted namespaces and classes; workloads (queue, namespace, class)
    from random namespaces and classes."""
    namespaces = ["a", "b", "c", "q0", "q1"]
    classes = ["low", "high", "system-node-critical"]
    queues = []
    for i in range(draw(st.integers(1, 3))):
        listed = tuple(draw(st.lists(st.sampled_from(namespaces), max_size=2, unique=True)))
        selected = draw(st.none() | st.frozensets(st.sampled_from(namespaces), max_size=2))
        allowed = draw(st.none() | st.frozensets(st.sampled_from(classes), max_size=2))
        queues.append(
            Queue(
                f"q{i}",
                namespaces=listed,
                admitted_namespaces=selected,
                priority_classes=allowed,
            )
        )
    workloads = draw(
        st.lists(
            st.tuples(
                st.sampled_from([q.name for q in queues]),
                st.sampled_from(namespaces),
                st.none() | st.sampled_from(classes),
            ),
            min_size=1,
            max_size=6,
        )
    )
    return queues, workloads


@settings(max_examples=60, deadline=None)
@given(tenancies())
def test_every_workload_runs_exactly_when_its_queue_admits_it(
    tenancy: tuple[list[Queue], list[tuple[str, str, str | None]]],
) -> None:
    queues, specs = tenancy
    by_name = {q.name: q for q in queues}
    cluster = EchoCluster(make_core([make_node("n", gpus=8)], queues))
    jobs = [
        make_workload(f"j{i}", queue, namespace=ns, priority_class=pc, gpus=1)
        for i, (queue, ns, pc) in enumerate(specs)
    ]
    cluster.submit(*jobs, now=0)
    running = cluster.running_workloads()
    waiting = {w.workload: w.waiting_for for w in cluster.core.explain_pending()}
    for job in jobs:
        refusal = by_name[job.queue].refusal(job.namespace, job.priority_class)
        if refusal is None:
            assert job.key in running  # 8 GPUs hold every workload: nothing else stops it
        else:
            assert waiting[job.key] == refusal[0]
