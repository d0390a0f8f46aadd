"""The object store: objects, the global resourceVersion, change history and watchers.

Every write takes one global counter forward, stamps ``metadata.resourceVersion`` and records
a :class:`Change` in the history, which is offered to every open :class:`Watcher` while the
store lock is held, so watchers see writes in commit order. Stored objects are immutable
snapshots: each write builds new dicts, and callers get deep copies.

:meth:`Store.compact` forgets the history *and* takes the counter forward, so every
resourceVersion handed out before it is too old to watch from (410 Gone).

Deletion follows the real server: an object with finalizers, or a pod deleted with a grace
period, gets ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` and stays (MODIFIED)
until its finalizers are gone and it is deleted with grace 0; otherwise it is removed at once
and the DELETED event carries its last state at the deletion's resourceVersion.
"""

from __future__ import annotations

import copy
import datetime as dt
import queue
import secrets
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.fakes.kube_api import errors
from tests.fakes.kube_api.resources import (
    CRD_KEY,
    Registry,
    ResourceKey,
    ResourceType,
    from_crd,
)
from tests.fakes.kube_api.selectors import Matcher

Obj = dict[str, Any]
WatchEvent = tuple[str, Obj]
"""``(type, object)`` as sent on a watch stream."""

_TOP_LEVEL_NOT_SPEC = frozenset({"metadata", "status", "kind", "apiVersion"})


_CRD_CONDITIONS = (("NamesAccepted", "NoConflicts"), ("Established", "InitialNamesAccepted"))


def now_rfc3339(offset_seconds: int = 0) -> str:
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Change:
    """One committed write. ``obj`` is the state after it (for DELETED, the last state at the
    deletion's resourceVersion); ``prev`` the state before it (None for ADDED)."""

    rv: int
    type: str
    key: ResourceKey
    namespace: str
    obj: Obj
    prev: Obj | None


def _spec_of(obj: Obj) -> Obj:
    """Everything generation tracks: all but metadata, status, kind and apiVersion."""
    return {k: v for k, v in obj.items() if k not in _TOP_LEVEL_NOT_SPEC}


def _render(rt: ResourceType, obj: Obj) -> Obj:
    return {**obj, "apiVersion": rt.api_version, "kind": rt.kind}


class Watcher:
    """One open watch: a queue of events for one resource, namespace and selector."""

    def __init__(self, rt: ResourceType, namespace: str | None, matches: Matcher) -> None:
        self.rt = rt
        self.namespace = namespace
        self.matches = matches
        self._queue: queue.SimpleQueue[WatchEvent | None] = queue.SimpleQueue()

    def push(self, event: WatchEvent) -> None:
        self._queue.put(event)

    def offer(self, change: Change) -> None:
        """Queue the event ``change`` means to this watcher, if any (a selector watch sees an
        object that starts matching as ADDED and one that stops matching as DELETED)."""
        if change.key != self.rt.key or self.namespace not in (None, change.namespace):
            return
        new_ok = self.matches(change.obj)
        if change.type == "MODIFIED":
            old_ok = change.prev is not None and self.matches(change.prev)
            kind = {(True, True): "MODIFIED", (False, True): "ADDED", (True, False): "DELETED"}
            if (old_ok, new_ok) in kind:
                self.push((kind[(old_ok, new_ok)], _render(self.rt, change.obj)))
        elif new_ok:
            self.push((change.type, _render(self.rt, change.obj)))

    def close(self) -> None:
        self._queue.put(None)

    def next(self, timeout: float | None) -> WatchEvent | bool | None:
        """The next event; ``None`` when closed; ``False`` when ``timeout`` passed first."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return False


class Store:
    """All objects of the fake, guarded by one re-entrant lock (:attr:`lock`)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        #: Notified (under :attr:`lock`) after every write and every watch opened.
        self.changed = threading.Condition(self.lock)
        self.registry = Registry()
        self._objects: dict[ResourceKey, dict[tuple[str, str], Obj]] = {}
        self._rv = 1  # never "0", which a watch reads as "start with the current state"
        self._oldest = 0
        self._history: list[Change] = []
        self._watchers: set[Watcher] = set()

    # ---- reading -------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self.lock:
            return str(self._rv)

    def _bucket(self, rt: ResourceType) -> dict[tuple[str, str], Obj]:
        return self._objects.setdefault(rt.key, {})

    def _ns(self, rt: ResourceType, namespace: str | None) -> str:
        return (namespace or "") if rt.namespaced else ""

    def _current(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self._bucket(rt).get((self._ns(rt, namespace), name))
        if obj is None:
            raise errors.not_found(rt.plural, name, rt.group)
        return obj

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self.lock:
            return copy.deepcopy(_render(rt, self._current(rt, namespace, name)))

    def list(
        self, rt: ResourceType, namespace: str | None, matches: Matcher | None = None
    ) -> tuple[list[Obj], str]:
        """Matching objects sorted by namespace and name, and the current resourceVersion."""
        with self.lock:
            items = [
                copy.deepcopy(_render(rt, obj))
                for (ns, _), obj in sorted(self._bucket(rt).items())
                if namespace in (None, ns) and (matches is None or matches(obj))
            ]
            return items, str(self._rv)

    # ---- writing -------------------------------------------------------------------------

    def _commit(self, rt: ResourceType, kind: str, obj: Obj, prev: Obj | None) -> Obj:
        self._rv += 1
        meta = obj["metadata"] = dict(obj["metadata"])
        meta["resourceVersion"] = str(self._rv)
        ns, name = self._ns(rt, meta.get("namespace")), meta["name"]
        if kind == "DELETED":
            del self._bucket(rt)[(ns, name)]
        else:
            self._bucket(rt)[(ns, name)] = obj
        change = Change(self._rv, kind, rt.key, ns, obj, prev)
        self._history.append(change)
        for watcher in self._watchers:
            watcher.offer(change)
        if rt.key == CRD_KEY:
            self._sync_crd(kind, obj)
        self.changed.notify_all()
        return copy.deepcopy(_render(rt, obj))

    def create(self, rt: ResourceType, body: Obj, namespace: str | None, as_client: bool) -> Obj:
        """Create ``body``; ``as_client`` applies what the server resets on API creates."""
        obj = copy.deepcopy(body)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.setdefault("metadata", {})
        with self.lock:
            if rt.namespaced:
                if namespace and meta.get("namespace") not in (None, "", namespace):
                    raise errors.bad_request(
                        "the namespace of the provided object does not match the namespace "
                        "sent on the request"
                    )
                meta["namespace"] = namespace or meta.get("namespace") or "default"
            else:
                meta.pop("namespace", None)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
            if not meta.get("name"):
                raise errors.ApiError(422, "name or generateName is required", "Invalid")
            if (self._ns(rt, meta.get("namespace")), meta["name"]) in self._bucket(rt):
                raise errors.already_exists(rt.plural, meta["name"], rt.group)
            for server_owned in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(server_owned, None)
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
            self._on_create(rt, obj, as_client)
            return self._commit(rt, "ADDED", obj, None)

    def _on_create(self, rt: ResourceType, obj: Obj, as_client: bool) -> None:
        if rt.key == ("", "pods"):
            spec = obj.setdefault("spec", {})
            spec.setdefault("schedulerName", "default-scheduler")
            cls = spec.get("priorityClassName")
            pcs = self._objects.get(("scheduling.k8s.io", "priorityclasses"), {})
            if cls and "priority" not in spec and ("", cls) in pcs:
                spec["priority"] = pcs[("", cls)].get("value", 0)
            if as_client:
                obj["status"] = {"phase": "Pending"}
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        elif rt.key == ("", "namespaces"):
            obj["status"] = {"phase": "Active"}
        elif rt.key == CRD_KEY:
            self._check_crd(obj)
            obj["status"] = {
                "acceptedNames": copy.deepcopy(obj["spec"]["names"]),
                "storedVersions": [v["name"] for v in obj["spec"]["versions"] if v.get("storage")],
                "conditions": [
                    {"type": t, "status": "True", "reason": r, "lastTransitionTime": now_rfc3339()}
                    for t, r in (
                        ("NamesAccepted", "NoConflicts"),
                        ("Established", "InitialNamesAccepted"),
                    )
                ],
            }
        elif as_client and rt.status_subresource and rt.key != ("", "nodes"):
            obj.pop("status", None)

    def update(
        self,
        rt: ResourceType,
        body: Obj,
        namespace: str | None,
        name: str,
        subresource: str | None,
        as_client: bool,
    ) -> Obj:
        """PUT: optimistic concurrency on ``metadata.resourceVersion`` when given; with a
        status subresource a client's main-resource write keeps the old status and a /status
        write changes only status."""
        with self.lock:
            old = self._current(rt, namespace, name)
            meta = body.get("metadata") or {}
            if meta.get("name") not in (None, name):
                raise errors.bad_request(
                    f"the name of the object ({meta.get('name')}) does not match the name on "
                    f"the URL ({name})"
                )
            rv = meta.get("resourceVersion")
            if rv not in (None, "") and rv != old["metadata"]["resourceVersion"]:
                raise errors.conflict(rt.plural, name, rt.group)
            if subresource == "status":
                new = copy.deepcopy(old)
                new["status"] = copy.deepcopy(body.get("status"))
            else:
                new = copy.deepcopy(body)
                if as_client and rt.status_subresource:
                    new["status"] = copy.deepcopy(old.get("status"))
            return self._write(rt, old, new)

    def mutate(
        self, rt: ResourceType, namespace: str | None, name: str, change: Callable[[Obj], Obj]
    ) -> Obj:
        """Read-modify-write under the lock: ``change`` gets a copy and returns the new object
        (or raises :class:`~tests.fakes.kube_api.errors.ApiError`)."""
        with self.lock:
            old = self._current(rt, namespace, name)
            return self._write(rt, old, change(copy.deepcopy(old)))

    def _write(self, rt: ResourceType, old: Obj, new: Obj) -> Obj:
        if new.get("status") is None:
            new.pop("status", None)
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        old_meta = old["metadata"]
        meta = new["metadata"] = dict(new.get("metadata") or {})
        for kept in ("name", "namespace", "uid", "creationTimestamp", "generation"):
            if kept in old_meta:
                meta[kept] = old_meta[kept]
            else:
                meta.pop(kept, None)
        for kept in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if kept in old_meta:
                meta[kept] = old_meta[kept]
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if new == _render(rt, old):
            return copy.deepcopy(new)  # a no-op write changes nothing, as on the real server
        if _spec_of(new) != _spec_of(old):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if rt.key == CRD_KEY:
            self._check_crd(new)
        if meta.get("deletionTimestamp") and self._may_remove(new):
            return self._commit(rt, "DELETED", new, old)
        return self._commit(rt, "MODIFIED", new, old)

    @staticmethod
    def _may_remove(obj: Obj) -> bool:
        meta = obj["metadata"]
        return not meta.get("finalizers") and not meta.get("deletionGracePeriodSeconds")

    def delete(self, rt: ResourceType, namespace: str | None, name: str, grace: int = 0) -> Obj:
        """DELETE with an effective grace period (only pods pass one above 0)."""
        with self.lock:
            old = self._current(rt, namespace, name)
            meta = old["metadata"]
            pending = meta.get("deletionGracePeriodSeconds")
            if not meta.get("finalizers") and grace <= 0:
                return self._commit(rt, "DELETED", copy.deepcopy(old), old)
            if meta.get("deletionTimestamp") and pending is not None and pending <= grace:
                return copy.deepcopy(_render(rt, old))  # a later delete never extends grace
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = now_rfc3339(grace)
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            return self._commit(rt, "MODIFIED", new, old)

    def remove(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        """Remove at once, whatever finalizers or grace period say."""
        with self.lock:
            old = self._current(rt, namespace, name)
            return self._commit(rt, "DELETED", copy.deepcopy(old), old)

    # ---- CRDs ----------------------------------------------------------------------------

    @staticmethod
    def _check_crd(obj: Obj) -> None:
        try:
            spec = obj["spec"]
            expected = f"{spec['names']['plural']}.{spec['group']}"
            kinds = (spec["names"]["kind"], [v["name"] for v in spec["versions"]])
        except (KeyError, TypeError) as exc:
            raise errors.ApiError(422, f"invalid CustomResourceDefinition: missing {exc}") from exc
        if obj["metadata"]["name"] != expected or not kinds[1]:
            raise errors.ApiError(
                422,
                f'CustomResourceDefinition.apiextensions.k8s.io "{obj["metadata"]["name"]}" is '
                f'invalid: metadata.name: must be spec.names.plural+"."+spec.group ({expected}) '
                "and spec.versions must not be empty",
                "Invalid",
            )

    def _sync_crd(self, kind: str, crd: Obj) -> None:
        spec = crd["spec"]
        key = (spec["group"], spec["names"]["plural"])
        self.registry.remove_custom(key)
        if kind == "DELETED":
            types = {rt.key: rt for rt in from_crd(crd)}
            for ns, name in sorted(self._objects.get(key, {})):
                if key in types:
                    old = self._objects[key][(ns, name)]
                    self._commit(types[key], "DELETED", copy.deepcopy(old), old)
            self._objects.pop(key, None)
        else:
            for rt in from_crd(crd):
                self.registry.add(rt)

    # ---- watching ------------------------------------------------------------------------

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        resource_version: str | None,
        matches: Matcher,
    ) -> Watcher:
        """Open a watch. From ``None``/``""``/``"0"``: ADDED for every current object first.
        From an older resourceVersion than history keeps: :func:`errors.gone` (410)."""
        watcher = Watcher(rt, namespace, matches)
        with self.lock:
            if resource_version in (None, "", "0"):
                items, _ = self.list(rt, namespace, matches)
                for item in items:
                    watcher.push(("ADDED", item))
            else:
                try:
                    since = int(resource_version)
                except ValueError as exc:
                    raise errors.bad_request(
                        f"invalid resource version {resource_version!r}"
                    ) from exc
                if since < self._oldest:
                    raise errors.gone(f"too old resource version: {since} ({self._oldest})")
                for change in self._history:
                    if change.rv > since:
                        watcher.offer(change)
            self._watchers.add(watcher)
            self.changed.notify_all()
        return watcher

    @property
    def watches_open(self) -> int:
        with self.lock:
            return len(self._watchers)

    def unwatch(self, watcher: Watcher) -> None:
        with self.lock:
            self._watchers.discard(watcher)

    def close_watches(self) -> None:
        with self.lock:
            for watcher in self._watchers:
                watcher.close()
            self._watchers.clear()

    def compact(self) -> None:
        with self.lock:
            self._rv += 1
            self._oldest = self._rv
            self._history.clear()
