"""The replica scaler's rounds without an API server: objects given as its informers would give
them, writes answered by a fake writer, so that what depends on timing (a watch that has not
caught up with gpufleet's own write) is made to happen on purpose."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpufleet.backends.prometheus.inference import ServingPods
from gpufleet.kube_client.api_types import (
    AUTOSCALING_WATCHED,
    DEPLOYMENTS,
    Resource,
)
from gpufleet.kube_client.informer import ADDED, DELETED, MODIFIED, Change
from gpufleet.kube_client.reachability import Reachability
from gpufleet.model.autoscaling import InferenceMetric, MetricReading
from gpufleet.service.kube_autoscaling import KubeReplicaScaler
from gpufleet.service.store import StoredEvent

Obj = dict[str, Any]


class NoApi:
    """The informers are never started here."""

    reachability = Reachability()

    def list(self, resource: Resource, resource_version: str = "") -> tuple[list[Obj], str]:
        raise AssertionError("not listed in these tests")

    def watch(
        self,
        resource: Resource,
        resource_version: str,
        timeout_s: int = 300,
        on_open: Callable[[Any], None] | None = None,
    ) -> Iterator[tuple[str, Obj]]:
        raise AssertionError("not watched in these tests")


@dataclass
class FakeWriter:
    """Answers a scale patch as the API server does: the Scale at the next resourceVersion."""

    version: int = 100
    patches: list[tuple[str, str, Obj]] = field(default_factory=list)

    def patch(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Obj,
        subresource: str | None = None,
    ) -> Obj:
        self.version += 1
        self.patches.append((f"{namespace}/{name}", subresource or "", patch))
        return {"kind": "Scale", "metadata": {"resourceVersion": str(self.version)}, **patch}


@dataclass
class FakePlane:
    writer: FakeWriter = field(default_factory=FakeWriter)
    events: list[StoredEvent] = field(default_factory=list)
    told: list[tuple[str, str]] = field(default_factory=list)

    def record_event(
        self, key: str, type_: str, reason: str, message: str, at: float | None = None
    ) -> StoredEvent:
        event = StoredEvent(at or 0.0, key, type_, reason, message)
        self.events.append(event)
        return event

    def pod_objects(self, namespaces: Collection[str]) -> list[Obj]:
        return []

    def tell(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        self.told.append((reason, message))


class Outstanding:
    """42 requests outstanding at the router, whatever the pods."""

    def read(
        self, serving: ServingPods, metrics: Collection[InferenceMetric], now: float
    ) -> dict[InferenceMetric, MetricReading]:
        return {InferenceMetric.QUEUE_DEPTH: MetricReading((), 42.0)}


def chat(replicas: int, version: int) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "chat",
            "namespace": "ml",
            "resourceVersion": str(version),
            "annotations": {
                "gpufleet.dev/max-replicas": "8",
                "gpufleet.dev/target-queue-depth": "10",
            },
        },
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "chat"}}},
    }


@pytest.fixture
def scaler() -> KubeReplicaScaler:
    found = KubeReplicaScaler(FakePlane(), NoApi(), Outstanding())
    for informer in found.informers.by_resource.values():
        informer.synced.set()
    return found


def watched(scaler: KubeReplicaScaler, kind: str, obj: Obj) -> None:
    scaler.informers.changes.put(Change(DEPLOYMENTS, kind, obj))


def test_a_count_written_counts_until_the_watch_shows_that_write(
    scaler: KubeReplicaScaler,
) -> None:
    plane = scaler.plane
    assert isinstance(plane, FakePlane)
    watched(scaler, ADDED, chat(1, version=10))
    (decision,) = scaler.sync(1000.0)
    assert (decision.current, decision.desired) == (1, 5)
    assert plane.writer.patches == [("ml/chat", "scale", {"spec": {"replicas": 5}})]
    # The watch still shows the Deployment before the write (version 10 < 101): the count is 5.
    (decision,) = scaler.sync(1015.0)
    assert decision.current == 5
    assert len(plane.writer.patches) == 1
    # The watch shows someone's later write (kubectl scale to 2): that count is the current.
    watched(scaler, MODIFIED, chat(2, version=102))
    (decision,) = scaler.sync(1030.0)
    assert (decision.current, decision.desired) == (2, 5)
    assert len(plane.writer.patches) == 2


def test_a_workload_deleted_or_no_longer_annotated_is_forgotten(
    scaler: KubeReplicaScaler,
) -> None:
    watched(scaler, ADDED, chat(1, version=10))
    scaler.sync(1000.0)
    assert set(scaler.tracked) == {"ml/Deployment/chat"}
    plain = chat(5, version=200)
    plain["metadata"]["annotations"] = {}
    watched(scaler, MODIFIED, plain)
    assert scaler.sync(1015.0) == []
    assert scaler.tracked == {}
    watched(scaler, ADDED, chat(5, version=201))
    scaler.sync(1030.0)
    watched(scaler, DELETED, chat(5, version=201))
    assert scaler.sync(1045.0) == []
    assert scaler.tracked == {}


def test_nothing_is_decided_until_every_kind_is_listed() -> None:
    plane = FakePlane()
    scaler = KubeReplicaScaler(plane, NoApi(), Outstanding())
    for informer in scaler.informers.by_resource.values():
        if informer.resource is not AUTOSCALING_WATCHED[-1]:
            informer.synced.set()
    watched(scaler, ADDED, chat(1, version=10))
    assert scaler.sync(1000.0) == []
    assert plane.writer.patches == []
    assert scaler.state.unsynced_rounds == 1
