"""The core's binds carried out through the API, and their outcomes taken in.

Owns :class:`ApiActions`: a Bind through the Binding subresource (the devices chosen go onto the
pod as annotations in the same write, signed with the binding key when the scheduler has one,
:mod:`gpufleet.io.kube.binding_signature`, as node agents honour no other; with, on a gang's
pods, the autoscalers' do-not-disrupt annotations:
:func:`gpufleet.io.kube.disruption.gang_guard`) on a pool of binder threads, fenced (calls.py),
and its outcome taken in at the next poll:

* answered 2xx: bound (the informers confirm it), and its pod told ``Scheduled`` (even when the
  informers showed it bound first, or a new core was built meanwhile);
* refused for good (404, 400, 403, 422): not bound; its devices are given back and the pod waits
  again (``BindFailed``, which rolls its gang back: the core evicts the members bound);
* no answer, a timeout or reset, 409 or 5xx: unknown (etcd unavailable reads as 409, and a write
  the API server timed out may still commit). The pod is read (a GET) to learn the truth, again
  every ``CHECK_RETRY_S`` while that fails, unless the informers show it first; only then is the
  core told. A 409 for a pod that did bind is so taken as bound.

Every bind is a :class:`BindCall` tagged with the term that decided it. An outcome of an earlier
term (a resync or a lost leadership since) is never handed to the core as it is: when the bind is
one the current core was told as in flight, the pod is read again for it; else it is dropped.

Does not decide what to bind (the core) nor evict (evictions.py), nor report why a pod waits.
"""

from __future__ import annotations

import queue
import time

from gpufleet.backends.kube import pods as podinfo
from gpufleet.backends.kube.calls import ApiCalls, log
from gpufleet.backends.kube.pods import PodState
from gpufleet.backends.kube.state import BackendState, BindCall, Outcome, Told
from gpufleet.io.kube.annotations import placement_annotations
from gpufleet.io.kube.binding_signature import signed_binding
from gpufleet.io.kube.disruption import gang_guard
from gpufleet.kube_client.api import PODS, ApiError, FencedError
from gpufleet.model import Placement, Pod
from gpufleet.model.events import BindFailed, ClusterEvent

__all__ = ["CHECK_RETRY_S", "ApiActions", "bind_outcome"]

#: How long after a failed read of a pod whose bind has no known outcome it is read again.
CHECK_RETRY_S = 1.0

#: Answers to a Binding that say for sure it was not carried out.
REFUSED = frozenset({400, 403, 404, 405, 415, 422})


def bind_outcome(status: int) -> str:
    """What an error answer to a Binding says of it: ``failed`` (refused, nothing written) or
    ``unknown`` (no answer, 409, 429, 5xx: it may have been written, or be yet)."""
    return "failed" if status in REFUSED else "unknown"


class ApiActions:
    """Binds and their outcomes through the API (see the module docstring)."""

    def __init__(self, state: BackendState, calls: ApiCalls) -> None:
        self.state = state
        self.calls = calls

    def bind(self, pod: Pod, placement: Placement) -> None:
        key = pod.key
        obj = self.state.objects[PODS].get(key)
        call = BindCall(key, podinfo.uid_of(obj or {}), placement, self.state.term)
        told = self.state.told.get(key)
        if told is None:  # the pod left between the cycle and now: let the core know
            self.state.results.put(
                Outcome("failed", call, "the pod no longer exists", self.state.term)
            )
            return
        told.state, told.placement, told.in_flight = PodState.BOUND, placement, True
        told.call = call
        self.state.ledger.take(placement)
        annotations = placement_annotations(placement)
        if self.state.binding_key is not None and annotations:
            annotations = signed_binding(
                self.state.binding_key, call.uid, placement.node, annotations
            )
        if self.state.guard_gangs and obj is not None and podinfo.pod_group(obj) is not None:
            annotations.update(gang_guard(podinfo.annotations_of(obj)))
        self.calls.submit(self._bind_call, call, annotations)

    def _bind_call(self, call: BindCall, annotations: dict[str, str]) -> None:
        namespace, name = call.key.split("/", 1)
        sent = time.perf_counter()
        try:
            self.state.api.bind(
                namespace,
                name,
                call.placement.node,
                annotations,
                lambda: self.calls.fence(call.term, call),
            )
        except FencedError:
            self.state.results.put(Outcome("dropped", call, "not sent: its term ended", call.term))
            self.state.wake.set()
            return
        except ApiError as error:
            kind = bind_outcome(error.status)
            self.state.results.put(Outcome(kind, call, error.message or str(error), call.term))
        except Exception as error:  # never lose a bind outcome
            self.state.results.put(Outcome("unknown", call, repr(error), call.term))
        else:
            self.state.results.put(Outcome("bound", call, call.placement.node, call.term))
        self.state.bind_answered(time.perf_counter() - sent)
        self.state.wake.set()

    def _check_call(self, call: BindCall, term: int) -> None:
        """Read the pod of a bind with no known outcome, for ``term``: bound to its node (the
        same pod) or not."""
        namespace, name = call.key.split("/", 1)
        try:
            pod = self.state.api.get_pod(namespace, name)
        except ApiError as error:
            self.state.results.put(Outcome("unknown", call, str(error), term, checked=True))
        else:
            if pod is None or podinfo.uid_of(pod) != call.uid:
                outcome = Outcome("failed", call, "the pod is gone", term, checked=True)
            elif podinfo.node_name(pod) == call.placement.node:
                outcome = Outcome("bound", call, call.placement.node, term, checked=True)
            else:
                where = podinfo.node_name(pod) or "no node"
                outcome = Outcome("failed", call, f"the pod is on {where}", term, checked=True)
            self.state.results.put(outcome)
        self.state.wake.set()

    def check_later(self, call: BindCall, delay: float) -> None:
        with self.state.lock:
            self.state.checks_due.append((time.monotonic() + delay, call))
            self.state.checks_due.sort(key=lambda due: due[0])

    def run_checks(self) -> None:
        now = time.monotonic()
        with self.state.lock:
            due = [c for at, c in self.state.checks_due if at <= now]
            self.state.checks_due = [(at, c) for at, c in self.state.checks_due if at > now]
        for call in due:
            told = self.state.told.get(call.key)
            if told is not None and told.call is call:
                self.calls.submit(self._check_call, call, self.state.term)

    def take_results(self, out: list[ClusterEvent]) -> None:
        while True:
            try:
                outcome = self.state.results.get_nowait()
            except queue.Empty:
                return
            self._take_outcome(outcome, out)

    def _tell_scheduled(self, call: BindCall) -> None:
        """The ``Scheduled`` Event of a bind answered 2xx, on its pod (not on a pod made
        since under the same name)."""
        obj = self.state.objects[PODS].get(call.key)
        if obj is not None and podinfo.uid_of(obj) == call.uid:
            self.state.reporter.scheduled(obj, call.placement)

    def _take_outcome(self, outcome: Outcome, out: list[ClusterEvent]) -> None:
        call, key = outcome.call, outcome.call.key
        told = self.state.told.get(key)
        current = told is not None and told.call is call
        if not outcome.checked:
            if outcome.kind == "bound":
                self.state.counters.binds += 1
                # Told here, whatever came first: the informers may show the pod bound before
                # its bind's own answer is taken in, and a new core may be built meanwhile.
                self._tell_scheduled(call)
            elif outcome.kind != "dropped":
                self.state.counters.bind_failures += 1
                log.info("bind of %s: %s (%s)", key, outcome.detail, outcome.kind)
        if outcome.term != self.state.term:
            # Decided, or learnt, for an earlier core: not this core's fact as it is. A bind
            # this core was told as in flight is learnt again, by reading its pod.
            if current and outcome.kind != "bound":
                call.answered = True
                self.check_later(call, 0.0)
            elif current:
                call.answered = call.bound = True
            return
        if told is None:
            if outcome.kind != "bound":  # the pod left before its bind was sent
                out.append(BindFailed(key, outcome.detail))
            return
        if not current:
            return  # the informers showed it bound meanwhile (or another bind followed)
        call.answered = True
        if outcome.kind == "bound":
            call.bound = True
            return
        if outcome.kind == "unknown":
            self.check_later(call, CHECK_RETRY_S if outcome.checked else 0.0)
            return
        # Known not bound ("failed", or "dropped": never sent).
        self.state.ledger.give_back(call.placement)
        before = self.state.told.get(key)
        self.state.told[key] = Told(PodState.WAITING, gang=before.gang if before else None)
        self.state.dirty_pods.add(key)  # if it was bound by someone else, say so next
        if key not in self.state.evict_after_bind:  # else its eviction is dropped: see there
            out.append(BindFailed(key, outcome.detail))
