"""The Kubernetes API as the node agent uses it: the few calls it makes, over the standard
library's ``http.client``.

Why it exists: ``gpufleet agent`` runs on every GPU node and must stay under 80 MB resident
(issue 13), and importing the official ``kubernetes`` package alone costs about 50 MiB (its
``__init__`` loads some 700 model classes, and ``kubernetes.config`` loads the client too).
The agent needs seven calls, so it speaks them itself; the scheduler, which makes many more,
keeps the official client (:class:`~gpufleet.kube_client.api.KubeApi`). It speaks them with
``http.client`` and ``ssl`` rather than an HTTP library for the same reason: ``httpx`` costs
~9 MiB more resident than the standard library, and one kept-alive HTTP/1.1 connection per
thread is all the agent needs.

Owns :class:`LightKubeApi`: exactly :class:`~gpufleet.kube_client.api_types.NodeAgentCalls`
(list and watch of a kind, with its field selector; get, patch and status-patch of a Node;
create and patch of an Event) with KubeApi's signatures and semantics: objects are the API
server's JSON dicts, listed items get ``kind`` and ``apiVersion``, patches are strategic merge
patches, every call passes the :class:`~gpufleet.kube_client.api_types.RateLimiter`, an
error answer is an :class:`~gpufleet.kube_client.api_types.ApiError` with the ``Status``
message (status 0: no answer), and a watch raises
:class:`~gpufleet.kube_client.api_types.WatchExpiredError` on 410 Gone, as an HTTP status or
as an ERROR event. Calls go on one kept-alive connection per calling thread, sent again once
on a new one when the server had closed the old one meanwhile; a watch has a connection of its
own. Where the server is and the credentials are :mod:`.light_config`'s. It sends nothing
again but as :mod:`.retry_policy` says, and does not cache or decide anything: the informer and
the node agent's modules do.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from gpufleet.kube_client.api_types import (
    WATCH_GRACE_S,
    WATCH_TIMEOUT_S,
    ApiError,
    KeptAliveConnection,
    NamedTLSConnection,
    Obj,
    RateLimiter,
    Resource,
    WatchExpiredError,
    quote_segment,
    status_error,
)
from gpufleet.kube_client.light_config import (
    ClusterAccess,
    KubeconfigError,
    in_cluster,
    load_kubeconfig,
)
from gpufleet.kube_client.reachability import Reachability
from gpufleet.kube_client.retry_policy import AnswerLostError, repeat_of, send_under_policy

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
USER_AGENT = "gpufleet-agent"


class WatchHandle:
    """What a watch's ``on_open`` is given: :meth:`shutdown` ends the stream from another
    thread at once (a blocked read wakes up), as urllib3's ``shutdown`` does for KubeApi."""

    def __init__(self, connection: http.client.HTTPConnection) -> None:
        self.connection = connection

    def shutdown(self) -> None:
        sock = self.connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def resource_path(resource: Resource) -> str:
    """The collection of a kind across all namespaces: ``/api/v1/pods``,
    ``/apis/gpufleet.dev/v1alpha1/queues``."""
    prefix = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    return f"{prefix}/{resource.plural}"


class LightKubeApi:
    """See the module docstring. Thread-safe: the pod watch, the event recorder and the
    agent's main loop share one (each thread has its own connection)."""

    TIMEOUT_S = 60.0
    WATCH_GRACE_S = WATCH_GRACE_S

    def __init__(self, access: ClusterAccess, limiter: RateLimiter | None = None) -> None:
        self.access = access
        self.limiter = limiter or RateLimiter(qps=50, burst=100)
        self.reachability = Reachability()
        url = urllib.parse.urlsplit(access.server)
        if url.scheme not in ("http", "https"):
            message = f"{access.source}: server {access.server!r} is not an http:// or https:// URL"
            raise KubeconfigError(message)
        self._https = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")  # a server behind a path (a proxy, Rancher)
        self._context = access.ssl_context() if self._https else None
        self._local = threading.local()
        self._open: weakref.WeakSet[http.client.HTTPConnection] = weakref.WeakSet()
        self._open_lock = threading.Lock()

    @classmethod
    def connect(cls, kubeconfig: str | None, limiter: RateLimiter | None = None) -> LightKubeApi:
        """From a kubeconfig file, or the pod's service account when None; raises
        :class:`~gpufleet.kube_client.light_config.KubeconfigError`."""
        access = in_cluster() if kubeconfig is None else load_kubeconfig(kubeconfig)
        return cls(access, limiter)

    def close(self) -> None:
        """Closes every connection open now (the threads' and the watches'); a later call
        opens a new one."""
        with self._open_lock:
            connections = list(self._open)
            self._open.clear()
        for connection in connections:
            connection.close()

    # ----------------------------------------------------------------------------- plumbing
    def _new_connection(self, timeout: float) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection
        if self._context is not None:
            server_name = self.access.tls_server_name
            connection = NamedTLSConnection(
                self._host, self._port, self._context, server_name, timeout
            )
        else:
            connection = KeptAliveConnection(self._host, self._port, timeout=timeout)
        with self._open_lock:
            self._open.add(connection)
        return connection

    def _thread_connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it has carried a request before."""
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is not None:
            with self._open_lock:
                if connection in self._open:  # not closed by close() meanwhile
                    return connection, True
        connection = self._new_connection(self.TIMEOUT_S)
        self._local.connection = connection
        return connection, False

    def _drop_thread_connection(self, connection: http.client.HTTPConnection) -> None:
        connection.close()
        self._local.connection = None
        with self._open_lock:
            self._open.discard(connection)

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        authorization = self.access.authorization()
        if authorization:
            headers["Authorization"] = authorization
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _target(self, path: str, params: dict[str, str] | None) -> str:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return f"{self._prefix}{path}{query}"

    def _call(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """The answer's JSON; :class:`ApiError` on an error status or no answer."""
        try:
            answer = self._send(method, path, body, params, content_type)
        except ApiError as error:
            self.reachability.failed(method.lower(), error)
            raise
        self.reachability.answered()
        return answer

    def _send(
        self,
        method: str,
        path: str,
        body: Obj | None,
        params: dict[str, str] | None,
        content_type: str,
    ) -> Any:
        self.limiter.acquire()
        data = json.dumps(body).encode() if body is not None else None
        headers = self._headers(content_type if body is not None else None)
        target = self._target(path, params)

        def send_once() -> Any:
            connection, reused = self._thread_connection()
            try:
                connection.request(method, target, data, headers)
                response = connection.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException) as error:
                self._drop_thread_connection(connection)
                raise AnswerLostError(
                    error, reused, f"{method} {path}: {_described(error)}"
                ) from None
            if response.will_close:
                self._drop_thread_connection(connection)
            if not 200 <= response.status < 300:
                raise status_error(response.status, response.reason, payload)
            return json.loads(payload) if payload else None

        return send_under_policy(repeat_of(method, path), send_once)

    # ----------------------------------------------------------------------------- reading
    def list(self, resource: Resource, resource_version: str = "") -> tuple[list[Obj], str]:
        """As :meth:`KubeApi.list <gpufleet.kube_client.api.KubeApi.list>`: every object of
        a kind (across namespaces), kind and apiVersion set, and the list's resourceVersion.
        ``resource_version`` "0" reads the watch cache, "" etcd."""
        params: dict[str, str] = {}
        if resource_version:
            params["resourceVersion"] = resource_version
        if resource.field_selector:
            params["fieldSelector"] = resource.field_selector
        listing = self._call("GET", resource_path(resource), params=params)
        items: list[Obj] = listing.get("items") or []
        for item in items:
            item.setdefault("kind", resource.kind)
            item.setdefault("apiVersion", resource.api_version)
        return items, str(listing.get("metadata", {}).get("resourceVersion", ""))

    def watch(
        self,
        resource: Resource,
        resource_version: str,
        timeout_s: int = WATCH_TIMEOUT_S,
        on_open: Callable[[Any], None] | None = None,
    ) -> Iterator[tuple[str, Obj]]:
        """As :meth:`KubeApi.watch <gpufleet.kube_client.api.KubeApi.watch>`: (type,
        object) changes after ``resource_version`` (bookmarks included) until the server ends
        the stream; :class:`WatchExpiredError` on 410 Gone, :class:`ApiError` (status 0) when
        the server cannot be reached or the stream breaks. ``on_open`` is given a
        :class:`WatchHandle`."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_s),
            "allowWatchBookmarks": "true",
        }
        if resource.field_selector:
            params["fieldSelector"] = resource.field_selector
        target = self._target(resource_path(resource), params)
        self.limiter.acquire()
        connection = self._new_connection(self.TIMEOUT_S)
        try:
            try:
                connection.connect()
                assert connection.sock is not None
                connection.sock.settimeout(timeout_s + self.WATCH_GRACE_S)
                connection.request("GET", target, headers=self._headers())
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as error:
                message = f"watch of {resource.plural}: {_described(error)}"
                unreachable = ApiError(0, "Unreachable", message)
                self.reachability.failed("watch", unreachable)
                raise unreachable from None
            self.reachability.answered()
            if not 200 <= response.status < 300:
                body = _read_quietly(response)
                if response.status == 410:
                    raise WatchExpiredError(response.reason)
                refused = status_error(response.status, response.reason, body)
                self.reachability.failed("watch", refused)
                raise refused
            if on_open is not None:
                on_open(WatchHandle(connection))
            try:
                yield from _changes(response, resource)
            except (OSError, http.client.HTTPException) as error:
                message = f"watch of {resource.plural} broke: {_described(error)}"
                raise ApiError(0, "Unreachable", message) from None
        finally:
            connection.close()
            with self._open_lock:
                self._open.discard(connection)

    # ----------------------------------------------------------------------------- nodes
    def get_node(self, name: str) -> Obj:
        node: Obj = self._call("GET", f"/api/v1/nodes/{quote_segment(name)}")
        return node

    def patch_node(self, name: str, patch: Obj) -> Obj:
        """A strategic merge patch of the Node (metadata: its labels and annotations)."""
        path = f"/api/v1/nodes/{quote_segment(name)}"
        node: Obj = self._call("PATCH", path, patch, content_type=STRATEGIC_MERGE)
        return node

    def patch_node_status(self, name: str, patch: Obj) -> Obj:
        """A strategic merge patch of the Node's status (conditions merge by type)."""
        path = f"/api/v1/nodes/{quote_segment(name)}/status"
        node: Obj = self._call("PATCH", path, patch, content_type=STRATEGIC_MERGE)
        return node

    # ----------------------------------------------------------------------------- events
    def create_event(self, namespace: str, body: Obj) -> Obj:
        path = f"/api/v1/namespaces/{quote_segment(namespace)}/events"
        result: Obj = self._call("POST", path, body)
        return result

    def patch_event(self, namespace: str, name: str, patch: Obj) -> None:
        path = f"/api/v1/namespaces/{quote_segment(namespace)}/events/{quote_segment(name)}"
        self._call("PATCH", path, patch, content_type=STRATEGIC_MERGE)


def _described(error: Exception) -> str:
    """An I/O error for a message: some of http.client's have no text of their own."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _read_quietly(response: http.client.HTTPResponse) -> bytes:
    """An error answer's body, or nothing when it cannot be read."""
    try:
        return response.read()
    except (OSError, http.client.HTTPException):
        return b""


def _changes(response: http.client.HTTPResponse, resource: Resource) -> Iterator[tuple[str, Obj]]:
    """The watch events of a streamed answer, one JSON document a line (``readline`` reads
    across the chunks of a chunked answer)."""
    while line := response.readline():
        if not line.strip():
            continue
        event = json.loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpiredError(str(obj.get("message", "")))
            raise ApiError(int(obj.get("code") or 0), str(obj.get("reason", "")), str(obj))
        obj.setdefault("kind", resource.kind)
        obj.setdefault("apiVersion", resource.api_version)
        yield str(kind), obj
