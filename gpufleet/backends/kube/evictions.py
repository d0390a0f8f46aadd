"""The core's evictions carried out through the Eviction API, and only where they are safe.

Owns :class:`ApiEvictions`. An eviction is sent only for a pod the informers show bound to the
node the core believes it on (or whose bind the API server answered), with a precondition on the
UID the core decided about, so that it can never delete another pod of the same name, nor a pod
that is still pending: the Eviction API deletes a pending pod too. A resourceVersion
precondition is not added: a bound pod's node never changes, and its status (which the kubelet
writes all the time) would refuse most evictions for nothing. The eviction of a pod whose bind
has no known outcome yet waits for it (:meth:`ApiEvictions._send_deferred_evictions`): sent once
the pod is known bound, never when the bind failed. Each is told as ``GangEvicted`` for a gang
sent away from an ending node, else ``Preempted``; one a PodDisruptionBudget forbids is retried
``EVICTION_RETRY_S`` later, within the term that decided it only.

Does not decide what to evict (the core) nor bind (actions.py).
"""

from __future__ import annotations

import time

from gpufleet.backends.kube import pods as podinfo
from gpufleet.backends.kube.calls import ApiCalls, log
from gpufleet.backends.kube.pods import PodState
from gpufleet.backends.kube.state import BackendState, PlannedEviction
from gpufleet.kube_client.api import PODS, ApiError, FencedError
from gpufleet.model.actions import told_to_victim
from gpufleet.model.events import ClusterEvent, PodDeleted

EVICTION_RETRY_S = 5.0


class ApiEvictions:
    """Evictions through the API (see the module docstring)."""

    def __init__(self, state: BackendState, calls: ApiCalls) -> None:
        self.state = state
        self.calls = calls

    def evict(self, key: str, preemptor: str | None, reason: str) -> None:
        obj = self.state.objects[PODS].get(key)
        told = self.state.told.get(key)
        if obj is None or told is None or told.placement is None:
            return  # gone: the informers tell the core
        if preemptor is None and key in self.state.sent_away:
            self.state.reporter.gang_evicted(obj, reason)
        else:
            namespace = key.split("/", 1)[0]
            self.state.reporter.preempted(obj, *told_to_victim(reason, preemptor, namespace))
        call = told.call
        uid = call.uid if call is not None else podinfo.uid_of(obj)
        planned = PlannedEviction(key, uid, told.placement.node, preemptor, reason, self.state.term)
        if call is not None and not call.bound:
            # Its bind has no known outcome: evicting now could delete a pending pod, or one
            # whose bind commits later. Sent once the pod is known bound; never if it is not.
            self.state.evict_after_bind[key] = planned
            return
        self._send_eviction(planned)

    def _send_eviction(self, planned: PlannedEviction) -> None:
        """Send ``planned`` if the pod is still the one decided about, bound where the core
        believes it."""
        key = planned.key
        obj = self.state.objects[PODS].get(key)
        told = self.state.told.get(key)
        if obj is None or told is None or told.placement is None:
            return
        answered_bound = told.call is not None and told.call.bound
        node = podinfo.node_name(obj)
        uid = podinfo.uid_of(obj)
        if uid != planned.uid or told.placement.node != planned.node:
            log.info("not evicting %s: it is another pod than the one decided about", key)
            return
        if node != planned.node and not (answered_bound and not node):
            log.info("not evicting %s: not bound to %s (bound to %r)", key, planned.node, node)
            return
        self.calls.submit(self._evict_call, planned)

    def _evict_call(self, planned: PlannedEviction) -> None:
        namespace, name = planned.key.split("/", 1)
        try:
            self.state.api.evict(
                namespace, name, planned.uid, lambda: self.calls.fence(planned.term)
            )
            self.state.counters.evictions += 1
        except FencedError:
            log.info("eviction of %s not sent: its term ended", planned.key)
        except ApiError as error:
            if error.status in (404, 409):  # gone, or another pod of that name now
                return
            self.state.counters.evictions_blocked += 1
            obj = self.state.objects[PODS].get(planned.key)
            if obj is not None:
                self.state.reporter.eviction_blocked(obj, error.message or str(error))
            with self.state.lock:
                if planned.term == self.state.term:
                    self.state.evictions_due.append((time.monotonic() + EVICTION_RETRY_S, planned))
                    self.state.evictions_due.sort(key=lambda due: due[0])
            self.state.wake.set()

    def retry_evictions(self) -> None:
        now = time.monotonic()
        with self.state.lock:
            due = [
                e for at, e in self.state.evictions_due if at <= now and e.term == self.state.term
            ]
            self.state.evictions_due = [(at, e) for at, e in self.state.evictions_due if at > now]
        for planned in due:
            self._send_eviction(planned)

    def send_deferred_evictions(self, out: list[ClusterEvent]) -> None:
        """Evictions that waited for a bind's outcome: sent for a pod now known bound; for
        one known not bound, the core is told its run ended (once: the pod stays, and waits
        with its workload again) and nothing is sent."""
        for key, planned in list(self.state.evict_after_bind.items()):
            told = self.state.told.get(key)
            if planned.term != self.state.term or told is None:
                del self.state.evict_after_bind[key]  # gone: the informers tell the core
                continue
            if told.state is PodState.WAITING:
                del self.state.evict_after_bind[key]
                out.append(PodDeleted(key))
                continue
            if told.call is None or told.call.bound:
                del self.state.evict_after_bind[key]
                self._send_eviction(planned)
