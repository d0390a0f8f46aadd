"""Telling users why, through the API: pod conditions, Events, and our objects' status.

Owns :class:`ApiReporter` (the backend's :class:`~gpufleet.backends.kube.backend.Reporter`):

* a pending pod gets ``PodScheduled=False`` with reason ``Unschedulable`` and kube-scheduler's
  style of message, and a ``FailedScheduling`` Event;
* ``Scheduled`` on a bind (with the devices), ``Preempted`` on a victim (naming its preemptor),
  ``GangEvicted`` on each pod of a gang evicted whole because one of its nodes goes away,
  ``EvictionBlocked`` when a PodDisruptionBudget forbids an eviction, ``DevicesWithdrawn`` on a
  pod and its node when the node no longer lists GPUs the pod holds, ``InvalidSpec`` on an
  object the scheduler cannot read (and a ``Valid=False`` condition on a Queue's status).

Rate limits, as client-go's event correlator does: the same (object, reason, message) is told
at most once per ``repeat_s`` (later repeats patch the Event's count), a pod's condition is
patched only when its message changes or ``repeat_s`` has passed, and everything goes through
one worker thread with a bounded backlog (what overflows is dropped and counted, never
blocking scheduling). A pod's condition whose patch fails (no answer, a 5xx: etcd away) is
sent again after a back-off (``retry_s``, doubling to ``repeat_s``) until it is taken, the pod
is bound or gone, or a newer message replaces it: a pod that waits is told why eventually, even
across an outage (the core tells each message once). A failed call is told once per
``repeat_s`` for each status code, with
how many were not told; one that got no answer is not told here at all (the client's
:class:`~gpufleet.kube_client.reachability.Reachability` tells an outage in two lines).
:class:`StatusPublisher` keeps Queue and PodGroup status current: it works out what changed
in the scheduler's turn and sends the patches through the same worker, so that the turn
never waits on the API server; a patch that fails is sent again at the next publish.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from gpufleet.backends.kube.backend import KubeBackend
from gpufleet.backends.kube.pods import is_ready, pod_group
from gpufleet.control.status import queue_numbers
from gpufleet.kube_client.api import POD_GROUPS, PODS, QUEUES, ApiError, KubeApi, Obj, rfc3339
from gpufleet.kube_client.informer import object_key
from gpufleet.model import Placement
from gpufleet.model.resources import quantity
from gpufleet.model.workload import SCHEDULING_GATED
from gpufleet.scheduling.core import SchedulerCore

log = logging.getLogger(__name__)


class ApiReporter:
    """See the module docstring."""

    def __init__(
        self,
        api: KubeApi,
        component: str = "gpufleet",
        instance: str = "",
        repeat_s: float = 60.0,
        backlog: int = 20_000,
        clock: Callable[[], float] = time.monotonic,
        retry_s: float = 1.0,
    ) -> None:
        self.api = api
        self.retry_s = retry_s
        self.component = component
        self.instance = instance or component
        self.repeat_s = repeat_s
        self.clock = clock
        self.dropped = 0
        self.sent = 0
        self._jobs: queue.Queue[Callable[[], object] | None] = queue.Queue(maxsize=backlog)
        self._told: dict[tuple[str, str, str], tuple[float, str, int]] = {}
        self._conditions: dict[str, tuple[str, float]] = {}
        #: Per status code of failed calls: when last told, and how many since not told.
        self._failures: dict[int, tuple[float, int]] = {}
        #: Pods' conditions whose patch failed, by pod: when to send it again, the back-off
        #: so far, and the patch.
        self._retries: dict[str, tuple[float, float, Callable[[], object]]] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, name="reporter", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------------------- Reporter
    def scheduled(self, pod: Obj, placement: Placement) -> None:
        with self._lock:
            self._retries.pop(object_key(pod), None)  # bound: why it waited is no news
        devices = placement.visible_devices
        where = f" (GPUs {devices})" if devices else ""
        self.event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {object_key(pod)} to {placement.node}{where}",
        )

    def unschedulable(self, pod: Obj, message: str, reason: str = "Unschedulable") -> None:
        """The PodScheduled condition, and a FailedScheduling event unless the pod is only
        held by its scheduling gates (kube-scheduler sends none for those)."""
        key = object_key(pod)
        now = self.clock()
        with self._lock:
            last = self._conditions.get(key)
            if last is not None and last[0] == message and now - last[1] < self.repeat_s:
                return
            self._conditions[key] = (message, now)
        metadata = pod.get("metadata") or {}
        namespace, name = str(metadata.get("namespace", "default")), str(metadata.get("name"))
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": rfc3339(),
                    }
                ]
            }
        }
        with self._lock:
            self._retries.pop(key, None)  # this message replaces one waiting to be sent again
        self._submit(partial(self._send_condition, key, namespace, name, patch, 0.0))
        if reason != SCHEDULING_GATED:
            self.event(pod, "Warning", "FailedScheduling", message)

    def _send_condition(
        self, key: str, namespace: str, name: str, patch: Obj, backoff: float
    ) -> None:
        """Patch a pod's condition; if that fails but for the pod being gone, send it again
        later (see the module docstring)."""
        try:
            self.api.patch_pod_status(namespace, name, patch)
        except ApiError as error:
            if error.status != 404:
                delay = min(self.repeat_s, max(self.retry_s, backoff * 2))
                again = partial(self._send_condition, key, namespace, name, patch, delay)
                with self._lock:
                    self._retries[key] = (self.clock() + delay, delay, again)
            raise

    @property
    def retrying(self) -> frozenset[str]:
        """The pods whose condition waits to be sent again."""
        with self._lock:
            return frozenset(self._retries)

    def _retry_due(self) -> None:
        """Queue the conditions whose time to be sent again has come."""
        now = self.clock()
        with self._lock:
            due = [k for k, (at, _, _) in self._retries.items() if at <= now]
            jobs = [self._retries.pop(k)[2] for k in due]
        for job in jobs:
            self._submit(job)

    def preempted(self, pod: Obj, preemptor: str | None, reason: str) -> None:
        by = f"Preempted by {preemptor}" if preemptor else "Evicted"
        self.event(pod, "Normal", "Preempted", f"{by}: {reason}")

    def eviction_blocked(self, pod: Obj, message: str) -> None:
        self.event(pod, "Warning", "EvictionBlocked", f"eviction refused, will retry: {message}")

    def gang_evicted(self, pod: Obj, reason: str) -> None:
        self.event(pod, "Warning", "GangEvicted", reason)

    def invalid(self, kind: str, obj: Obj, message: str) -> None:
        self.event({"kind": kind, **obj}, "Warning", "InvalidSpec", message)
        if kind == "Queue":
            name = str((obj.get("metadata") or {}).get("name"))
            condition = _condition("Valid", "False", "InvalidSpec", message)
            patch = {"status": {"conditions": [condition]}}
            self._submit(lambda: self.api.patch_custom_status(QUEUES, name, None, patch))

    def devices_withdrawn(self, pod: Obj, node: Obj | None, message: str) -> None:
        self.event(pod, "Warning", "DevicesWithdrawn", message)
        if node is not None:
            self.event({"kind": "Node", **node}, "Warning", "DevicesWithdrawn", message)

    def forget(self, pod_key: str) -> None:
        with self._lock:
            self._conditions.pop(pod_key, None)
            self._retries.pop(pod_key, None)

    # ----------------------------------------------------------------------------- events
    def event(self, obj: Obj, kind: str, reason: str, message: str) -> None:
        """An Event about ``obj``; a repeat within ``repeat_s`` is dropped, a later one
        counted on the first Event."""
        metadata = obj.get("metadata") or {}
        involved_key = f"{obj.get('kind', 'Pod')}/{object_key(obj)}"
        key = (involved_key, reason, message)
        now = self.clock()
        with self._lock:
            last = self._told.get(key)
            if last is not None and now - last[0] < self.repeat_s:
                return
            count = 1 if last is None else last[2] + 1
            name = last[1] if last is not None else _event_name(metadata, reason, message)
            self._told[key] = (now, name, count)
            if len(self._told) > 100_000:  # forget the oldest half, as a bounded cache
                for stale in sorted(self._told, key=lambda k: self._told[k][0])[:50_000]:
                    del self._told[stale]
        namespace = str(metadata.get("namespace") or "default")
        stamp = rfc3339()
        if count > 1:
            patch = {"count": count, "lastTimestamp": stamp, "message": message}
            self._submit(lambda: self.api.patch_event(namespace, name, patch))
            return
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", "v1"),
                "kind": obj.get("kind", "Pod"),
                "name": metadata.get("name"),
                "namespace": metadata.get("namespace"),
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
        }
        self._submit(lambda: self.api.create_event(namespace, body))

    # ----------------------------------------------------------------------------- worker
    def submit(self, job: Callable[[], object]) -> None:
        """Run ``job`` on the worker (dropped and counted when the backlog is full)."""
        self._submit(job)

    def _submit(self, job: Callable[[], object]) -> None:
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            self.dropped += 1

    def _work(self) -> None:
        while True:
            self._retry_due()
            try:
                job = self._jobs.get(timeout=self.retry_s / 2)
            except queue.Empty:
                continue
            if job is None:
                return
            try:
                job()
                self.sent += 1
            except ApiError as error:
                if error.status not in (0, 404, 409):  # 0: no answer, told by Reachability
                    self._tell_failure(error)
            except Exception:
                log.exception("reporting failed")
            finally:
                self._jobs.task_done()

    def _tell_failure(self, error: ApiError) -> None:
        now = self.clock()
        told_at, untold = self._failures.get(error.status, (None, 0))
        if told_at is not None and now - told_at < self.repeat_s:
            self._failures[error.status] = (told_at, untold + 1)
            return
        self._failures[error.status] = (now, 0)
        more = f" ({untold} more like it not told)" if untold else ""
        log.info("reporting failed: %s%s", error, more)

    def flush(self, timeout: float = 10.0) -> bool:
        """Whether the backlog is sent within ``timeout`` seconds (tests, shutdown)."""
        done = self._jobs.all_tasks_done  # the queue's own condition, notified as it empties
        with done:
            return done.wait_for(lambda: not self._jobs.unfinished_tasks, timeout)

    def close(self) -> None:
        self._jobs.put(None)


def _event_name(metadata: Mapping[str, Any], reason: str, message: str) -> str:
    digest = hashlib.sha1(f"{reason}/{message}/{time.time_ns()}".encode()).hexdigest()[:10]
    return f"{metadata.get('name', 'object')}.{digest}"


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(),
    }


# --------------------------------------------------------------------------------- status
class StatusPublisher:
    """Writes each Queue's usage, borrowed amount, pending and running counts and share, and
    each PodGroup's phase and placed members, when they change; the patches go through
    ``submit`` (the reporter's worker)."""

    def __init__(self, api: KubeApi, submit: Callable[[Callable[[], object]], None]) -> None:
        self.api = api
        self.submit = submit
        self._last: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()  # _last: the turn's thread and the worker's

    def publish(self, core: SchedulerCore, backend: KubeBackend) -> int:
        """Queue a patch of what changed since the last call; returns how many."""
        sent = 0
        for name, status in queue_status(core).items():
            if name in backend.objects[QUEUES] and self._changed(("Queue", name), status):
                valid = _condition("Valid", "True", "Accepted", "the scheduler uses this queue")
                body = {"status": {**status, "conditions": [valid]}}
                call = partial(self.api.patch_custom_status, QUEUES, name, None, body)
                sent += self._patch(("Queue", name), call)
        for key, status in pod_group_status(core, backend).items():
            if self._changed(("PodGroup", key), status):
                namespace, name = key.split("/", 1)
                body = {"status": status}
                call = partial(self.api.patch_custom_status, POD_GROUPS, name, namespace, body)
                sent += self._patch(("PodGroup", key), call)
        return sent

    def _changed(self, key: tuple[str, str], status: dict[str, Any]) -> bool:
        with self._lock:
            if self._last.get(key) == status:
                return False
            self._last[key] = status
            return True

    def _patch(self, key: tuple[str, str], call: Callable[[], object]) -> int:
        def send() -> None:
            try:
                call()
            except ApiError as error:
                if error.status != 404:
                    with self._lock:  # not written: the next publish sends it again
                        self._last.pop(key, None)
                raise

        self.submit(send)
        return 1


def queue_status(core: SchedulerCore) -> dict[str, dict[str, Any]]:
    """Each queue's usage (its subtree's), amount borrowed beyond its nominal quota, pending
    and running workloads, and dominant-resource share, as Queue status shows them."""
    return {
        name: {
            "usage": {k: quantity(k, v) for k, v in numbers.usage.items()},
            "borrowed": {k: quantity(k, v) for k, v in sorted(numbers.borrowed.items())},
            "pending": numbers.pending,
            "running": numbers.running,
            "share": numbers.share,
        }
        for name, numbers in queue_numbers(core).items()
    }


def pod_group_status(core: SchedulerCore, backend: KubeBackend) -> dict[str, dict[str, Any]]:
    """Each PodGroup's phase (Pending, Scheduled, Running) and how many members are placed
    and ready."""
    placed: dict[str, int] = {}
    ready: dict[str, int] = {}
    for key, obj in backend.objects[PODS].items():
        group = pod_group(obj)
        if group is None:
            continue
        namespace = key.split("/", 1)[0]
        group_key = f"{namespace}/{group}"
        if core.placement_of(key) is not None:
            placed[group_key] = placed.get(group_key, 0) + 1
            ready[group_key] = ready.get(group_key, 0) + is_ready(obj)
    out: dict[str, dict[str, Any]] = {}
    for key, obj in backend.objects[POD_GROUPS].items():
        need = int((obj.get("spec") or {}).get("minMember") or 1)
        have, up = placed.get(key, 0), ready.get(key, 0)
        phase = "Running" if up >= need else "Scheduled" if have >= need else "Pending"
        out[key] = {"phase": phase, "placed": have, "ready": up}
    return out
