"""Replica autoscaling on Kubernetes (the fake API server, the real client and scheduler): the
workloads annotated for gpufleet are scaled through their ``scale`` subresource from the metrics
read each observatory round, with an Event saying why; new replicas wait on their queue's quota
like any pod; a Prometheus that is down, a workload another autoscaler is in charge of, bad
annotations and a refused scale write are each said once, and nothing is scaled on them."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpufleet.backends.prometheus.inference import ServingPods
from gpufleet.kube_client.api_types import AUTOSCALING_WATCHED, HORIZONTAL_POD_AUTOSCALERS
from gpufleet.kube_client.informer import object_key
from gpufleet.model.autoscaling import InferenceMetric, MetricReading
from gpufleet.model.queues import TENANT_LABEL
from gpufleet.service.kube_autoscaling import KubeReplicaScaler
from gpufleet.service.observatory import Observatory
from gpufleet.service.store import StoredEvent
from gpufleet.telemetry.series_layout import Labels
from gpufleet.telemetry.series_query import SeriesUnavailableError
from gpufleet.testing.service import pod_doc
from gpufleet.testing.waiting import wait_until
from tests.fakes.kube_api import ApiError
from tests.service.test_kube_plane import Cluster, cluster  # noqa: F401  (fixture)

NAMESPACE = "team-a"
KEY = f"{NAMESPACE}/Deployment/chat"
SCALE_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/chat/scale"
#: Queue depth per replica 10, up to 8; scale-down after a minute of lower recommendations.
ANNOTATIONS = {
    "gpufleet.dev/max-replicas": "8",
    "gpufleet.dev/target-queue-depth": "10",
    "gpufleet.dev/scale-down-stabilization": "60s",
}
KEDA_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "scaledobjects.keda.sh"},
    "spec": {
        "group": "keda.sh",
        "names": {"kind": "ScaledObject", "plural": "scaledobjects"},
        "scope": "Namespaced",
        "versions": [{"name": "v1alpha1", "served": True, "storage": True}],
    },
}


class NoSeries:
    """The observatory's series: none (its alert rules are not what is tested here)."""

    def query(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str] | None = None,
        quantile: float | None = None,
        *,
        by: Sequence[str] | None = None,
        across: str = "sum",
    ) -> dict[Labels, float]:
        return {}


@dataclass
class FakeMetrics:
    """Each workload's requests outstanding (by its name), shared evenly by its ready pods, as
    Prometheus would answer them; ``down`` answers nothing. Records what it was asked."""

    queue: dict[str, float] = field(default_factory=dict)
    down: bool = False
    asked: list[ServingPods] = field(default_factory=list)

    def read(
        self, serving: ServingPods, metrics: Collection[InferenceMetric], now: float
    ) -> dict[InferenceMetric, MetricReading]:
        if self.down:
            raise SeriesUnavailableError("Prometheus at http://prometheus:9090: unreachable")
        self.asked.append(serving)
        total = self.queue.get(serving.name)
        ready = sorted(serving.ready)
        share = () if total is None or not ready else (total / len(ready),) * len(ready)
        return {InferenceMetric.QUEUE_DEPTH: MetricReading(share, total)}


def deployment(
    name: str, replicas: int, annotations: Mapping[str, str], gpus: int = 2
) -> dict[str, Any]:
    template = pod_doc(name, gpus, namespace=NAMESPACE, runtime=None)
    template["metadata"] = {"labels": {"app": name}}
    template["spec"]["schedulerName"] = "gpufleet"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": dict(annotations)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }


@dataclass
class Scaling:
    """The plane over the fake cluster, its replica scaler on :class:`FakeMetrics`, and the
    test in the role of the controllers and kubelets that the fake API server has not."""

    on: Cluster
    metrics: FakeMetrics
    scaler: KubeReplicaScaler
    observatory: Observatory
    now: float = field(default_factory=lambda: time.time() + 60)

    def caught_up(self) -> None:
        """The scaler's informers show every object as the server holds it."""
        for resource in AUTOSCALING_WATCHED:
            try:
                held = self.on.server.list(resource.api_version, resource.kind)
            except ApiError:
                continue  # a kind not served (KEDA not installed)
            for obj in held:
                version = obj["metadata"]["resourceVersion"]
                seen = self.scaler.wait_until_seen(resource, object_key(obj), version)
                assert seen, f"the scaler did not see {resource.plural} {object_key(obj)}"

    def round(self, after_s: float = 15.0) -> None:
        """One observatory round ``after_s`` after the last (the scaler's informers and the
        plane's pods caught up first)."""
        self.caught_up()
        self.on.settle()
        self.now += after_s
        self.observatory.observe(self.now)

    def replicas(self, name: str = "chat") -> int:
        found = self.on.server.get("apps/v1", "Deployment", name, NAMESPACE)
        assert found is not None
        return int(found["spec"]["replicas"])

    def controllers_run(self, name: str = "chat", gpus: int = 2) -> None:
        """Play the ReplicaSet controller and the kubelets: the Deployment's pods made or
        removed (newest first) to its count, and those bound Running and Ready."""
        want = self.replicas(name)
        pods = sorted(
            (p for p in self.on.server.list("v1", "Pod", NAMESPACE)
             if p["metadata"].get("labels", {}).get("app") == name),
            key=lambda p: int(p["metadata"]["name"].rsplit("-", 1)[1]),
        )  # fmt: skip
        for extra in pods[want:][::-1]:
            self.on.server.delete("v1", "Pod", extra["metadata"]["name"], NAMESPACE)
        made = int(pods[-1]["metadata"]["name"].rsplit("-", 1)[1]) + 1 if pods else 0
        for index in range(made, made + max(0, want - len(pods))):
            doc = pod_doc(f"{name}-{index}", gpus, namespace=NAMESPACE, runtime=None)
            doc["metadata"]["labels"].update({"app": name, TENANT_LABEL: NAMESPACE})
            doc["metadata"]["ownerReferences"] = [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-5d8f",
                 "uid": "u-rs", "controller": True}
            ]  # fmt: skip
            doc["spec"]["schedulerName"] = "gpufleet"
            self.on.server.create(doc)
        self.on.settle()
        for pod in self.on.server.list("v1", "Pod", NAMESPACE):
            ready = {"type": "Ready", "status": "True"}
            if pod["spec"].get("nodeName") and ready not in pod["status"].get("conditions", []):
                pod["status"]["phase"] = "Running"
                pod["status"].setdefault("conditions", []).append(ready)
                self.on.server.update(pod)
        self.on.settle()

    def events(self, key: str = KEY, reason: str | None = None) -> list[StoredEvent]:
        return [
            e
            for e in self.on.plane.store.events(key)
            if e.reason.startswith("Gpufleet") and (reason is None or e.reason == reason)
        ]

    def kube_events(self, reason: str) -> list[dict[str, Any]]:
        assert self.on.plane.scheduler.reporter.flush(10)
        return [e for e in self.on.server.list("v1", "Event", NAMESPACE) if e["reason"] == reason]

    def scale_writes(self) -> int:
        return self.on.server.requests.count(("PATCH", SCALE_PATH))


def start_scaling(on: Cluster) -> Scaling:
    """The plane observing (no series of its own) and scaling on :class:`FakeMetrics`, once
    its scaler's informers have listed."""
    observatory = on.plane.observe_with(NoSeries())
    observatory.replace_rules([])
    metrics = FakeMetrics()
    scaler = on.plane.autoscale_replicas(metrics)
    wait_until(lambda: scaler.synced, "the scaler's informers to list")
    return Scaling(on, metrics, scaler, observatory)


@pytest.fixture
def scaling(cluster: Cluster) -> Scaling:  # noqa: F811
    return start_scaling(cluster)


def test_scale_up_writes_the_scale_says_why_and_new_replicas_wait_on_quota(
    scaling: Scaling,
) -> None:
    queue = scaling.on.server.get("gpufleet.dev/v1alpha1", "Queue", NAMESPACE)
    assert queue is not None
    queue["spec"]["borrowingLimit"] = {"nvidia.com/gpu": 0}  # its 6 GPUs, none of team-b's
    scaling.on.server.update(queue)
    scaling.on.server.create(deployment("chat", 1, ANNOTATIONS))
    scaling.controllers_run()
    scaling.metrics.queue["chat"] = 42.0
    scaling.round()
    assert scaling.replicas() == 5
    assert scaling.scale_writes() == 1
    (event,) = scaling.events()
    assert (event.type, event.reason) == ("Normal", "GpufleetScaled")
    assert event.message == "New size: 5; reason: queue depth 42 per replica over target 10: 1 -> 5"
    (told,) = scaling.kube_events("GpufleetScaled")
    assert told["involvedObject"]["kind"] == "Deployment"
    assert told["involvedObject"]["name"] == "chat"
    assert told["message"] == event.message
    (asked,) = scaling.metrics.asked
    assert (asked.pods, asked.ready) == (("chat-0",), frozenset({"chat-0"}))
    # The ReplicaSet makes four more pods of 2 GPUs: the queue's 6 GPUs hold three replicas,
    # the other two wait on its quota like any pod gpufleet schedules (2 GPUs stay free).
    scaling.controllers_run()
    records = scaling.on.plane.records
    states = {k.rpartition("/")[2]: r.state.value for k, r in records.items()}
    assert states == {
        "chat-0": "Running", "chat-1": "Running", "chat-2": "Running",
        "chat-3": "Pending", "chat-4": "Pending",
    }  # fmt: skip
    why = scaling.on.client("admin").get(f"/api/v1/workloads/{NAMESPACE}/chat-4/explain")
    assert why.json()["waiting_for"] == "quota", why.json()
    # Waiting replicas are unready: 42 outstanding over 5 replicas stays at 5, not more.
    scaling.round()
    assert scaling.replicas() == 5
    assert scaling.metrics.asked[-1].ready == frozenset({"chat-0", "chat-1", "chat-2"})
    assert len(scaling.events()) == 1


def test_scale_down_waits_for_the_stabilisation_window(scaling: Scaling) -> None:
    scaling.on.server.create(deployment("chat", 4, ANNOTATIONS, gpus=1))
    scaling.controllers_run(gpus=1)
    scaling.metrics.queue["chat"] = 8.0  # one replica's worth
    for _ in range(4):  # the window is 60 s: the count found at first is held that long
        scaling.round()
        assert scaling.replicas() == 4
    assert scaling.events() == []
    scaling.round()
    assert scaling.replicas() == 1
    (event,) = scaling.events()
    assert event.message == (
        "New size: 1; reason: queue depth 2 per replica under target 10: 4 -> 1"
    )


def test_scale_to_zero_and_wake_on_the_routers_queue(scaling: Scaling) -> None:
    annotations = {**ANNOTATIONS, "gpufleet.dev/min-replicas": "0",
                   "gpufleet.dev/scale-to-zero-after": "30s"}  # fmt: skip
    scaling.on.server.create(deployment("chat", 1, annotations))
    scaling.controllers_run()
    scaling.metrics.queue["chat"] = 0.0
    for _ in range(3):  # active never: the initial cooldown (0 s) has passed at once
        scaling.round()
        if scaling.replicas() == 0:
            break
    assert scaling.replicas() == 0
    (asleep,) = scaling.events()
    assert "no metric above its activation threshold" in asleep.message
    assert asleep.message.endswith("1 -> 0")
    scaling.controllers_run()
    assert not scaling.on.server.list("v1", "Pod", NAMESPACE)
    # No pod: the router's queue (a series naming the Deployment) is what wakes it.
    scaling.metrics.queue["chat"] = 3.0
    scaling.round()
    assert scaling.replicas() == 1
    woken = scaling.events()[-1]
    assert woken.message == (
        "New size: 1; reason: queue depth 3 above activation threshold 0: 0 -> 1 (activated)"
    )
    assert scaling.metrics.asked[-1].pods == ()


def test_a_prometheus_that_is_down_scales_nothing_and_is_said_once(scaling: Scaling) -> None:
    annotations = {**ANNOTATIONS, "gpufleet.dev/min-replicas": "0",
                   "gpufleet.dev/scale-to-zero-after": "15s"}  # fmt: skip
    scaling.on.server.create(deployment("chat", 2, annotations))
    scaling.controllers_run()
    scaling.metrics.down = True
    for _ in range(4):  # never to zero on metrics it cannot read
        scaling.round()
    assert scaling.replicas() == 2
    assert scaling.scale_writes() == 0
    (down,) = scaling.events()
    assert (down.type, down.reason) == ("Warning", "GpufleetMetricsUnavailable")
    assert "Prometheus at http://prometheus:9090: unreachable" in down.message
    assert scaling.scaler.state.metrics_error is not None
    scaling.metrics.down = False
    scaling.metrics.queue["chat"] = 45.0
    scaling.round()
    assert scaling.scaler.state.metrics_error is None
    assert scaling.replicas() == 5


@pytest.mark.parametrize("other", ["hpa", "scaledobject"])
def test_a_workload_another_autoscaler_is_in_charge_of_is_left_to_it(
    cluster: Cluster,  # noqa: F811
    other: str,
) -> None:
    server = cluster.server
    if other == "hpa":
        server.create({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "chat", "namespace": NAMESPACE},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": "chat"},
                     "minReplicas": 1, "maxReplicas": 3,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": 50}}}]},
        })  # fmt: skip
        named = "HorizontalPodAutoscaler team-a/chat"
    else:
        server.create(KEDA_CRD)
        server.create({
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": "chat-so", "namespace": NAMESPACE},
            "spec": {"scaleTargetRef": {"name": "chat"}, "triggers": [
                {"type": "cpu", "metadata": {"value": "50"}}]},
        })  # fmt: skip
        # KEDA's own HPA for it is named by the ScaledObject, not on its own.
        server.create({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "keda-hpa-chat-so", "namespace": NAMESPACE,
                         "ownerReferences": [{"apiVersion": "keda.sh/v1alpha1",
                                              "kind": "ScaledObject", "name": "chat-so",
                                              "uid": "u-so", "controller": True}]},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": "chat"}, "maxReplicas": 3},
        })  # fmt: skip
        named = "ScaledObject team-a/chat-so"
    scaling = start_scaling(cluster)
    scaling.on.server.create(deployment("chat", 1, ANNOTATIONS))
    scaling.controllers_run()
    scaling.metrics.queue["chat"] = 42.0
    for _ in range(3):
        scaling.round()
    assert scaling.replicas() == 1
    assert scaling.scale_writes() == 0
    assert scaling.metrics.asked == []
    (event,) = scaling.events()
    assert (event.type, event.reason) == ("Normal", "GpufleetAutoscalingDeferred")
    assert event.message.startswith(f"also autoscaled by {named}: that one is in charge")
    # Once the other autoscaler is gone, gpufleet's annotations are acted on.
    if other == "hpa":
        server.delete("autoscaling/v2", "HorizontalPodAutoscaler", "chat", NAMESPACE)
        assert scaling.scaler.wait_until_seen(HORIZONTAL_POD_AUTOSCALERS, f"{NAMESPACE}/chat", None)
        scaling.round()
        assert scaling.replicas() == 5


def test_bad_annotations_are_said_once_and_nothing_is_scaled(scaling: Scaling) -> None:
    typo = {**ANNOTATIONS, "gpufleet.dev/target-queue-dept": "10"}
    scaling.on.server.create(deployment("chat", 1, typo))
    scaling.controllers_run()
    scaling.metrics.queue["chat"] = 42.0
    for _ in range(3):
        scaling.round()
    assert scaling.replicas() == 1
    assert scaling.scale_writes() == 0
    (event,) = scaling.events()
    assert (event.type, event.reason) == ("Warning", "GpufleetAutoscalingInvalid")
    assert event.message == (
        "autoscaling annotations not read, replicas left as they are: "
        "metadata.annotations[gpufleet.dev/target-queue-dept]: unknown annotation; "
        "did you mean 'gpufleet.dev/target-queue-depth'?"
    )
    assert len(scaling.kube_events("GpufleetAutoscalingInvalid")) == 1
    fixed = scaling.on.server.get("apps/v1", "Deployment", "chat", NAMESPACE)
    assert fixed is not None
    del fixed["metadata"]["annotations"]["gpufleet.dev/target-queue-dept"]
    scaling.on.server.update(fixed)
    scaling.round()
    assert scaling.replicas() == 5


@pytest.mark.parametrize("status", [409, 404])
def test_a_refused_scale_write_is_said_once_and_tried_again(scaling: Scaling, status: int) -> None:
    scaling.on.server.create(deployment("chat", 1, ANNOTATIONS))
    scaling.controllers_run()
    scaling.metrics.queue["chat"] = 42.0
    scaling.on.server.fail_next("PATCH", "deployments/chat/scale$", status, times=2)
    scaling.round()
    scaling.round()
    assert scaling.replicas() == 1
    assert scaling.scale_writes() == 2
    refused = scaling.events(reason="GpufleetScaleFailed")
    if status == 409:
        (event,) = refused
        assert event.type == "Warning"
        assert event.message.startswith("New size: 5; reason: queue depth 42 per replica")
        assert event.message.endswith("tried again next round")
    else:  # the workload was gone when written: forgotten, said in the log only
        assert refused == []
    # The refused writes were no scale events: the next one, within the scale-up policies'
    # 15 s, may still add 4 replicas.
    scaling.round(after_s=5)
    assert scaling.replicas() == 5
    assert scaling.scale_writes() == 3
    assert [e.reason for e in scaling.events()][-1] == "GpufleetScaled"
