"""The Kubernetes API as the node agent uses it: the few calls it makes, over httpx.

Why it exists: ``gpufleet agent`` runs on every GPU node and must stay under 80 MB resident
(issue 13), and importing the official ``kubernetes`` package alone costs about 50 MiB (its
``__init__`` loads some 700 model classes, and ``kubernetes.config`` loads the client too).
The agent needs seven calls, so it speaks them itself; the scheduler, which makes many more,
keeps the official client (:class:`~gpufleet.backends.kube.api.KubeApi`).

Owns :class:`LightKubeApi`: exactly :class:`~gpufleet.backends.kube.api_types.NodeAgentCalls`
(list and watch of a kind, with its field selector; get, patch and status-patch of a Node;
create and patch of an Event) with KubeApi's signatures and semantics: objects are the API
server's JSON dicts, listed items get ``kind`` and ``apiVersion``, patches are strategic merge
patches, every call passes the :class:`~gpufleet.backends.kube.api_types.RateLimiter`, an
error answer is an :class:`~gpufleet.backends.kube.api_types.ApiError` with the ``Status``
message (status 0: no answer), and a watch raises
:class:`~gpufleet.backends.kube.api_types.WatchExpiredError` on 410 Gone, as an HTTP status or
as an ERROR event. Where the server is and the credentials are :mod:`.light_config`'s. It does
not cache, retry or decide anything: the informer and the node agent's modules do.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from gpufleet.backends.kube.api_types import (
    WATCH_TIMEOUT_S,
    ApiError,
    Obj,
    RateLimiter,
    Resource,
    WatchExpiredError,
    quote_segment,
    status_error,
)
from gpufleet.backends.kube.light_config import ClusterAccess, in_cluster, load_kubeconfig

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
USER_AGENT = "gpufleet-agent"


class WatchHandle:
    """What a watch's ``on_open`` is given: :meth:`shutdown` ends the stream from another
    thread at once (a blocked read wakes up), as urllib3's ``shutdown`` does for KubeApi."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response

    def shutdown(self) -> None:
        stream = self.response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        else:
            self.response.close()


def resource_path(resource: Resource) -> str:
    """The collection of a kind across all namespaces: ``/api/v1/pods``,
    ``/apis/gpufleet.dev/v1alpha1/queues``."""
    prefix = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    return f"{prefix}/{resource.plural}"


class LightKubeApi:
    """See the module docstring. Thread-safe: the pod watch, the event recorder and the
    agent's main loop share one (httpx's pool hands each its own connection)."""

    TIMEOUT_S = 60.0
    #: How much longer than its ``timeoutSeconds`` a watch waits for its next line before it
    #: takes the connection for dead (the server ends the stream at ``timeoutSeconds``).
    WATCH_GRACE_S = 30.0

    def __init__(
        self,
        access: ClusterAccess,
        limiter: RateLimiter | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.access = access
        self.limiter = limiter or RateLimiter(qps=50, burst=100)
        secure = access.server.startswith("https:")
        self._extensions = (
            {"sni_hostname": access.tls_server_name} if secure and access.tls_server_name else {}
        )
        self.client = httpx.Client(
            base_url=access.server,
            verify=access.ssl_context() if secure else False,  # plain HTTP: nothing to verify
            timeout=self.TIMEOUT_S,
            headers={"Accept": "application/json", "User-Agent": USER_AGENT},
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=4),
            trust_env=False,  # as the official client: no proxy or CA from the environment
            transport=transport,
        )

    @classmethod
    def connect(cls, kubeconfig: str | None, limiter: RateLimiter | None = None) -> LightKubeApi:
        """From a kubeconfig file, or the pod's service account when None; raises
        :class:`~gpufleet.backends.kube.light_config.KubeconfigError`."""
        access = in_cluster() if kubeconfig is None else load_kubeconfig(kubeconfig)
        return cls(access, limiter)

    def close(self) -> None:
        self.client.close()

    # ----------------------------------------------------------------------------- plumbing
    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers: dict[str, str] = {}
        authorization = self.access.authorization()
        if authorization:
            headers["Authorization"] = authorization
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _call(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """The answer's JSON; :class:`ApiError` on an error status or no answer."""
        self.limiter.acquire()
        try:
            response = self.client.request(
                method,
                path,
                params=params,
                content=json.dumps(body).encode() if body is not None else None,
                headers=self._headers(content_type if body is not None else None),
                extensions=self._extensions,
            )
        except (httpx.HTTPError, OSError) as error:
            raise ApiError(0, "Unreachable", f"{method} {path}: {error}") from None
        if not response.is_success:
            raise status_error(response.status_code, response.reason_phrase, response.content)
        return response.json() if response.content else None

    # ----------------------------------------------------------------------------- reading
    def list(self, resource: Resource, resource_version: str = "") -> tuple[list[Obj], str]:
        """As :meth:`KubeApi.list <gpufleet.backends.kube.api.KubeApi.list>`: every object of
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
        """As :meth:`KubeApi.watch <gpufleet.backends.kube.api.KubeApi.watch>`: (type,
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
        request = self.client.build_request(
            "GET",
            resource_path(resource),
            params=params,
            headers=self._headers(),
            timeout=httpx.Timeout(self.TIMEOUT_S, read=timeout_s + self.WATCH_GRACE_S),
            extensions=self._extensions,
        )
        self.limiter.acquire()
        try:
            response = self.client.send(request, stream=True)
        except (httpx.HTTPError, OSError) as error:
            raise ApiError(0, "Unreachable", f"watch of {resource.plural}: {error}") from None
        try:
            if not response.is_success:
                body = _read_quietly(response)
                if response.status_code == 410:
                    raise WatchExpiredError(response.reason_phrase)
                raise status_error(response.status_code, response.reason_phrase, body)
            if on_open is not None:
                on_open(WatchHandle(response))
            yield from _changes(response, resource)
        except (httpx.HTTPError, OSError) as error:
            raise ApiError(0, "Unreachable", f"watch of {resource.plural} broke: {error}") from None
        finally:
            response.close()

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


def _read_quietly(response: httpx.Response) -> bytes:
    """An error answer's body, or nothing when it cannot be read."""
    try:
        return response.read()
    except (httpx.HTTPError, OSError):
        return b""


def _changes(response: httpx.Response, resource: Resource) -> Iterator[tuple[str, Obj]]:
    """The watch events of a streamed answer, one JSON document a line."""
    for line in response.iter_lines():
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
