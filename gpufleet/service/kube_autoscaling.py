"""Replica autoscaling on Kubernetes, in ``gpufleet serve --kubeconfig --prometheus-url``: the
workloads that carry gpufleet's autoscaling annotations, scaled every observatory round.

Owns :class:`KubeReplicaScaler`, subscribed to the plane's
:class:`~gpufleet.service.observatory.Observatory` (:meth:`KubeReplicaScaler.on_round`, every
15 s: the HorizontalPodAutoscaler's sync period). It watches the Deployments, StatefulSets,
ReplicaSets, HorizontalPodAutoscalers and KEDA ScaledObjects of the cluster (informers: one list
each, then watches, so a round costs the API server nothing but the scale writes), and each
round, for every workload :func:`~gpufleet.service.kube_autoscaled.survey` says gpufleet scales:

1. its replicas: ``spec.replicas`` as the watch last showed it (or the count gpufleet wrote, while
   the watch has not caught up with that write); its pods from the plane's pod cache, ready by
   their Ready condition (:func:`~gpufleet.service.kube_autoscaled.serving_pods`);
2. its metrics from Prometheus over those pods (a :class:`WorkloadMetrics`:
   :class:`~gpufleet.backends.prometheus.inference.PrometheusInferenceMetrics`);
3. the decision of its :class:`~gpufleet.elastic.replicas.ReplicaAutoscaler` (the HPA's
   algorithm, KEDA's activation for scale to zero), kept between rounds;
4. when the count changes, a merge patch of ``spec.replicas`` on the workload's ``scale``
   subresource, and a Normal Event ``GpufleetScaled`` on the workload (a Kubernetes Event, and
   one in the plane's store under the workload's key) saying ``New size: 7; reason: ...``, as
   the HPA controller's ``SuccessfulRescale`` does.

New replicas are pods like any other: their Deployment's ReplicaSet makes them, and gpufleet's
scheduler queues, admits and places them under their queue's quota and priority; one that waits
is unready, and counts as such in the next decisions.

What is said once (an Event, and a log line), and then only when it changes: a workload whose
annotations do not read, or that an HPA or ScaledObject also targets (left to that one); a
Prometheus that cannot answer (no decision at all in that round, as the HPA decides nothing on
metrics it cannot get; the next round tries again); a scale write the API server refuses (a
Warning ``GpufleetScaleFailed``; tried again next round; a workload gone meanwhile is
forgotten). Followed from the HPA controller (``horizontal.go``): a refused write records no
scale event, so the rate policies do not count it. Until every informer has listed once,
nothing is decided (an HPA not yet seen must not be fought over).

Where it differs from the HPA: readiness is the pods' Ready condition for every metric (a
model server's readiness probe says when its model has loaded); its state (recommendations,
scale events, KEDA's activity) lives as long as the server; a restarted server starts each
workload with its current count as the first recommendation, as the HPA controller does when
it first sees an HPA (``recordInitialRecommendation``), so it scales down only after a whole
scale-down window.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpufleet.backends.prometheus.inference import ServingPods
from gpufleet.elastic.replica_behavior import ScaleHistory
from gpufleet.elastic.replicas import ReplicaAutoscaler, ScaleDecision
from gpufleet.kube_client.api_types import (
    AUTOSCALING_WATCHED,
    DEPLOYMENTS,
    HORIZONTAL_POD_AUTOSCALERS,
    REPLICA_SETS,
    SCALED_OBJECTS,
    STATEFUL_SETS,
    ApiError,
    ListWatchApi,
    Resource,
)
from gpufleet.kube_client.informer import DELETED, Informers, object_key
from gpufleet.model.autoscaling import InferenceMetric, MetricReading
from gpufleet.service.kube_autoscaled import Autoscaled, Passed, serving_pods, survey
from gpufleet.service.observatory import ObservedRound
from gpufleet.service.store import StoredEvent
from gpufleet.telemetry.series_query import SeriesUnavailableError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
SCALED = "GpufleetScaled"
SCALE_FAILED = "GpufleetScaleFailed"
METRICS_UNAVAILABLE = "GpufleetMetricsUnavailable"
#: Decisions kept in memory (the changes are also events).
DECISIONS_KEPT = 1000


class ScaleWriter(Protocol):
    """Writes a merge patch (:class:`~gpufleet.kube_client.writer.ObjectWriter`)."""

    def patch(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Obj,
        subresource: str | None = None,
    ) -> Obj: ...


class ScalingPlane(Protocol):
    """What the scaler needs of its plane
    (:class:`~gpufleet.service.kube_plane.KubeControlPlane`)."""

    @property
    def writer(self) -> ScaleWriter: ...

    def record_event(
        self, key: str, type_: str, reason: str, message: str, at: float | None = None
    ) -> StoredEvent: ...

    def pod_objects(self, namespaces: Collection[str]) -> list[Obj]:
        """The cached pods of ``namespaces`` (copies)."""
        ...

    def tell(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        """A Kubernetes Event about ``obj``."""
        ...


class WorkloadMetrics(Protocol):
    """Where a workload's metrics come from (Prometheus; a fake in tests)."""

    def read(
        self, serving: ServingPods, metrics: Collection[InferenceMetric], now: float
    ) -> dict[InferenceMetric, MetricReading]:
        """Each of ``metrics`` of ``serving`` at ``now``; SeriesUnavailableError when the
        source cannot answer."""
        ...


@dataclass
class _Tracked:
    """One scaled workload between rounds: its autoscaler, the count gpufleet last wrote
    (with the resourceVersion the write returned) and the refusal last told."""

    autoscaler: ReplicaAutoscaler
    written: tuple[str, int] | None = None
    refused: str | None = None


@dataclass
class ScalerState:
    """What the scaler says of itself (for logs and tests)."""

    #: Why the latest round read no metrics (None: it could).
    metrics_error: str | None = None
    #: Rounds skipped because an informer had not listed yet.
    unsynced_rounds: int = 0
    told: set[tuple[str, str, str]] = field(default_factory=set)


def _older(seen: str, written: str) -> bool:
    """Whether the resourceVersion ``seen`` precedes ``written`` (etcd's are counters)."""
    return seen.isdigit() and written.isdigit() and int(seen) < int(written)


class KubeReplicaScaler:
    """See the module docstring. :meth:`start` starts the informers; :meth:`stop` ends them."""

    def __init__(self, plane: ScalingPlane, api: ListWatchApi, metrics: WorkloadMetrics) -> None:
        self.plane = plane
        self.metrics = metrics
        self.informers = Informers(api, AUTOSCALING_WATCHED)
        self.objects: dict[Resource, dict[str, Obj]] = {r: {} for r in AUTOSCALING_WATCHED}
        self.tracked: dict[str, _Tracked] = {}
        #: The latest decisions, oldest first: (workload key, decision).
        self.decisions: deque[tuple[str, ScaleDecision]] = deque(maxlen=DECISIONS_KEPT)
        self.state = ScalerState()
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.informers.start()

    def stop(self, timeout: float = 5.0) -> None:
        for informer in self.informers.by_resource.values():
            informer.close()
        for informer in self.informers.by_resource.values():
            informer.join(timeout)

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.by_resource.values())

    def wait_until_seen(
        self, resource: Resource, key: str, version: str | None, timeout: float = 10.0
    ) -> bool:
        """Whether the informer of ``resource`` shows ``key`` at ``version`` (None: gone)
        within ``timeout`` seconds (tests, after a write)."""
        return self.informers.by_resource[resource].wait_until_seen(key, version, timeout)

    def _drain(self) -> None:
        while True:
            try:
                change = self.informers.changes.get_nowait()
            except queue.Empty:
                return
            objects = self.objects[change.resource]
            if change.type == DELETED:
                objects.pop(object_key(change.obj), None)
            else:
                objects[object_key(change.obj)] = change.obj

    # ----------------------------------------------------------------------------- rounds
    def on_round(self, observed: ObservedRound) -> None:
        """The observatory's subscriber: :meth:`sync` at the round's time."""
        self.sync(observed.now)

    def sync(self, now: float) -> list[ScaleDecision]:
        """One round at ``now``: decide for every scaled workload and act; returns the
        decisions taken (none when the metrics cannot be read)."""
        with self._lock:
            self._drain()
            if not self.synced:
                if self.state.unsynced_rounds == 0:
                    log.info("replica autoscaling waits for its first listing of the workloads")
                self.state.unsynced_rounds += 1
                return []
            workloads = [
                obj for r in (DEPLOYMENTS, STATEFUL_SETS, REPLICA_SETS)
                for obj in self.objects[r].values()
            ]  # fmt: skip
            autoscalers = [
                *self.objects[HORIZONTAL_POD_AUTOSCALERS].values(),
                *self.objects[SCALED_OBJECTS].values(),
            ]
            scaled, passed = survey(workloads, autoscalers)
            self._tell_passed(passed, now)
            for key in self.tracked.keys() - {s.target.key for s in scaled}:
                del self.tracked[key]
            return self._decide(scaled, now)

    def _decide(self, scaled: Sequence[Autoscaled], now: float) -> list[ScaleDecision]:
        namespaces = {s.target.namespace for s in scaled}
        pods = self.plane.pod_objects(namespaces) if scaled else []
        decisions: list[ScaleDecision] = []
        for item in scaled:
            tracked = self.tracked.get(item.target.key)
            if tracked is None:
                # As the HPA controller's recordInitialRecommendation: the count found is the
                # first recommendation, so a (re)started server scales down only after a window.
                seeded = ScaleHistory.seeded(now, item.replicas, item.spec.behavior)
                autoscaler = ReplicaAutoscaler(item.spec, seeded)
                tracked = self.tracked[item.target.key] = _Tracked(autoscaler)
            tracked.autoscaler.spec = item.spec  # a changed spec keeps its history
            current = self._current(item, tracked)
            serving = serving_pods(item, pods, current)
            wanted = {target.metric for target in item.spec.metrics}
            try:
                readings = self.metrics.read(serving, wanted, now)
            except SeriesUnavailableError as error:
                self._metrics_down(scaled, str(error), now)
                return decisions
            before = tracked.autoscaler.history
            decision = tracked.autoscaler.recommend(now, current, len(serving.ready), readings)
            decisions.append(decision)
            self.decisions.append((item.target.key, decision))
            if decision.desired != current:
                self._scale(item, tracked, decision, before, now)
        self._metrics_back()
        return decisions

    def _current(self, item: Autoscaled, tracked: _Tracked) -> int:
        """The workload's replicas: what the watch shows, unless gpufleet wrote a count the
        watch has not shown yet."""
        if tracked.written is not None:
            version, count = tracked.written
            if _older(item.resource_version, version):
                return count
            tracked.written = None
        return item.replicas

    # ----------------------------------------------------------------------------- acting
    def _scale(
        self,
        item: Autoscaled,
        tracked: _Tracked,
        decision: ScaleDecision,
        before: ScaleHistory,
        now: float,
    ) -> None:
        target = item.target
        told = f"New size: {decision.desired}; reason: {decision.reason}"
        try:
            answer = self.plane.writer.patch(
                target.kind, target.namespace, target.name,
                {"spec": {"replicas": decision.desired}}, subresource="scale",
            )  # fmt: skip
        except ApiError as error:
            # As the HPA: a write that failed is no scale event for the rate policies.
            tracked.autoscaler.history = dataclasses.replace(
                tracked.autoscaler.history,
                scale_ups=before.scale_ups,
                scale_downs=before.scale_downs,
            )
            if error.status == 404:
                log.info("%s is gone: not scaled, forgotten", target)
                self.tracked.pop(target.key, None)
                return
            refusal = f"{error.status} {error.message}"
            if tracked.refused == refusal:
                return
            tracked.refused = refusal
            message = f"{told}; the API server refused it ({error}): tried again next round"
            self._event(item.obj, target.key, "Warning", SCALE_FAILED, message, now)
            return
        tracked.refused = None
        version = str((answer.get("metadata") or {}).get("resourceVersion") or "")
        tracked.written = (version, decision.desired)
        self._event(item.obj, target.key, "Normal", SCALED, told, now)

    def _event(self, obj: Obj, key: str, type_: str, reason: str, message: str, at: float) -> None:
        log.info("%s %s: %s", key, reason, message)
        self.plane.record_event(key, type_, reason, message, at)
        try:
            self.plane.tell(obj, type_, reason, message)
        except Exception:  # the store has it; an Event that cannot be sent must not stop scaling
            log.exception("the Event %s on %s could not be sent", reason, key)

    def _tell_passed(self, passed: Sequence[Passed], now: float) -> None:
        """Tell each workload left alone why, once while it stays so."""
        current = {(p.target.key, p.reason, p.message) for p in passed}
        for item in passed:
            if (item.target.key, item.reason, item.message) not in self.state.told:
                self._event(item.obj, item.target.key, item.type, item.reason, item.message, now)
        self.state.told = current

    def _metrics_down(self, scaled: Sequence[Autoscaled], error: str, now: float) -> None:
        if self.state.metrics_error is not None:
            self.state.metrics_error = error
            return
        self.state.metrics_error = error
        log.warning(
            "replica autoscaling decides nothing while its metrics cannot be read: %s", error
        )
        message = f"metrics cannot be read, replicas left as they are until they can: {error}"
        for item in scaled:
            self._event(item.obj, item.target.key, "Warning", METRICS_UNAVAILABLE, message, now)

    def _metrics_back(self) -> None:
        if self.state.metrics_error is not None:
            log.info("replica autoscaling reads its metrics again")
        self.state.metrics_error = None
