"""Admission and preemption, one table row per documented rule of Kueue, Volcano or KAI.

Each case is a short story: steps that submit (or finish) workloads at a time, and what must
run and what must have been evicted once the core settled. The id of a case names its rule;
the comment above it names the documentation the rule comes from:

* Kueue, Cluster Queue (kueue.sigs.k8s.io/docs/concepts/cluster_queue): nominalQuota, cohorts,
  borrowingLimit, lendingLimit, flavors (a quota per GPU model), ``preemption``
  (``reclaimWithinCohort``, ``withinClusterQueue: LowerPriority``);
* Kueue, Preemption (kueue.sigs.k8s.io/docs/concepts/preemption): reclaim only while the
  preemptor's ClusterQueue stays within its nominal quota; candidates in borrowing queues
  first, then lower priority;
* Kueue, Hierarchical Cohorts (kueue.sigs.k8s.io/docs/concepts/hierarchical_cohorts);
* Kubernetes, Pod Priority and Preemption (kubernetes.io/docs/concepts/scheduling-eviction/
  pod-priority-preemption): ``preemptionPolicy: Never``; Resource Quotas
  (kubernetes.io/docs/concepts/policy/resource-quotas);
* Volcano, capacity plugin (volcano.sh, "how to use capacity plugin"): a queue reclaims what it
  lent, up to its deserved amount; gang plugin: a job runs and is evicted as a whole;
* KAI Scheduler (github.com/NVIDIA/KAI-Scheduler, docs/fairness, docs/priority, the
  min-runtime plugin): the over-quota surplus divided by over-quota weight; non-preemptible
  workloads run only within the deserved quota and are never evicted; a minimum run time
  before a workload may be preempted; victims that lose the least work first.
"""

from __future__ import annotations

import pytest

from gpufleet.model.queues import ResourceQuota
from gpufleet.model.resources import GPU
from gpufleet.testing.builders import gpus, make_cluster, make_node, make_queue, make_workload
from tests.scheduling.stories import LATER, Case, Step, jobs, names, run

# Two nodes of 4 GPUs; the top-level queues a and b (4 GPUs nominal each) share them as a
# cohort. Queue a2 cannot borrow, so that its own quota, not capacity, is what is full.
EIGHT = tuple(make_cluster(2, gpus=4))
A4 = make_queue("a", 4)
B4 = make_queue("b", 4)
A4_ONLY = make_queue("a", 4, borrow=0)

CASES = [
    # Kueue Cluster Queue: a workload is admitted while its queue's usage stays within its
    # nominalQuota, whatever the cohort's other queues run.
    pytest.param(
        Case(
            EIGHT,
            (A4, B4),
            (
                Step(0, jobs("b", 4, "b")),
                Step(
                    1, (make_workload("gang", "a", pods=2, gpus=2),), gpus_by_queue={"a": 4, "b": 4}
                ),
            ),
        ),
        id="kueue-admit-within-nominal",
    ),
    # Kueue cohort: a ClusterQueue may borrow the unused nominal quota of the other queues of
    # its cohort.
    pytest.param(
        Case(EIGHT, (A4, B4), (Step(0, jobs("a", 9, "a"), gpus_by_queue={"a": 8}),)),
        id="kueue-borrow-unused-quota-of-a-sibling",
    ),
    # Kueue borrowingLimit: the most a ClusterQueue may use beyond its nominal quota.
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 4, borrow=1), B4),
            (Step(0, jobs("a", 7, "a"), gpus_by_queue={"a": 5}),),
        ),
        id="kueue-borrowing-limit-caps-borrowing",
    ),
    # Kueue lendingLimit: the most of its unused nominal quota a ClusterQueue lends.
    pytest.param(
        Case(
            EIGHT,
            (A4, make_queue("b", 4, lend=1)),
            (Step(0, jobs("a", 7, "a"), gpus_by_queue={"a": 5}),),
        ),
        id="kueue-lending-limit-caps-what-others-borrow",
    ),
    # Kueue Hierarchical Cohorts: a cohort's own quota and borrowingLimit bound its subtree;
    # its children borrow from each other inside it, not beyond it.
    pytest.param(
        Case(
            EIGHT,
            (
                make_queue("org", 4, borrow=0),
                make_queue("a", 2, parent="org"),
                make_queue("b", 2, parent="org"),
                make_queue("other", 4),
            ),
            (Step(0, jobs("a", 6, "a"), gpus_by_queue={"a": 4}),),
        ),
        id="kueue-hierarchy-parent-quota-caps-children",
    ),
    # Kueue preemption.reclaimWithinCohort; Volcano capacity plugin (reclaim what was lent): a
    # queue below its nominal quota evicts workloads of a queue that borrows.
    pytest.param(
        Case(
            EIGHT,
            (A4, B4),
            (
                Step(0, jobs("b", 8, "b"), gpus_by_queue={"b": 8}),
                Step(LATER, jobs("a", 2, "a"), gpus_by_queue={"a": 2, "b": 6}, evicted_count=2),
            ),
        ),
        id="kueue-reclaim-queue-below-nominal-evicts-borrowed-work",
    ),
    # Kueue Preemption (reclaim while the preemptor stays within nominal); Volcano capacity
    # plugin (reclaim up to the deserved amount): reclaim stops where the lender is back
    # within its own nominal quota, even if the reclaiming queue still waits.
    pytest.param(
        Case(
            EIGHT,
            (A4, B4),
            (
                Step(0, (*jobs("a", 2, "a"), *jobs("b", 6, "b"))),
                Step(LATER, jobs("new", 3, "a"), gpus_by_queue={"a": 4, "b": 4}, evicted_count=2),
            ),
        ),
        id="kueue-reclaim-takes-only-what-is-borrowed",
    ),
    # Kueue Preemption: a queue that would go beyond its nominal quota does not reclaim, even
    # from a queue that borrows more.
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 2), make_queue("b", 2), make_queue("c", 4)),
            (
                Step(0, (*jobs("a", 3, "a"), *jobs("b", 5, "b"))),
                Step(LATER, jobs("new", 1, "a"), gpus_by_queue={"a": 3, "b": 5}, evicted_count=0),
            ),
        ),
        id="kueue-queue-above-nominal-cannot-reclaim",
    ),
    # Kueue withinClusterQueue: LowerPriority: when the queue's own quota is full (free GPUs
    # elsewhere do not help: it may not borrow), a workload evicts a lower-priority one of its
    # queue.
    pytest.param(
        Case(
            EIGHT,
            (A4_ONLY, B4),
            (
                Step(0, jobs("low", 4, "a")),
                Step(
                    LATER,
                    (make_workload("high", "a", priority=5),),
                    gpus_by_queue={"a": 4},
                    evicted_count=1,
                ),
            ),
        ),
        id="kueue-within-queue-priority-preemption-when-quota-is-full",
    ),
    # Kueue withinClusterQueue: LowerPriority: equal priority is not lower: it waits.
    pytest.param(
        Case(
            EIGHT,
            (A4_ONLY, B4),
            (
                Step(0, jobs("low", 4, "a")),
                Step(LATER, (make_workload("same", "a"),), evicted_count=0, gpus_by_queue={"a": 4}),
            ),
        ),
        id="kueue-equal-priority-does-not-preempt",
    ),
    # Kubernetes PriorityClass preemptionPolicy: Never: placed ahead in the queue but never
    # preempts; it waits.
    pytest.param(
        Case(
            EIGHT,
            (A4_ONLY, B4),
            (
                Step(0, jobs("low", 4, "a")),
                Step(
                    LATER,
                    (make_workload("polite", "a", priority=5, never_preempt=True),),
                    evicted_count=0,
                    gpus_by_queue={"a": 4},
                ),
            ),
        ),
        id="k8s-preemption-policy-never-waits",
    ),
    # KAI Scheduler priority and preemptibility: a non-preemptible workload is never a victim,
    # whatever the preemptor's priority.
    pytest.param(
        Case(
            EIGHT,
            (A4_ONLY, B4),
            (
                Step(0, jobs("pinned", 4, "a", preemptible=False)),
                Step(
                    LATER,
                    (make_workload("high", "a", priority=9),),
                    evicted_count=0,
                    gpus_by_queue={"a": 4},
                ),
            ),
        ),
        id="kai-non-preemptible-work-is-not-evicted",
    ),
    # KAI Scheduler: non-preemptible workloads run only within the queue's deserved (nominal)
    # quota, even when a sibling's unused quota could be borrowed.
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 2), make_queue("b", 6)),
            (
                Step(0, jobs("pinned", 3, "a", preemptible=False), gpus_by_queue={"a": 2}),
                Step(1, jobs("burst", 2, "a"), gpus_by_queue={"a": 4}),
            ),
        ),
        id="kai-non-preemptible-work-stays-within-nominal",
    ),
    # KAI min-runtime plugin: a workload younger than its minimum run time is no victim; once it
    # is old enough (the core's next timer), the waiting preemptor evicts it.
    pytest.param(
        Case(
            EIGHT,
            (A4_ONLY, B4),
            (
                Step(0, jobs("low", 4, "a")),
                Step(10, (make_workload("high", "a", priority=5),), evicted_count=0),
                Step(None, evicted_count=1, gpus_by_queue={"a": 4}),
            ),
        ),
        id="kai-min-runtime-protects-young-victims-then-preempts",
    ),
    # Kueue Preemption (candidates sorted by priority, lowest first): the lowest priority goes
    # first, even when it is the bigger workload.
    pytest.param(
        Case(
            EIGHT,
            (A4_ONLY, B4),
            (
                Step(
                    0,
                    (
                        make_workload("p0-two-gpus", "a", gpus=2, priority=0),
                        make_workload("p1", "a", priority=1),
                        make_workload("p1b", "a", priority=1),
                    ),
                ),
                Step(
                    LATER,
                    (make_workload("high", "a", priority=5),),
                    evicted=names("p0-two-gpus"),
                    running=names("p1", "p1b", "high"),
                ),
            ),
        ),
        id="kueue-victims-lowest-priority-first",
    ),
    # KAI Scheduler (evict what loses the least): among equals, the workload holding fewer GPUs
    # (less work lost) goes first.
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 3, borrow=0), B4),
            (
                Step(0, (make_workload("big", "a", gpus=2), make_workload("small", "a"))),
                Step(
                    LATER,
                    (make_workload("high", "a", priority=5),),
                    evicted=names("small"),
                    running=names("big", "high"),
                ),
            ),
        ),
        id="kai-victims-fewest-gpus-least-work-lost-first",
    ),
    # KAI Scheduler (least work lost): a workload that checkpointed recently loses little and
    # goes first, though the other one is newer (Kueue's tie-break would pick the newer).
    pytest.param(
        Case(
            EIGHT,
            (make_queue("a", 2, borrow=0), B4),
            (
                Step(0, (make_workload("checkpointed", "a", checkpoint=100),)),
                Step(10, (make_workload("newer", "a"),)),
                Step(
                    1_050,
                    (make_workload("high", "a", priority=5),),
                    evicted=names("checkpointed"),
                    running=names("newer", "high"),
                ),
            ),
        ),
        id="kai-checkpointed-work-is-cheaper-to-evict",
    ),
    # Volcano gang plugin: a gang is one victim: all its pods are evicted, though one GPU would
    # do.
    pytest.param(
        Case(
            EIGHT,
            (A4_ONLY, B4),
            (
                Step(
                    0,
                    (
                        make_workload("gang", "a", pods=2, gpus=1),
                        make_workload("p1", "a", priority=1),
                        make_workload("p1b", "a", priority=1),
                    ),
                ),
                Step(
                    LATER,
                    (make_workload("high", "a", priority=5),),
                    evicted=names("gang"),
                    running=names("p1", "p1b", "high"),
                ),
            ),
        ),
        id="volcano-gang-is-evicted-whole",
    ),
    # Kubernetes ResourceQuota: a namespace's hard cap holds whatever its queue allows, and
    # only for that namespace.
    pytest.param(
        Case(
            EIGHT,
            (),
            (
                Step(
                    0,
                    (*jobs("team", 3, "default", namespace="team"), *jobs("other", 3, "default")),
                    running=names("team0", "team1", "other0", "other1", "other2"),
                ),
            ),
            resource_quotas=(ResourceQuota("gpus", "team", {GPU: gpus(2)}),),
        ),
        id="k8s-namespace-resource-quota-caps-its-namespace-only",
    ),
    # Kueue ResourceFlavors (one quota per GPU model): H100 pods stop at the queue's H100
    # quota while T4 nodes have room; pods that take any model go to T4.
    pytest.param(
        Case(
            (make_node("h100", gpus=4, model="H100"), make_node("t4", gpus=4, model="T4")),
            (make_queue("a", 2, borrow=0, model="H100"),),
            (
                Step(0, jobs("h100-", 3, "a", models=["H100"]), running=names("h100-0", "h100-1")),
                Step(1, jobs("any", 2, "a"), gpus_by_node={"h100": 2, "t4": 2}),
            ),
        ),
        id="kueue-per-gpu-model-quota",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_rule(case: Case) -> None:
    run(case)


# KAI Scheduler fairness: the surplus over quotas goes to queues in proportion to their
# over-quota weight (Kueue fair sharing: weighted share of what is borrowed).
@pytest.mark.parametrize(
    "nominal",
    [
        pytest.param(None, id="kai-weighted-fair-share-no-quota"),
        pytest.param(0, id="kai-weighted-fair-share-zero-quota"),
    ],
)
def test_weighted_fair_share_of_surplus(nominal: int | None) -> None:
    queues = (make_queue("heavy", nominal, weight=2), make_queue("light", nominal, weight=1))
    both = (*jobs("heavy", 12, "heavy"), *jobs("light", 12, "light"))
    run(
        Case(
            (make_node("n", gpus=8), make_node("m", gpus=4)),
            queues,
            (Step(0, both, gpus_by_queue={"heavy": 8, "light": 4}),),
        )
    )
