"""Verbs: one parsed request → a JSON answer or an open watch, free of any HTTP plumbing.

GET (get, list, ``watch=true``), POST (create; pods' ``binding`` and ``eviction``), PUT
(update, ``/status``), PATCH (merge, strategic merge, JSON patch; ``/status``) and DELETE;
``/scale`` of the apps kinds (GET, PUT, PATCH: :mod:`.scale`).
Collection deletes, dry runs and server-side apply are not served.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.kube_api import errors, pods, scale
from tests.fakes.kube_api.patch import apply_patch
from tests.fakes.kube_api.routes import Route, resolve
from tests.fakes.kube_api.selectors import parse_field_selector, parse_label_selector
from tests.fakes.kube_api.store import Obj, Store, Watcher

_BINDINGS = re.compile(r"^/api/v1/namespaces/([^/]+)/bindings/?$")
VERSION = {"major": "1", "minor": "33", "gitVersion": "v1.33.0-gpufleet-fake", "platform": "fake"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    body: Any = None
    content_type: str = "application/json"


@dataclass(frozen=True)
class Response:
    code: int
    body: Obj


@dataclass(frozen=True)
class WatchStream:
    """An open watch (``watcher``), or the single ERROR event to send (``error``)."""

    watcher: Watcher | None
    error: Obj | None
    timeout: float | None


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _body(request: Request) -> Obj:
    if not isinstance(request.body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    return request.body


def _check_type(route: Route, body: Obj) -> None:
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version not in (None, route.rt.api_version):
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({route.rt.api_version})"
        )
    if kind not in (None, route.rt.kind):
        raise errors.bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({route.rt.kind})"
        )


def _optional_int(value: Any) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise errors.bad_request(f"invalid integer {value!r}") from exc


def handle(store: Store, request: Request) -> Response | WatchStream:
    """Answer ``request``; raises :class:`~tests.fakes.kube_api.errors.ApiError`."""
    if request.path.rstrip("/") == "/version" and request.method == "GET":
        return Response(200, dict(VERSION))
    if request.method == "POST" and (m := _BINDINGS.match(request.path)):
        return Response(201, pods.bind(store, m.group(1), None, _body(request)))
    with store.lock:
        route = resolve(store.registry, request.path)
    if route is None:
        raise errors.unknown_path()
    allowed = {"status"} if route.rt.status_subresource else set()
    if route.rt.key == pods.PODS.key:
        allowed |= {"binding", "eviction"}
    if route.rt.key in scale.SCALED:
        allowed |= {"scale"}
    if route.subresource is not None and route.subresource not in allowed:
        raise errors.unknown_path()
    verb = {
        "GET": _get,
        "POST": _post,
        "PUT": _put,
        "PATCH": _patch,
        "DELETE": _delete,
    }.get(request.method)
    if verb is None:
        raise errors.ApiError(405, f"method {request.method} not allowed", "MethodNotAllowed")
    return verb(store, route, request)


def _not_allowed() -> errors.ApiError:
    return errors.ApiError(
        405, "the server does not allow this method on the requested resource", "MethodNotAllowed"
    )


def _get(store: Store, route: Route, request: Request) -> Response | WatchStream:
    if route.subresource == "scale" and route.name:
        return Response(200, scale.get_scale(store, route.rt, route.namespace, route.name))
    if route.name is not None:
        return Response(200, store.get(route.rt, route.namespace, route.name))
    if route.subresource is not None:
        raise errors.unknown_path()
    query = request.query
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"), route.rt.key)

    def matches(obj: Obj) -> bool:
        return labels(obj) and fields(obj)

    if _flag(query.get("watch")):
        timeout = _optional_int(query.get("timeoutSeconds"))
        try:
            watcher = store.watch(route.rt, route.namespace, query.get("resourceVersion"), matches)
        except errors.ApiError as exc:
            return WatchStream(None, exc.body(), None)
        return WatchStream(watcher, None, float(timeout) if timeout is not None else None)
    items, rv = store.list(route.rt, route.namespace, matches)
    return Response(
        200,
        {
            "kind": route.rt.list_kind,
            "apiVersion": route.rt.api_version,
            "metadata": {"resourceVersion": rv},
            "items": items,
        },
    )


def _post(store: Store, route: Route, request: Request) -> Response:
    body = _body(request)
    namespace = route.namespace or ""
    if route.subresource == "binding" and route.name:
        return Response(201, pods.bind(store, namespace, route.name, body))
    if route.subresource == "eviction" and route.name:
        return Response(201, pods.evict(store, namespace, route.name, body))
    if route.name is not None or (route.rt.namespaced and route.namespace is None):
        raise _not_allowed()
    _check_type(route, body)
    return Response(201, store.create(route.rt, body, route.namespace, as_client=True))


def _put(store: Store, route: Route, request: Request) -> Response:
    if route.subresource == "scale" and route.name:
        written = scale.write_scale(
            store, route.rt, route.namespace, route.name, _body(request), None
        )
        return Response(200, written)
    if route.name is None or route.subresource not in (None, "status"):
        raise _not_allowed()
    body = _body(request)
    _check_type(route, body)
    obj = store.update(
        route.rt, body, route.namespace, route.name, route.subresource, as_client=True
    )
    return Response(200, obj)


def _patch(store: Store, route: Route, request: Request) -> Response:
    if route.subresource == "scale" and route.name:
        written = scale.write_scale(
            store, route.rt, route.namespace, route.name, request.body, request.content_type
        )
        return Response(200, written)
    if route.name is None or route.subresource not in (None, "status"):
        raise _not_allowed()
    with store.lock:
        old = store.get(route.rt, route.namespace, route.name)
        patched = apply_patch(old, request.body, request.content_type, route.rt.custom)
        if not isinstance(patched, dict):
            raise errors.ApiError(422, "the patched object is not a JSON object", "Invalid")
        meta = patched.setdefault("metadata", {})
        if meta.get("resourceVersion") not in (None, "", old["metadata"]["resourceVersion"]):
            raise errors.conflict(route.rt.plural, route.name, route.rt.group)
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        _check_type(route, patched)
        obj = store.update(
            route.rt, patched, route.namespace, route.name, route.subresource, as_client=True
        )
    return Response(200, obj)


def _delete(store: Store, route: Route, request: Request) -> Response:
    if route.name is None or route.subresource is not None:
        raise _not_allowed()
    options = request.body if isinstance(request.body, dict) else {}
    grace = _optional_int(request.query.get("gracePeriodSeconds"))
    if grace is None:
        grace = _optional_int(options.get("gracePeriodSeconds"))
    with store.lock:
        current = store.get(route.rt, route.namespace, route.name)
        preconditions = options.get("preconditions") or {}
        for key in ("uid", "resourceVersion"):
            wanted = preconditions.get(key)
            if wanted not in (None, "", current["metadata"].get(key)):
                raise errors.conflict(
                    route.rt.plural,
                    route.name,
                    route.rt.group,
                    f"Precondition failed: {key} in precondition: {wanted}, "
                    f"{key} in object meta: {current['metadata'].get(key)}",
                )
        if route.rt.key == pods.PODS.key:
            obj = pods.delete_pod(store, route.namespace or "", route.name, grace)
        else:
            obj = store.delete(route.rt, route.namespace, route.name)
    return Response(200, obj)
