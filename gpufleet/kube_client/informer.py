"""List-watch of one kind: a cache of its objects and a stream of their changes.

Owns client-go's informer contract (its reflector's), in a thread per kind: list (the first
time from the API server's watch cache, ``resourceVersion=0``), then watch from the list's
resourceVersion; when a stream ends, watch again from the last resourceVersion seen. When the
connection breaks, the server cannot be reached, or it answers 429 or 5xx, watch again from
that resourceVersion too (at once after a stream that had run a while, else after a
back-off): nothing is listed again. Only a 410 Gone (the resourceVersion is older than the
server's history), a refusal (403, a CRD removed) or a broken line lists again, from the
watch cache at the last resourceVersion seen ("not older than", as client-go's relist;
``""``, a consistent read from etcd, only when even that is refused with a 410), and turns the
difference between the cache and the new listing into the changes that were missed (so
nothing deleted during the gap is forgotten). The back-off grows on failures and is reset
when the server answers again: this informer's call, or any call of the same client (its
:class:`~gpufleet.kube_client.reachability.Reachability`), which ends a back-off early. A
failure is told in one log line (the first of a run of equal failures; no traceback: an
unreachable server is an expected state, not a bug), and not at all when the server gave no
answer: the client's Reachability tells that once for all. A kind whose CRD is not installed
(404) counts as synced with no objects, and is listed again the same way until it appears.
:meth:`Informer.close` ends the open watch at once, so that an informer stops before the
server it talks to. Every change goes to one ``sink`` shared by all informers, in the order
seen; :meth:`Informer.wait_until_seen` waits (on a condition, not by polling) until a write
has come back through the watch. It does not interpret objects: the backend does.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.kube_client.api_types import (
    ApiError,
    ListWatchApi,
    Obj,
    Resource,
    WatchExpiredError,
)

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"

#: A watch that broke after running this long is renewed at once; a shorter one (a server
#: that accepts watches and drops them) backs off, as client-go's "very short watch" does.
SHORT_WATCH_S = 1.0


def _resumable(error: ApiError) -> bool:
    """Whether a watch that failed so may resume from its last resourceVersion: no answer or a
    broken stream, too many requests, a server error (client-go's reflector re-watches on
    these; a 410 or a refusal lists again)."""
    return error.status == 0 or error.status == 429 or error.status >= 500


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
        #: When the watch now open was answered (None: none is).
        self._watch_opened_at: float | None = None
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
        self.api.reachability.wake()
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
        reachability = self.api.reachability
        delay = self.backoff_s[0]
        listed = False  # the cache is listed: a watch may resume from resource_version
        while not self.stop.is_set():
            recoveries = reachability.recoveries
            try:
                if not listed:
                    self._list()
                    listed = True
                    delay = self.backoff_s[0]
                self._watch_until_expired()
                listed = False  # 410 Gone: list again
                continue
            except ApiError as error:
                if self.stop.is_set():
                    return  # closed under a call: not a failure
                if error.status == 404:  # the kind is not installed: nothing of it exists
                    self.synced.set()
                if not _resumable(error):
                    listed = False
                elif self._ran_a_while():
                    delay = self.backoff_s[0]
                    continue  # a stream that broke: watch again at once
                self._note_failure(error, delay)
            except Exception as error:  # a bad line: list again, never die
                if self.stop.is_set():
                    return
                log.debug("informer %s failed", self.resource.plural, exc_info=True)
                listed = False
                self._note_failure(ApiError(-1, type(error).__name__, str(error)), delay)
            if reachability.wait_recovered(recoveries, delay, until=self.stop.is_set):
                delay = self.backoff_s[0]  # the server answers again: try now
            else:
                delay = min(delay * 2, self.backoff_s[1])

    def _ran_a_while(self) -> bool:
        opened = self._watch_opened_at
        return opened is not None and time.monotonic() - opened >= SHORT_WATCH_S

    def _note_failure(self, error: ApiError, retry_in: float) -> None:
        message = str(error)
        if error.status == 0:  # no answer: the client's Reachability tells it, once
            log.debug("listing or watching %s failed: %s", self.resource.plural, message)
        elif message != self.last_error:
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
        # from etcd); a relist too, at the last resourceVersion seen (the watch cache answers
        # with that or something newer), unless the server has not that one: then etcd.
        since = self.resource_version if self.relists else "0"
        try:
            items, version = self.api.list(self.resource, since)
        except ApiError as error:
            if not since or not _version_unavailable(error):
                raise
            items, version = self.api.list(self.resource, "")
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
            self._watch_opened_at = None
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
        self._watch_opened_at = time.monotonic()
        if self.stop.is_set():  # closed while the request was on its way
            self.close()


def _version_unavailable(error: ApiError) -> bool:
    """Whether a list at a resourceVersion was refused for that version: 410 Gone, or (the
    watch cache behind it) a 504 "Too large resource version"."""
    return error.status == 410 or (error.status == 504 and "resource version" in str(error))


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
