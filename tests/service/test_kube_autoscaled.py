"""Which of a cluster's workloads gpufleet scales (:func:`survey`) and which of their pods
serve (:func:`serving_pods`), from objects as the API sends them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.backends.prometheus.inference import reading_of
from gpufleet.elastic.replica_metrics import Observation
from gpufleet.model.autoscaling import InferenceMetric
from gpufleet.service.kube_autoscaled import DEFERRED, INVALID, serving_pods, survey
from gpufleet.telemetry.series_layout import Labels

Obj = dict[str, Any]
ANNOTATED = {"gpufleet.dev/max-replicas": "4", "gpufleet.dev/target-queue-depth": "5"}


def workload(
    kind: str = "Deployment",
    name: str = "chat",
    namespace: str = "ml",
    annotations: dict[str, str] | None = None,
    owner: str | None = None,
) -> Obj:
    metadata: Obj = {"name": name, "namespace": namespace, "annotations": dict(annotations or {})}
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": owner, "controller": True}
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": metadata,
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}},
    }


def hpa(target: str, namespace: str = "ml", kind: str = "Deployment") -> Obj:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": target, "namespace": namespace},
        "spec": {"scaleTargetRef": {"kind": kind, "name": target}},
    }


def scaled_object(target: str) -> Obj:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": f"{target}-so", "namespace": "ml"},
        "spec": {"scaleTargetRef": {"name": target}},
    }


@pytest.mark.parametrize(
    ("workloads", "autoscalers", "scaled", "passed"),
    [
        ([workload(annotations=ANNOTATED)], [], ["ml/Deployment/chat"], []),
        # The Deployment controller copies its annotations onto its ReplicaSets.
        (
            [workload(annotations=ANNOTATED),
             workload("ReplicaSet", "chat-5d8f", annotations=ANNOTATED, owner="chat")],
            [], ["ml/Deployment/chat"], [],
        ),
        ([workload("ReplicaSet", "rs", annotations=ANNOTATED)], [], ["ml/ReplicaSet/rs"], []),
        ([workload("StatefulSet", "db", annotations=ANNOTATED)], [hpa("db", "other")],
         ["ml/StatefulSet/db"], []),
        ([workload(annotations=ANNOTATED)], [hpa("chat")], [], [DEFERRED]),
        ([workload(annotations=ANNOTATED)], [hpa("chat", kind="StatefulSet")],
         ["ml/Deployment/chat"], []),
        ([workload(annotations=ANNOTATED)], [scaled_object("chat")], [], [DEFERRED]),
        ([workload()], [hpa("chat")], [], []),
        ([workload(annotations={"gpufleet.dev/model-load-time": "2m"})], [], [], []),
        ([workload(annotations={"gpufleet.dev/max-replicas": "4"})], [], [], [INVALID]),
    ],
    ids=[
        "deployment", "replicaset-of-a-deployment", "replicaset-alone",
        "hpa-of-another-namespace", "hpa", "hpa-of-another-kind", "scaledobject",
        "not-annotated", "load-time-only", "no-target",
    ],
)  # fmt: skip
def test_survey(
    workloads: list[Obj], autoscalers: list[Obj], scaled: list[str], passed: list[str]
) -> None:
    found, left = survey(workloads, autoscalers)
    assert [s.target.key for s in found] == scaled
    assert [p.reason for p in left] == passed


def pod(name: str, ready: bool, created: str, **extra: Any) -> Obj:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    metadata: Obj = {"name": name, "namespace": "ml", "labels": {"app": "chat"},
                     "creationTimestamp": created}  # fmt: skip
    metadata.update(extra.pop("metadata", {}))
    return {"metadata": metadata, "status": {"phase": "Running", "conditions": conditions, **extra}}


def test_serving_pods_as_the_hpa_finds_them() -> None:
    ((scaled,), _) = survey([workload(annotations=ANNOTATED)], [])
    pods = [
        pod("chat-a", True, "2026-01-01T00:00:03Z"),
        pod("chat-b", True, "2026-01-01T00:00:01Z"),
        pod("chat-c", False, "2026-01-01T00:00:02Z"),
        pod("chat-d", True, "2026-01-01T00:00:00Z",
            metadata={"deletionTimestamp": "2026-01-01T00:01:00Z"}),
        pod("chat-e", True, "2026-01-01T00:00:00Z", phase="Succeeded"),
        pod("other", True, "2026-01-01T00:00:00Z", metadata={"labels": {"app": "x"}}),
        pod("elsewhere", True, "2026-01-01T00:00:00Z", metadata={"namespace": "ml2"}),
    ]  # fmt: skip
    serving = serving_pods(scaled, pods, replicas=2)
    assert serving.pods == ("chat-a", "chat-b", "chat-c")
    assert serving.ready == {"chat-a", "chat-b"}
    # Scaled down to 1 while its pods go: the oldest ready one is the one that stays.
    assert serving_pods(scaled, pods, replicas=1).ready == {"chat-b"}


@given(
    pods=st.lists(
        st.tuples(st.integers(0, 9), st.booleans(), st.integers(0, 5)),
        max_size=12,
        unique_by=lambda p: p[0],
    ),
    replicas=st.integers(0, 8),
    answer=st.dictionaries(st.integers(0, 11), st.floats(0, 1e6), max_size=12),
)
def test_whatever_the_pods_and_answers_the_decision_can_take_them(
    pods: list[tuple[int, bool, int]], replicas: int, answer: dict[int, float]
) -> None:
    """The pods ready are the workload's own, never more than its replicas, and each metric's
    replica values are at most one per ready pod (what the autoscaler's Observation needs)."""
    ((scaled,), _) = survey([workload(annotations=ANNOTATED)], [])
    objects = [pod(f"chat-{i}", up, f"2026-01-01T00:00:0{age}Z") for i, up, age in pods]
    serving = serving_pods(scaled, objects, replicas)
    assert serving.ready <= set(serving.pods)
    assert len(serving.ready) <= replicas
    labelled: dict[Labels, float] = {(("pod", f"chat-{i}"),): v for i, v in answer.items()}
    readings = {
        metric: reading_of(metric, serving, labelled)
        for metric in (InferenceMetric.QUEUE_DEPTH, InferenceMetric.GPU_UTILIZATION)
    }
    Observation(replicas, len(serving.ready), readings)
