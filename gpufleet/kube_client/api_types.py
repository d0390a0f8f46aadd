"""The Kubernetes API's plain vocabulary, with no Kubernetes client behind it.

Owns what both API clients share and what the code above them is written against: the object
type (:data:`Obj`, the API server's JSON as dicts), the errors (:class:`ApiError`,
:class:`WatchExpiredError`), the kinds listed and watched (:class:`Resource` and its
constants), the client-side rate limit (:class:`RateLimiter`), the API's timestamp formats, and
the two protocols the informer and the node agent's modules take: :class:`ListWatchApi` and
:class:`NodeAgentCalls`. The scheduler's client (:class:`~gpufleet.kube_client.api.KubeApi`,
over the official ``kubernetes`` package) and the node agent's
(:class:`~gpufleet.kube_client.light_api.LightKubeApi`, over the standard library's
``http.client``) both satisfy them.

It imports no client: importing the official one costs the node agent ~50 MiB of its 80 MiB
memory budget, and everything here is needed without it. It makes no calls.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gpufleet.kube_client.reachability import Reachability

Obj = dict[str, Any]

#: How long one watch request stays open before it is renewed from its last resourceVersion.
WATCH_TIMEOUT_S = 300
#: Every call's deadlines: to connect, and for each read of its answer (a server that
#: accepts and never answers, or a half-open connection, fails the call after this long).
CONNECT_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 30.0
#: How much longer than its ``timeoutSeconds`` a watch waits for its next line before it takes
#: the connection for dead (the server ends the stream at ``timeoutSeconds``; bookmarks and
#: changes come well within).
WATCH_GRACE_S = 30.0

#: TCP keepalive on every connection to the API server, as Go's dialer sets it for client-go
#: (probes after 30 s idle): a connection whose other end vanished without a FIN (a node or a
#: NAT gone, a half-open connection) is found within a minute, not after the kernel's hours.
KEEPALIVE_OPTIONS: tuple[tuple[int, int, int], ...] = (
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
    *(
        (socket.IPPROTO_TCP, option, value)
        for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
        if (option := getattr(socket, name, None)) is not None
    ),
)


def keep_alive(sock: socket.socket) -> None:
    """Turn :data:`KEEPALIVE_OPTIONS` on for a connected socket."""
    for level, option, value in KEEPALIVE_OPTIONS:
        sock.setsockopt(level, option, value)


class WatchExpiredError(Exception):
    """The resourceVersion a watch resumed from is too old (410 Gone): list again."""


class ApiError(Exception):
    """A call the API server refused; ``status`` is its HTTP code (0: no answer)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.message = message


class FencedError(Exception):
    """A write not sent: the check made just before it (this replica still leads, the turn that
    decided it is still the current one) said no."""


class ForbiddenApiError(ApiError):
    """A 403: the API server's RBAC or an admission plugin (Pod Security) refused the caller
    (for a write impersonating a tenant: the tenant)."""


def status_error(status: int, reason: str, body: str | bytes | None) -> ApiError:
    """An error answer: the message of its ``Status`` body where it has one."""
    message = reason
    if body:
        try:
            message = str(json.loads(body).get("message", message))
        except (ValueError, AttributeError):
            text = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
            message = text[:500]
    return (ForbiddenApiError if status == 403 else ApiError)(status, reason, message)


def quote_segment(segment: str) -> str:
    """One path segment (a name, a namespace), escaped."""
    return urllib.parse.quote(segment, safe="")


#: The headers of a request the API server authorizes as another identity (the caller needs
#: the ``impersonate`` verb on those users and groups): Kubernetes reads each group from a
#: header line of its own, never a comma-separated list.
IMPERSONATE_USER = "Impersonate-User"
IMPERSONATE_GROUP = "Impersonate-Group"


@dataclass(frozen=True, slots=True)
class Impersonation:
    """An identity to act as: the API server applies its RBAC and admission to the request as
    if ``user``, a member of ``groups``, had sent it (kubectl's ``--as`` and ``--as-group``)."""

    user: str
    groups: tuple[str, ...] = ()

    def headers(self) -> list[tuple[str, str]]:
        """The header lines, in order: the user's, then one per group."""
        return [(IMPERSONATE_USER, self.user)] + [(IMPERSONATE_GROUP, g) for g in self.groups]


@dataclass(frozen=True, slots=True)
class Resource:
    """A kind the scheduler lists and watches: core (group ""), built-in or custom.
    ``field_selector`` narrows its lists and watches (the node agent's pods of one node)."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    field_selector: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


NODES = Resource("Node", "", "v1", "nodes", False)
PODS = Resource("Pod", "", "v1", "pods", True)
PRIORITY_CLASSES = Resource("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", False)
RESOURCE_QUOTAS = Resource("ResourceQuota", "", "v1", "resourcequotas", True)
QUEUES = Resource("Queue", "gpufleet.dev", "v1alpha1", "queues", False)
POD_GROUPS = Resource("PodGroup", "gpufleet.dev", "v1alpha1", "podgroups", True)
COSCHEDULING_POD_GROUPS = Resource("PodGroup", "scheduling.x-k8s.io", "v1alpha1", "podgroups", True)
#: Volcano's, which KubeRay and the Kubeflow operators make with their Volcano integration.
VOLCANO_POD_GROUPS = Resource("PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups", True)
#: What ``serve``'s replica autoscaler watches: the kinds it scales, and the autoscalers that
#: may be in charge of them instead (KEDA's ScaledObjects, when KEDA is installed).
DEPLOYMENTS = Resource("Deployment", "apps", "v1", "deployments", True)
STATEFUL_SETS = Resource("StatefulSet", "apps", "v1", "statefulsets", True)
REPLICA_SETS = Resource("ReplicaSet", "apps", "v1", "replicasets", True)
HORIZONTAL_POD_AUTOSCALERS = Resource(
    "HorizontalPodAutoscaler", "autoscaling", "v2", "horizontalpodautoscalers", True
)
SCALED_OBJECTS = Resource("ScaledObject", "keda.sh", "v1alpha1", "scaledobjects", True)
AUTOSCALING_WATCHED: tuple[Resource, ...] = (
    DEPLOYMENTS,
    STATEFUL_SETS,
    REPLICA_SETS,
    HORIZONTAL_POD_AUTOSCALERS,
    SCALED_OBJECTS,
)
#: What the scheduler watches.
WATCHED: tuple[Resource, ...] = (
    NODES,
    PODS,
    QUEUES,
    POD_GROUPS,
    COSCHEDULING_POD_GROUPS,
    VOLCANO_POD_GROUPS,
    PRIORITY_CLASSES,
    RESOURCE_QUOTAS,
)


class RateLimiter:
    """A token bucket: ``qps`` calls a second on average, bursts of up to ``burst`` (the
    client-go flowcontrol limiter; the Python client has none of its own)."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"rate limit needs qps > 0 and burst >= 1, got {qps} and {burst}")
        self.qps, self.burst = qps, burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)


def micro_time(at: float | None = None) -> str:
    """A ``MicroTime`` (leases, events.k8s.io) for ``at`` seconds since the epoch (now)."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(at: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class ListWatchApi(Protocol):
    """What an informer calls: list a kind, then watch its changes; and whether the server
    answers, as all the client's calls see it."""

    reachability: Reachability

    def list(self, resource: Resource, resource_version: str = "") -> tuple[list[Obj], str]:
        """Every object of ``resource`` (kind and apiVersion set) and the list's
        resourceVersion."""
        ...

    def watch(
        self,
        resource: Resource,
        resource_version: str,
        timeout_s: int = WATCH_TIMEOUT_S,
        on_open: Callable[[Any], None] | None = None,
    ) -> Iterator[tuple[str, Obj]]:
        """(type, object) changes after ``resource_version``; :class:`WatchExpiredError` on
        410 Gone. ``on_open`` is given a handle whose ``shutdown()`` ends the watch from
        another thread."""
        ...


class NodeAgentCalls(ListWatchApi, Protocol):
    """Every call the node agent makes: its pods' list and watch, its Node, its Events."""

    def get_node(self, name: str) -> Obj: ...

    def patch_node(self, name: str, patch: Obj) -> Obj: ...

    def patch_node_status(self, name: str, patch: Obj) -> Obj: ...

    def create_event(self, namespace: str, body: Obj) -> Obj: ...

    def patch_event(self, namespace: str, name: str, patch: Obj) -> None: ...


class KeptAliveConnection(http.client.HTTPConnection):
    """A plain HTTP connection with TCP keepalive (:data:`KEEPALIVE_OPTIONS`)."""

    def connect(self) -> None:
        super().connect()
        keep_alive(self.sock)


class NamedTLSConnection(http.client.HTTPSConnection):
    """An HTTPS connection that may verify the server under another name (the kubeconfig's
    ``tls-server-name``), with TCP keepalive."""

    def __init__(
        self,
        host: str,
        port: int,
        context: ssl.SSLContext,
        server_name: str | None,
        timeout: float,
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls_context = context
        self._server_name = server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        keep_alive(self.sock)
        self.sock = self._tls_context.wrap_socket(
            self.sock, server_hostname=self._server_name or self.host
        )
