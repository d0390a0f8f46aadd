"""Events the node agent records about its Node and the pods on it, as the kubelet's do.

Owns :class:`EventRecorder`: core v1 Events (what ``kubectl describe`` and ``kubectl get
events`` show) with ``source.component``/``source.host`` and ``reportingComponent``/
``reportingInstance`` set as the kubelet sets them, named ``<object>.<hex nanoseconds>`` and
correlated as client-go's ``EventCorrelator`` does, cheaply, in memory:

* the same (object, type, reason, message) again patches the first Event's ``count`` and
  ``lastTimestamp`` instead of making another (an Event gone meanwhile, expired by the API
  server's event TTL, is made again with the count so far);
* once ``similar_limit`` different messages with the same (object, type, reason) have been
  seen within ``similar_window_s``, further ones are told as one Event, "(combined from
  similar events): <latest message>", counted as above;
* what it remembers is bounded (least recently used first out, as client-go's 4096-entry LRU).

Writes go through one worker thread with a bounded backlog (what overflows is dropped and
counted), so that recording never blocks the device plugin's ``Allocate``. What to tell, and
when, is the agent's.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpufleet.kube_client.api_types import ApiError, NodeAgentCalls, rfc3339

log = logging.getLogger(__name__)

NORMAL, WARNING = "Normal", "Warning"
COMBINED_PREFIX = "(combined from similar events): "


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about: a Node (cluster-scoped) or a Pod."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def node(cls, name: str) -> ObjectRef:
        """A Node as the kubelet refers to it (its uid is its name; ``kubectl describe node``
        looks Events up so)."""
        return cls("Node", name, "", name)

    @classmethod
    def pod(cls, namespace: str, name: str, uid: str = "") -> ObjectRef:
        return cls("Pod", name, namespace, uid)

    @property
    def event_namespace(self) -> str:
        """Where its Events live: its namespace, ``default`` for a cluster-scoped object."""
        return self.namespace or "default"


@dataclass(slots=True)
class _Told:
    name: str
    count: int
    body: dict[str, Any]


class EventRecorder:
    """See the module docstring."""

    def __init__(
        self,
        api: NodeAgentCalls,
        host: str,
        component: str = "gpufleet-agent",
        similar_limit: int = 10,
        similar_window_s: float = 600.0,
        remembered: int = 4096,
        backlog: int = 1000,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.host = host
        self.component = component
        self.similar_limit = similar_limit
        self.similar_window_s = similar_window_s
        self.remembered = remembered
        self.clock = clock
        self.wall = wall
        self.dropped = 0
        self.sent = 0
        self._told: OrderedDict[tuple[str, ...], _Told] = OrderedDict()
        #: (object, type, reason) -> (window start, distinct messages seen in it)
        self._similar: OrderedDict[tuple[str, ...], tuple[float, set[str]]] = OrderedDict()
        self._lock = threading.Lock()
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=backlog)
        self._thread = threading.Thread(target=self._work, name="agent-events", daemon=True)
        self._thread.start()

    def event(self, involved: ObjectRef, type: str, reason: str, message: str) -> None:
        """Record an Event (written in the background; see :meth:`flush`)."""
        if type not in (NORMAL, WARNING):
            raise ValueError(f"event {reason}: type {type!r} is not Normal or Warning")
        who = (involved.kind, involved.namespace, involved.name, involved.uid)
        with self._lock:
            message, key = self._correlate(who, type, reason, message)
            told = self._told.get(key)
            stamp = rfc3339(self.wall())
            if told is None:
                body = self._body(involved, type, reason, message, stamp)
                told = _Told(str(body["metadata"]["name"]), 1, body)
                self._remember(self._told, key, told)
                job = self._create_job(involved.event_namespace, told, dict(body))
            else:
                told.count += 1
                self._told.move_to_end(key)
                job = self._patch_job(involved.event_namespace, told, message, stamp)
        self._submit(job)

    # ----------------------------------------------------------------------------- correlation
    def _correlate(
        self, who: tuple[str, ...], type: str, reason: str, message: str
    ) -> tuple[str, tuple[str, ...]]:
        """The message to tell and the key of the Event it counts on: ``message`` and its own
        Event, or, once too many similar ones were seen, the combined message and the one
        Event of them all."""
        key = (*who, type, reason)
        now = self.clock()
        start, messages = self._similar.get(key, (now, set()))
        if now - start > self.similar_window_s:
            start, messages = now, set()
        messages.add(message)
        self._remember(self._similar, key, (start, messages))
        if len(messages) >= self.similar_limit:
            return COMBINED_PREFIX + message, (*key, COMBINED_PREFIX)
        return message, (*key, message)

    def _remember(
        self, cache: OrderedDict[tuple[str, ...], Any], key: tuple[str, ...], v: Any
    ) -> None:
        cache[key] = v
        cache.move_to_end(key)
        while len(cache) > self.remembered:
            cache.popitem(last=False)

    def _body(
        self, involved: ObjectRef, type: str, reason: str, message: str, stamp: str
    ) -> dict[str, Any]:
        name = f"{involved.name}.{time.time_ns():x}"
        reference: dict[str, Any] = {
            "apiVersion": involved.api_version,
            "kind": involved.kind,
            "name": involved.name,
        }
        if involved.namespace:
            reference["namespace"] = involved.namespace
        # A Node's uid in Events is its name, as the kubelet writes and kubectl looks it up.
        uid = involved.uid or (involved.name if involved.kind == "Node" else "")
        if uid:
            reference["uid"] = uid
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": involved.event_namespace},
            "involvedObject": reference,
            "reason": reason,
            "message": message,
            "type": type,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }

    # ----------------------------------------------------------------------------- writing
    def _create_job(self, namespace: str, told: _Told, body: dict[str, Any]) -> Callable[[], None]:
        def create() -> None:
            self.api.create_event(namespace, body)

        return create

    def _patch_job(
        self, namespace: str, told: _Told, message: str, stamp: str
    ) -> Callable[[], None]:
        changes = {"count": told.count, "lastTimestamp": stamp, "message": message}

        def patch() -> None:
            try:
                self.api.patch_event(namespace, told.name, changes)
            except ApiError as error:
                if error.status != 404:
                    raise
                # Expired by the server's event TTL: tell it again, with the count so far.
                name = f"{told.body['involvedObject']['name']}.{time.time_ns():x}"
                told.name = name
                body = {**told.body, "metadata": {"name": name, "namespace": namespace}, **changes}
                self.api.create_event(namespace, body)

        return patch

    def _submit(self, job: Callable[[], None]) -> None:
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            self.dropped += 1

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                job()
                self.sent += 1
            except ApiError as error:
                log.info("recording an event failed: %s", error)
            except Exception:
                log.exception("recording an event failed")
            finally:
                self._jobs.task_done()

    def flush(self, timeout: float = 10.0) -> bool:
        """Whether everything recorded so far is written within ``timeout`` seconds."""
        done = self._jobs.all_tasks_done
        with done:
            return done.wait_for(lambda: not self._jobs.unfinished_tasks, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (up to ``timeout`` seconds), then stop the worker."""
        self.flush(timeout)
        self._jobs.put(None)
        self._thread.join(timeout)
