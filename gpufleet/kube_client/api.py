"""The Kubernetes API as the scheduler uses it: plain dicts over the official client.

Owns the calls (list, watch, binding, eviction, status patches, events, leases, custom-object
status, any object by path for the writer, optionally as an impersonated identity) and the
client-side rate limit every call passes through. Objects stay the JSON dicts
the API server sends (``_preload_content=False``): the readers of ``gpufleet.io`` take dicts,
and skipping the client's model classes is several times faster on 10,000-pod lists. The POSTs
made once per pod (Binding, Eviction, Event) skip the client altogether: :class:`JsonPoster`
sends them on a kept-alive ``http.client`` connection of each thread's own, with the client's
TLS settings and credentials, at about half the CPU per call and with no connection-pool lock
for the binder threads to queue on (the Python process, not the API server, is what limits
binding). It does not cache or decide anything: informers, the backend and the reporters do;
it sends a POST again only as :mod:`.retry_policy` says (on a kept-alive connection the server
closed meanwhile; a Binding or an Eviction after a lost answer too, whose repeat is read for
what it says of the first). The types and helpers that need no client (errors,
:class:`Resource`, :class:`RateLimiter`, timestamps) live in :mod:`.api_types` and are
re-exported here. The node agent uses :mod:`.light_api` instead (its memory budget).

Every call has a deadline: :data:`CONNECT_TIMEOUT_S` to connect and, by default,
:data:`CALL_TIMEOUT_S` for each read of its answer (a caller with a deadline of its own, the
lease renewal, passes a shorter one); a watch waits :data:`WATCH_GRACE_S` past its
``timeoutSeconds``. Connections carry TCP keepalive, so a half-open one is found, and urllib3
does not retry (each caller retries as it sees fit: an informer with back-off, the lease at
its next round), which would multiply a deadline and log a warning per attempt. Every call's
outcome goes to the client's :class:`~gpufleet.kube_client.reachability.Reachability`.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import urllib3.exceptions
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from urllib3.connection import HTTPConnection as Urllib3Connection
from urllib3.util.retry import Retry

from gpufleet.kube_client.api_types import (
    AUTOSCALING_WATCHED,
    CALL_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    COSCHEDULING_POD_GROUPS,
    KEEPALIVE_OPTIONS,
    NODES,
    POD_GROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    RESOURCE_QUOTAS,
    VOLCANO_POD_GROUPS,
    WATCH_GRACE_S,
    WATCH_TIMEOUT_S,
    WATCHED,
    ApiError,
    FencedError,
    ForbiddenApiError,
    Impersonation,
    KeptAliveConnection,
    NamedTLSConnection,
    Obj,
    RateLimiter,
    Resource,
    WatchExpiredError,
    micro_time,
    rfc3339,
)
from gpufleet.kube_client.api_types import quote_segment as _quote
from gpufleet.kube_client.api_types import status_error as _status_error
from gpufleet.kube_client.reachability import Reachability
from gpufleet.kube_client.retry_policy import (
    AnswerLostError,
    repeat_of,
    send_under_policy,
    settle_binding,
    settle_eviction,
)

#: The plain types live in api_types (the node agent imports them without the client);
#: they stay importable from here.
__all__ = [
    "AUTOSCALING_WATCHED",
    "CALL_TIMEOUT_S",
    "CONNECT_TIMEOUT_S",
    "COSCHEDULING_POD_GROUPS",
    "NODES",
    "PODS",
    "POD_GROUPS",
    "PRIORITY_CLASSES",
    "QUEUES",
    "RESOURCE_QUOTAS",
    "UNREACHABLE",
    "VOLCANO_POD_GROUPS",
    "WATCHED",
    "WATCH_GRACE_S",
    "WATCH_TIMEOUT_S",
    "ApiError",
    "FencedError",
    "ForbiddenApiError",
    "Impersonation",
    "JsonPoster",
    "KubeApi",
    "Obj",
    "RateLimiter",
    "Reachability",
    "Resource",
    "WatchExpiredError",
    "load_client",
    "micro_time",
    "rfc3339",
]

#: Asked just before a write is sent; False: it is not sent (:class:`FencedError`).
Fence = Callable[[], bool]

#: What urllib3 raises when the server cannot be reached or a stream breaks (most are not
#: OSErrors: MaxRetryError, ProtocolError).
UNREACHABLE = (OSError, urllib3.exceptions.HTTPError)


class JsonPoster:
    """POSTs of JSON bodies on one kept-alive connection per calling thread; see the module
    docstring. Built with :meth:`for_configuration`, which declines (None) what it does not
    speak: a proxy."""

    TIMEOUT_S = 60.0

    def __init__(self, configuration: k8s.Configuration, user_agent: str) -> None:
        url = urllib.parse.urlsplit(configuration.host)
        self._https = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self._configuration = configuration
        self._user_agent = user_agent
        self._context = _ssl_context(configuration) if self._https else None
        self._server_name = configuration.tls_server_name or None
        self._local = threading.local()

    @classmethod
    def for_configuration(cls, api_client: k8s.ApiClient) -> JsonPoster | None:
        configuration = api_client.configuration
        if configuration.proxy:
            return None
        return cls(configuration, str(api_client.user_agent))

    def post(self, path: str, body: Obj, settle: Callable[[ApiError], Any] | None = None) -> Any:
        """The answer's JSON; raises :class:`ApiError` on an error status or no answer. Sent
        again as :mod:`.retry_policy` says; ``settle`` reads an error answer to a repeat."""
        data = json.dumps(body).encode()
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": self._user_agent,
        }
        for auth in self._configuration.auth_settings().values():
            if auth["in"] == "header" and auth["value"]:
                headers[auth["key"]] = auth["value"]
        target = self._prefix + path

        def send_once() -> Any:
            connection, reused = self._connection()
            try:
                connection.request("POST", target, data, headers)
                response = connection.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                self._local.connection = None
                raise AnswerLostError(error, reused, str(error)) from None
            if response.will_close:
                self._local.connection = None
            if not 200 <= response.status < 300:
                raise _status_error(response.status, response.reason, payload)
            return json.loads(payload) if payload else None

        return send_under_policy(repeat_of("POST", path), send_once, settle)

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it has carried a request before."""
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is not None:
            return connection, True
        if self._context is not None:
            connection = NamedTLSConnection(
                self._host, self._port, self._context, self._server_name, self.TIMEOUT_S
            )
        else:
            connection = KeptAliveConnection(self._host, self._port, timeout=self.TIMEOUT_S)
        self._local.connection = connection
        return connection, False


def _ssl_context(configuration: k8s.Configuration) -> ssl.SSLContext:
    """What urllib3 would set up for the client: the cluster's CA (or no verification when the
    kubeconfig says so), the client certificate, the host name check."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    return context


def load_client(kubeconfig: str | None, pool_size: int = 32) -> k8s.ApiClient:
    """An API client from a kubeconfig file, or the in-cluster service account when None."""
    configuration = k8s.Configuration()
    if kubeconfig is None:
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    return k8s.ApiClient(configuration)


def _harden_pool(api_client: k8s.ApiClient) -> None:
    """The client's connection pool without urllib3's retries (see the module docstring) and
    with TCP keepalive: set on the pool manager, whose pools take them as they are made (the
    official client's configuration offers neither socket options nor a retry per call)."""
    pool_manager = api_client.rest_client.pool_manager
    pool_manager.connection_pool_kw["retries"] = Retry(total=False)
    options = list(Urllib3Connection.default_socket_options) + list(KEEPALIVE_OPTIONS)
    pool_manager.connection_pool_kw["socket_options"] = options
    pool_manager.clear()  # pools made before now: made again with these


def _deadline(read_s: float) -> tuple[float, float]:
    """``_request_timeout`` for a call answered within ``read_s`` a read."""
    return (min(CONNECT_TIMEOUT_S, read_s), read_s)


_HTTP_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch"}

#: The verb of a call, from the generated client's method name (its first word).
_VERBS = {"read": "get", "replace": "update"}


def _verb(method: Callable[..., Any]) -> str:
    first = getattr(method, "__name__", "call").split("_", 1)[0]
    return _VERBS.get(first, first)


class KubeApi:
    """See the module docstring. Thread-safe: binders, informers and reporters share one."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        limiter: RateLimiter | None = None,
        reachability: Reachability | None = None,
        timeout_s: float = CALL_TIMEOUT_S,
    ) -> None:
        """``timeout_s``: each call's deadline for a read of its answer, unless it passes its
        own."""
        _harden_pool(api_client)
        self.client = api_client
        self.reachability = reachability or Reachability()
        self.timeout_s = timeout_s
        self.core = k8s.CoreV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.scheduling = k8s.SchedulingV1Api(api_client)
        self.coordination = k8s.CoordinationV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.autoscaling = k8s.AutoscalingV2Api(api_client)
        self.limiter = limiter or RateLimiter(qps=500, burst=1000)
        self.poster = JsonPoster.for_configuration(api_client)

    def with_own_limit(self) -> KubeApi:
        """The same client behind a rate limit of its own, at the same qps and burst:
        kube-scheduler sends its Events through a second clientset so, so that telling users
        never slows binding down."""
        limiter = RateLimiter(self.limiter.qps, self.limiter.burst)
        return KubeApi(self.client, limiter, self.reachability, self.timeout_s)

    # ----------------------------------------------------------------------------- plumbing
    def _call(
        self,
        method: Callable[..., Any],
        *args: Any,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """``method`` called with ``args``, ``kwargs`` and a deadline: ``timeout_s`` for each
        read of the answer (None: the client's own)."""
        self.limiter.acquire()
        return self._call_unlimited(method, *args, timeout_s=timeout_s, **kwargs)

    def _call_unlimited(
        self,
        method: Callable[..., Any],
        *args: Any,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """:meth:`_call` past the rate limit (its caller waited for it)."""
        deadline = _deadline(self.timeout_s if timeout_s is None else timeout_s)
        try:
            try:
                response = method(
                    *args, _preload_content=False, _request_timeout=deadline, **kwargs
                )
                data = response.data
            except ApiException as error:
                raise _api_error(error) from None
            except UNREACHABLE as error:
                raise ApiError(0, "Unreachable", str(error)) from None
        except ApiError as error:
            self.reachability.failed(_verb(method), error)
            raise
        self.reachability.answered()
        return json.loads(data) if data else None

    def _post(
        self,
        path: str,
        body: Obj,
        method: Callable[..., Any],
        *args: Any,
        fence: Fence | None = None,
        settle: Callable[[ApiError], Any] | None = None,
    ) -> Any:
        """POST ``body`` to ``path`` through the poster, or through the client's ``method``
        (called with ``args`` and the body) where there is no poster. ``fence`` is asked after
        the rate limit's wait, the last moment before the request goes out; when it says no,
        nothing is sent and :class:`FencedError` raised. ``settle``: see
        :meth:`JsonPoster.post` (the client, without a poster, sends nothing again)."""
        if self.poster is None:
            if fence is None:
                return self._call(method, *args, body)
            self.limiter.acquire()
            if not fence():
                raise FencedError(path)
            return self._call_unlimited(method, *args, body)
        self.limiter.acquire()
        if fence is not None and not fence():
            raise FencedError(path)
        try:
            answer = self.poster.post(path, body, settle)
        except ApiError as error:
            self.reachability.failed("create", error)
            raise
        self.reachability.answered()
        return answer

    def _list_method(self, resource: Resource) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        if resource.group in (
            "gpufleet.dev", "scheduling.x-k8s.io", "scheduling.volcano.sh", "keda.sh"
        ):  # fmt: skip
            # Listed across all namespaces for namespaced kinds too.
            args = (resource.group, resource.version, resource.plural)
            return self.custom.list_cluster_custom_object, args
        methods: dict[str, Callable[..., Any]] = {
            "Node": self.core.list_node,
            "Pod": self.core.list_pod_for_all_namespaces,
            "ResourceQuota": self.core.list_resource_quota_for_all_namespaces,
            "PriorityClass": self.scheduling.list_priority_class,
            "Deployment": self.apps.list_deployment_for_all_namespaces,
            "StatefulSet": self.apps.list_stateful_set_for_all_namespaces,
            "ReplicaSet": self.apps.list_replica_set_for_all_namespaces,
            "HorizontalPodAutoscaler": (
                self.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces
            ),
        }
        return methods[resource.kind], ()

    # ----------------------------------------------------------------------------- reading
    def list(self, resource: Resource, resource_version: str = "") -> tuple[list[Obj], str]:
        """Every object of a kind, each with kind and apiVersion set, and the list's
        resourceVersion to watch from. ``resource_version`` "0" takes what the API server's
        watch cache holds (fast, possibly a moment old; the watch that follows catches up),
        "" a consistent read from etcd."""
        method, args = self._list_method(resource)
        extra: dict[str, Any] = {"resource_version": resource_version} if resource_version else {}
        if resource.field_selector:
            extra["field_selector"] = resource.field_selector
        listing = self._call(method, *args, **extra)
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
        """(type, object) changes after ``resource_version`` until the server ends the stream;
        raises :class:`WatchExpiredError` on 410 Gone, :class:`ApiError` (status 0) when the
        server cannot be reached or the stream breaks. ``on_open`` is given the streamed
        response (whose ``shutdown`` ends the watch from another thread)."""
        method, args = self._list_method(resource)
        extra = {"field_selector": resource.field_selector} if resource.field_selector else {}
        self.limiter.acquire()
        try:
            try:
                response = method(
                    *args,
                    **extra,
                    watch=True,
                    resource_version=resource_version,
                    timeout_seconds=timeout_s,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                    _request_timeout=_deadline(timeout_s + WATCH_GRACE_S),
                )
            except ApiException as error:
                if error.status == 410:
                    raise WatchExpiredError(str(error.reason)) from None
                raise _api_error(error) from None
            except UNREACHABLE as error:
                raise ApiError(0, "Unreachable", str(error)) from None
        except ApiError as error:
            self.reachability.failed("watch", error)
            raise
        self.reachability.answered()
        if on_open is not None:
            on_open(response)
        try:
            for line in _lines(response):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpiredError(str(obj.get("message", "")))
                    raise ApiError(int(obj.get("code") or 0), str(obj.get("reason", "")), str(obj))
                obj.setdefault("kind", resource.kind)
                obj.setdefault("apiVersion", resource.api_version)
                yield str(kind), obj
        except UNREACHABLE as error:
            broke = ApiError(0, "Unreachable", f"watch of {resource.plural} broke: {error}")
            self.reachability.failed("watch", broke)
            raise broke from None
        finally:
            response.release_conn()

    # ----------------------------------------------------------------------------- any object
    def request(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        content_type: str = "application/json",
        impersonate: Impersonation | None = None,
    ) -> Obj | None:
        """One request of any object at ``path`` (the writer's create, get, patch, replace,
        delete), with a JSON ``body``; the answer's JSON. With ``impersonate`` it is sent as
        that identity (:class:`Impersonation`: the API server authorizes and admits it as if
        that user had sent it); without, as this client's own, as every other call here."""
        headers = urllib3.HTTPHeaderDict(self.client.default_headers)
        headers["Content-Type"] = content_type
        headers["Accept"] = "application/json"
        self.client.update_params_for_auth(headers, [], ["BearerToken"])
        # A header of its own per group: not the client's call_api, whose headers are a dict.
        for name, value in impersonate.headers() if impersonate is not None else ():
            headers.add(name, value)
        url = self.client.configuration.host + path
        self.limiter.acquire()
        try:
            try:
                response = self.client.rest_client.request(
                    method,
                    url,
                    headers=headers,
                    body=body,
                    _preload_content=False,
                    _request_timeout=_deadline(self.timeout_s),
                )
                data = response.data
            except ApiException as error:
                raise _api_error(error) from None
            except UNREACHABLE as error:
                raise ApiError(0, "Unreachable", str(error)) from None
        except ApiError as error:
            self.reachability.failed(_HTTP_VERBS.get(method.upper(), method.lower()), error)
            raise
        self.reachability.answered()
        found: Obj | None = json.loads(data) if data else None
        return found

    # ----------------------------------------------------------------------------- pods
    def bind(
        self,
        namespace: str,
        name: str,
        node: str,
        annotations: Mapping[str, str],
        fence: Fence | None = None,
    ) -> None:
        """Bind through the Binding subresource; the API server copies the binding's
        annotations onto the pod in the same write. ``fence``: see :meth:`_post`. Sent again
        after a lost answer; a 409 to the repeat is a success when the pod is bound to
        ``node``, a 409 Conflict naming the node when to another (:mod:`.retry_policy`)."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{_quote(namespace)}/pods/{_quote(name)}/binding"

        def settle(error: ApiError) -> None:
            settle_binding(error, node, lambda: self.get_pod(namespace, name))

        self._post(
            path,
            body,
            self.core.create_namespaced_pod_binding,
            name,
            namespace,
            fence=fence,
            settle=settle,
        )

    def evict(self, namespace: str, name: str, uid: str = "", fence: Fence | None = None) -> None:
        """Evict through the Eviction API (PodDisruptionBudgets apply: 429 when one forbids).
        ``uid``: only the pod of that UID (a precondition the API server checks: another pod
        of the same name is refused with 409). ``fence``: see :meth:`_post`. Sent again after a
        lost answer; a 404 to the repeat (the first removed the pod) is a success."""
        body: Obj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if uid:
            body["deleteOptions"] = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "preconditions": {"uid": uid},
            }
        path = f"/api/v1/namespaces/{_quote(namespace)}/pods/{_quote(name)}/eviction"
        self._post(
            path,
            body,
            self.core.create_namespaced_pod_eviction,
            name,
            namespace,
            fence=fence,
            settle=settle_eviction,
        )

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        """The pod as etcd holds it now (a quorum read), or None when there is none."""
        try:
            pod: Obj = self._call(self.core.read_namespaced_pod, name, namespace)
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return pod

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> None:
        self._call(self.core.patch_namespaced_pod_status, name, namespace, patch)

    # ----------------------------------------------------------------------------- nodes
    def get_node(self, name: str) -> Obj:
        node: Obj = self._call(self.core.read_node, name)
        return node

    def patch_node(self, name: str, patch: Obj) -> Obj:
        """A strategic merge patch of the Node (metadata: its labels and annotations)."""
        node: Obj = self._call(self.core.patch_node, name, patch)
        return node

    def patch_node_status(self, name: str, patch: Obj) -> Obj:
        """A strategic merge patch of the Node's status (conditions merge by type)."""
        node: Obj = self._call(self.core.patch_node_status, name, patch)
        return node

    # ----------------------------------------------------------------------------- events
    def create_event(self, namespace: str, body: Obj) -> Obj:
        path = f"/api/v1/namespaces/{_quote(namespace)}/events"
        result: Obj = self._post(path, body, self.core.create_namespaced_event, namespace)
        return result

    def patch_event(self, namespace: str, name: str, patch: Obj) -> None:
        self._call(self.core.patch_namespaced_event, name, namespace, patch)

    # ----------------------------------------------------------------------------- leases
    # ``timeout_s``: the leader elector's deadline (what is left of its renew deadline).
    def get_lease(self, namespace: str, name: str, timeout_s: float | None = None) -> Obj | None:
        try:
            lease: Obj = self._call(
                self.coordination.read_namespaced_lease, name, namespace, timeout_s=timeout_s
            )
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return lease

    def create_lease(self, namespace: str, body: Obj, timeout_s: float | None = None) -> Obj:
        result: Obj = self._call(
            self.coordination.create_namespaced_lease, namespace, body, timeout_s=timeout_s
        )
        return result

    def replace_lease(
        self, namespace: str, name: str, body: Obj, timeout_s: float | None = None
    ) -> Obj:
        result: Obj = self._call(
            self.coordination.replace_namespaced_lease, name, namespace, body, timeout_s=timeout_s
        )
        return result

    # ----------------------------------------------------------------------------- custom
    def patch_custom_status(
        self, resource: Resource, name: str, namespace: str | None, patch: Obj
    ) -> None:
        """Merge-patch the status subresource of one of our objects."""
        if resource.namespaced:
            assert namespace is not None
            self._call(
                self.custom.patch_namespaced_custom_object_status,
                resource.group, resource.version, namespace, resource.plural, name, patch,
            )  # fmt: skip
        else:
            self._call(
                self.custom.patch_cluster_custom_object_status,
                resource.group, resource.version, resource.plural, name, patch,
            )  # fmt: skip


def _api_error(error: ApiException) -> ApiError:
    return _status_error(int(error.status or 0), str(error.reason or ""), error.body)


def _lines(response: Any) -> Iterator[bytes]:
    """Whole lines of a streamed response (a chunk may end mid-line)."""
    rest = b""
    for chunk in response.stream(amt=None, decode_content=False):
        rest += chunk
        *lines, rest = rest.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if rest.strip():
        yield rest
