"""List-watch of one kind: a cache of its objects and a stream of their changes.

Owns client-go's informer contract, in a thread per kind: list, then watch from the list's
resourceVersion; when a stream ends, watch again from the last resourceVersion seen; on 410 Gone
list again and turn the difference between the cache and the new listing into the changes
that were missed (so nothing deleted during the gap is forgotten); on any other failure wait
with a growing backoff and list again, saying so in one log line (the first of a run of equal
failures; no traceback: an unreachable server is an expected state, not a bug). A kind whose
CRD is not installed (404) counts as synced with no objects, and is listed again the same way
until it appears. :meth:`Informer.close` ends the open watch at once, so that an informer
stops before the server it talks to. Every change goes to one ``sink`` shared by all
informers, in the order seen; :meth:`Informer.wait_until_seen` waits (on a condition, not by
polling) until a write has come back through the watch. It does not interpret objects: the
backend does.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.backends.kube.api_types import (
    ApiError,
    ListWatchApi,
    Obj,
    Resource,
    WatchExpiredError,
)

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(frozen=True, slots=True)
class Change:
    """One object of ``resource`` ADDED, MODIFIED or DELETED (its last state)."""

    resource: Resource
    type: str
    obj: Obj


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` for namespaced objects, ``name`` otherwise."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = str(metadata.get("name", ""))
    return f"{namespace}/{name}" if namespace else name


def _resource_version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _shows(found: Obj | None, version: str | None) -> bool:
    """Whether ``found`` (None: absent) is the write of ``version`` or something later (a
    status update since; None: a deletion). The API's resourceVersions are opaque, but etcd's
    (and every server's we know) are counters."""
    if version is None or found is None:
        return version is None and found is None
    seen = _resource_version(found)
    if seen == version:
        return True
    return seen.isdigit() and version.isdigit() and int(seen) > int(version)


class Informer:
    """See the module docstring. ``synced`` is set once the first listing is in the sink."""

    def __init__(
        self,
        api: ListWatchApi,
        resource: Resource,
        sink: Callable[[Change], None],
        stop: threading.Event,
        watch_timeout_s: int = 300,
        backoff_s: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self.api = api
        self.resource = resource
        self.sink = sink
        self.stop = stop
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.cache: dict[str, Obj] = {}
        self.synced = threading.Event()
        self.resource_version = ""
        self.relists = 0
        self.last_error: str | None = None
        self._thread: threading.Thread | None = None
        #: Held while the cache changes and its change goes to the sink; notified after.
        self._seen = threading.Condition()
        #: The response of the watch now open (closed by :meth:`close` to end it at once).
        self._watching: Any = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.run, name=f"informer-{self.resource.plural}", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        """Stop (the ``stop`` event, shared with the other informers, is set) and end the
        watch now open, rather than when its server next sends something."""
        self.stop.set()
        response = self._watching
        shutdown = getattr(response, "shutdown", None)  # urllib3 2.3+: wakes a blocked read
        if shutdown is not None:
            with contextlib.suppress(Exception):
                shutdown()

    def wait_until_seen(self, key: str, version: str | None, timeout: float) -> bool:
        """Whether, within ``timeout`` seconds, the cache shows object ``key`` at ``version``
        or later (None: the object gone); when it does, its change is in the sink already."""
        with self._seen:
            return self._seen.wait_for(lambda: _shows(self.cache.get(key), version), timeout)

    def _take(self, kind: str, obj: Obj) -> None:
        """One change into the cache and the sink, then wake whoever waits to see it."""
        key = object_key(obj)
        with self._seen:
            if kind == DELETED:
                self.cache.pop(key, None)
            else:
                self.cache[key] = obj
            self.sink(Change(self.resource, kind, obj))
            self._seen.notify_all()

    def run(self) -> None:
        delay = self.backoff_s[0]
        while not self.stop.is_set():
            try:
                self._list()
                delay = self.backoff_s[0]
                self._watch_until_expired()
            except ApiError as error:
                if self.stop.is_set():
                    return  # closed under a call: not a failure
                self._note_failure(str(error), delay)
                if error.status == 404:  # the kind is not installed: nothing of it exists
                    self.synced.set()
            except Exception as error:  # a broken stream, a bad line: list again, never die
                if self.stop.is_set():
                    return
                log.debug("informer %s failed", self.resource.plural, exc_info=True)
                self._note_failure(f"{type(error).__name__}: {error}", delay)
            else:
                continue
            self.stop.wait(delay)
            delay = min(delay * 2, self.backoff_s[1])

    def _note_failure(self, message: str, retry_in: float) -> None:
        if message != self.last_error:
            log.warning(
                "listing or watching %s failed: %s (retrying in %gs, with backoff)",
                self.resource.plural,
                message.splitlines()[0] if message else message,
                retry_in,
            )
        self.last_error = message

    def _list(self) -> None:
        # The first listing comes from the API server's watch cache, as client-go's
        # reflectors take it (with 10,000 pods, a quarter of a second sooner than a read
        # from etcd); after a 410 the cache is as old as what was missed: read etcd.
        items, version = self.api.list(self.resource, "" if self.relists else "0")
        fresh = {object_key(item): item for item in items}
        for key, old in list(self.cache.items()):
            if key not in fresh:
                self._take(DELETED, old)
        for key, item in fresh.items():
            seen = self.cache.get(key)
            if seen is None or _resource_version(seen) != _resource_version(item):
                self._take(ADDED if seen is None else MODIFIED, item)
        self.resource_version = version
        self.relists += 1
        self.last_error = None
        self.synced.set()

    def _watch_until_expired(self) -> None:
        """Watch, renewing each ended stream from the last resourceVersion, until 410."""
        while not self.stop.is_set():
            try:
                for kind, obj in self.api.watch(
                    self.resource, self.resource_version, self.watch_timeout_s, self._opened
                ):
                    version = _resource_version(obj)
                    if version:
                        self.resource_version = version
                    if kind == "BOOKMARK":
                        continue
                    self._take(kind, obj)
                    if self.stop.is_set():
                        return
            except WatchExpiredError:
                return
            finally:
                self._watching = None

    def _opened(self, response: Any) -> None:
        self._watching = response
        if self.stop.is_set():  # closed while the request was on its way
            self.close()


class Informers:
    """An informer per kind, all feeding one queue of changes: what the scheduler watches.
    Started on its own (``gpufleet scheduler`` starts it before importing the scheduling core,
    so that the API server lists while Python imports) or by the backend that owns it."""

    def __init__(
        self, api: ListWatchApi, resources: Iterable[Resource], watch_timeout_s: int = 300
    ) -> None:
        self.stop = threading.Event()
        #: Set whenever a change arrives (and to stop waiting).
        self.wake = threading.Event()
        self.changes: queue.SimpleQueue[Change] = queue.SimpleQueue()
        self.by_resource = {
            resource: Informer(api, resource, self._sink, self.stop, watch_timeout_s)
            for resource in resources
        }
        self.started = False

    def start(self) -> None:
        """Start listing and watching (once; later calls do nothing)."""
        if self.started:
            return
        self.started = True
        for informer in self.by_resource.values():
            informer.start()

    def _sink(self, change: Change) -> None:
        self.changes.put(change)
        self.wake.set()
