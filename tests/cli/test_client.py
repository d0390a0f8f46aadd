"""The API client against a fake server (an ``httpx.MockTransport`` handler): routes, answers
parsed into the schema models, errors as ApiError with the ErrorBody, unreachable servers.

The schema builders here (``workload``, ``node``, ...) are shared with test_remote.py.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from gpufleet.api.schemas import (
    Change,
    ChangeKind,
    ClusterSummary,
    DeviceView,
    ErrorBody,
    EventView,
    Explanation,
    NodeView,
    PodView,
    QueueView,
    Role,
    SubmitResult,
    WhoAmI,
    WorkloadDetail,
    WorkloadState,
    WorkloadSummary,
)
from gpufleet.cli.client import (
    ApiClient,
    ApiError,
    ServerUnreachableError,
    UnexpectedResponseError,
    _trusting,
    error_body,
    parse_event_stream,
)

SERVER = "http://gpufleet.test:8080"

# -- builders of schema instances -----------------------------------------------------------


def workload(
    name: str = "train-1",
    namespace: str = "team-a",
    *,
    state: WorkloadState = WorkloadState.RUNNING,
    pods: int = 2,
    gpus: float = 2.0,
    submitted: float = 60.0,
    started: float | None = 90.0,
    **overrides: Any,
) -> WorkloadSummary:
    values: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "key": f"{namespace}/{name}",
        "kind": "Job",
        "tenant": namespace,
        "queue": namespace,
        "priority": 0,
        "state": state,
        "pods": pods,
        "pods_running": pods if state is WorkloadState.RUNNING else 0,
        "gpus": gpus,
        "gpu_request": f"{pods}x1",
        "submitted": submitted,
        "started": started,
    }
    return WorkloadSummary(**(values | overrides))


def pod(name: str = "train-1-0", **overrides: Any) -> PodView:
    values: dict[str, Any] = {
        "name": name,
        "state": "Running",
        "node": "node-a",
        "gpu_indices": [0],
        "cpu": 4.0,
        "memory_mib": 16384,
        "gpus": 1.0,
        "gpu_request": "1",
    }
    return PodView(**(values | overrides))


def event(time: float, reason: str, message: str, kind: str = "Normal") -> EventView:
    return EventView(time=time, type=kind, reason=reason, message=message)


def detail(
    summary: WorkloadSummary | None = None,
    pods: list[PodView] | None = None,
    events: list[EventView] | None = None,
    **overrides: Any,
) -> WorkloadDetail:
    base = (summary or workload()).model_dump()
    return WorkloadDetail(**base, pod_views=pods or [], events=events or [], **overrides)


def device(
    index: int, allocated: float = 0.0, pods: list[str] | None = None, healthy: bool = True
) -> DeviceView:
    return DeviceView(
        index=index,
        model="A100",
        memory_mib=81920,
        allocated=allocated,
        shared=0 < allocated < 1 or len(pods or []) > 1,
        pods=pods or [],
        healthy=healthy,
    )


def node(
    name: str = "node-a",
    allocations: tuple[float, ...] = (1.0, 0.5, 0.0, 0.0),
    withdrawn: tuple[int, ...] = (),
) -> NodeView:
    """A node of A100s allocated so per device; ``withdrawn``: indices of unhealthy ones."""
    return NodeView(
        name=name,
        gpu_model="A100",
        cpu=64.0,
        cpu_allocated=8.0,
        memory_mib=262144,
        memory_allocated_mib=32768,
        gpus=len(allocations),
        gpus_allocatable=len(allocations) - len(withdrawn),
        gpus_allocated=sum(allocations),
        labels={"gpufleet.dev/rack": "r1"},
        taints=["nvidia.com/gpu=present:NoSchedule"],
        devices=[
            device(i, a, [f"team-a/p{i}"] if a else [], i not in withdrawn)
            for i, a in enumerate(allocations)
        ],
    )


def queue(name: str = "team-a", **overrides: Any) -> QueueView:
    values: dict[str, Any] = {
        "name": name,
        "parent": "org",
        "nominal": {"nvidia.com/gpu": 8.0, "cpu": 64.0, "memory": 524288.0},
        "usage": {"nvidia.com/gpu": 10.0},
        "borrowed": {"nvidia.com/gpu": 2.0},
        "share": 0.25,
        "pending": 3,
        "running": 5,
    }
    return QueueView(**(values | overrides))


def cluster(time: float = 600.0, backend: str = "simulated") -> ClusterSummary:
    return ClusterSummary(
        backend=backend,
        time=time,
        nodes=2,
        gpus=8,
        gpus_allocated=3.0,
        gpu_allocation=0.375,
        workloads_pending=1,
        workloads_running=2,
        policy="default",
    )


def explanation(**overrides: Any) -> Explanation:
    values: dict[str, Any] = {
        "workload": "team-a/train-1",
        "state": WorkloadState.PENDING,
        "queue": "team-a",
        "position": 2,
        "waiting_for": "quota",
        "message": "queue team-a is at its nominal quota of 8 GPUs and cannot borrow",
        "estimated_start": 1500.0,
    }
    return Explanation(**(values | overrides))


def whoami(tenant: str = "team-a", role: Role = Role.TENANT, **overrides: Any) -> WhoAmI:
    values: dict[str, Any] = {
        "tenant": tenant,
        "role": role,
        "queues": [tenant],
        "namespaces": [tenant],
    }
    return WhoAmI(**(values | overrides))


# -- a fake server --------------------------------------------------------------------------

Answer = Callable[[httpx.Request], httpx.Response]


@dataclass
class FakeServer:
    """Answers from a table of (method, path) -> answer, else ``fallback`` (default: a 404);
    records every request."""

    routes: dict[tuple[str, str], Answer] = field(default_factory=dict)
    fallback: Answer | None = None
    requests: list[httpx.Request] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.routes.get((request.method, request.url.path), self.fallback)
        if answer is None:
            return httpx.Response(
                404, json={"error": "not_found", "message": f"no route {request.url.path}"}
            )
        return answer(request)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def client(self, token: str | None = "t0k") -> ApiClient:
        return ApiClient(SERVER, token, transport=httpx.MockTransport(self.handle))


def answer(payload: object, status: int = 200) -> Answer:
    return lambda _: httpx.Response(status, json=payload)


def dumped(models: object) -> object:
    if isinstance(models, list):
        return [m.model_dump(mode="json") for m in models]
    assert hasattr(models, "model_dump")
    return models.model_dump(mode="json")


# -- routes ---------------------------------------------------------------------------------

W = "/api/v1/workloads"

ROUTE_CASES = [
    ("whoami", "GET", "/api/v1/whoami", whoami(), lambda c: c.whoami(), None),
    ("cluster", "GET", "/api/v1/cluster", cluster(), lambda c: c.cluster(), None),
    ("list-workloads", "GET", W, [workload()], lambda c: c.list_workloads(), None),
    (
        "list-workloads-filtered",
        "GET",
        W,
        [workload()],
        lambda c: c.list_workloads(state=WorkloadState.PENDING, queue="q", namespace="ns"),
        {"state": "Pending", "queue": "q", "namespace": "ns"},
    ),
    ("get-workload", "GET", f"{W}/team-a/train-1", detail(), lambda c: c.get_workload("team-a", "train-1"), None),  # noqa: E501
    ("explain", "GET", f"{W}/team-a/train-1/explain", explanation(), lambda c: c.explain("team-a", "train-1"), None),  # noqa: E501
    ("delete-workload", "DELETE", f"{W}/team-a/train-1", workload(state=WorkloadState.CANCELLED), lambda c: c.delete_workload("team-a", "train-1"), None),  # noqa: E501
    ("list-queues", "GET", "/api/v1/queues", [queue()], lambda c: c.list_queues(), None),
    ("get-queue", "GET", "/api/v1/queues/team-a", queue(), lambda c: c.get_queue("team-a"), None),
    ("list-nodes", "GET", "/api/v1/nodes", [node()], lambda c: c.list_nodes(), None),
    ("get-node", "GET", "/api/v1/nodes/node-a", node(), lambda c: c.get_node("node-a"), None),
    (
        "events-of-one",
        "GET",
        "/api/v1/events",
        [event(1.0, "Submitted", "ok")],
        lambda c: c.events("team-a/train-1"),
        {"workload": "team-a/train-1"},
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "payload", "call", "params"),
    [pytest.param(*case[1:], id=case[0]) for case in ROUTE_CASES],
)
def test_each_route_is_called_and_its_answer_parsed(
    method: str,
    path: str,
    payload: Any,
    call: Callable[[ApiClient], object],
    params: dict[str, str] | None,
) -> None:
    server = FakeServer({(method, path): answer(dumped(payload))})
    result = call(server.client())
    assert result == payload
    (request,) = server.requests
    assert request.headers["authorization"] == "Bearer t0k"
    assert dict(request.url.params) == (params or {})
    assert str(request.url).startswith(SERVER)


def test_submit_sends_the_document_as_is_with_its_content_type() -> None:
    accepted = SubmitResult(accepted=[workload(state=WorkloadState.PENDING)])
    server = FakeServer({("POST", W): answer(dumped(accepted), 201)})
    result = server.client().submit(b"kind: Pod\n", "application/yaml")
    assert result == accepted
    (request,) = server.requests
    assert request.content == b"kind: Pod\n"
    assert request.headers["content-type"] == "application/yaml"


def test_no_token_sends_no_authorization_header() -> None:
    server = FakeServer({("GET", "/healthz"): answer({"status": "ok"})})
    assert server.client(token=None).healthz()
    assert "authorization" not in server.requests[0].headers


def test_names_are_escaped_into_one_path_segment() -> None:
    server = FakeServer()
    with pytest.raises(ApiError):
        server.client().get_workload("team-a", "a/b?c")
    assert server.requests[0].url.raw_path == b"/api/v1/workloads/team-a/a%2Fb%3Fc"


def test_put_queue_sends_json_and_create_token_query_parameters() -> None:
    server = FakeServer(
        {
            ("PUT", "/api/v1/queues"): answer(dumped(queue())),
            ("POST", "/api/v1/tokens"): answer(
                {
                    "token": "gf_x",
                    "id": "0123456789ab",
                    "tenant": "team-b",
                    "role": "tenant",
                    "expires": 1e9,
                },
                201,
            ),
        }
    )
    client = server.client()
    assert client.put_queue({"kind": "Queue", "metadata": {"name": "team-a"}}) == queue()
    created = client.create_token("team-b", Role.TENANT, ["team-b"])
    assert created.token == "gf_x"
    assert server.requests[1].url.params.multi_items() == [
        ("tenant", "team-b"),
        ("role", "tenant"),
        ("queue", "team-b"),
    ]


# -- errors ---------------------------------------------------------------------------------

ERROR_CASES = [
    ("401", 401, {"error": "unauthorized", "message": "missing or unknown token"},
     "missing or unknown token (401 unauthorized)"),
    ("403", 403, {"error": "forbidden", "message": "tenant team-a may not submit to queue team-b"},
     "tenant team-a may not submit to queue team-b (403 forbidden)"),
    ("404", 404, {"error": "not_found", "message": "workload team-a/x not found"},
     "workload team-a/x not found (404 not_found)"),
    ("413", 413, {"error": "too_large", "message": "request body over 1048576 bytes"},
     "request body over 1048576 bytes (413 too_large)"),
    ("422-with-field", 422,
     {"error": "invalid", "message": "must be a quantity", "field": "spec.containers[0].cpu"},
     "must be a quantity (422 invalid, field spec.containers[0].cpu)"),
    ("fastapi-detail", 405, {"detail": "Method Not Allowed"},
     "Method Not Allowed (405 http_405)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in ERROR_CASES],
)
def test_error_answers_become_api_errors_with_the_body(
    status: int, body: dict[str, str], expected: str
) -> None:
    server = FakeServer({("GET", "/api/v1/whoami"): answer(body, status)})
    with pytest.raises(ApiError) as caught:
        server.client().whoami()
    assert caught.value.status == status
    assert str(caught.value) == expected


def test_an_error_without_a_json_body_keeps_the_status_and_text() -> None:
    body = error_body(httpx.Response(502, text="<html>Bad Gateway</html>"))
    assert body == ErrorBody(error="http_502", message="<html>Bad Gateway</html>")
    assert error_body(httpx.Response(500)).message == "Internal Server Error"


def _failing(error: Exception) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    return httpx.MockTransport(handler)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(
            httpx.ConnectError("[Errno 111] Connection refused"),
            f"cannot reach the gpufleet server at {SERVER} ([Errno 111] Connection refused)",
            id="refused",
        ),
        pytest.param(
            httpx.ReadTimeout("timed out"),
            f"the gpufleet server at {SERVER} did not answer in time (ReadTimeout)",
            id="timeout",
        ),
        pytest.param(
            httpx.RemoteProtocolError("Server disconnected"),
            f"cannot reach the gpufleet server at {SERVER} (Server disconnected)",
            id="disconnected",
        ),
    ],
)
def test_an_unreachable_server_is_named_in_the_error(error: Exception, expected: str) -> None:
    client = ApiClient(SERVER + "/", "t", transport=_failing(error))
    with pytest.raises(ServerUnreachableError) as caught:
        client.list_nodes()
    assert str(caught.value).startswith(expected)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        pytest.param({"tenant": "a"}, "not a WhoAmI (role: Field required)", id="missing-field"),
        pytest.param([1], "not a WhoAmI ((top): Input should be an object)", id="wrong-type"),
    ],
)
def test_an_answer_of_the_wrong_shape_is_reported(payload: object, expected: str) -> None:
    server = FakeServer({("GET", "/api/v1/whoami"): answer(payload)})
    with pytest.raises(UnexpectedResponseError) as caught:
        server.client().whoami()
    assert expected in str(caught.value)
    assert f"GET {SERVER}/api/v1/whoami" in str(caught.value)


def test_probes_answer_false_on_an_error_status() -> None:
    server = FakeServer({("GET", "/readyz"): answer({"status": "starting"}, 503)})
    assert not server.client().readyz()


# -- the event stream -----------------------------------------------------------------------


def _change(seq: int) -> str:
    return Change(seq=seq, kind=ChangeKind.WORKLOAD, key="a/b", time=1.0).model_dump_json()


def test_event_stream_lines_become_changes() -> None:
    lines = [": keep-alive", "", "event: change", "id: 1", f"data: {_change(1)}", ""]
    lines += [f"data:{_change(2)}"]  # the last event, cut off without its blank line
    changes = list(parse_event_stream(iter(lines)))
    assert [c.seq for c in changes] == [1, 2]


def test_stream_reads_server_sent_events() -> None:
    body = f"data: {_change(7)}\n\ndata: {_change(8)}\n\n"
    server = FakeServer(
        {
            ("GET", "/api/v1/stream"): lambda _: httpx.Response(
                200, text=body, headers={"content-type": "text/event-stream"}
            )
        }
    )
    assert [c.seq for c in server.client().stream()] == [7, 8]
    assert server.requests[0].headers["accept"] == "text/event-stream"


def test_stream_refused_raises_api_error() -> None:
    server = FakeServer(
        {("GET", "/api/v1/stream"): answer({"error": "unauthorized", "message": "no"}, 401)}
    )
    with pytest.raises(ApiError) as caught:
        list(server.client().stream())
    assert caught.value.status == 401


@pytest.mark.parametrize(
    ("server", "trusts_public_authorities"),
    [("http://127.0.0.1:8080", False), ("https://gpufleet.example:8443", True)],
    ids=["plain-http", "https"],
)
def test_only_an_https_server_reads_the_public_authorities(
    server: str, trusts_public_authorities: bool
) -> None:
    """Reading the CA bundle takes longer than a request to a local server; over plain HTTP
    nothing is verified, so it is not read."""
    verify = _trusting(None, server)
    if trusts_public_authorities:
        assert verify is True
    else:
        assert isinstance(verify, ssl.SSLContext)
        assert verify.cert_store_stats()["x509_ca"] == 0
        assert verify.verify_mode is ssl.CERT_REQUIRED  # an https redirect would fail closed
