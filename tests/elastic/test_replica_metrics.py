"""What one metric proposes (Kubernetes' replica calculator): cases mirrored from
kubernetes/kubernetes pkg/controller/podautoscaler/replica_calculator_test.go, each case id the
Go test it follows (CPU cases as GPU utilisation in percent: a Resource metric's rules), and
the cases where gpufleet differs on purpose."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpufleet.elastic.replica_metrics import Observation, Tolerance, propose
from gpufleet.model.autoscaling import MetricSource, MetricTarget
from gpufleet.testing.autoscaling_builders import (
    GPU_UTIL,
    LATENCY,
    QUEUE,
    per_replica,
    reading,
    workload_figure,
)

DEFAULT = Tolerance(0.1, 0.1)


@dataclass(frozen=True)
class Case:
    target: MetricTarget
    current: int
    ready: int
    values: tuple[float, ...] = ()
    figure: float | None = None
    expected: int | None = None


def cpu_like(target: float) -> MetricTarget:
    return per_replica(GPU_UTIL, target, utilization=True)


def plain(target: float) -> MetricTarget:
    return per_replica(QUEUE, target)


def value(target: float, source: MetricSource = MetricSource.OBJECT) -> MetricTarget:
    return workload_figure(QUEUE, target, average=False, source=source)


def average(target: float, source: MetricSource = MetricSource.OBJECT) -> MetricTarget:
    return workload_figure(QUEUE, target, average=True, source=source)


EXTERNAL = MetricSource.EXTERNAL
KUBERNETES = {
    # Resource (CPU) cases, as a utilisation in percent of what each replica holds.
    "TestReplicaCalcScaleUp": Case(cpu_like(30), 3, 3, (30, 50, 70), expected=5),
    "TestReplicaCalcScaleUpUnreadyLessScale": Case(cpu_like(30), 3, 2, (50, 70), expected=4),
    "TestReplicaCalcScaleUpUnreadyNoScale": Case(cpu_like(30), 3, 1, (40,), expected=3),
    "TestReplicaCalcScaleDown": Case(cpu_like(50), 5, 5, (10, 30, 50, 25, 25), expected=3),
    "TestReplicaCalcScaleDownExcludeUnreadyPods": Case(
        cpu_like(50), 5, 3, (10, 30, 50), expected=2
    ),
    "TestReplicaCalcScaleDownExcludeUnscheduledPods": Case(cpu_like(50), 5, 1, (10,), expected=1),
    "TestReplicaCalcTolerance": Case(cpu_like(100), 3, 3, (101, 103, 102), expected=3),
    "TestReplicaCalcMissingMetrics": Case(cpu_like(100), 4, 4, (40, 9.5), expected=3),
    "TestReplicaCalcMissingMetricsNoChangeEq": Case(cpu_like(100), 2, 2, (100,), expected=2),
    "TestReplicaCalcMissingMetricsNoChangeGt": Case(cpu_like(100), 2, 2, (190,), expected=2),
    "TestReplicaCalcMissingMetricsNoChangeLt": Case(cpu_like(100), 2, 2, (60,), expected=2),
    "TestReplicaCalcMissingMetricsUnreadyChange": Case(cpu_like(50), 3, 2, (45,), expected=3),
    "TestReplicaCalcMissingMetricsUnreadyScaleUp": Case(cpu_like(50), 3, 2, (200,), expected=4),
    "TestReplicaCalcMissingMetricsUnreadyScaleDown": Case(cpu_like(50), 4, 3, (10, 10), expected=3),
    "TestReplicaCalcMissingMetricsScaleDownTargetOver100": Case(
        cpu_like(300), 4, 3, (10, 5), expected=2
    ),
    # Pods (custom per-pod) metrics.
    "TestReplicaCalcScaleUpCM": Case(plain(15000), 3, 3, (20000, 10000, 30000), expected=4),
    "TestReplicaCalcScaleDownCM": Case(plain(20000), 5, 5, (12000,) * 5, expected=3),
    "TestReplicaCalcToleranceCM": Case(plain(20000), 3, 3, (20000, 21000, 21000), expected=3),
    "TestPlainMetricReplicaCalcMissingMetricsNoChangeEq": Case(
        plain(20000), 5, 5, (20000, 19000, 21000), expected=5
    ),
    # Object metrics, Value and AverageValue.
    "TestReplicaCalcScaleUpCMObject": Case(value(15000), 3, 3, figure=20000, expected=4),
    "TestReplicaCalcScaleDownCMObject": Case(value(20000), 5, 5, figure=12000, expected=3),
    "TestReplicaCalcToleranceCMObject": Case(value(20000), 3, 3, figure=20666, expected=3),
    "TestReplicaCalcScaleUpCMObjectIgnoresUnreadyPods": Case(
        value(10000), 3, 1, figure=50000, expected=5
    ),
    "TestReplicaCalcScaleUpCMPerPodObject": Case(average(5000), 3, 3, figure=20000, expected=4),
    "TestReplicaCalcScaleDownPerPodCMObject": Case(average(2000), 5, 5, figure=6000, expected=3),
    "TestReplicaCalcTolerancePerPodCMObject": Case(average(5000), 4, 4, figure=20166, expected=4),
    # External metrics, Value and AverageValue.
    "TestReplicaCalcScaleUpCMExternalIgnoresUnreadyPods": Case(
        value(4400, EXTERNAL), 3, 1, figure=8600, expected=2
    ),
    "TestReplicaCalcScaleDownCMExternal": Case(
        value(14334, EXTERNAL), 5, 5, figure=8600, expected=3
    ),
    "TestReplicaCalcToleranceCMExternal": Case(
        value(8888, EXTERNAL), 3, 3, figure=8600, expected=3
    ),
    "TestReplicaCalcScaleUpPerPodCMExternal": Case(
        average(2150, EXTERNAL), 3, 3, figure=8600, expected=4
    ),
    "TestReplicaCalcScaleDownPerPodCMExternal": Case(
        average(2867, EXTERNAL), 5, 5, figure=8600, expected=3
    ),
    "TestReplicaCalcTolerancePerPodCMExternal": Case(
        average(2900, EXTERNAL), 3, 3, figure=8600, expected=3
    ),
}


def seen(case: Case) -> Observation:
    metric = case.target.metric
    return Observation(
        case.current, case.ready, {metric: reading(*case.values, workload=case.figure)}
    )


@pytest.mark.parametrize("case", KUBERNETES.values(), ids=KUBERNETES.keys())
def test_kubernetes_replica_calculator_cases(case: Case) -> None:
    proposal = propose(case.target, seen(case), DEFAULT)
    assert proposal.problem is None
    assert proposal.replicas == case.expected


DIFFERENCES = {
    # TestReplicaCalcScaleUpCMUnreadyHotCpuNoLessScale: Kubernetes counts the running, unready
    # pod's custom metric (30000) and proposes 6; a replica still loading its model reports
    # nothing, and counts as 0 on a scale-up.
    "unready-replicas-left-out-of-any-metric": Case(plain(15000), 3, 2, (50000, 10000), expected=4),
    # Kubernetes proposes ceil(ratio x 0 ready) = 0; nothing serves yet, so nothing changes.
    "value-target-with-no-ready-replica-keeps-the-count": Case(
        value(10, EXTERNAL), 4, 0, figure=80, expected=4
    ),
}


@pytest.mark.parametrize("case", DIFFERENCES.values(), ids=DIFFERENCES.keys())
def test_where_gpufleet_differs(case: Case) -> None:
    assert propose(case.target, seen(case), DEFAULT).replicas == case.expected


@pytest.mark.parametrize(
    ("tolerance", "ratio_value", "expected"),
    [
        pytest.param(Tolerance(0.1, 0.1), 10.9, 3, id="default-10%-up-within"),
        pytest.param(Tolerance(0.1, 0.1), 11.1, 4, id="default-10%-up-beyond"),
        pytest.param(Tolerance(0.1, 0.1), 9.0, 3, id="default-10%-down-edge-within"),
        pytest.param(Tolerance(0.1, 0.05), 10.6, 4, id="scale-up-tolerance-5%"),
        pytest.param(Tolerance(0.3, 0.1), 7.5, 3, id="scale-down-tolerance-30%"),
        pytest.param(Tolerance(0.0, 0.0), 10.1, 4, id="no-tolerance"),
    ],
)
def test_tolerance_per_direction(tolerance: Tolerance, ratio_value: float, expected: int) -> None:
    observed = Observation(3, 3, {QUEUE: reading(ratio_value, ratio_value, ratio_value)})
    assert propose(plain(10), observed, tolerance).replicas == expected


@pytest.mark.parametrize(
    ("target", "observed", "problem"),
    [
        pytest.param(
            plain(10), Observation(3, 3, {}), "no reading of queue depth", id="no-reading"
        ),
        pytest.param(
            plain(10),
            Observation(2, 0, {QUEUE: reading(workload=40)}),
            "no ready replica reported queue depth (replicas may be loading)",
            id="per-replica-while-every-replica-loads",
        ),
        pytest.param(
            workload_figure(LATENCY, 0.5, average=False),
            Observation(2, 2, {LATENCY: reading(0.3, 0.9)}),
            "no p95 of p95 latency to compare",
            id="a-p95-the-world-did-not-give",
        ),
    ],
)
def test_no_proposal_says_why(target: MetricTarget, observed: Observation, problem: str) -> None:
    proposal = propose(target, observed, DEFAULT)
    assert (proposal.replicas, proposal.problem) == (None, problem)


def test_a_workload_figure_counts_the_routers_queue_while_replicas_load() -> None:
    # 30 requests waiting at the router for one loading replica: 3 replicas at 10 each.
    observed = Observation(1, 0, {QUEUE: reading(workload=30)})
    assert propose(average(10, EXTERNAL), observed, DEFAULT).replicas == 3


def test_observation_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="ready"):
        Observation(2, 3, {})
    with pytest.raises(ValueError, match="3 replica values, but only 2 replicas are ready"):
        Observation(3, 2, {QUEUE: reading(1, 2, 3)})
