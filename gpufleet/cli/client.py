"""A thin typed client of the control plane's HTTP API (``/api/v1``), over ``httpx.Client``.

One method per route of :mod:`gpufleet.api`; answers come back as the schema models of
:mod:`gpufleet.api.schemas`. Failures are three exceptions, all :class:`ClientError`:
:class:`ApiError` (the server answered 4xx/5xx; carries the status and the :class:`ErrorBody`),
:class:`ServerUnreachableError` (no answer; names the address) and
:class:`UnexpectedResponseError` (an answer that is not the documented shape).

The HTTP client is injectable (an ``httpx.Client`` such as FastAPI's ``TestClient``, or a
transport), so tests drive the real app in-process. This module does no printing and reads no
configuration: that is :mod:`gpufleet.cli.remote` and :mod:`gpufleet.cli.remote_config`.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from gpufleet.api.schemas import (
    API_PREFIX,
    AlertList,
    Change,
    ClusterSummary,
    ErrorBody,
    EventView,
    Explanation,
    History,
    LogChunk,
    NodeView,
    PriorityClassView,
    QueueView,
    Role,
    SubmitResult,
    TokenCreated,
    WhoAmI,
    WorkloadDetail,
    WorkloadState,
    WorkloadSummary,
)

M = TypeVar("M", bound=BaseModel)

#: Connect fast (a server on the same machine either answers or is not there); reads may wait
#: for a scheduling cycle on a busy server.
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)

JSON_TYPE = "application/json"
YAML_TYPE = "application/yaml"


class ClientError(Exception):
    """Anything that kept a request from giving its documented answer."""


class ApiError(ClientError):
    """The server answered with a 4xx or 5xx status."""

    def __init__(self, status: int, body: ErrorBody, method: str, url: str) -> None:
        self.status = status
        self.body = body
        self.method = method
        self.url = url
        # the server's messages often name the field already
        where = f", field {body.field}" if body.field and body.field not in body.message else ""
        super().__init__(f"{body.message} ({status} {body.error}{where})")


class ServerUnreachableError(ClientError):
    """No answer: nothing listens at the address, a timeout, a broken connection."""


class UnexpectedResponseError(ClientError):
    """An answer that is not the documented JSON shape (another server at the address?)."""


def error_body(response: httpx.Response) -> ErrorBody:
    """The ErrorBody of a failed answer, or one made up from the status when there is none."""
    try:
        return ErrorBody.model_validate_json(response.content)
    except ValidationError:
        pass
    text = " ".join(response.text.split())[:200] if response.content else ""
    try:  # FastAPI's own {"detail": ...} before the server's handlers replace it
        detail = json.loads(response.content).get("detail")
        if isinstance(detail, str):
            text = detail
    except (ValueError, AttributeError):
        pass
    return ErrorBody(
        error=f"http_{response.status_code}",
        message=text or response.reason_phrase or f"HTTP {response.status_code}",
    )


class ApiClient:
    """The control plane's API at ``server`` (``http://host:port``, ``https://...``), as
    ``token``; over https, the server's certificate must be signed by a public authority or,
    given ``ca_file`` (PEM), by one in that file."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        http: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        ca_file: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.token = token
        #: The CA file trusted beyond the public authorities (a WebSocket trusts it too).
        self.ca_file = ca_file
        self._owns_http = http is None
        self._http = http or httpx.Client(
            transport=transport, timeout=timeout, verify=_trusting(ca_file, self.server)
        )

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = {"Accept": JSON_TYPE}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        headers.update(extra or {})
        return headers

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | Sequence[str]] | None = None,
        content: bytes | None = None,
        json_body: object = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """Send one request; raise unless the answer is 2xx."""
        url = self.server + path
        try:
            response = self._http.request(
                method,
                url,
                params=params,
                content=content,
                json=json_body,
                headers=self._headers(headers),
            )
        except httpx.TimeoutException as error:
            raise ServerUnreachableError(
                f"the gpufleet server at {self.server} did not answer in time "
                f"({type(error).__name__})"
            ) from error
        except httpx.TransportError as error:
            reason = str(error) or type(error).__name__
            if "CERTIFICATE_VERIFY_FAILED" in reason:
                raise ServerUnreachableError(
                    f"the gpufleet server at {self.server} has a certificate this client does "
                    f"not trust ({reason}); give the CA that signed it with GPUFLEET_CA_FILE "
                    "or `gpufleet login --ca-file`"
                ) from error
            raise ServerUnreachableError(
                f"cannot reach the gpufleet server at {self.server} ({reason}); is "
                "`gpufleet serve` running there? (set the address with --server, "
                "GPUFLEET_SERVER or `gpufleet login`)"
            ) from error
        if response.status_code >= 400:
            raise ApiError(response.status_code, error_body(response), method, url)
        return response

    def _get(self, path: str, model: type[M], params: Mapping[str, str] | None = None) -> M:
        return _parse(self.request("GET", path, params=params), model)

    def _get_list(
        self, path: str, model: type[M], params: Mapping[str, str] | None = None
    ) -> list[M]:
        return _parse_list(self.request("GET", path, params=params), model)

    # -- unauthenticated --------------------------------------------------------------------

    def healthz(self) -> bool:
        return self._probe("/healthz")

    def readyz(self) -> bool:
        return self._probe("/readyz")

    def _probe(self, path: str) -> bool:
        try:
            self.request("GET", path)
        except ApiError:
            return False
        return True

    # -- /api/v1 ----------------------------------------------------------------------------

    def whoami(self) -> WhoAmI:
        return self._get(f"{API_PREFIX}/whoami", WhoAmI)

    def cluster(self) -> ClusterSummary:
        return self._get(f"{API_PREFIX}/cluster", ClusterSummary)

    def history(self, since: float | None = None) -> History:
        params = _params(since=None if since is None else repr(since))
        return self._get(f"{API_PREFIX}/history", History, params)

    def submit(
        self, document: bytes | str, content_type: str = YAML_TYPE, *, dry_run: bool = False
    ) -> SubmitResult:
        """Submit one or more workload documents (YAML or JSON text, as the server reads it);
        with ``dry_run``, the server checks them and answers without keeping them."""
        body = document.encode() if isinstance(document, str) else document
        response = self.request(
            "POST",
            f"{API_PREFIX}/workloads",
            params={"dry_run": "true"} if dry_run else None,
            content=body,
            headers={"Content-Type": content_type},
        )
        return _parse(response, SubmitResult)

    def list_workloads(
        self,
        *,
        state: WorkloadState | str | None = None,
        queue: str | None = None,
        namespace: str | None = None,
    ) -> list[WorkloadSummary]:
        params = _params(state=state, queue=queue, namespace=namespace)
        return self._get_list(f"{API_PREFIX}/workloads", WorkloadSummary, params)

    # A workload is named by namespace and name, and by kind where kinds share the name
    # (names are unique per kind and namespace, as in Kubernetes).
    def get_workload(self, namespace: str, name: str, kind: str | None = None) -> WorkloadDetail:
        return self._get(_workload_path(namespace, name), WorkloadDetail, _params(kind=kind))

    def explain(self, namespace: str, name: str, kind: str | None = None) -> Explanation:
        path = _workload_path(namespace, name) + "/explain"
        return self._get(path, Explanation, _params(kind=kind))

    def logs(
        self,
        namespace: str,
        name: str,
        kind: str | None = None,
        *,
        pod: str | None = None,
        attempt: int | None = None,
        offset: int = 0,
    ) -> LogChunk:
        """A slice of the output of a run of one of the workload's pods (``serve --local``)."""
        params = _params(
            kind=kind,
            pod=pod,
            attempt=None if attempt is None else str(attempt),
            offset=str(offset),
        )
        return self._get(_workload_path(namespace, name) + "/logs", LogChunk, params)

    def delete_workload(
        self, namespace: str, name: str, kind: str | None = None
    ) -> WorkloadSummary:
        path = _workload_path(namespace, name)
        response = self.request("DELETE", path, params=_params(kind=kind))
        return _parse(response, WorkloadSummary)

    def ungate(
        self, namespace: str, name: str, kind: str | None = None, gates: Sequence[str] = ()
    ) -> WorkloadSummary:
        """Remove scheduling gates from the workload's pods (those named, else all)."""
        path = _workload_path(namespace, name) + "/ungate"
        body = {"gates": list(gates)} if gates else None
        response = self.request("POST", path, params=_params(kind=kind), json_body=body)
        return _parse(response, WorkloadSummary)

    def resume(self, namespace: str, name: str, kind: str | None = None) -> WorkloadSummary:
        """Resume a suspended Job."""
        path = _workload_path(namespace, name) + "/resume"
        return _parse(self.request("POST", path, params=_params(kind=kind)), WorkloadSummary)

    def suspend(self, namespace: str, name: str, kind: str | None = None) -> WorkloadSummary:
        """Suspend a waiting Job."""
        path = _workload_path(namespace, name) + "/suspend"
        return _parse(self.request("POST", path, params=_params(kind=kind)), WorkloadSummary)

    def list_queues(self) -> list[QueueView]:
        return self._get_list(f"{API_PREFIX}/queues", QueueView)

    def get_queue(self, name: str) -> QueueView:
        return self._get(f"{API_PREFIX}/queues/{_segment(name)}", QueueView)

    def put_queue(self, queue: Mapping[str, Any]) -> QueueView:
        """Create or replace a queue from a ``Queue`` object (admin)."""
        return _parse(self.request("PUT", f"{API_PREFIX}/queues", json_body=queue), QueueView)

    def delete_queue(self, name: str) -> None:
        self.request("DELETE", f"{API_PREFIX}/queues/{_segment(name)}")

    def list_alerts(self, state: str | None = None) -> AlertList:
        return self._get(f"{API_PREFIX}/alerts", AlertList, _params(state=state))

    def list_priority_classes(self) -> list[PriorityClassView]:
        return self._get_list(f"{API_PREFIX}/priorityclasses", PriorityClassView)

    def put_priority_class(self, priority_class: Mapping[str, Any]) -> PriorityClassView:
        """Create or replace a priority class from a ``PriorityClass`` object (admin)."""
        response = self.request("PUT", f"{API_PREFIX}/priorityclasses", json_body=priority_class)
        return _parse(response, PriorityClassView)

    def list_nodes(self) -> list[NodeView]:
        return self._get_list(f"{API_PREFIX}/nodes", NodeView)

    def get_node(self, name: str) -> NodeView:
        return self._get(f"{API_PREFIX}/nodes/{_segment(name)}", NodeView)

    def events(self, workload: str | None = None) -> list[EventView]:
        """Events, all visible ones or those of one workload (``namespace/name``)."""
        params = _params(workload=workload)
        return self._get_list(f"{API_PREFIX}/events", EventView, params)

    def create_token(
        self, tenant: str, role: Role | str, queues: Sequence[str] = ()
    ) -> TokenCreated:
        """A new token (admin); the answer is the only place its text is ever shown."""
        params = {"tenant": tenant, "role": str(role), "queue": list(queues)}
        return _parse(self.request("POST", f"{API_PREFIX}/tokens", params=params), TokenCreated)

    def stream(self) -> Iterator[Change]:
        """The server-sent changes, as they come, until the server or the caller stops."""
        url = self.server + f"{API_PREFIX}/stream"
        try:
            with self._http.stream(
                "GET",
                url,
                headers=self._headers({"Accept": "text/event-stream"}),
                # a quiet stream is not a dead server: no read timeout
                timeout=httpx.Timeout(None, connect=5.0),
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError(response.status_code, error_body(response), "GET", url)
                yield from parse_event_stream(response.iter_lines())
        except httpx.TransportError as error:
            raise ServerUnreachableError(
                f"lost the event stream of the gpufleet server at {self.server} ({error})"
            ) from error


def _trusting(ca_file: str | None, server: str) -> ssl.SSLContext | bool:
    """What httpx verifies the server's certificate with: the public authorities, or the
    ones in ``ca_file`` (ServerUnreachableError if it cannot be read). A plain ``http://``
    server with no CA file gets a context that trusts no one: nothing is encrypted to it, and
    reading the public authorities' bundle takes longer (about 60 ms) than the request."""
    if ca_file is None:
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT) if server.startswith("http://") else True
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as error:
        raise ServerUnreachableError(
            f"cannot use the CA file {ca_file} ({error}); set it with GPUFLEET_CA_FILE or "
            "`gpufleet login --ca-file`"
        ) from None


def parse_event_stream(lines: Iterator[str]) -> Iterator[Change]:
    """Changes from server-sent event lines (``data:`` lines, a blank line ends an event)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield _parse_json("\n".join(data), Change)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        # ignored: comments (':' keep-alives), event:, id:, retry:
    if data:
        yield _parse_json("\n".join(data), Change)


def _segment(text: str) -> str:
    """One path segment: a '/' or '?' in a name must not change the route."""
    return quote(text, safe="")


def _workload_path(namespace: str, name: str) -> str:
    return f"{API_PREFIX}/workloads/{_segment(namespace)}/{_segment(name)}"


def _params(**values: str | None) -> dict[str, str]:
    return {key: str(value) for key, value in values.items() if value is not None}


def _parse(response: httpx.Response, model: type[M]) -> M:
    return _parse_json(response.content, model, response)


def _parse_json(content: bytes | str, model: type[M], response: httpx.Response | None = None) -> M:
    try:
        return model.model_validate_json(content)
    except ValidationError as error:
        raise _unexpected(model.__name__, error, response) from None


def _parse_list(response: httpx.Response, model: type[M]) -> list[M]:
    try:
        return TypeAdapter(list[model]).validate_json(response.content)  # type: ignore[valid-type]
    except ValidationError as error:
        raise _unexpected(f"list of {model.__name__}", error, response) from None


def _unexpected(
    what: str, error: ValidationError, response: httpx.Response | None
) -> UnexpectedResponseError:
    where = f" from {response.request.method} {response.request.url}" if response else ""
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"]) or "(top)"
    return UnexpectedResponseError(
        f"unexpected answer{where}: not a {what} ({location}: {first['msg']}); "
        "is this a gpufleet server of the same version?"
    )
