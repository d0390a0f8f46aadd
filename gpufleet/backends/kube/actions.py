"""The core's actions carried out through the API.

Owns :class:`ApiActions`: a Bind through the Binding subresource (the devices chosen go onto the pod
as annotations in the same write, signed with the binding key when the scheduler has one,
:mod:`gpufleet.backends.kube.binding_signature`, as node agents honour no other; with, on a gang's
pods, the autoscalers' do-not-disrupt annotations: :func:`gpufleet.io.disruption.gang_guard`) and an
Evict through the Eviction API (told as ``GangEvicted`` for a gang sent away from an ending node,
else ``Preempted``), each on a pool of binder threads and counted until it has its answer; a bind's
outcome taken in at the next poll (a failed one gives its devices back and the pod waits again); an
eviction a PodDisruptionBudget forbids retried ``EVICTION_RETRY_S`` later.

Does not decide what to bind or evict (the core) nor report why a pod waits (the Reporter).
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable

from gpufleet.backends.kube import pods as podinfo
from gpufleet.backends.kube.api import PODS, ApiError
from gpufleet.backends.kube.binding_signature import signed_binding
from gpufleet.backends.kube.devices import placement_annotations
from gpufleet.backends.kube.pods import PodState
from gpufleet.backends.kube.state import BackendState, Told
from gpufleet.io.disruption import gang_guard
from gpufleet.model import Placement, Pod
from gpufleet.model.actions import told_to_victim
from gpufleet.model.events import BindFailed, ClusterEvent

# The name these lines have always been logged under (before the backend was split in parts).
log = logging.getLogger("gpufleet.backends.kube.backend")

EVICTION_RETRY_S = 5.0


class ApiActions(BackendState):
    """Binds and evictions through the API (see the module docstring)."""

    def _bind(self, pod: Pod, placement: Placement) -> None:
        key = pod.key
        told = self._told.get(key)
        if told is None:  # the pod left between the cycle and now: let the core know
            self._results.put(("failed", key, "the pod no longer exists"))
            return
        told.state, told.placement, told.in_flight = PodState.BOUND, placement, True
        self._ledger.take(placement)
        annotations = placement_annotations(placement)
        obj = self.objects[PODS].get(key)
        if self.binding_key is not None and annotations:
            uid = str(((obj or {}).get("metadata") or {}).get("uid", ""))
            annotations = signed_binding(self.binding_key, uid, placement.node, annotations)
        if self.guard_gangs and obj is not None and podinfo.pod_group(obj) is not None:
            annotations.update(gang_guard(podinfo.annotations_of(obj)))
        self._call(self._bind_call, pod, placement, annotations)

    def _bind_call(self, pod: Pod, placement: Placement, annotations: dict[str, str]) -> None:
        sent = time.perf_counter()
        try:
            self.api.bind(pod.namespace, pod.name, placement.node, annotations)
        except ApiError as error:
            self._results.put(("failed", pod.key, error.message or str(error)))
        except Exception as error:  # never lose a bind outcome
            self._results.put(("failed", pod.key, repr(error)))
        else:
            self._results.put(("bound", pod.key, placement.node))
        self.bind_answered(time.perf_counter() - sent)
        self._wake.set()

    def _take_results(self, out: list[ClusterEvent]) -> None:
        while True:
            try:
                outcome, key, detail = self._results.get_nowait()
            except queue.Empty:
                return
            told = self._told.get(key)
            if outcome == "bound":
                self.counters.binds += 1
                obj = self.objects[PODS].get(key)
                if obj is not None and told is not None and told.placement is not None:
                    self.reporter.scheduled(obj, told.placement)
                continue
            self.counters.bind_failures += 1
            log.info("bind of %s failed: %s", key, detail)
            if told is not None and told.in_flight:
                assert told.placement is not None
                self._ledger.give_back(told.placement)
                self._told[key] = Told(PodState.WAITING, gang=told.gang)
                self._dirty_pods.add(key)  # if it was bound by someone else, say so next
            out.append(BindFailed(key, detail))

    def _evict(self, key: str, preemptor: str | None, reason: str) -> None:
        obj = self.objects[PODS].get(key)
        if obj is None:
            return
        if preemptor is None and key in self._sent_away:
            self.reporter.gang_evicted(obj, reason)
        else:
            namespace = key.split("/", 1)[0]
            self.reporter.preempted(obj, *told_to_victim(reason, preemptor, namespace))
        self._call(self._evict_call, key, preemptor, reason)

    def _evict_call(self, key: str, preemptor: str | None, reason: str) -> None:
        namespace, name = key.split("/", 1)
        try:
            self.api.evict(namespace, name)
            self.counters.evictions += 1
        except ApiError as error:
            if error.status == 404:
                return
            self.counters.evictions_blocked += 1
            obj = self.objects[PODS].get(key)
            if obj is not None:
                self.reporter.eviction_blocked(obj, error.message or str(error))
            with self._lock:
                due = time.monotonic() + EVICTION_RETRY_S
                self._evictions_due.append((due, key, preemptor, reason))
                self._evictions_due.sort()
            self._wake.set()

    def _retry_evictions(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [e for e in self._evictions_due if e[0] <= now]
            self._evictions_due = [e for e in self._evictions_due if e[0] > now]
        for _, key, preemptor, reason in due:
            if key in self._told:
                self._call(self._evict_call, key, preemptor, reason)

    def _call(self, call: Callable[..., None], *args: object) -> None:
        """``call`` on a binder thread, counted until it has its answer."""
        with self._calls_answered:
            self._calls_open += 1
        self._binders.submit(self._counted, call, *args)

    def _counted(self, call: Callable[..., None], *args: object) -> None:
        try:
            call(*args)
        finally:
            with self._calls_answered:
                self._calls_open -= 1
                self._calls_answered.notify_all()

    def wait_calls_answered(self, timeout: float) -> bool:
        """Whether every bind and eviction sent so far has its answer within ``timeout``
        seconds (its outcome queued for the next poll): a turn's writes are done."""
        with self._calls_answered:
            return self._calls_answered.wait_for(lambda: self._calls_open == 0, timeout)
