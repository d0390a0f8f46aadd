"""Kueue's admission and preemption rules that users moving from Kueue rely on, one story per
rule (issue 11, items 1-5). Each id names the rule; the comment above it says where Kueue
defines it (kueue.sigs.k8s.io docs: Cluster Queue, Preemption, Hierarchical Cohorts, Flavor
Fungibility; and the scheduler's code: flavorassigner ``fitsResourceQuota``, the classical
preemption's candidate iterator, the scheduler's entry ordering)."""

from __future__ import annotations

import pytest

from gpufleet.model.queues import (
    BorrowWithinCohortPolicy,
    FlavorFungibility,
    FungibilityPolicy,
    Queue,
    QueueingStrategy,
    QueuePreemption,
    ReclaimPolicy,
    WithinQueuePolicy,
)
from gpufleet.model.resources import gpu_model_key
from gpufleet.testing.builders import make_cluster, make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core
from tests.scheduling.stories import LATER, Case, Step, jobs, names, run

EIGHT = tuple(make_cluster(2, gpus=4))
H100 = "NVIDIA-H100-80GB-HBM3"  # as GPU Feature Discovery names it
A100 = "NVIDIA-A100-SXM4-80GB"


def policy(
    within: WithinQueuePolicy = WithinQueuePolicy.LOWER_PRIORITY,
    reclaim: ReclaimPolicy = ReclaimPolicy.ANY,
    borrow: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER,
    threshold: int | None = None,
) -> QueuePreemption:
    return QueuePreemption(within, reclaim, borrow, threshold)


def model_queue(
    name: str,
    quotas: dict[str, float],
    borrow: dict[str, float] | None = None,
    **options: object,
) -> Queue:
    """A queue with a nominal quota per GPU model (GPUs), and a borrowing limit per model if
    given."""
    queue = make_queue(name, **options)  # type: ignore[arg-type]
    nominal = {gpu_model_key(m): round(v * 1000) for m, v in quotas.items()}
    limits = {gpu_model_key(m): round(v * 1000) for m, v in (borrow or {}).items()}
    return Queue(
        queue.name,
        queue.parent,
        nominal,
        limits,
        queue.lending_limit,
        queue.weight,
        queue.namespaces,
        queue.preemption,
        queue.queueing_strategy,
        queue.gpu_models,
        queue.fungibility,
        admitted_namespaces=queue.admitted_namespaces,
    )


CASES = [
    # Issue 11 item 1. Kueue Hierarchical Cohorts: a queue within its nominal quota reclaims
    # from a sibling that borrows, though their parent (which cannot borrow) is full: the
    # borrowed usage must not count against the reclaiming queue at every ancestor.
    pytest.param(
        Case(
            EIGHT,
            (
                make_queue("org", 8, borrow=0),
                make_queue("a", 4, parent="org"),
                make_queue("b", 4, parent="org"),
            ),
            (
                Step(0, jobs("b", 8, "b"), gpus_by_queue={"b": 8}),
                Step(LATER, jobs("a", 1, "a"), gpus_by_queue={"a": 1, "b": 7}, evicted_count=1),
            ),
        ),
        id="kueue-reclaim-from-sibling-under-a-full-parent",
    ),
    # The same three levels deep (the README's org > research > llm): llm reclaims what
    # vision, under the same parent, borrows.
    pytest.param(
        Case(
            EIGHT,
            (
                make_queue("org", 8, borrow=0),
                make_queue("research", 8, parent="org"),
                make_queue("llm", 4, parent="research"),
                make_queue("vision", 4, parent="research"),
            ),
            (
                Step(0, jobs("v", 8, "vision"), gpus_by_queue={"vision": 8}),
                Step(
                    LATER,
                    jobs("l", 2, "llm"),
                    gpus_by_queue={"llm": 2, "vision": 6},
                    evicted_count=2,
                ),
            ),
        ),
        id="kueue-reclaim-two-levels-below-a-full-root",
    ),
    # Issue 11 item 2. Kueue preemption when quota, not nodes, is short: the lowest priority
    # goes, wherever it runs (one eviction, not a chain).
    pytest.param(
        Case(
            (make_node("n0", gpus=8), make_node("n1", gpus=8)),
            (make_queue("q", 12, borrow=0),),
            (
                Step(
                    0,
                    (
                        make_workload("high", "q", gpus=4, priority=3),
                        make_workload("mid", "q", gpus=4, priority=2),
                        make_workload("low", "q", gpus=4, priority=1),
                    ),
                ),
                Step(
                    LATER,
                    (make_workload("new", "q", gpus=4, priority=3),),
                    evicted=names("low"),
                    running=names("high", "mid", "new"),
                ),
                Step(LATER + 1, evicted=names("low"), running=names("high", "mid", "new")),
            ),
        ),
        id="k8s-quota-short-evicts-the-lowest-priority-only",
    ),
    # Kueue scheduler entry ordering: a workload that fits its queue's nominal quota goes
    # before one that must borrow, so nobody borrows what must then be reclaimed.
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 4), make_queue("b", 4)),
            (
                Step(0, (*jobs("a", 4, "a"), *jobs("b", 3, "b"))),
                Step(
                    LATER,
                    (make_workload("a-borrows", "a"), make_workload("b-within", "b")),
                    evicted_count=0,
                    gpus_by_queue={"a": 4, "b": 4},
                ),
            ),
        ),
        id="kueue-within-nominal-admitted-before-borrowing",
    ),
    # Kueue withinClusterQueue: only a workload whose request fits its queue's nominal quota
    # preempts in its queue: 4 GPUs asked of a 2-GPU queue wait, 2 preempt.
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 2), make_queue("b", 6)),
            (
                # The low ones fill one node: evicting them would make room.
                Step(0, jobs("low", 4, "a")),
                Step(1, jobs("b", 4, "b")),
                Step(
                    LATER,
                    (make_workload("big", "a", gpus=4, priority=5),),
                    evicted_count=0,
                ),
                Step(
                    LATER + 10,
                    (make_workload("fits", "a", gpus=2, priority=5),),
                    evicted_count=2,
                    gpus_by_queue={"a": 4, "b": 4},
                ),
            ),
        ),
        id="kueue-within-queue-preemption-only-when-request-fits-nominal",
    ),
    # Kueue withinClusterQueue: Never.
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 4, borrow=0, preemption=policy(within=WithinQueuePolicy.NEVER)),),
            (
                Step(0, jobs("low", 4, "a")),
                Step(LATER, (make_workload("high", "a", priority=5),), evicted_count=0),
            ),
        ),
        id="kueue-within-cluster-queue-never",
    ),
    # Kueue withinClusterQueue: LowerOrNewerEqualPriority: an equal-priority workload that
    # arrived later than the waiting one is a victim.
    pytest.param(
        Case(
            EIGHT,
            (
                make_queue(
                    "a",
                    4,
                    borrow=0,
                    preemption=policy(within=WithinQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY),
                ),
            ),
            (
                Step(0, (make_workload("first", "a", gpus=2),)),
                Step(1, (make_workload("older", "a", gpus=4),), running=names("first")),
                Step(2, (make_workload("newer", "a", gpus=2),), running=names("first", "newer")),
                Step(
                    LATER,
                    finish=("first",),
                    evicted=names("newer"),
                    running=names("older"),
                ),
            ),
        ),
        id="kueue-within-cluster-queue-lower-or-newer-equal-priority",
    ),
    # ... and with LowerPriority (the default) the same workload waits for it instead.
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 4, borrow=0),),
            (
                Step(0, (make_workload("first", "a", gpus=2),)),
                Step(1, (make_workload("older", "a", gpus=4),)),
                Step(2, (make_workload("newer", "a", gpus=2),)),
                Step(LATER, finish=("first",), evicted_count=0, running=names("newer")),
            ),
        ),
        id="kueue-within-cluster-queue-lower-priority-spares-equal",
    ),
    # Kueue reclaimWithinCohort: Never: the queue waits for its lent quota to come back.
    pytest.param(
        Case(
            EIGHT,
            (
                make_queue("a", 4, preemption=policy(reclaim=ReclaimPolicy.NEVER)),
                make_queue("b", 4),
            ),
            (
                Step(0, jobs("b", 8, "b")),
                Step(LATER, jobs("a", 2, "a"), evicted_count=0, gpus_by_queue={"b": 8}),
            ),
        ),
        id="kueue-reclaim-within-cohort-never",
    ),
    # Kueue reclaimWithinCohort: LowerPriority: only borrowed work of lower priority goes.
    pytest.param(
        Case(
            EIGHT,
            (
                make_queue("a", 4, preemption=policy(reclaim=ReclaimPolicy.LOWER_PRIORITY)),
                make_queue("b", 4),
            ),
            (
                Step(0, (*jobs("hi", 4, "b", priority=5), *jobs("lo", 4, "b", priority=0))),
                Step(
                    LATER,
                    jobs("a", 2, "a", priority=3),
                    evicted_count=2,
                    gpus_by_queue={"a": 2, "b": 6},
                ),
                Step(
                    LATER + 10,
                    jobs("more", 3, "a", priority=3),
                    evicted=names("lo0", "lo1", "lo2", "lo3"),
                    gpus_by_queue={"a": 4, "b": 4},
                ),
            ),
        ),
        id="kueue-reclaim-within-cohort-lower-priority",
    ),
    # Kueue borrowWithinCohort: a workload that must borrow preempts lower-priority borrowed
    # work of another queue (Never, the default: it waits).
    pytest.param(
        Case(
            EIGHT,
            (
                make_queue(
                    "a",
                    2,
                    preemption=policy(borrow=BorrowWithinCohortPolicy.LOWER_PRIORITY),
                ),
                make_queue("b", 2),
                make_queue("c", 4),
            ),
            (
                Step(0, (*jobs("b", 6, "b", priority=1), *jobs("c", 2, "c", priority=1))),
                Step(
                    LATER,
                    (make_workload("big", "a", gpus=4, priority=5),),
                    evicted_count=4,
                    gpus_by_queue={"a": 4, "b": 2, "c": 2},
                ),
            ),
        ),
        id="kueue-borrow-within-cohort-lower-priority",
    ),
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 2), make_queue("b", 2), make_queue("c", 4)),
            (
                Step(0, (*jobs("b", 6, "b", priority=1), *jobs("c", 2, "c", priority=1))),
                Step(LATER, (make_workload("big", "a", gpus=4, priority=5),), evicted_count=0),
            ),
        ),
        id="kueue-borrow-within-cohort-never-by-default",
    ),
    # Kueue borrowWithinCohort.maxPriorityThreshold: victims above it are safe.
    pytest.param(
        Case(
            EIGHT,
            (
                make_queue(
                    "a",
                    2,
                    preemption=policy(borrow=BorrowWithinCohortPolicy.LOWER_PRIORITY, threshold=0),
                ),
                make_queue("b", 2),
                make_queue("c", 4),
            ),
            (
                Step(0, (*jobs("b", 6, "b", priority=1), *jobs("c", 2, "c", priority=1))),
                Step(LATER, (make_workload("big", "a", gpus=4, priority=5),), evicted_count=0),
            ),
        ),
        id="kueue-borrow-within-cohort-max-priority-threshold",
    ),
    # Kueue queueingStrategy: StrictFIFO: the first workload that cannot start blocks the
    # ones behind it, even those that would fit ...
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 8, strategy=QueueingStrategy.STRICT_FIFO),),
            (
                Step(0, (make_workload("busy", "a", gpus=3), make_workload("busy2", "a", gpus=3))),
                Step(1, (make_workload("big", "a", gpus=4),)),
                Step(2, (make_workload("small", "a"),), running=names("busy", "busy2")),
                Step(3, finish=("busy",), running=names("busy2", "big", "small")),
            ),
        ),
        id="kueue-strict-fifo-blocks-behind-the-head",
    ),
    # ... BestEffortFIFO (the default) lets them pass.
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 8),),
            (
                Step(0, (make_workload("busy", "a", gpus=3), make_workload("busy2", "a", gpus=3))),
                Step(1, (make_workload("big", "a", gpus=4),)),
                Step(2, (make_workload("small", "a"),), running=names("busy", "busy2", "small")),
            ),
        ),
        id="kueue-best-effort-fifo-lets-others-pass",
    ),
    # Kueue Hierarchical Cohorts: of two queues that must borrow, the one that borrows from
    # its closest ancestor goes first.
    pytest.param(
        Case(
            EIGHT,
            (
                make_queue("org", 8),
                make_queue("infra", 4, parent="org"),
                make_queue("ci", 4, parent="infra"),
                make_queue("research", 4, parent="org"),
                make_queue("llm", 2, parent="research"),
                make_queue("vision", 2, parent="research"),
            ),
            (
                Step(0, (*jobs("ci", 4, "ci"), *jobs("llm", 2, "llm"))),
                Step(
                    LATER,
                    (
                        make_workload("ci-more", "ci", gpus=2),
                        make_workload("llm-more", "llm", gpus=2),
                    ),
                    running=names("ci0", "ci1", "ci2", "ci3", "llm0", "llm1", "llm-more"),
                ),
            ),
        ),
        id="kueue-hierarchy-borrow-from-the-closest-ancestor-first",
    ),
    # Kueue Hierarchical Cohorts: a subtree whose parent names no quota of its own holds its
    # children's: what it lent comes back, by reclaim, though the request is more than the
    # reclaiming queue's own nominal quota (it fits its parent's subtree).
    pytest.param(
        Case(
            EIGHT,
            (
                Queue("research"),
                make_queue("llm", 4, parent="research"),
                make_queue("vision", 4, parent="research"),
                make_queue("other", 0),
            ),
            (
                Step(0, jobs("o", 8, "other"), gpus_by_queue={"other": 8}),
                Step(
                    LATER,
                    (make_workload("wide", "llm", pods=6, gpus=1),),
                    gpus_by_queue={"llm": 6, "other": 2},
                    evicted_count=6,
                ),
            ),
        ),
        id="kueue-hierarchy-reclaim-by-a-parent-without-quota-of-its-own",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_rule(case: Case) -> None:
    run(case)


# ----------------------------------------------------------------------------- GPU models
def model_nodes() -> tuple:  # type: ignore[type-arg]
    return (make_node("h", gpus=4, model=H100), make_node("a", gpus=4, model=A100))


MODEL_CASES = [
    # Issue 11 item 4. Kueue gives a pod set one flavor: a gang waits rather than run across
    # two GPU models ...
    pytest.param(
        Case(
            model_nodes(),
            (make_queue("q"),),
            (
                Step(0, (make_workload("h2", "q", gpus=2, models=[H100]),)),
                Step(0, (make_workload("a2", "q", gpus=2, models=[A100]),)),
                Step(1, (make_workload("gang", "q", pods=4, gpus=1),), running=names("h2", "a2")),
                Step(2, finish=("a2",), running=names("h2", "gang"), gpus_by_node={"h": 2, "a": 4}),
            ),
        ),
        id="kueue-gang-on-one-gpu-model",
    ),
    # ... unless it allows mixed models.
    pytest.param(
        Case(
            model_nodes(),
            (make_queue("q"),),
            (
                Step(0, (make_workload("h2", "q", gpus=2, models=[H100]),)),
                Step(0, (make_workload("a2", "q", gpus=2, models=[A100]),)),
                Step(
                    1,
                    (make_workload("gang", "q", pods=4, gpus=1, mixed_models=True),),
                    gpus_by_node={"h": 4, "a": 4},
                ),
            ),
        ),
        id="gpufleet-gang-mixes-models-when-it-asks",
    ),
    # Issue 11 item 5. A quota on the short model name covers the product GPU Feature
    # Discovery reports: a cap of 1 H100 admits one pod, not four.
    pytest.param(
        Case(
            (make_node("h", gpus=4, model=H100),),
            (model_queue("q", {"H100": 1}, {"H100": 0}),),
            (Step(0, jobs("p", 4, "q", models=[H100]), running=names("p0")),),
        ),
        id="gpufleet-model-quota-key-covers-the-gfd-product",
    ),
    # Kueue flavor order: the queue's first model is used while it fits (though the policy
    # would take the A100 node, listed first).
    pytest.param(
        Case(
            model_nodes()[::-1],
            (model_queue("q", {"A100": 4, "H100": 4}, gpu_models=["H100", "A100"]),),
            (Step(0, jobs("p", 5, "q"), gpus_by_node={"h": 4, "a": 1}),),
        ),
        id="kueue-flavors-in-the-queues-order",
    ),
    # Kueue flavorFungibility whenCanBorrow: MayStopSearch (default): borrow on the first
    # model rather than try the next ...
    pytest.param(
        Case(
            model_nodes(),
            (
                model_queue("q", {"H100": 2, "A100": 4}, gpu_models=["H100", "A100"]),
                model_queue("other", {"H100": 2}),
            ),
            (Step(0, jobs("p", 3, "q"), gpus_by_node={"h": 3}),),
        ),
        id="kueue-fungibility-borrow-stops-the-search",
    ),
    # ... TryNextFlavor: the next model where it fits within nominal first.
    pytest.param(
        Case(
            model_nodes(),
            (
                model_queue(
                    "q",
                    {"H100": 2, "A100": 4},
                    gpu_models=["H100", "A100"],
                    fungibility=FlavorFungibility(
                        when_can_borrow=FungibilityPolicy.TRY_NEXT_FLAVOR
                    ),
                ),
                model_queue("other", {"H100": 2}),
            ),
            (Step(0, jobs("p", 3, "q"), gpus_by_node={"h": 2, "a": 1}),),
        ),
        id="kueue-fungibility-try-next-model-before-borrowing",
    ),
    # Kueue whenCanPreempt: TryNextFlavor (default): a model with room beats preempting on
    # the first ...
    pytest.param(
        Case(
            model_nodes(),
            (model_queue("q", {"H100": 4, "A100": 4}, gpu_models=["H100", "A100"]),),
            (
                Step(0, jobs("low", 4, "q", models=[H100])),
                Step(
                    LATER,
                    (make_workload("high", "q", priority=5),),
                    evicted_count=0,
                    gpus_by_node={"h": 4, "a": 1},
                ),
            ),
        ),
        id="kueue-fungibility-try-next-model-before-preempting",
    ),
    # ... MayStopSearch: preempt on the first model.
    pytest.param(
        Case(
            model_nodes(),
            (
                model_queue(
                    "q",
                    {"H100": 4, "A100": 4},
                    gpu_models=["H100", "A100"],
                    fungibility=FlavorFungibility(
                        when_can_preempt=FungibilityPolicy.MAY_STOP_SEARCH
                    ),
                ),
            ),
            (
                Step(0, jobs("low", 4, "q", models=[H100])),
                Step(
                    LATER,
                    (make_workload("high", "q", priority=5),),
                    evicted_count=1,
                    gpus_by_node={"h": 4},
                ),
            ),
        ),
        id="kueue-fungibility-preempt-on-the-first-model",
    ),
]


@pytest.mark.parametrize("case", MODEL_CASES)
def test_model_rule(case: Case) -> None:
    run(case)


def test_a_quota_on_a_model_no_node_has_is_reported() -> None:
    core = make_core(
        (make_node("h", gpus=4, model=H100),),
        (model_queue("q", {"H100": 1, "B200": 2}),),
    )
    assert core.quota_warnings() == [
        "quota nvidia.com/gpu.B200 (queue q) matches no node's GPU model "
        f"(models: {H100}); model names match GPU Feature Discovery products by prefix, "
        "e.g. H100 covers NVIDIA-H100-80GB-HBM3"
    ]


def test_a_requeued_preempted_workload_keeps_its_place() -> None:
    """Kueue orders a queue by creation time: a preempted workload goes back ahead of
    workloads that arrived after it."""
    core = make_core(EIGHT, (make_queue("a", 4, borrow=0),))
    cluster = EchoCluster(core)
    cluster.submit(*jobs("low", 4, "a"), now=0)
    cluster.submit(make_workload("later", "a"), now=10)
    cluster.submit(make_workload("high", "a", priority=5), now=LATER)
    assert len(cluster.evicted) == 1
    order = [e.workload for e in core.explain_pending(estimate=False)]
    assert order == [f"default/{cluster.evicted[0].split('/')[1]}", "default/later"]


def test_workloads_behind_a_strict_fifo_head_are_told_why() -> None:
    core = make_core(EIGHT, (make_queue("a", 8, strategy=QueueingStrategy.STRICT_FIFO),))
    cluster = EchoCluster(core)
    cluster.submit(make_workload("busy", "a", gpus=3), make_workload("busy2", "a", gpus=3), now=0)
    cluster.submit(make_workload("big", "a", gpus=4), make_workload("small", "a"), now=1)
    explained = {e.workload: e for e in core.explain_pending(estimate=False)}
    assert explained["default/big"].waiting_for == "quota"
    assert explained["default/small"].waiting_for == "queue order"
    assert explained["default/small"].message == (
        "waiting behind default/big: queue a is StrictFIFO"
    )


def test_a_pod_asking_for_a_short_model_name_runs_on_the_gfd_product() -> None:
    core = make_core(model_nodes(), (make_queue("q"),))
    cluster = EchoCluster(core)
    cluster.submit(make_workload("p", "q", models=["H100"]), now=0)
    assert cluster.running["default/p"].node == "h"
